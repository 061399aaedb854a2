"""Partial run of one component: `pyinfra inventory/rig.py deploys/router.py` (the router in
front of the replica rigs of ``router_replica_group``; docs/router.md)."""

from roles.router import router
from roles.settings import host_settings

router(host_settings())
