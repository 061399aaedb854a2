"""comfyui: ComfyUI at a pinned commit, a uv-built locked venv, its base directory and service.

Settings: every ``comfyui_*`` key in inventory/group_data/all.py, plus rigup_prefix,
rigup_etc_dir, rigup_state_dir, uv_cache_dir, nvidia_gpu_count. Layout
(:func:`roles.comfyui.flags.comfyui_dirs`):

- ``<prefix>/comfyui/src``: git checkout of ``comfyui_git_url`` at ``comfyui_commit`` (a URL, or
  a local mirror path for rigs behind a firewall and for the lab); root-owned, read-only to the
  service. A checkout with local changes is never reset: the run stops and names them.
- ``<prefix>/comfyui/venv``: built by uv from files/comfyui/requirements.lock (hash-pinned).
- ``comfyui_base_dir`` (``--base-directory``): models/, custom_nodes/, input/, output/, user/
  (and ComfyUI's own temp/), owned by the service user. rigup creates the directories and never
  touches what is in them; model files are links into the model store.
- ``comfyui.service``: hardened, part of the media mode (roles/modes), counted as started once
  ``GET /system_stats`` answers. Its flags are checked by the pinned ComfyUI's own parser.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from io import StringIO
from pathlib import Path

from pyinfra import host, logger
from pyinfra.api import FactBase, deploy, operation
from pyinfra.api.exceptions import OperationError
from pyinfra.operations import apt, files, server, systemd
from pyinfra.operations.util import any_changed

from roles.comfyui.flags import (
    BASE_SUBDIRS,
    comfyui_dirs,
    exec_start,
    main_args,
    service_env,
    system_stats_url,
)
from roles.common.operations import check_passes, fingerprint, uv_venv_synced
from roles.common.paths import Paths
from roles.common.service import mode_unit_state
from roles.common.settings import require_valid_settings
from roles.model import link_model_files, place_model
from roles.modes import gpu_hold_back_reason
from roles.modes.budget import MODES, SERVICE_MODES
from roles.nvidia.layer import NvidiaLayer

FILES = Path(__file__).resolve().parents[2] / "files"
UNIT = "comfyui.service"
TARGET = MODES[SERVICE_MODES[UNIT]]  # rigup-media.target

#: comfyui_models entry -> model manifests (files/model/manifests/<name>.toml) it places. LTX-2.3
#: needs files from four Hugging Face repositories, one manifest each.
COMFYUI_MODEL_SETS: dict[str, tuple[str, ...]] = {
    "flux2-dev": ("flux2-dev",),
    "ltx-2.3": (
        "ltx-2.3-22b-dev-fp8",
        "ltx-2.3-spatial-upscaler",
        "ltx-2.3-distilled-lora",
        "ltx-2-gemma-3-12b",
    ),
}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class GitCheckout(FactBase):
    """State of a git work tree: ``{"head": "<40 hex>", "origin": "<url>", "dirty": [...]}``.

    ``dirty`` lists ``git status --porcelain`` lines (changed or untracked files, ignored ones
    excluded). None when ``path`` has no ``.git``.
    """

    def command(self, path: str) -> str:
        q = shlex.quote(path)
        return (
            f"if test -d {q}/.git; then "
            f'echo "@head $(git -C {q} rev-parse -q --verify HEAD 2>/dev/null)"; '
            f'echo "@origin $(git -C {q} remote get-url origin 2>/dev/null)"; '
            f"git -C {q} status --porcelain 2>&1 | sed 's/^/@dirty /'; "
            "else echo '@absent'; fi"
        )

    def process(self, output: list[str]) -> dict | None:
        if not output or output[0] == "@absent":
            return None
        state: dict = {"head": "", "origin": "", "dirty": []}
        for line in output:
            tag, _, rest = line.partition(" ")
            if tag == "@head":
                state["head"] = rest.strip()
            elif tag == "@origin":
                state["origin"] = rest.strip()
            elif tag == "@dirty":
                state["dirty"].append(rest)
        return state


@operation()
def git_checkout_pinned(path: str, url: str, commit: str, version_check: str | None = None):
    """Hold a git checkout of ``url`` at ``path`` on ``commit`` (detached HEAD).

    + path: work tree on the host (cloned when absent)
    + url: git URL or local mirror path; becomes/updates the ``origin`` remote
    + commit: full 40-hex commit id; fetched from origin when the clone lacks it
    + version_check: shell command run after a checkout that must pass (e.g. a version grep)

    A no-op when HEAD is ``commit``, origin is ``url`` and the tree is clean. Raises
    ``OperationError`` when the work tree has local changes (they are kept, never reset) or when
    the commit is not in the repository at ``url``.
    """
    state = host.get_fact(GitCheckout, path=path)
    if state and state["dirty"]:
        changes = "; ".join(state["dirty"][:10])
        raise OperationError(
            f"{path} has local changes ({changes}); rigup does not reset them. Move them out "
            f"(custom nodes belong in the base directory's custom_nodes/), then re-run."
        )
    if state and state["head"] == commit and state["origin"] == url:
        host.noop(f"{path} is at {commit[:12]}")
        return
    q, c = shlex.quote(path), shlex.quote(commit)
    if state is None:
        yield f"git clone --quiet --no-checkout {shlex.quote(url)} {q}"
    elif state["origin"] != url:
        yield f"git -C {q} remote set-url origin {shlex.quote(url)}"
    yield (
        f"git -C {q} cat-file -e {c}^{{commit}} 2>/dev/null || git -C {q} fetch --quiet origin {c}"
        f" || {{ echo 'commit {commit} is not in {url}' >&2; exit 1; }}"
    )
    yield f"git -C {q} -c advice.detachedHead=false checkout --quiet --detach {c}"
    if version_check:
        yield version_check


def _place_models(data, models_dir: str) -> None:
    """Place the model manifests of ``comfyui_models`` in the model store (verified, atomic:
    roles.model.place_model) and link each file into ComfyUI's ``models/<folder>/``
    (roles.model.link_model_files; the manifest's ``dest`` names the folder). ComfyUI follows
    the links; the store stays the one copy, root-owned and read-only to the service."""
    for key in data.comfyui_models:
        for name in COMFYUI_MODEL_SETS.get(key, (key,)):
            link_model_files(place_model(name), into=models_dir)


@deploy("ComfyUI")
def comfyui(nvidia: NvidiaLayer | None = None) -> None:
    """Check out the pinned ComfyUI, build its locked venv, lay out its base directory, check its
    flags with its own parser, place its models and install its unit.

    The service is linked into ``rigup-media.target`` where it can run: with ``comfyui_cpu``, or
    on a host with GPUs and the NVIDIA driver; otherwise it is installed, stopped and disabled,
    and the run says why. Raises ``SettingsError`` before any change on invalid settings (the
    VRAM budget included). Does nothing (and says so) when ``comfyui_install`` is false.
    ``nvidia``: what roles.nvidia.nvidia returned in this run (None: the host as it is).
    """
    data = host.data
    require_valid_settings(data, host.name)
    if not data.comfyui_install:
        logger.info(f"[{host.name}] ComfyUI: comfyui_install is False; not installed")
        return
    p = Paths.from_data(data)
    d = comfyui_dirs(data)
    user = data.comfyui_user

    apt.packages(name="git (ComfyUI source)", packages=["git"])
    server.user(
        name=f"Service user {user}",
        user=user,
        system=True,
        home=d["home"],
        shell="/usr/sbin/nologin",
        groups=["video"],
        comment="rigup ComfyUI service",
    )
    files.directory(
        name=f"Directory {d['home']}", path=d["home"], user=user, group=user, mode="750"
    )
    files.directory(
        name=f"Directory {d['home']}/tmp",
        path=f"{d['home']}/tmp",
        user=user,
        group=user,
        mode="700",
    )
    for path in (d["root"], d["scripts"], d["etc"]):
        files.directory(name=f"Directory {path}", path=path, user="root", group="root", mode="755")
    # The base directory tree: the directories themselves, never their content (recursive=False).
    files.directory(
        name=f"Directory {d['base']}", path=d["base"], user=user, group=user, mode="750"
    )
    for sub in BASE_SUBDIRS:
        files.directory(
            name=f"Directory {d['base']}/{sub}",
            path=f"{d['base']}/{sub}",
            user=user,
            group=user,
            mode="750",
        )

    commit = data.comfyui_commit
    version_file = shlex.quote(f"{d['src']}/comfyui_version.py")
    checkout = git_checkout_pinned(
        name=f"ComfyUI {data.comfyui_version} source at {commit[:12]}",
        path=d["src"],
        url=data.comfyui_git_url,
        commit=commit,
        version_check=(
            f"grep -qx '__version__ = \"{data.comfyui_version}\"' {version_file} || "
            f"{{ echo 'comfyui_version: {version_file} at {commit} is not "
            f"{data.comfyui_version}' >&2; exit 1; }}"
        ),
    )

    lock_src = FILES / "comfyui" / "requirements.lock"
    lock = files.put(name="ComfyUI lock file", src=str(lock_src), dest=d["lock"], mode="644")
    venv = uv_venv_synced(
        name="ComfyUI venv (uv, locked)",
        venv=d["venv"],
        lock=d["lock"],
        python=data.comfyui_python,
        uv=p.uv,
        cache_dir=p.uv_cache,
        tmp_dir=p.tmp,
    )

    scripts = {
        "check_args.py": FILES / "comfyui" / "check_args.py",
        "wait-ready": FILES / "vllm" / "wait-ready",
    }
    for name, src in scripts.items():
        files.put(name=f"Script {name}", src=str(src), dest=f"{d['scripts']}/{name}", mode="755")

    args = main_args(data)
    argv = files.put(
        name="ComfyUI main.py arguments (JSON)",
        src=StringIO(json.dumps(args, indent=2) + "\n"),
        dest=d["args_file"],
        mode="644",
    )
    stamp = f"{p.checks}/comfyui-args.ok"
    files.file(
        name=f"Forget {stamp} (source or venv changed)",
        path=stamp,
        present=False,
        _if=any_changed(checkout, venv),
    )
    check_passes(
        name="Check the main.py arguments with the pinned ComfyUI's own parser",
        command=(
            f"runuser -u {shlex.quote(user)} -- env PYTHONDONTWRITEBYTECODE=1 {d['python']} "
            f"{d['scripts']}/check_args.py {d['src']} {d['args_file']}"
        ),
        stamp=stamp,
        key=fingerprint(args, commit, _sha256(lock_src), _sha256(scripts["check_args.py"])),
        what="ComfyUI argument check",
    )

    _place_models(data, f"{d['base']}/models")

    env_file = files.template(
        name="ComfyUI environment file",
        src=str(FILES / "comfyui" / "comfyui.env.j2"),
        dest=d["env_file"],
        user="root",
        group=user,
        mode="640",
        env=service_env(data),
    )
    unit = files.template(
        name=f"Unit {UNIT}",
        src=str(FILES / "comfyui" / "comfyui.service.j2"),
        dest=d["unit"],
        mode="644",
        comfyui_version=data.comfyui_version,
        mode_name="media",
        target=TARGET,
        service_user=user,
        env_file=d["env_file"],
        base_dir=d["base"],
        home=d["home"],
        exec_start=exec_start(data),
        wait_ready=f"{d['scripts']}/wait-ready",
        ready_url=system_stats_url(data),
        start_timeout_s=data.comfyui_start_timeout_s,
    )
    systemd.daemon_reload(name="systemd daemon-reload", _if=unit.did_change)

    mode_unit_state(
        UNIT,
        "ComfyUI",
        None if data.comfyui_cpu else gpu_hold_back_reason(data, nvidia),
        TARGET,
        "media",
        any_changed(unit, env_file, argv, venv, lock, checkout),
        installed="installed and checked",
        hint="comfyui_cpu = True runs it on the CPU",
    )
