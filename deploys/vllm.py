"""Partial run of one component: `pyinfra inventory/rig.py deploys/vllm.py` (with the LLM
checkpoint it serves: placed, or checked in place)."""

from roles.model import model, model_store
from roles.settings import host_settings
from roles.vllm import vllm

settings = host_settings()
vllm(settings, model(settings, model_store(settings)))
