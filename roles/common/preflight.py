"""Host preflight: refuse a host rigup cannot converge, before any change, with a clear reason:
a host rigup does not support, and a file system with less free space than a change needs."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from pyinfra import host
from pyinfra.api import FactBase
from pyinfra.api.exceptions import DeployError

from rigup.diagnosis import DF_ARGS, parse_df

#: Distributions the roles are written for: Ubuntu 26.04 (the rig) and Debian 13 (the lab).
SUPPORTED_IDS = ("ubuntu", "debian")


class HostBasics(FactBase):
    """``{"id": "ubuntu", "version_id": "26.04", "systemd": True, "uid": 0}`` from os-release,
    ``/run/systemd/system`` (systemd is PID 1) and ``id -u``."""

    def command(self) -> str:
        return (
            '(. /etc/os-release 2>/dev/null; echo "id=${ID:-}"; echo "version_id=${VERSION_ID:-}"); '
            "if test -d /run/systemd/system; then echo systemd=1; else echo systemd=0; fi; "
            "echo uid=$(id -u)"
        )

    def process(self, output: list[str]) -> dict:
        values = dict(line.split("=", 1) for line in output if "=" in line)
        return {
            "id": values.get("id", ""),
            "version_id": values.get("version_id", ""),
            "systemd": values.get("systemd") == "1",
            "uid": int(values.get("uid", "-1") or -1),
        }


def require_supported_host() -> None:
    """Raise ``DeployError`` unless the host is Debian/Ubuntu, booted with systemd, as root.

    (pyinfra's ``--sudo`` makes commands run as root; the check reads the effective uid.)
    """
    basics = host.get_fact(HostBasics)
    problems = []
    if basics["id"] not in SUPPORTED_IDS:
        problems.append(f"distribution {basics['id'] or 'unknown'!r} is not Ubuntu or Debian")
    if not basics["systemd"]:
        problems.append("systemd is not running as PID 1 (no /run/systemd/system)")
    if basics["uid"] != 0:
        problems.append(
            f"commands run as uid {basics['uid']}, not root: connect as root or add --sudo"
        )
    if problems:
        raise DeployError(
            f"host {host.name} cannot be converged (nothing was changed): " + "; ".join(problems)
        )


class FreeSpace(FactBase):
    """The file system holding each of ``paths`` (or its nearest existing parent: a directory
    the run has not made yet): ``{path: {"mount": str, "free_bytes": int, "size_bytes": int,
    "free_gib": float, "size_gib": float}}``, GiB = 2**30 bytes; a path ``df`` gives no figure
    for is left out. ``free`` is what ``df`` calls available (what a service user may write).

    Reads ``df -B1 --output=target,avail,size`` (GNU coreutils) after a ``== <path>`` line per
    path; :func:`rigup.diagnosis.parse_df` reads its figures (the doctor's own parser)."""

    def command(self, paths: tuple[str, ...]) -> str:
        df = " ".join(DF_ARGS)
        parts = [
            f"o={shlex.quote(path)}; p=$o; "
            'while ! test -e "$p" && test "$p" != /; do p=$(dirname "$p"); done; '
            f'echo "== $o"; {df} "$p" 2>/dev/null | tail -n 1'
            for path in paths
        ]
        return "; ".join(parts) + "; true" if parts else "true"

    def process(self, output: list[str]) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        path = None
        for line in output:
            if line.startswith("== "):
                path = line[3:]
                continue
            figures = parse_df(line)
            if path and figures:
                found[path] = figures[0]
        return found


@dataclass(frozen=True)
class SpaceNeed:
    """``gib`` GiB (2**30 bytes) that ``what`` writes under ``path``; ``source``: where the
    figure comes from (a measurement)."""

    path: str
    gib: float
    what: str
    source: str


def free_space_problems(needs: list[SpaceNeed], free: dict[str, dict[str, Any]]) -> list[str]:
    """One sentence per file system with less free space than the ``needs`` on it together
    (each need counted once per file system it names; ``free``: :class:`FreeSpace` of their
    paths): its mount point, the paths, free vs needed GiB and each need with its source.
    A path without a figure is not checked."""
    by_mount: dict[str, tuple[dict[str, Any], list[SpaceNeed]]] = {}
    for need in needs:
        fs = free.get(need.path)
        if fs is None:
            continue
        _, listed = by_mount.setdefault(fs["mount"], (fs, []))
        if all(n.what != need.what for n in listed):
            listed.append(need)
    problems = []
    for mount, (fs, listed) in by_mount.items():
        needed = sum(n.gib for n in listed)
        if fs["free_gib"] >= needed:
            continue
        paths = ", ".join(dict.fromkeys(n.path for n in listed))
        items = "; ".join(f"{n.what}: {n.gib:g} GiB ({n.source})" for n in listed)
        free_gib = f"{fs['free_gib']:.2f}" if fs["free_gib"] >= 0.01 else f"{fs['free_gib']:.4f}"
        problems.append(
            f"{paths} (file system {mount}): {free_gib} GiB free of "
            f"{fs['size_gib']:.2f} GiB, {needed:g} GiB needed: {items}"
        )
    return problems


def require_free_space(needs: list[SpaceNeed], change: str) -> None:
    """Raise ``DeployError`` (before any change) when a file system that ``needs`` name has
    less free space than they need together (:func:`free_space_problems`; every file system at
    once); ``change``: what the run would do (``restart vllm.service``), named in the error.
    Reads a fact: call inside a deploy."""
    if not needs:
        return
    free = host.get_fact(FreeSpace, paths=tuple(dict.fromkeys(n.path for n in needs)))
    problems = free_space_problems(needs, free or {})
    if problems:
        raise DeployError(
            f"host {host.name}: not enough free space to {change} (nothing was changed): "
            + " | ".join(problems)
            + ". Free space there (old model revisions under model_store_dir, `uv cache prune`, "
            "the service's caches) and converge again"
        )


def service_space_needs(
    spec: Any, uv_cache: str, venvs: list[tuple[str, bool]], starts: bool
) -> tuple[list[SpaceNeed], list[str]]:
    """``(needs, changes)``: the free space a run's changes to one service need (a
    :class:`SpaceNeed` per path) and those changes in words. ``spec``: its
    :class:`roles.common.service.ServiceSpec` (``disk``: its footprint's
    :class:`roles.common.footprint.DiskNeeds`; None: nothing is checked); ``starts``: the run
    (re)starts it, and a start writes ``disk.start_gib`` on each file system of its home (its
    ``tmp``, caches) and its ``read_write_paths``; ``venvs``: ``(venv, the run syncs it)``, a
    sync needing ``disk.venv_gib`` on the file systems of ``uv_cache`` and of the venv (once
    when they are one)."""
    disk = spec.disk
    needs: list[SpaceNeed] = []
    changes: list[str] = []
    if disk is None:
        return needs, changes
    if starts:
        changes.append(f"restart {spec.unit}")
        what = f"a start of {spec.unit} (its temporary files and caches)"
        for path in (f"{spec.home}/tmp", spec.home, *spec.read_write_paths):
            needs.append(SpaceNeed(path, disk.start_gib, what, disk.start_source))
    for venv, syncs in venvs:
        if syncs:
            changes.append(f"sync {spec.component}'s venv {venv}")
            what = f"{spec.component}'s venv"
            for path in (uv_cache, venv):
                needs.append(SpaceNeed(path, disk.venv_gib, what, disk.venv_source))
    return needs, changes
