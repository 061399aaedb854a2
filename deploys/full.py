"""The whole rig, one component a line: `pyinfra inventory/rig.py deploys/full.py`.

Each line also exists as its own deploy file (deploys/<component>.py) for partial runs.
"""

from roles.base import base
from roles.model import model
from roles.nvidia import nvidia
from roles.vllm import vllm

base()  # apt baseline, directories, pinned uv
nvidia()  # driver + CUDA toolkit, persistence + power limit at boot, NVLink verified
model()  # the LLM checkpoint, placed and patched for text-only serving
vllm()  # vLLM 0.22.1 venv, flags checked by vLLM's parser, systemd service
