"""The local source: a copy of the model on a disk the host sees (a rigup store or backup, a
mirror directory, a Hugging Face cache), copied (or hard-linked) and verified file by file."""

from __future__ import annotations

import os
from pathlib import Path

from modeltool.hashing import copy_resuming, sha256_file
from modeltool.layout import RECORD, SourceError
from modeltool.progress import Progress
from modeltool.snapshot import missing_shards, wanted_from_tree


def hf_cache_snapshot(manifest: dict, root: Path) -> Path | None:
    """The manifest's snapshot in a Hugging Face cache under ``root``, resolved by
    huggingface_hub with ``local_files_only`` (its commit when known, else its ref), or None.

    Nothing is changed in this process: ``HF_HUB_OFFLINE`` is left alone (huggingface_hub reads
    it once, at import, so setting it here would also cut off a later hub source)."""
    org, _, repo = manifest["repo_id"].partition("/")
    if not (root / f"models--{org}--{repo}").is_dir():
        return None
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    revision = manifest.get("commit") or manifest["ref"]
    try:
        return Path(
            snapshot_download(
                manifest["repo_id"], revision=revision, cache_dir=str(root), local_files_only=True
            )
        )
    except LocalEntryNotFoundError:
        return None


def local_candidates(manifest: dict, roots: list[str]) -> list[tuple[Path, str]]:
    """Existing directories that may hold the model, in search order, with their layout."""
    name, rev = manifest["name"], manifest["revision"]
    basename = manifest["repo_id"].split("/")[-1]
    out: list[tuple[Path, str]] = []
    for root in map(Path, roots):
        if (root / name / rev).is_dir():
            out.append((root / name / rev, "rigup store/backup"))
        for path in (root / name, root / basename):
            # a directory holding placed revisions is a store, not a mirror of the files
            if path.is_dir() and not any(path.glob(f"*/{RECORD}")) and (path, "mirror") not in out:
                out.append((path, "mirror"))
        snap = hf_cache_snapshot(manifest, root) if root.is_dir() else None
        if snap is not None:
            out.append((snap, f"Hugging Face cache (snapshot {snap.name})"))
    return out


def source_file(src: Path, f: dict) -> Path | None:
    for rel in (f["dest"], f["path"]):
        if (src / rel).is_file():
            return src / rel
    return None


def complete_local_copy(manifest: dict, roots: list[str]) -> tuple[Path, str, list[dict]]:
    """The first local candidate holding every wanted file, with every shard its checkpoint
    index names: (directory, layout, files). Raises :class:`SourceError` saying what each
    candidate lacks."""
    candidates = local_candidates(manifest, roots)
    if not candidates:
        raise SourceError(f"no copy under {', '.join(roots) or '(no --local-dir)'}")
    why = []
    for src, layout in candidates:
        files = manifest["files"] or wanted_from_tree(manifest, src)
        found = {f["dest"]: source_file(src, f) for f in files}
        missing = [d for d, p in found.items() if p is None]
        if not files:
            why.append(f"{src} ({layout}) holds no file the manifest selects")
        elif missing:
            why.append(f"{src} ({layout}) lacks {', '.join(missing[:5])}")
        elif broken := missing_shards(src, found):  # type: ignore[arg-type]
            why.append(f"{src} ({layout}) is incomplete: {'; '.join(broken[:5])}")
        else:
            return src, layout, files
    raise SourceError("no complete copy: " + "; ".join(why))


def copy_file(src: Path, tmp: Path, link: str, progress: Progress) -> tuple[str, str]:
    """Bring one source file to ``tmp``: a hard link (``link == "hardlink"``, same filesystem)
    then hashed, else a copy resuming what an earlier run left at ``tmp``. Returns (sha256,
    note) where note says what happened to an earlier partial copy ("" if none)."""
    if link == "hardlink" and src.stat().st_dev == tmp.parent.stat().st_dev:
        tmp.unlink(missing_ok=True)
        os.link(src.resolve(), tmp)
        return sha256_file(tmp), ""
    copied = copy_resuming(src.resolve(), tmp, progress)
    note = ""
    if copied.kept or copied.dropped:
        note = f"resumed after {copied.kept:,} bytes that match the source"
        if copied.dropped:
            note += f" ({copied.dropped:,} bytes that did not were copied again)"
    return copied.sha256, note
