"""rigup's own code on a machine without pyinfra: the pure modules (``roles.vllm.flags``, the
settings in inventory/group_data/all.py) and the host package rigup-doctor, rigup-bench and
rigup-nvlink run on a rig (``rigup``: rigup.bench, rigup.doctor, rigup.metrics, rigup.diagnosis).

Some rigup packages' ``__init__`` is a pyinfra deploy (``roles.vllm``, ``roles.doctor``); the
modules this check needs inside them are pure. :func:`pure` imports such a module with those
parent packages registered bare (their ``__init__`` not run) where pyinfra is missing.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import runpy
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[3]


def pure(module: str) -> ModuleType:
    """Import rigup's ``module`` (``"roles.vllm.flags"``); a parent package whose ``__init__``
    needs pyinfra, where pyinfra is not installed, is registered bare (its ``__init__`` not
    run). Raises ImportError when the module itself needs what is not installed."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    parts = module.split(".")
    for i in range(1, len(parts)):
        name = ".".join(parts[:i])
        if name in sys.modules:
            continue
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if (exc.name or "").split(".")[0] != "pyinfra":
                raise
            spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
            spec.submodule_search_locations = [str(REPO.joinpath(*parts[:i]))]
            sys.modules[name] = importlib.util.module_from_spec(spec)
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
