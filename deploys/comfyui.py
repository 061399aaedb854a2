"""Partial run of one component: `pyinfra inventory/rig.py deploys/comfyui.py` (with the model tool
that places its models)."""

from roles.comfyui import comfyui
from roles.model import model_store
from roles.settings import host_settings

settings = host_settings()
comfyui(settings, model_store(settings))
