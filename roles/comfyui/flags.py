"""Pure rendering of the ComfyUI service: ``main.py`` arguments, environment, ExecStart line.

Every function takes the settings mapping (``host.data`` or a dict). The deploy ships the very
same argument list to the host, where the pinned ComfyUI's own parser checks it
(files/comfyui/check_args.py runs ``comfy/cli_args.py`` of the checkout).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from roles.common.urls import local_probe_url
from roles.vllm.flags import systemd_quote


def comfyui_dirs(data: Mapping[str, Any] | Any) -> dict[str, str]:
    """Absolute paths of ComfyUI's pieces: ``{"src", "venv", "python", "lock", "scripts", "etc",
    "env_file", "args_file", "home", "base", "database", "unit"}``.

    ``src`` is the git checkout (root-owned, read-only to the service); ``base`` is
    ``--base-directory`` (models, custom_nodes, input, output, user and ComfyUI's own temp;
    owned by the service user); ``home`` holds caches (torch, Hugging Face) outside the user's tree.
    """
    prefix = str(data.get("rigup_prefix")).rstrip("/")
    etc = str(data.get("rigup_etc_dir")).rstrip("/")
    state = str(data.get("rigup_state_dir")).rstrip("/")
    base = str(data.get("comfyui_base_dir")).rstrip("/")
    root = f"{prefix}/comfyui"
    return {
        "root": root,
        "src": f"{root}/src",
        "venv": f"{root}/venv",
        "python": f"{root}/venv/bin/python",
        "lock": f"{root}/requirements.lock",
        "scripts": f"{root}/bin",
        "etc": f"{etc}/comfyui",
        "env_file": f"{etc}/comfyui/comfyui.env",
        "args_file": f"{etc}/comfyui/main-args.json",
        "home": f"{state}/comfyui",
        "base": base,
        "database": f"{base}/user/comfyui.db",
        "unit": "/etc/systemd/system/comfyui.service",
    }


#: Sub-directories of --base-directory that ComfyUI reads and writes (folder_paths.py of the
#: pinned release). rigup creates them and never touches what is inside. temp/ is left to
#: ComfyUI: main.py deletes it at exit and creates it at start (cleanup_temp), so managing it
#: would make every deploy outside the media mode re-create it (measured in the lab).
BASE_SUBDIRS = ("models", "custom_nodes", "input", "output", "user")


def main_args(data: Mapping[str, Any] | Any) -> list[str]:
    """Arguments that follow ``python main.py``, in a stable order.

    Shape: ``["--listen", "127.0.0.1", "--port", "8188", "--base-directory", dir,
    "--database-url", "sqlite:///<base>/user/comfyui.db", "--disable-auto-launch",
    "--cuda-device", "0", "--reserve-vram", "1.0", *comfyui_extra_args]``; with ``comfyui_cpu``
    ``--cpu`` replaces ``--cuda-device``/``--reserve-vram``. Units: ``--reserve-vram`` in GiB
    (ComfyUI multiplies it by 1024**3). ``--database-url`` moves ComfyUI's SQLite file out of the
    read-only checkout (its default is ``<checkout>/user/comfyui.db``).
    """
    d = comfyui_dirs(data)
    args = [
        "--listen", str(data.get("comfyui_host")),
        "--port", str(data.get("comfyui_port")),
        "--base-directory", d["base"],
        "--database-url", f"sqlite:///{d['database']}",
        "--disable-auto-launch",
    ]  # fmt: skip
    if data.get("comfyui_cpu"):
        args.append("--cpu")
    else:
        args += [
            "--cuda-device", str(data.get("comfyui_gpu_index")),
            "--reserve-vram", str(float(data.get("comfyui_reserve_vram_gib"))),
        ]  # fmt: skip
    args += [str(a) for a in data.get("comfyui_extra_args") or []]
    return args


def service_env(data: Mapping[str, Any] | Any) -> dict[str, str]:
    """Environment of comfyui.service (a 0640 env file). Caches live in the service user's home;
    Hugging Face is read offline; no telemetry (ComfyUI sets DO_NOT_TRACK itself as well)."""
    home = comfyui_dirs(data)["home"]
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
    env.update({str(k): str(v) for k, v in (data.get("comfyui_env") or {}).items()})
    return env


def exec_start(data: Mapping[str, Any] | Any) -> str:
    """The ``ExecStart=`` value: ``<venv>/bin/python <checkout>/main.py <args...>``, quoted."""
    d = comfyui_dirs(data)
    words = [d["python"], f"{d['src']}/main.py", *main_args(data)]
    return " ".join(systemd_quote(w) for w in words)


def system_stats_url(data: Mapping[str, Any] | Any) -> str:
    """URL of ComfyUI's ``GET /system_stats`` (its readiness probe) as seen from the host."""
    return local_probe_url(str(data.get("comfyui_host")), data.get("comfyui_port"), "/system_stats")
