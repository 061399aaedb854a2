"""voxcpm: VoxCPM2 text-to-speech as a hardened systemd service with an OpenAI-style API.

Settings: every ``voxcpm_*`` key in inventory/group_data/all.py, plus nvidia_gpu_count,
model_store_dir and the rigup_* layout. What it converges:

- CPython ``voxcpm_python_version`` (3.10-3.12: voxcpm 2.0.3's range) installed by uv's managed
  Python into ``<rigup_prefix>/python`` (roles/voxcpm/python.py, docs/voxcpm.md);
- the venv from files/voxcpm/requirements.lock (voxcpm==2.0.3 and every dependency, hashed);
- the VoxCPM2 checkpoint placed from its manifest (files/model/manifests/voxcpm2.toml);
- rigup's HTTP server (files/voxcpm/voxcpm_server.py), its env file (0640) and
  ``voxcpm.service`` (hardened, loopback by default, PartOf= the media mode target).
"""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.api.exceptions import DeployError
from pyinfra.facts.server import Arch
from pyinfra.operations import files, systemd
from pyinfra.operations.util import any_changed

from roles.common.operations import uv_venv_synced
from roles.common.paths import Paths
from roles.common.service import mode_unit_state, service_account
from roles.common.settings import require_valid_settings
from roles.model import place_model
from roles.nvidia.layer import NvidiaLayer, observed_layer
from roles.voxcpm.python import PythonVersion, managed_python_installed
from roles.voxcpm.service import (
    MEDIA_TARGET,
    REPO,
    UNIT,
    VoxcpmPaths,
    exec_start,
    is_loopback,
    probe_url,
    server_args,
    service_env,
    start_decision,
)

FILES = REPO / "files" / "voxcpm"


@deploy("VoxCPM2")
def voxcpm(nvidia: NvidiaLayer | None = None) -> None:
    """Interpreter, locked venv, model, server and unit; start it where it can run.

    The service runs with the test double selected (``voxcpm_test_double_synthesizer``), or on
    a host that declares GPUs and has the NVIDIA driver; otherwise it is installed, stopped and
    disabled, and the run says why. Raises ``SettingsError`` before any change on invalid
    settings, ``DeployError`` when the model is neither placed nor available to place.
    ``nvidia``: what roles.nvidia.nvidia returned in this run (None: the host as it is).
    """
    data = host.data
    require_valid_settings(data, host.name)
    common = Paths.from_data(data)
    p = VoxcpmPaths.from_data(data)
    user = data.voxcpm_user
    version = data.voxcpm_python_version

    service_account(user, p.home, "rigup VoxCPM2 service")
    for path, owner, mode in (
        (f"{p.home}/cache", user, "700"),
        (p.voices, "root", "750"),  # reference recordings <voice>.wav: the user's, never removed
    ):
        files.directory(name=f"Directory {path}", path=path, user=owner, group=user, mode=mode)
    for path in (p.python_install_dir, p.root, f"{p.root}/bin", p.etc):
        files.directory(name=f"Directory {path}", path=path, user="root", group="root", mode="755")

    # --- the interpreter: CPython 3.10-3.12 from uv's managed Python -------------------------
    interpreter = p.interpreter(version, host.get_fact(Arch))
    python = managed_python_installed(
        name=f"CPython {version} (uv managed Python) for VoxCPM2",
        version=version,
        interpreter=interpreter,
        install_dir=p.python_install_dir,
        uv=common.uv,
        cache_dir=common.uv_cache,
        tmp_dir=common.tmp,
        mirror=data.voxcpm_python_install_mirror,
        downloads_json=data.voxcpm_python_downloads_json,
    )
    venv_version = host.get_fact(PythonVersion, path=p.python)
    if venv_version is not None and venv_version != version:
        files.directory(
            name=f"Remove the venv built on Python {venv_version} (now {version})",
            path=p.venv,
            present=False,
        )

    # --- the locked venv ----------------------------------------------------------------------
    lock = files.put(
        name="VoxCPM2 lock file",
        src=str(FILES / "requirements.lock"),
        dest=p.lock,
        mode="644",
    )
    venv = uv_venv_synced(
        name=f"voxcpm {data.voxcpm_version} venv (uv, locked, Python {version})",
        venv=p.venv,
        lock=p.lock,
        python=interpreter,
        uv=common.uv,
        cache_dir=common.uv_cache,
        tmp_dir=common.tmp,
    )
    server_file = files.put(
        name="VoxCPM2 HTTP server (voxcpm_server.py)",
        src=str(FILES / "voxcpm_server.py"),
        dest=p.server,
        mode="644",
    )

    # --- the model ----------------------------------------------------------------------------
    placed = place_model(data.voxcpm_model_manifest)
    if placed.path != p.model_dir:
        raise DeployError(f"VoxCPM2 model placed at {placed.path}, expected {p.model_dir}")

    # --- environment, unit, state -------------------------------------------------------------
    env_file = files.template(
        name="VoxCPM2 environment file",
        src=str(FILES / "voxcpm.env.j2"),
        dest=p.env_file,
        user="root",
        group=user,
        mode="640",
        env=service_env(data, p),
    )
    unit = files.template(
        name=f"Unit {UNIT}",
        src=str(FILES / "voxcpm.service.j2"),
        dest=p.unit,
        mode="644",
        service_user=user,
        served_model_name=data.voxcpm_served_model_name,
        server=p.server,
        env_file=p.env_file,
        home=p.home,
        exec_start=exec_start(p, server_args(data, p)),
        ready_url=probe_url(data, "/ready"),
        start_timeout_s=data.voxcpm_start_timeout_s,
        media_target=MEDIA_TARGET,
        loopback_only=is_loopback(data.voxcpm_host),
    )
    systemd.daemon_reload(name="systemd daemon-reload", _if=unit.did_change)

    blocker = start_decision(data, (nvidia or observed_layer(data)).driver_usable)
    if blocker is None and data.voxcpm_test_double_synthesizer:
        logger.warning(
            f"[{host.name}] VoxCPM2: voxcpm_test_double_synthesizer is on: {UNIT} serves a "
            "TEST DOUBLE tone, not VoxCPM2 speech (tests only)."
        )
    mode_unit_state(
        UNIT,
        "VoxCPM2",
        blocker,
        MEDIA_TARGET,
        "media",
        any_changed(unit, env_file, venv, lock, server_file, python),
        relink_if=unit.did_change,
    )
