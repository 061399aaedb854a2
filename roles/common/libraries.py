"""rigup's standard-library code on a host: a module, or a package of modules, of rigup's own
installed under its host name (``rigup_diagnosis``, ``rigup_units``...) in a ``lib`` directory
that the on-host scripts put first on their ``sys.path``."""

from __future__ import annotations

from pathlib import Path

from pyinfra.api.operation import OperationMeta

from roles.common.placed import file_absent, file_placed, tree_placed


def library_path(name: str, src: Path) -> str:
    """The file or directory name of the library ``name`` on the host: ``name.py`` for a
    module, ``name`` for a package (a directory with ``__init__.py``)."""
    return name if src.is_dir() else f"{name}.py"


def host_library(name: str, src: Path, lib: str, what: str = "") -> OperationMeta:
    """Install ``src`` (a module, or a package directory) as the importable ``name`` in
    ``lib``; a package's files are held as in ``src`` (a module it no longer has is removed:
    :func:`roles.common.placed.tree_placed`) and a module file of the same name, which the
    package replaces, is removed. Returns the operation that changes when the library's code
    changed."""
    label = f"Library {library_path(name, src)}{f' ({what})' if what else ''}"
    if not src.is_dir():
        return file_placed(name=label, src=str(src), dest=f"{lib}/{name}.py", mode="644")
    op = tree_placed(name=label, src=str(src), dest=f"{lib}/{name}", mode="644", dir_mode="755")
    file_absent(name=f"No module file {name}.py beside the package {name}", path=f"{lib}/{name}.py")
    return op
