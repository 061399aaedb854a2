"""Pure helpers of the voxcpm role: the server's command line and its environment.

Deploys and tests (unit and testinfra) share them, so an expectation is never a second copy.
"""

from __future__ import annotations

from typing import Any

from roles.common.command_line import exec_line
from roles.common.urls import local_probe_url
from roles.voxcpm.paths import VoxcpmPaths
from roles.voxcpm.settings import VoxcpmSettings


def server_args(data: Any, p: VoxcpmPaths, model_dir: str) -> list[str]:
    """Arguments of files/voxcpm/voxcpm_server.py from the settings (``--flag value`` pairs)."""
    vox = VoxcpmSettings.of(data)
    args = [
        "--model-dir", model_dir,
        "--host", str(vox.voxcpm_host),
        "--port", str(vox.voxcpm_port),
        "--served-model-name", str(vox.voxcpm_served_model_name),
        "--voices-dir", p.voices,
        *[a for k, v in sorted(vox.voxcpm_voice_aliases.items())
          for a in ("--voice-alias", f"{k}={v}")],
        # exactly "cuda": voxcpm 2.0.3 torch.compiles only then (VoxCPM2Model.optimize checks
        # device != "cuda"), so the GPU is chosen by CUDA_VISIBLE_DEVICES, not "cuda:N"
        "--device", "cuda",
        "--cfg-value", str(vox.voxcpm_cfg_value),
        "--inference-timesteps", str(vox.voxcpm_inference_timesteps),
    ]  # fmt: skip
    if not vox.voxcpm_torch_compile:
        args.append("--no-optimize")
    if vox.voxcpm_test_double_synthesizer:
        args += ["--synthesizer", "test-double"]
    return args


def exec_start(p: VoxcpmPaths, args: list[str]) -> str:
    """The unit's ExecStart= value, each argument systemd-quoted."""
    return exec_line([p.python, p.server, *args])


def service_env(data: Any, p: VoxcpmPaths) -> dict[str, str]:
    """Environment file of the service: offline hubs, the GPU, caches in the service's home."""
    cache = f"{p.home}/cache"
    return {
        "HOME": p.home,
        "TMPDIR": f"{p.home}/tmp",
        "HF_HUB_OFFLINE": "1",  # load only the placed directory, never the network
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HOME": f"{cache}/huggingface",
        "MODELSCOPE_CACHE": f"{cache}/modelscope",
        "XDG_CACHE_HOME": cache,
        "TORCHINDUCTOR_CACHE_DIR": f"{cache}/torchinductor",  # torch.compile (optimize=True)
        "TRITON_CACHE_DIR": f"{cache}/triton",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",  # CUDA numbers GPUs as nvidia-smi does
        "CUDA_VISIBLE_DEVICES": str(VoxcpmSettings.of(data).voxcpm_gpu_index),
        "PYTHONUNBUFFERED": "1",
        "DO_NOT_TRACK": "1",
        "GRADIO_ANALYTICS_ENABLED": "False",  # voxcpm depends on gradio; no telemetry
    }


def probe_url(data: Any, path: str = "/ready") -> str:
    """URL of the server's ``path`` as seen from the host itself."""
    vox = VoxcpmSettings.of(data)
    return local_probe_url(str(vox.voxcpm_host), vox.voxcpm_port, path)


def start_decision(data: Any, gpu_blocker: str | None) -> str | None:
    """None when the service should run; otherwise why it is kept installed but stopped.

    It runs with the test double selected (no GPU needed), or where a GPU service can run
    (``gpu_blocker`` None: the host declares GPUs and has the NVIDIA driver).
    """
    if VoxcpmSettings.of(data).voxcpm_test_double_synthesizer:
        return None
    return gpu_blocker
