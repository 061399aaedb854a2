"""Build a Hugging Face hub cache directory (the layout `hf download` and huggingface_hub write
to ~/.cache/huggingface/hub) from local files, so huggingface_hub can resolve a pinned snapshot
offline (HF_HUB_OFFLINE=1) in tests and in the lab without reaching the hub.

Layout (huggingface_hub's "manage-cache" docs, ``file_download._create_symlink``):

    <cache>/models--<org>--<repo>/blobs/<sha256 of the file>
    <cache>/models--<org>--<repo>/snapshots/<commit>/<path>  -> ../../blobs/<sha256> (relative)
    <cache>/models--<org>--<repo>/refs/<ref>                  containing <commit>

The commit is CONSTRUCTED (sha1 of the file list and contents), never a real hub commit.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path


def constructed_commit(files: dict[str, Path]) -> str:
    """40-hex stand-in for a commit: sha1 over the sorted paths and their sha256."""
    h = hashlib.sha1()
    for rel in sorted(files):
        h.update(rel.encode() + b"\0" + sha256_of(files[rel]).encode() + b"\n")
    return h.hexdigest()


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            h.update(chunk)
    return h.hexdigest()


def build_hf_cache(cache: Path, repo_id: str, files: dict[str, Path], ref: str = "main") -> str:
    """Put ``files`` (repo path -> local file) into ``cache`` as one snapshot of ``repo_id``
    reachable through ``refs/<ref>``; returns the (constructed) commit."""
    commit = constructed_commit(files)
    repo = Path(cache) / f"models--{repo_id.replace('/', '--')}"
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    snapshot = repo / "snapshots" / commit
    for rel, src in files.items():
        digest = sha256_of(src)
        blob = repo / "blobs" / digest
        if not blob.exists():
            shutil.copyfile(src, blob)
        link = snapshot / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs" / ref).write_text(commit)
    return commit
