"""Partial run of one component: `pyinfra inventory/rig.py deploys/voxcpm.py` (with the model tool
that places its models)."""

from roles.model import model_store
from roles.settings import host_settings
from roles.voxcpm import voxcpm

settings = host_settings()
voxcpm(settings, model_store(settings))
