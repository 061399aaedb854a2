"""rigup's host package on a host: the repository's ``rigup/`` (standard library only: the
diagnosis table, the nvidia-smi readers, the unit reader, the doctor, the benchmark, the report)
installed as the package ``rigup`` in a tool tree's ``lib`` directory, which the on-host scripts
put first on their ``sys.path`` (their one line). The deploy imports the same package by the same
name from the repository root."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyinfra import host
from pyinfra.facts.files import FindDirectories, FindFiles
from pyinfra.operations import files

#: the package's source on the controller
PACKAGE = Path(__file__).resolve().parents[2] / "rigup"
#: its name on the host, and in the deploy
PACKAGE_NAME = PACKAGE.name


def host_package(lib: str) -> Any:
    """Install rigup's host package as ``<lib>/rigup`` (its files synced: a module the package no
    longer has is removed) and remove every other entry of ``lib``, which holds the package
    alone (a module or package of another name there, which no deploy of this tree put, would
    be code the scripts could import by mistake). Reads facts: call inside a deploy. Returns
    the sync operation, which changes when the package's code changed."""
    dest = f"{lib}/{PACKAGE_NAME}"
    op = files.sync(
        name=f"Package {PACKAGE_NAME} in {lib} (the rig's own code)",
        src=str(PACKAGE),
        dest=dest,
        mode="644",
        dir_mode="755",
        delete=True,
        exclude=["*.pyc"],
        exclude_dir=["__pycache__", "*/__pycache__"],
    )
    found_dirs = set(host.get_fact(FindDirectories, path=lib, maxdepth=1) or []) - {lib, dest}
    found_files = set(host.get_fact(FindFiles, path=lib, maxdepth=1) or [])
    what = f"Only the package {PACKAGE_NAME} in {lib}: remove"
    for path in sorted(found_dirs):
        files.directory(name=f"{what} {path}", path=path, present=False)
    for path in sorted(found_files):
        files.file(name=f"{what} {path}", path=path, present=False)
    return op
