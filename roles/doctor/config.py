"""What rigup-doctor, rigup-bench and rigup-report know about a host: ``doctor.json`` and the
benchmark arms' drop-ins, rendered from the settings. Pure functions of the settings mapping
(``host.data`` or a dict), so the unit tests check them directly."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from roles import services as registry
from roles.cluster.member import ClusterMember
from roles.cluster.watch import doctor_view
from roles.comfyui.paths import UNIT as COMFYUI_UNIT
from roles.comfyui.paths import ComfyuiPaths
from roles.common.footprint import MODES
from roles.common.paths import Layout
from roles.common.urls import local_probe_url
from roles.doctor.paths import ARM_DROPIN, DoctorPaths
from roles.doctor.settings import arm_problems
from roles.model.paths import ModelPaths
from roles.modes import mode_services
from roles.nvidia.paths import NvidiaPaths
from roles.vllm import served_args, service_spec
from roles.vllm.paths import VllmPaths
from roles.voxcpm.paths import VoxcpmPaths


class Overlay:
    """Settings with some keys replaced (a benchmark arm's), read like pyinfra's ``host.data``:
    ``overlay.get(key)`` and ``overlay.key``."""

    def __init__(self, base: Any, changes: Mapping[str, Any]):
        self._base = base
        self._changes = dict(changes)

    def get(self, key: str, default: Any = None) -> Any:
        if key in self._changes:
            return self._changes[key]
        value = self._base.get(key)
        return default if value is None else value

    def __getattr__(self, key: str) -> Any:
        if key.startswith("_"):
            raise AttributeError(key)
        return self.get(key)


def venvs(data: Any) -> list[dict[str, Any]]:
    """Every locked venv on the host: ``{"name", "python", "lock", "deploy"}`` (and the
    distributions uv reinstalls at every sync, ``mislabelled``: not a difference from the lock,
    roles/common/facts.py UvSyncPending): each installed GPU service's (roles/services.py),
    then the model tool's and the CUDA toolkit's."""
    npaths = NvidiaPaths.from_data(data)
    found = [
        {
            "name": s.component,
            **_venv(s.paths.from_data(data)),
            "deploy": s.deploy,
            "mislabelled": list(s.mislabelled(data)),
        }
        for s in registry.SERVICES
        if s.installed(data)
    ]
    found += [
        {"name": "model tool", **_venv(ModelPaths.from_data(data)), "deploy": "deploys/model.py"},
        {
            "name": "CUDA toolkit",
            "python": f"{npaths.cuda_venv}/bin/python",
            "lock": npaths.cuda_lock,
            "deploy": "deploys/nvidia.py",
        },
    ]
    return found


def _venv(paths: Any) -> dict[str, str]:
    return {"python": paths.python, "lock": paths.lock}


def served(
    data: Any, model_dir: str, cpus: list[int], member: ClusterMember | None = None
) -> list[str]:
    """The arguments vllm.service runs with (``vllm serve`` ARGS): the vLLM role's (with the
    multi-node flags of ``member``'s cluster)."""
    return served_args(data, model_dir, cpus, member)[0]


def _flag(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args and args.index(flag) + 1 < len(args) else None


def doctor_config(
    data: Any,
    model_dir: str,
    model: Mapping[str, str] | None = None,
    cpus: list[int] = (),
    member: ClusterMember | None = None,
) -> dict:
    """The content of ``doctor.json`` for a host whose LLM is placed at ``model_dir``
    (``model``: its manifest's name, revision and repository, for the report; ``cpus``: the
    host's allowed CPUs, for the CPU build's arguments; ``member``: its place in a cluster of
    rigs, roles/cluster/inventory.py ``this_member``, None when it serves alone). What vLLM
    runs with is read from the arguments it is served with (the CPU build leaves out the FP8
    KV cache and MTP). A rig with ComfyUI (comfyui_install) gets a ``media`` key
    (:func:`media_view`). A rig of a cluster gets a ``cluster`` key (roles/cluster/watch.py
    ``doctor_view``: rigup-doctor's cluster section); a rig alone has none."""
    layout = Layout.from_data(data)
    args = served(data, model_dir, list(cpus), member)
    spec = _flag(args, "--speculative-config")
    vp = VllmPaths.from_data(data)
    dp = DoctorPaths.from_data(data)
    host, port = str(data.get("vllm_host")), data.get("vllm_port")
    services = mode_services(data)
    config = {
        "modes": {m: {"target": MODES[m], "services": services[m]} for m in MODES},
        "vllm": {
            "unit": "vllm.service",
            "version": data.get("vllm_version"),
            "base_url": local_probe_url(host, port, "").rstrip("/"),
            "health_url": local_probe_url(host, port, "/health"),
            "metrics_url": local_probe_url(host, port, "/metrics"),
            "served_model_name": data.get("vllm_served_model_name"),
            "model_dir": model_dir,
            "model": dict(model or {}),
            "python": vp.python,
            "venv": vp.venv,
            "cli": [vp.python, f"{vp.bin}/vllm_cli.py"],
            "api_key_file": vp.api_key_file,
            "args_file": vp.args_file,
            "device": data.get("vllm_device"),
            "serve_args": args,
            "max_model_len": int(_flag(args, "--max-model-len") or data.get("vllm_max_model_len")),
            "block_size": data.get("vllm_block_size"),
            "kv_cache_dtype": _flag(args, "--kv-cache-dtype") or "auto",
            "tensor_parallel_size": int(_flag(args, "--tensor-parallel-size") or 1),
            "prefix_caching": "--enable-prefix-caching" in args,
            "speculative_config": json.loads(spec) if spec else None,
            "start_timeout_s": data.get("vllm_start_timeout_s"),
        },
        "gpus": {
            "count": data.get("nvidia_gpu_count"),
            "compute_capability": data.get("nvidia_gpu_compute_capability"),
            "vram_gib": data.get("nvidia_gpu_vram_gib"),
            "power_limit_w": data.get("nvidia_power_limit_w"),
            "persistence": data.get("nvidia_persistence_mode"),
            "nvlink_required": data.get("nvlink_required"),
            "nvlink_links": data.get("nvlink_expected_links"),
            "driver_branch": data.get("nvidia_driver_branch"),
            "cuda_toolkit": data.get("cuda_toolkit_version"),
        },
        "disks": [
            {"path": str(data.get("model_store_dir")), "what": "model store"},
            {"path": layout.uv_cache, "what": "uv cache"},
        ],
        "disk_warn_gib": data.get("doctor_disk_warn_gib"),
        "venvs": venvs(data),
        "uv": {"path": layout.uv, "cache": layout.uv_cache, "tmp": layout.tmp},
        "doctor": {"window_s": data.get("doctor_window_s")},
        "bench": {
            "results": dp.results,
            "rows": [dict(r) for r in data.get("bench_rows")],
            "seed_source": data.get("bench_seed_source"),
            "seed_acceptance": data.get("bench_seed_acceptance"),
            "arms": {
                name: {
                    "what": arm["what"],
                    "dropin": f"{dp.arms}/{name}.conf",
                    "seed": arm.get("seed", {}),
                    "rows": list(arm.get("rows", [])),
                    "unavailable": "; ".join(arm_problems(data, arm)),
                }
                for name, arm in data.get("bench_arms").items()
            },
            "dropin": ARM_DROPIN,
            "rigup_start": f"{layout.bin}/rigup-start",
        },
    }
    if data.get("comfyui_install"):
        config["media"] = media_view(data, services)
    if data.get("voxcpm_install"):
        config["speech"] = speech_view(data)
    if member is not None:
        config["cluster"] = doctor_view(data, member)
    return config


def media_view(data: Any, services: Mapping[str, list[str]]) -> dict[str, str]:
    """doctor.json's ``media`` (rigup-bench --media, rigup/bench/media.py): ComfyUI's unit, the
    mode it runs in and that mode's target, its local URL (no trailing slash) and the directory
    of rigup's shipped workflows (roles/comfyui places them)."""
    mode = next((m for m, units in services.items() if COMFYUI_UNIT in units), "media")
    return {
        "unit": COMFYUI_UNIT,
        "mode": mode,
        "target": MODES[mode],
        "url": local_probe_url(str(data.get("comfyui_host")), data.get("comfyui_port"), ""),
        "workflows": ComfyuiPaths.from_data(data).workflows,
    }


def speech_view(data: Any) -> dict[str, str]:
    """doctor.json's ``speech`` (rigup-free speech, rigup/media/free.py): the speech server's
    local URL (no trailing slash), the root-only file holding its API key and the variable
    named there (files/voxcpm/voxcpm_server.py reads VOXCPM_API_KEY)."""
    return {
        "unit": "voxcpm.service",
        "url": local_probe_url(str(data.get("voxcpm_host")), data.get("voxcpm_port"), ""),
        "api_key_file": VoxcpmPaths.from_data(data).api_key_file,
        "api_key_name": "VOXCPM_API_KEY",
    }


def _env_line(name: str, value: Any) -> str:
    text = str(value)
    if any(c in text for c in " \"'\\$"):
        text = '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'
    return f"{name}={text}\n"


def arm_files(
    data: Any, name: str, arm: Mapping[str, Any], model_dir: str, cpus: list[int] = ()
) -> dict[str, str]:
    """The files of one benchmark arm, by suffix: ``.conf`` (the vllm.service drop-in
    rigup-bench puts under /run), ``.env`` (its environment, read after the unit's own
    environment files so that it wins) and, for an arm that changes vLLM flags, ``.json`` (its
    ``vllm serve`` arguments, checked by vLLM's parser at converge)."""
    dp = DoctorPaths.from_data(data)
    lines = [
        f"# rigup-bench arm {name}: {arm['what']}\n",
        "# Managed by rigup (roles/doctor): rigup-bench copies this drop-in to\n",
        f"# {ARM_DROPIN} for one benchmark arm, restarts vllm.service, and removes it afterwards.\n",
        "[Service]\n",
    ]
    out: dict[str, str] = {}
    if arm.get("env"):
        out[".env"] = "".join(_env_line(k, v) for k, v in sorted(dict(arm["env"]).items()))
        lines.append(f"EnvironmentFile={dp.arms}/{name}.env\n")
    if arm.get("unset"):
        lines.append(f"UnsetEnvironment={' '.join(arm['unset'])}\n")
    if arm.get("settings"):
        overlay = Overlay(data, arm["settings"])
        spec = service_spec(overlay, model_dir, list(cpus))
        lines += ["ExecStart=\n", f"ExecStart={spec.exec_start}\n"]
        out[".json"] = json.dumps(served(overlay, model_dir, list(cpus)), indent=2) + "\n"
    out[".conf"] = "".join(lines)
    return out
