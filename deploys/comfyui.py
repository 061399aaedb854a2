"""Partial run of one component: `pyinfra inventory/rig.py deploys/comfyui.py`."""

from roles.comfyui import comfyui

comfyui()
