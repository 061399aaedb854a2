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

from roles.common.facts import DirectoryInventory
from roles.common.operations import uv_venv_synced
from roles.common.paths import Paths
from roles.common.service import has_nvidia_driver, service_account, unit_state
from roles.common.settings import require_valid_settings
from roles.voxcpm.python import PythonVersion, managed_python_installed
from roles.voxcpm.service import (
    MEDIA_TARGET,
    REPO,
    UNIT,
    VoxcpmPaths,
    exec_start,
    is_loopback,
    manifest_identity,
    probe_url,
    server_args,
    service_env,
    start_decision,
)

FILES = REPO / "files" / "voxcpm"

try:  # issue 5's model placement (manifest-format.md section 5)
    from roles.model import place_model
except ImportError:  # INTEGRATION POINT (issue 4 x issue 5): see _place_local_copy
    place_model = None

#: Until issue 5's place_model is merged: the local copy the VoxCPM2 checkpoint is placed from.
#: It is where issue 5's "local" source looks first for this manifest (model_local_dirs default
#: ["/srv/mirror"], then <root>/<repo basename> = /srv/mirror/VoxCPM2).
LOCAL_COPY = "/srv/mirror/VoxCPM2"


def _place_local_copy(data, p: VoxcpmPaths, tmp_dir: str) -> None:
    """Place the checkpoint from :data:`LOCAL_COPY` with the skeleton's atomic copy.

    INTEGRATION POINT: once issue 5 lands, ``place_model(data.voxcpm_model_manifest)`` replaces
    this function (same destination, ``<model_store_dir>/<name>/<revision>``), with size/sha256
    verification and the hub sources. Raises ``DeployError`` before any change when nothing is
    placed and the local copy is missing or has no config.json.
    """
    from roles.model import checkpoint_placed

    name, revision = manifest_identity(data.voxcpm_model_manifest)
    if host.get_fact(DirectoryInventory, path=p.model_dir) is None:
        source = host.get_fact(DirectoryInventory, path=LOCAL_COPY)
        if source is None or "config.json" not in source:
            raise DeployError(
                f"VoxCPM2 model: nothing is placed at {p.model_dir} and {LOCAL_COPY} "
                f"{'has no config.json' if source is not None else 'does not exist'} on "
                f"{host.name} (nothing was changed). Copy the openbmb/VoxCPM2 snapshot there "
                "(e.g. `hf download openbmb/VoxCPM2 --local-dir ...` on a machine that reaches "
                "the hub)."
            )
    store = str(data.model_store_dir).rstrip("/")
    for path in (store, f"{store}/{name}"):
        files.directory(name=f"Directory {path}", path=path, user="root", group="root", mode="755")
    checkpoint_placed(
        name=f"Place model {name}@{revision} from {LOCAL_COPY}",
        source=LOCAL_COPY,
        dest=p.model_dir,
        tmp_dir=tmp_dir,
    )


@deploy("VoxCPM2")
def voxcpm() -> None:
    """Interpreter, locked venv, model, server and unit; start it where it can run.

    The service runs with the test double selected (``voxcpm_test_double_synthesizer``), or on
    a host that declares GPUs and has the NVIDIA driver; otherwise it is installed, stopped and
    disabled, and the run says why. Raises ``SettingsError`` before any change on invalid
    settings, ``DeployError`` when the model is neither placed nor available to place.
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
    if place_model is not None:
        placed = place_model(data.voxcpm_model_manifest)
        if placed.path != p.model_dir:
            raise DeployError(f"VoxCPM2 model placed at {placed.path}, expected {p.model_dir}")
    else:
        _place_local_copy(data, p, common.tmp)

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

    blocker = start_decision(data, has_nvidia_driver(data.nvidia_gpu_count))
    if blocker is None and data.voxcpm_test_double_synthesizer:
        logger.warning(
            f"[{host.name}] VoxCPM2: voxcpm_test_double_synthesizer is on: {UNIT} serves a "
            "TEST DOUBLE tone, not VoxCPM2 speech (tests only)."
        )
    unit_state(
        UNIT,
        "VoxCPM2",
        blocker,
        any_changed(unit, env_file, venv, lock, server_file, python),
    )
