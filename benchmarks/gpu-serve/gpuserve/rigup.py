"""rigup's own code on a machine without pyinfra: the pure modules (``roles.vllm.flags``, the
settings in inventory/group_data/all.py) and the host package rigup-doctor, rigup-bench and
rigup-nvlink run on a rig (``rigup``: rigup.bench, rigup.doctor, rigup.metrics, rigup.diagnosis).

Some rigup packages' ``__init__`` is a pyinfra deploy (``roles.vllm``, ``roles.cluster``); the
modules this check needs inside them are pure. :func:`pure` imports such a module with those
packages kept bare (their ``__init__`` stopped at the pyinfra import) where pyinfra is missing.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import runpy
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[3]


class _BarePackages(importlib.abc.MetaPathFinder):
    """Finds rigup's packages (``roles``, ``roles.vllm``, ``roles.cluster`` ...) as the standard
    path finder does, but a package whose ``__init__`` stops at a missing pyinfra is kept bare:
    what its ``__init__`` defined before the pyinfra import, its submodules importable."""

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] != "roles":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.submodule_search_locations is None or spec.loader is None:
            return spec
        spec.loader = _BareOnPyinfra(spec.loader)
        return spec


class _BareOnPyinfra(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec):
        return None

    def exec_module(self, module: ModuleType) -> None:
        try:
            self.loader.exec_module(module)
        except ModuleNotFoundError as exc:
            if (exc.name or "").split(".")[0] != "pyinfra":
                raise


def pure(module: str) -> ModuleType:
    """Import rigup's ``module`` (``"roles.vllm.flags"``); where pyinfra is not installed, every
    rigup package on the way whose ``__init__`` is a pyinfra deploy (``roles.vllm``,
    ``roles.cluster``, ...) is kept bare (its ``__init__`` stops at the pyinfra import). Raises
    ImportError when the module itself needs what is not installed."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    try:
        importlib.import_module("pyinfra")
    except ModuleNotFoundError:
        if not any(isinstance(f, _BarePackages) for f in sys.meta_path):
            sys.meta_path.insert(0, _BarePackages())
    return importlib.import_module(module)


def settings() -> dict[str, Any]:
    """rigup's settings as a deploy reads them: every public name of
    inventory/group_data/all.py (the one settings file a rig owner edits)."""
    module = runpy.run_path(str(REPO / "inventory" / "group_data" / "all.py"))
    return {k: v for k, v in module.items() if not k.startswith("_")}


def host_package(lib: Path) -> Path:
    """rigup's host package (the repository's rigup/, roles/common/libraries.py) as
    ``lib/rigup`` (a symlink), ``lib`` first on ``sys.path``, as on a rig. Returns ``lib``."""
    lib.mkdir(parents=True, exist_ok=True)
    link = lib / "rigup"
    if link.is_symlink() or link.exists():
        link.unlink()
    os.symlink(REPO / "rigup", link)
    if str(lib) not in sys.path:
        sys.path.insert(0, str(lib))
    return lib
