"""A venv built by uv from a committed, hash-pinned lock: the one way rigup installs Python
software on a host (vLLM, ComfyUI, VoxCPM2, the model tool, the CUDA toolkit)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyinfra.api.operation import OperationMeta

from roles.common.operations import uv_venv_recorded, uv_venv_synced
from roles.common.paths import Layout
from roles.common.placed import file_placed, file_present, survey
from roles.common.uv import PackageSources


@dataclass(frozen=True)
class LockedVenv:
    """The operations of :func:`locked_venv`: ``lock`` (the lock file put on the host) and
    ``venv`` (the sync); either changing means different software in the venv."""

    lock: OperationMeta
    venv: OperationMeta
    path: str

    @property
    def python(self) -> str:
        """The venv's interpreter."""
        return f"{self.path}/bin/python"


def locked_venv(
    settings: Any,
    *,
    what: str,
    contents: str,
    lock_src: Path,
    lock: str,
    venv: str,
    python: str,
    mislabelled: tuple[str, ...] = (),
) -> LockedVenv:
    """Put ``lock_src`` at ``lock`` on the host and hold the venv at ``venv`` to exactly it.

    + what: the component ("vLLM"), contents: what the lock holds, for the operation names
    + python: the interpreter a new venv is created with (``python3`` or a path)
    + mislabelled: see :func:`roles.common.operations.uv_venv_synced`

    uv comes from the base role (``<prefix>/uv``), with its wheel cache and temp directory; the
    packages from the host's package sources (``uv_index_url``, ``uv_extra_index_urls``,
    ``uv_find_links``, ``uv_offline``: :class:`roles.common.uv.PackageSources`), hash-checked
    against the lock whatever the source.
    """
    layout = Layout.from_data(settings)
    sources = PackageSources.from_data(settings).uv_env()
    survey((lock, f"{venv}/.lock"))
    lock_op = file_placed(name=f"{what} lock file", src=str(lock_src), dest=lock, mode="644")
    venv_op = uv_venv_synced(
        name=f"{what} venv ({contents}; uv, locked)",
        venv=venv,
        lock=lock,
        python=python,
        uv=layout.uv,
        cache_dir=layout.uv_cache,
        tmp_dir=layout.tmp,
        mislabelled=mislabelled,
        sources=sources,
    )
    uv_venv_recorded(
        name=f"{what} venv: its sync recorded",
        venv=venv,
        lock=lock,
        uv=layout.uv,
        cache_dir=layout.uv_cache,
        tmp_dir=layout.tmp,
        sources=sources,
    )
    uv_lock_private(venv)
    return LockedVenv(lock=lock_op, venv=venv_op, path=venv)


def uv_lock_private(directory: str) -> None:
    """``<directory>/.lock``, the file uv flocks while it changes a venv or a Python install
    directory, root-only (0600). uv creates it world-writable (0666), and flock needs only a
    file one can open: with 0666 or 0644 any local user could hold it and stall every uv run
    of a converge. Created if absent (uv takes the file as it finds it)."""
    file_present(
        name=f"uv's lock file {directory}/.lock root-only (0600)",
        path=f"{directory}/.lock",
        user="root",
        group="root",
        mode="600",
    )
