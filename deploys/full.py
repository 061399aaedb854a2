"""The whole rig, one component a line: `pyinfra inventory/rig.py deploys/full.py`.

The settings are checked once per host, before any change; each component gets them, and what
an earlier one made (the model store, the placed LLM) is handed to the next. Each component also
has its own deploy file (deploys/<component>.py) for partial runs.
"""

from roles.base import base
from roles.cluster import cluster
from roles.comfyui import comfyui
from roles.doctor import doctor
from roles.model import model, model_store
from roles.modes import modes
from roles.nvidia import nvidia
from roles.router import replica_firewall, router
from roles.settings import host_settings
from roles.vllm import vllm
from roles.voxcpm import voxcpm

settings = host_settings()  # every key checked (types, ranges, VRAM budget) before any change
base(settings)  # apt baseline, directories, pinned uv, the services' readiness wait
gpu = nvidia(settings)  # driver + CUDA toolkit, persistence + power limit at boot, NVLink verified
store = model_store(settings)  # the model tool (huggingface_hub, modelscope) and token files
replica_firewall(settings)  # a replica rig: vLLM's port answers the router rigs only (before it)
llm = model(settings, store)  # the LLM checkpoint, placed verified and set up for text-only serving
vllm(settings, llm, gpu)  # vLLM 0.22.1 venv, flags and checkpoint checked by vLLM, vllm.service
cluster(settings)  # many rigs: the cluster's firewall and supervisor (nothing on a rig alone)
voxcpm(settings, store, gpu)  # VoxCPM2: CPython 3.12 (uv), locked venv, model, voxcpm.service
comfyui(settings, store, gpu)  # ComfyUI at a pinned commit, locked venv, models, comfyui.service
modes(settings)  # rigup-llm/rigup-media targets, rigup-mode, boot mode; starts a mode
router(settings)  # router_enabled: vllm-router in front of the replica rigs (off by default)
doctor(settings, llm)  # rigup-doctor, rigup-bench (vLLM's bench serve), rigup-report
