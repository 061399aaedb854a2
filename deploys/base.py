"""Partial run of one component: `pyinfra inventory/rig.py deploys/base.py`."""

from roles.base import base
from roles.settings import host_settings

base(host_settings())
