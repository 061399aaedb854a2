"""The whole rig, one component a line: `pyinfra inventory/rig.py deploys/full.py`.

Each line also exists as its own deploy file (deploys/<component>.py) for partial runs.
"""

from roles.base import base
from roles.comfyui import comfyui  # issue 4
from roles.model import model
from roles.modes import modes  # issue 4
from roles.nvidia import nvidia
from roles.vllm import vllm
from roles.voxcpm import voxcpm

base()  # apt baseline, directories, pinned uv
gpu = nvidia()  # driver + CUDA toolkit, persistence + power limit at boot, NVLink verified
model()  # the LLM checkpoint, placed and patched for text-only serving
vllm(gpu)  # vLLM 0.22.1 venv, flags checked by vLLM's parser, systemd service
voxcpm(gpu)  # VoxCPM2 text-to-speech: CPython 3.12 (uv), locked venv, HTTP server, voxcpm.service
comfyui(gpu)  # ComfyUI at a pinned commit, locked venv, base directory, models, comfyui.service
modes()  # last: rigup-llm/rigup-media targets, rigup-mode, boot mode; starts a mode if none runs
