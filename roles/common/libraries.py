"""rigup's standard-library code on a host: a module, or a package of modules, of rigup's own
installed under its host name (``rigup_diagnosis``, ``rigup_units``...) in a ``lib`` directory
that the on-host scripts put first on their ``sys.path``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyinfra.operations import files


def library_path(name: str, src: Path) -> str:
    """The file or directory name of the library ``name`` on the host: ``name.py`` for a
    module, ``name`` for a package (a directory with ``__init__.py``)."""
    return name if src.is_dir() else f"{name}.py"


def host_library(name: str, src: Path, lib: str, what: str = "") -> Any:
    """Install ``src`` (a module, or a package directory) as the importable ``name`` in
    ``lib``; a package's files are synced (a module it no longer has is removed) and a module
    file of the same name, which the package replaces, is removed. Returns the operation that
    changes when the library's code changed."""
    label = f"Library {library_path(name, src)}{f' ({what})' if what else ''}"
    if not src.is_dir():
        return files.put(name=label, src=str(src), dest=f"{lib}/{name}.py", mode="644")
    op = files.sync(
        name=label,
        src=str(src),
        dest=f"{lib}/{name}",
        mode="644",
        dir_mode="755",
        delete=True,
        exclude=["*.pyc"],
        exclude_dir=["__pycache__", "*/__pycache__"],
    )
    files.file(
        name=f"No module file {name}.py beside the package {name}",
        path=f"{lib}/{name}.py",
        present=False,
    )
    return op
