"""Before any change: can a model that is not placed yet be placed on this host?"""

from __future__ import annotations

from typing import Any

from pyinfra import host, logger
from pyinfra.api.exceptions import DeployError
from pyinfra.facts.files import Directory

from roles.common.facts import DirectoryInventory
from roles.common.preflight import FreeSpace
from roles.model.commands import layout
from roles.model.facts import ModelCandidates
from roles.model.manifest import Manifest


def require_source(data: Any, manifest: Manifest, dest: str, lock_file: str | None = None) -> bool:
    """Before any change: a model that is not placed needs a source that can provide it and
    room on the disk. Raises DeployError with the reason and the numbers. Returns whether the
    model still has to be placed.

    Hugging Face places an unpinned manifest (first-run locking: the ref is resolved on the host
    and the lock written to ``lock_file``); ModelScope needs a lock (its files are checked
    against the lock's sha256)."""
    if host.get_fact(Directory, path=dest):
        return False
    sources = list(data.get("model_sources"))
    hub = [s for s in sources if s != "local"]
    can_lock = "huggingface" in sources
    if hub and not manifest.locked and not can_lock and "local" not in sources:
        raise DeployError(
            f"model {manifest.name}: its manifest ({manifest.source_file}) has no lock (no "
            f"commit, no sha256), and {', '.join(hub)} checks every file against a lock "
            "(nothing was changed). Add 'huggingface' to model_sources (the first placement "
            "locks it), lock it with files/model/model_lock.py where the hub is reachable, or "
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
    hub_ok = bool(hub) and (manifest.locked or can_lock)
    if not local_ok and not hub_ok:
        where = ", ".join(roots) or "(model_local_dirs is empty)"
        raise DeployError(
            f"model {manifest.name}@{manifest.revision}: no copy found under {where} on "
            f"{host.name}, nothing is placed at {dest} yet, and no other source can provide it "
            f"(model_sources = {sources}); nothing was changed. Mount or copy it to "
            f"{roots[0] if roots else '<dir>'}/{manifest.name}/ or add 'huggingface' to "
            "model_sources."
        )
    if not local_ok and not manifest.locked:
        logger.info(
            f"[{host.name}] model {manifest.name}: no lock yet: the host resolves "
            f"{manifest.repo_id}@{manifest.ref} to a commit, places the files at that commit "
            f"checked against the hub's hashes, and the lock is written to {lock_file}"
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
        free = (host.get_fact(FreeSpace, paths=(dest,)) or {}).get(dest, {}).get("free_bytes")
        if free is not None and total + layout.SPARE_BYTES > free:
            raise DeployError(
                f"model {manifest.name}@{manifest.revision}: {total / 1e9:.2f} GB to place + "
                f"{layout.SPARE_BYTES / 2**30:.0f} GiB spare, but only {free / 1e9:.2f} GB "
                f"free under {data.get('model_store_dir')} on {host.name} (nothing was changed)"
            )
    return True
