"""voxcpm: VoxCPM2 text-to-speech as a hardened systemd service with an OpenAI-style API.

Settings: every ``voxcpm_*`` key (rules in roles/voxcpm/settings.py). What it converges:

- CPython ``voxcpm_python_version`` (3.11-3.12: voxcpm 2.0.3's 3.10-3.12 as far as its lock
  allows) installed by uv's managed Python into ``<rigup_prefix>/python`` (roles/voxcpm/python.py,
  docs/voxcpm.md);
- the venv from files/voxcpm/requirements.lock (voxcpm==2.0.3 and every dependency, hashed);
- the VoxCPM2 checkpoint placed from its manifest (files/model/manifests/voxcpm2.toml);
- rigup's HTTP server (files/voxcpm/voxcpm_server.py, with its modules beside it:
  roles/voxcpm/settings.py SERVER_MODULES), its env file (0640), its API key (0600,
  from ``$voxcpm_api_key_env`` on the controller; required beyond loopback) and
  ``voxcpm.service`` (hardened, loopback by default, part of the media mode).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.facts.server import Arch
from pyinfra.operations import files

from roles.common.paths import Layout
from roles.common.placed import directory_placed, survey
from roles.common.service import GpuService, ServiceSpec, api_key_or_refuse
from roles.common.venv import uv_lock_private
from roles.model import ModelStore
from roles.nvidia.layer import NvidiaLayer, gpu_hold_back_reason
from roles.voxcpm.footprint import FOOTPRINT
from roles.voxcpm.paths import UNIT, VoxcpmPaths
from roles.voxcpm.python import PythonVersion, managed_python_installed
from roles.voxcpm.service import exec_start, server_args, service_env, start_decision
from roles.voxcpm.settings import SERVER_MODULES, VoxcpmSettings

FILES = Path(__file__).resolve().parents[2] / "files" / "voxcpm"
#: The variable the speech server reads its API key from (files/voxcpm/voxcpm_server.py).
API_KEY_VARIABLE = "VOXCPM_API_KEY"


def service_spec(settings: Any, model_dir: str) -> ServiceSpec:
    """voxcpm.service serving the checkpoint at ``model_dir``: what differs from the skeleton."""
    p = VoxcpmPaths.from_data(settings)
    return ServiceSpec.of(
        settings,
        p,
        FOOTPRINT,
        env=service_env(settings, p),
        description=(
            "VoxCPM2 text-to-speech server, OpenAI-style /v1/audio/speech "
            f"({VoxcpmSettings.of(settings).voxcpm_served_model_name})"
        ),
        documentation=f"file://{p.server}",
        exec_start=exec_start(p, server_args(settings, p, model_dir)),
        ready_pid_key="pid",
        optional_env_files=(
            (
                "# VOXCPM_API_KEY (voxcpm_api_key_env): root-only, read by systemd, never in argv",
                p.api_key_file,
            ),
        ),
        stop_timeout_s=30,
        restart_sec=10,
        restart_prevent_exit_status=(2,),
        restart_prevent_comment=(
            "Exit 2: the model directory is not a VoxCPM2 checkpoint (voxcpm_server.py); a "
            "converge fixes that, a restart cannot"
        ),
    )


@deploy("VoxCPM2")
def voxcpm(settings, store: ModelStore, nvidia: NvidiaLayer | None = None) -> None:
    """Interpreter, locked venv, model, server and unit; start it where it can run.

    The service runs with the test double selected (``voxcpm_test_double_synthesizer``), or on
    a host that declares GPUs and has the NVIDIA driver; otherwise it is installed, stopped and
    disabled, and the run says why. Raises ``DeployError`` before any change when the model is
    neither placed nor available to place. Does nothing (and says so) when ``voxcpm_install`` is
    False. ``nvidia``: what roles.nvidia.nvidia returned in this run (the driver there or
    planned); without it (a partial run) the host as it is.
    """
    cfg = VoxcpmSettings.of(settings)
    if not cfg.voxcpm_install:
        logger.info(f"[{host.name}] VoxCPM2: voxcpm_install is False; not installed")
        return
    layout = Layout.from_data(settings)
    p = VoxcpmPaths.from_data(settings)
    key_env = cfg.voxcpm_api_key_env
    key = api_key_or_refuse(
        "VoxCPM2",
        "voxcpm_host",
        cfg.voxcpm_host,
        key_env,
        os.environ.get(key_env),
        p.api_key_file,
    )
    version = cfg.voxcpm_python_version
    placed = store.place(cfg.voxcpm_model_manifest)
    svc = GpuService(settings, service_spec(settings, placed.path))

    svc.account("rigup VoxCPM2 service")
    svc.directories(
        root_owned=(p.python_install_dir, p.root, p.bin, p.etc),
        owned=((f"{p.home}/cache", "700"),),
    )
    svc.api_key(key, key_env, p.secrets_dir, p.api_key_file, API_KEY_VARIABLE)
    # reference recordings <voice>.wav: the user's, never removed; readable by the service
    directory_placed(
        name=f"Directory {p.voices}",
        path=p.voices,
        user="root",
        group=cfg.voxcpm_user,
        mode="750",
    )

    # --- the interpreter: CPython 3.11-3.12 from uv's managed Python -------------------------
    interpreter = p.interpreter(version, host.get_fact(Arch))
    python = managed_python_installed(
        name=f"CPython {version} (uv managed Python) for VoxCPM2",
        version=version,
        interpreter=interpreter,
        install_dir=p.python_install_dir,
        uv=layout.uv,
        cache_dir=layout.uv_cache,
        tmp_dir=layout.tmp,
        mirror=cfg.voxcpm_python_install_mirror,
        downloads_json=cfg.voxcpm_python_downloads_json,
    )
    svc.track(python, software=True)
    uv_lock_private(p.python_install_dir)
    venv_version = host.get_fact(PythonVersion, path=p.python)
    if venv_version is not None and venv_version != version:
        files.directory(
            name=f"Remove the venv built on Python {venv_version} (now {version})",
            path=p.venv,
            present=False,
        )

    svc.venv(
        what="VoxCPM2",
        contents=f"voxcpm {cfg.voxcpm_version}, Python {version}",
        lock_src=FILES / "requirements.lock",
        lock=p.lock,
        venv=p.venv,
        python=interpreter,
    )
    survey([p.server, *(f"{p.bin}/{module}" for module in SERVER_MODULES)])
    svc.put("VoxCPM2 HTTP server (voxcpm_server.py)", FILES / "voxcpm_server.py", p.server)
    for module, what in SERVER_MODULES.items():
        svc.put(f"VoxCPM2 HTTP server's {what} ({module})", FILES / module, f"{p.bin}/{module}")

    blocker = start_decision(settings, gpu_hold_back_reason(settings, nvidia))
    if blocker is None and cfg.voxcpm_test_double_synthesizer:
        logger.warning(
            f"[{host.name}] VoxCPM2: voxcpm_test_double_synthesizer is on: {UNIT} serves a "
            "TEST DOUBLE tone, not VoxCPM2 speech (tests only)."
        )
    svc.install(blocker)
