"""Before any change: can a model that is not placed yet be placed on this host?"""

from __future__ import annotations

from typing import Any

from pyinfra import host
from pyinfra.api.exceptions import DeployError
from pyinfra.facts.files import Directory

from roles.common.facts import DirectoryInventory
from roles.model.commands import model_fetch
from roles.model.facts import FreeBytes, ModelCandidates
from roles.model.manifest import Manifest


def require_source(data: Any, manifest: Manifest, dest: str) -> bool:
    """Before any change: a model that is not placed needs a source that can provide it and
    room on the disk. Raises DeployError with the reason and the numbers. Returns whether the
    model still has to be placed."""
    if host.get_fact(Directory, path=dest):
        return False
    sources = list(data.get("model_sources"))
    hub = [s for s in sources if s != "local"]
    if hub and not manifest.locked and "local" not in sources:
        raise DeployError(
            f"model {manifest.name}: its manifest ({manifest.source_file}) is unpinned (no "
            f"commit, no sha256), and {', '.join(hub)} downloads only locked manifests (nothing "
            "was changed). Lock it with files/model/model_lock.py where the hub is reachable, or "
            "add a local copy to model_local_dirs and 'local' to model_sources."
        )
    roots = list(data.get("model_local_dirs"))
    candidates = host.get_fact(
        ModelCandidates,
        model=manifest.name,
        revision=manifest.revision,
        basename=manifest.repo_id.split("/")[-1],
        hf_cache=f"models--{manifest.repo_id.replace('/', '--')}",
        roots=roots,
    )
    local_ok = "local" in sources and bool(candidates)
    if not local_ok and not (hub and manifest.locked):
        where = ", ".join(roots) or "(model_local_dirs is empty)"
        raise DeployError(
            f"model {manifest.name}@{manifest.revision}: no copy found under {where} on "
            f"{host.name}, nothing is placed at {dest} yet, and no other source can provide it "
            f"(model_sources = {sources}; hub downloads need a locked manifest); nothing was "
            f"changed. Mount or copy it to {roots[0] if roots else '<dir>'}/{manifest.name}/ "
            "or add a source."
        )
    total = manifest.total_bytes
    if total is None and local_ok and candidates[0][1] != "hf-cache":
        inventory = host.get_fact(DirectoryInventory, path=candidates[0][0]) or {}
        if (
            not manifest.files
            and "config.json" not in inventory
            and manifest.name == data.get("model_llm_manifest")
        ):
            raise DeployError(
                f"model {manifest.name}: {candidates[0][0]} has no config.json, so it is not a "
                "Hugging Face checkpoint directory (nothing was changed)"
            )
        total = sum(size for rel, size in inventory.items() if manifest.selects(rel))
    if total is not None:
        free = host.get_fact(FreeBytes, path=dest)
        if free is not None and total + model_fetch.SPARE_BYTES > free:
            raise DeployError(
                f"model {manifest.name}@{manifest.revision}: {total / 1e9:.2f} GB to place + "
                f"{model_fetch.SPARE_BYTES / 2**30:.0f} GiB spare, but only {free / 1e9:.2f} GB "
                f"free under {data.get('model_store_dir')} on {host.name} (nothing was changed)"
            )
    return True
