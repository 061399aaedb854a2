"""Signatures of free disk and of a venv against its lock (rigup-doctor)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .core import FAIL, OK, WARN, Signature

#: Below this many GiB free a service cannot write its caches or a venv rebuild fails.
DISK_FULL_GIB = 2.0


def _disk_fields(s: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "path": s.get("path"),
        "what": s.get("what"),
        "free": f"{s.get('free_gib', 0):.1f}",
        "total": f"{s.get('total_gib', 0):.0f}",
        "warn": f"{s.get('warn_gib', 0):g}",
    }


_DISK: list[Signature] = [
    Signature(
        id="disk/full",
        source="disk",
        severity=FAIL,
        what="{path} ({what}) is full: {free} GiB free of {total} GiB",
        why="services cannot write their caches there and a venv rebuild or a model placement "
        "fails",
        fix="free space: old model revisions under model_store_dir are never deleted by rigup "
        "(remove the ones you no longer serve); `uv cache prune` trims the uv cache",
        matcher=lambda s: _disk_fields(s) if s.get("free_gib", 0) < DISK_FULL_GIB else None,
    ),
    Signature(
        id="disk/low",
        source="disk",
        severity=WARN,
        what="{path} ({what}): {free} GiB free of {total} GiB, below {warn} GiB",
        why="a vLLM venv rebuild needs ~5 GB and a new Qwen3.6-27B INT4 revision ~17 GB",
        fix="free space before the next upgrade (old model revisions, `uv cache prune`)",
        matcher=lambda s: _disk_fields(s) if s.get("free_gib", 0) < s.get("warn_gib", 0) else None,
    ),
    Signature(
        id="disk/ok",
        source="disk",
        severity=OK,
        what="{path} ({what}): {free} GiB free of {total} GiB",
        why="read from the filesystem now",
        fix="nothing to do",
        matcher=lambda s: _disk_fields(s) if "free_gib" in s else None,
    ),
]

_VENV: list[Signature] = [
    Signature(
        id="venv/missing",
        source="venv",
        severity=FAIL,
        what="the {name} venv is missing ({python})",
        why="its interpreter does not exist: the venv was removed or never built",
        fix="converge ({deploy}) builds it from its lock",
        matcher=lambda s: dict(s) if s.get("missing") else None,
    ),
    Signature(
        id="venv/not-root",
        source="venv",
        severity=OK,
        what="the {name} venv was not compared with its lock: {unreadable} is root's only; "
        "run `sudo rigup-doctor` to compare it",
        why="uv needs its cache and temporary directory, which rigup keeps private to root",
        fix="run it with sudo",
        matcher=lambda s: dict(s) if s.get("unreadable") else None,
    ),
    Signature(
        id="venv/unchecked",
        source="venv",
        severity=WARN,
        what="the {name} venv could not be compared with its lock",
        why="{error}",
        fix="run `{check}` by hand",
        matcher=lambda s: dict(s) if s.get("error") else None,
    ),
    Signature(
        id="venv/drift",
        source="venv",
        severity=WARN,
        what="the {name} venv differs from its lock: {changes}",
        why="packages were installed, upgraded or removed by hand (pip/uv pip in the venv); "
        "rigup tested the locked set",
        fix="converge ({deploy}) syncs it back to {lock}",
        matcher=lambda s: (
            {**s, "changes": "; ".join(s["drift"][:6]) + (" ..." if len(s["drift"]) > 6 else "")}
            if s.get("drift")
            else None
        ),
    ),
    Signature(
        id="venv/ok",
        source="venv",
        severity=OK,
        what="the {name} venv matches its lock",
        why="`uv pip sync --dry-run` plans no change",
        fix="nothing to do",
        matcher=lambda s: dict(s),
    ),
]
