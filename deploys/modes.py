"""Partial run of one component: `pyinfra inventory/rig.py deploys/modes.py`."""

from roles.modes import modes
from roles.settings import host_settings

modes(host_settings())
