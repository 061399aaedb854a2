"""Partial run of one component: `pyinfra inventory/rig.py deploys/model.py` (the model tool
and the LLM checkpoint)."""

from roles.model import model, model_store
from roles.settings import host_settings

settings = host_settings()
model(settings, model_store(settings))
