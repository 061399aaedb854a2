"""Partial run of one component: `pyinfra inventory/rig.py deploys/base.py`."""

from roles.base import base

base()
