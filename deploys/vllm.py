"""Partial run of one component: `pyinfra inventory/rig.py deploys/vllm.py`."""

from roles.vllm import vllm

vllm()
