"""rigup's host package on a host: the repository's ``rigup/`` (standard library only: the
diagnosis table, the nvidia-smi readers, the unit reader, the doctor, the benchmark, the report)
installed as the package ``rigup`` in a tool tree's ``lib`` directory, which the on-host scripts
put first on their ``sys.path`` (their one line). The deploy imports the same package by the same
name from the repository root."""

from __future__ import annotations

from pathlib import Path

from pyinfra.api.operation import OperationMeta
from pyinfra.operations import files

from roles.common.placed import file_absent, survey_tree, tree_entries, tree_placed

#: the package's source on the controller
PACKAGE = Path(__file__).resolve().parents[2] / "rigup"
#: its name on the host, and in the deploy
PACKAGE_NAME = PACKAGE.name


def host_package(lib: str) -> OperationMeta:
    """Install rigup's host package as ``<lib>/rigup`` (its files held as in the repository: a
    module the package no longer has is removed, :func:`roles.common.placed.tree_placed`) and
    remove every other entry of ``lib``, which holds the package alone (a module or package of
    another name there, which no deploy of this tree put, would be code the scripts could
    import by mistake). ``lib`` and everything under it are read in one round trip
    (:func:`roles.common.placed.survey_tree`). Reads facts: call inside a deploy. Returns the
    package's operation, which changes when the package's code changed."""
    dest = f"{lib}/{PACKAGE_NAME}"
    survey_tree(lib)
    op = tree_placed(
        name=f"Package {PACKAGE_NAME} in {lib} (the rig's own code)",
        src=str(PACKAGE),
        dest=dest,
        mode="644",
        dir_mode="755",
    )
    what = f"Only the package {PACKAGE_NAME} in {lib}: remove"
    for path, state in sorted(tree_entries(lib).items()):
        rel = path[len(lib) :].strip("/")
        if not rel or "/" in rel or rel == PACKAGE_NAME or state is None:
            continue
        if state.get("type") == "directory":
            files.directory(name=f"{what} {path}", path=path, present=False)
        else:
            file_absent(name=f"{what} {path}", path=path)
    return op
