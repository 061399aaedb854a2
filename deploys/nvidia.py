"""Partial run of one component: `pyinfra inventory/rig.py deploys/nvidia.py`."""

from roles.nvidia import nvidia
from roles.settings import host_settings

nvidia(host_settings())
