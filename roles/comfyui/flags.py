"""Pure rendering of the ComfyUI service: ``main.py`` arguments, environment, ExecStart line.

Every function takes the settings mapping (``host.data`` or a dict). The deploy ships the very
same argument list to the host, where the pinned ComfyUI's own parser checks it
(files/comfyui/check_args.py runs ``comfy/cli_args.py`` of the checkout).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from roles.comfyui.paths import ComfyuiPaths
from roles.comfyui.settings import ComfyuiSettings
from roles.common.command_line import exec_line
from roles.common.urls import local_probe_url


def main_args(data: Mapping[str, Any] | Any) -> list[str]:
    """Arguments that follow ``python main.py``, in a stable order.

    Shape: ``["--listen", "127.0.0.1", "--port", "8188", "--base-directory", dir,
    "--database-url", "sqlite:///<base>/user/comfyui.db", "--disable-auto-launch",
    "--cuda-device", "0", "--reserve-vram", "1.0", *comfyui_extra_args]``; with ``comfyui_cpu``
    ``--cpu`` replaces ``--cuda-device``/``--reserve-vram``. Units: ``--reserve-vram`` in GiB
    (ComfyUI multiplies it by 1024**3). ``--database-url`` moves ComfyUI's SQLite file out of the
    read-only checkout (its default is ``<checkout>/user/comfyui.db``).
    """
    d = ComfyuiPaths.from_data(data)
    comfy = ComfyuiSettings.of(data)
    args = [
        "--listen", str(comfy.comfyui_host),
        "--port", str(comfy.comfyui_port),
        "--base-directory", d.base,
        "--database-url", f"sqlite:///{d.database}",
        "--disable-auto-launch",
    ]  # fmt: skip
    if comfy.comfyui_cpu:
        args.append("--cpu")
    else:
        args += [
            "--cuda-device", str(comfy.comfyui_gpu_index),
            "--reserve-vram", str(float(comfy.comfyui_reserve_vram_gib)),
        ]  # fmt: skip
    args += [str(a) for a in comfy.comfyui_extra_args or []]
    return args


def service_env(data: Mapping[str, Any] | Any) -> dict[str, str]:
    """Environment of comfyui.service (a 0640 env file). Caches live in the service user's home;
    Hugging Face is read offline; no telemetry (ComfyUI sets DO_NOT_TRACK itself as well)."""
    home = ComfyuiPaths.from_data(data).home
    env = {
        "HOME": home,
        "HF_HOME": f"{home}/huggingface",
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "DO_NOT_TRACK": "1",
        "TORCH_HOME": f"{home}/torch",
        "TRITON_CACHE_DIR": f"{home}/triton-cache",
        "XDG_CACHE_HOME": f"{home}/cache",
        "TMPDIR": f"{home}/tmp",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "PYTHONUNBUFFERED": "1",
    }
    env.update({str(k): str(v) for k, v in (ComfyuiSettings.of(data).comfyui_env or {}).items()})
    return env


def exec_start(data: Mapping[str, Any] | Any) -> str:
    """The ``ExecStart=`` value: ``<venv>/bin/python <checkout>/main.py <args...>``, quoted."""
    d = ComfyuiPaths.from_data(data)
    return exec_line([d.python, f"{d.src}/main.py", *main_args(data)])


def system_stats_url(data: Mapping[str, Any] | Any) -> str:
    """URL of ComfyUI's ``GET /system_stats`` (its readiness probe) as seen from the host."""
    comfy = ComfyuiSettings.of(data)
    return local_probe_url(str(comfy.comfyui_host), comfy.comfyui_port, "/system_stats")
