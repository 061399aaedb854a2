"""A venv built by uv from a committed, hash-pinned lock: the one way rigup installs Python
software on a host (vLLM, ComfyUI, VoxCPM2, the model tool, the CUDA toolkit)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyinfra.api.operation import OperationMeta
from pyinfra.operations import files

from roles.common.operations import uv_venv_synced
from roles.common.paths import Layout


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

    uv comes from the base role (``<prefix>/uv``), with its wheel cache and temp directory.
    """
    layout = Layout.from_data(settings)
    lock_op = files.put(name=f"{what} lock file", src=str(lock_src), dest=lock, mode="644")
    venv_op = uv_venv_synced(
        name=f"{what} venv ({contents}; uv, locked)",
        venv=venv,
        lock=lock,
        python=python,
        uv=layout.uv,
        cache_dir=layout.uv_cache,
        tmp_dir=layout.tmp,
        mislabelled=mislabelled,
    )
    return LockedVenv(lock=lock_op, venv=venv_op, path=venv)
