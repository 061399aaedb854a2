"""Partial run of one component: `pyinfra inventory/rig.py deploys/router.py` (the router in
front of the replica rigs of ``router_replica_group``, and each replica's firewall; docs/router.md)."""

from roles.router import replica_firewall, router
from roles.settings import host_settings

settings = host_settings()
replica_firewall(settings)  # a replica rig: its vLLM port answers the router rigs only
router(settings)
