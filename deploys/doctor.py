"""Partial run of one component: `pyinfra inventory/rig.py deploys/doctor.py` (rigup-doctor,
rigup-bench, rigup-report for the LLM as placed)."""

from roles.doctor import doctor
from roles.model import model, model_store
from roles.settings import host_settings

settings = host_settings()
doctor(settings, model(settings, model_store(settings)))
