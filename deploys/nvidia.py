"""Partial run of one component: `pyinfra inventory/rig.py deploys/nvidia.py`."""

from roles.nvidia import nvidia

nvidia()
