"""Partial run of one component: `pyinfra inventory/rig.py deploys/voxcpm.py`."""

from roles.voxcpm import voxcpm

voxcpm()
