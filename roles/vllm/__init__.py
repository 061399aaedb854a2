"""vllm: a uv-built venv locked to vLLM 0.22.1 and its systemd service.

Settings: every ``vllm_*`` key in inventory/group_data/all.py, plus nvidia_gpu_count. The
rendered ``vllm serve`` arguments are checked on the host by vLLM's own argument parser from the
venv (files/vllm/check_args.py), and the checkpoint by vLLM's own config code
(files/vllm/text_only_check.py), before the service is (re)started.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from io import StringIO
from pathlib import Path

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import files, systemd
from pyinfra.operations.util import any_changed

from roles.common.operations import check_passes, fingerprint, uv_venv_synced
from roles.common.paths import Paths
from roles.common.service import mode_unit_state, service_account
from roles.common.settings import require_valid_settings
from roles.common.urls import local_probe_url
from roles.modes import gpu_hold_back_reason
from roles.modes.budget import MODES, SERVICE_MODES
from roles.nvidia.layer import NvidiaLayer, observed_layer
from roles.vllm.flags import exec_start, serve_args, service_env

FILES = Path(__file__).resolve().parents[2] / "files"
UNIT = "vllm.service"
TARGET = MODES[SERVICE_MODES[UNIT]]  # rigup-llm.target


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def health_url(data) -> str:
    """URL of vLLM's ``/health`` endpoint as seen from the host itself."""
    return local_probe_url(str(data.get("vllm_host")), data.get("vllm_port"), "/health")


@deploy("vLLM")
def vllm(nvidia: NvidiaLayer | None = None) -> None:
    """Build the locked venv, check the flags and the checkpoint with vLLM, install the unit.

    On a host that declares GPUs (``nvidia_gpu_count`` > 0) and has the NVIDIA driver the service
    is linked into ``rigup-llm.target`` (started with the LLM mode by roles/modes) and restarted,
    when running, if its inputs change. Elsewhere it is installed, stopped and disabled, and the
    run says so. ``nvidia``: what roles.nvidia.nvidia returned in this run (None in a partial
    run: the host as it is). Raises ``SettingsError`` before any change on invalid settings.
    """
    data = host.data
    require_valid_settings(data, host.name)
    layer = nvidia or observed_layer(data)
    p = Paths.from_data(data)
    user = data.vllm_user

    service_account(user, p.vllm_home, "rigup vLLM service")
    for path in (p.vllm_root, p.vllm_scripts, p.vllm_etc):
        files.directory(name=f"Directory {path}", path=path, user="root", group="root", mode="755")

    lock_src = FILES / "vllm" / "requirements.lock"
    lock = files.put(name="vLLM lock file", src=str(lock_src), dest=p.vllm_lock, mode="644")
    venv = uv_venv_synced(
        name=f"vLLM {data.vllm_version} venv (uv, locked)",
        venv=p.vllm_venv,
        lock=p.vllm_lock,
        python=data.vllm_python,
        uv=p.uv,
        cache_dir=p.uv_cache,
        tmp_dir=p.tmp,
    )

    # A rebuilt venv is a different vLLM as far as the checks below are concerned: forget their
    # earlier verdicts so they run again against the new one.
    stamps = [f"{p.checks}/vllm-args.ok", f"{p.checks}/text-only.ok"]
    stamps.append(f"{p.checks}/checkpoint-preflight.ok")  # --- Checkpoint preflight (issue 5) ---
    for stamp in stamps:
        files.file(
            name=f"Forget {stamp} (venv rebuilt)", path=stamp, present=False, _if=venv.did_change
        )

    scripts = {
        "check_args.py": FILES / "vllm" / "check_args.py",
        "text_only_check.py": FILES / "vllm" / "text_only_check.py",
        "vllm_offline.py": FILES / "vllm" / "vllm_offline.py",
        "wait-ready": FILES / "vllm" / "wait-ready",
        "checkpoint_preflight.py": FILES / "model" / "checkpoint_preflight.py",  # issue 5
    }
    for name, src in scripts.items():
        mode = "644" if name.endswith("_offline.py") else "755"  # a module, not a command
        files.put(name=f"Script {name}", src=str(src), dest=f"{p.vllm_scripts}/{name}", mode=mode)

    args = serve_args(data)
    argv = files.put(
        name="vllm serve arguments (JSON)",
        src=StringIO(json.dumps(args, indent=2) + "\n"),
        dest=p.vllm_args_file,
        mode="644",
    )
    python = f"{p.vllm_venv}/bin/python"
    venv_key = (_sha256(lock_src), data.vllm_python)
    check_passes(
        name="Check the serve arguments with vLLM's own parser",
        command=f"{python} {p.vllm_scripts}/check_args.py {p.vllm_args_file}",
        stamp=stamps[0],
        key=fingerprint(
            args, venv_key, _sha256(scripts["check_args.py"]), _sha256(scripts["vllm_offline.py"])
        ),
        what="vLLM argument check",
    )
    method = data.vllm_text_only_method
    as_user = (
        f"runuser -u {shlex.quote(user)} -- env HOME={shlex.quote(p.vllm_home)} "
        f"TMPDIR={shlex.quote(p.vllm_home)}/tmp HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1"
    )
    # --- Checkpoint preflight (issue 5): lm_head, vision tensors, weight prefixes ---
    check_passes(
        name="Checkpoint preflight with vLLM's model registry (lm_head, vision, weight names)",
        command=(
            f"{as_user} {python} {p.vllm_scripts}/checkpoint_preflight.py "
            f"{shlex.quote(p.model_dir)} --method {method}"
        ),
        stamp=stamps[2],
        key=fingerprint(p.model_dir, method, venv_key, _sha256(scripts["checkpoint_preflight.py"])),
        what="checkpoint preflight",
    )
    check_passes(
        name=f"Check the checkpoint is served text-only ({method}) with vLLM's config code",
        command=(
            f"{as_user} {python} {p.vllm_scripts}/text_only_check.py {shlex.quote(p.model_dir)} "
            f"--method {method}"
        ),
        stamp=stamps[1],
        key=fingerprint(
            p.model_dir,
            method,
            venv_key,
            _sha256(scripts["text_only_check.py"]),
            _sha256(scripts["vllm_offline.py"]),
        ),
        what="text-only check",
    )

    env_file = files.template(
        name="vLLM environment file",
        src=str(FILES / "vllm" / "vllm.env.j2"),
        dest=p.vllm_env_file,
        user="root",
        group=user,
        mode="640",
        env=service_env(data, p.vllm_home, layer.cuda_env),
    )
    unit = files.template(
        name=f"Unit {UNIT}",
        src=str(FILES / "vllm" / "vllm.service.j2"),
        dest=p.vllm_unit,
        mode="644",
        service_user=user,
        vllm_version=data.vllm_version,
        served_model_name=data.vllm_served_model_name,
        env_file=p.vllm_env_file,
        home=p.vllm_home,
        exec_start=exec_start(p.vllm_bin, args),
        wait_ready=f"{p.vllm_scripts}/wait-ready",
        health_url=health_url(data),
        start_timeout_s=data.vllm_start_timeout_s,
        target=TARGET,
        interconnect_env=layer.interconnect_env,
    )
    systemd.daemon_reload(name="systemd daemon-reload", _if=unit.did_change)

    # Modes (roles/modes): vllm.service runs in the LLM mode only. Where it can run it is linked
    # into rigup-llm.target (enabled) and the modes deploy starts it with that mode; here it is
    # only restarted when running and its inputs changed.
    mode_unit_state(
        UNIT,
        "vLLM",
        gpu_hold_back_reason(data, layer),
        TARGET,
        "llm",
        any_changed(unit, env_file, argv, venv, lock),
        relink_if=unit.did_change,
        installed="installed and checked",
    )
