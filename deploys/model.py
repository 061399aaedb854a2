"""Partial run of one component: `pyinfra inventory/rig.py deploys/model.py`."""

from roles.model import model

model()
