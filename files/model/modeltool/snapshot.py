"""What a model directory holds, and what it should: the files a manifest wants, their sizes
against a record, the shards a safetensors index names, and files that do not belong. Pure but
for reading the directories given."""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path, PurePosixPath

from modeltool.layout import DOWNLOAD, EDIT_ORIGINAL, RECORD, VERIFIED

#: endings of files a transfer leaves while it runs or when it fails; never part of a model
TRANSIENT_ENDINGS = (".incomplete", ".bad", ".partial", ".tmp", ".lock")
#: index files that name the shards of a checkpoint (transformers' sharded formats)
INDEX_ENDINGS = (".safetensors.index.json", ".bin.index.json")


def is_transient(rel: str) -> bool:
    """A path (relative, posix) that is a transfer's leftover or a hub library's state."""
    name = PurePosixPath(rel).name
    return (
        rel.startswith((".cache/", DOWNLOAD + "/"))
        or name in (RECORD, VERIFIED)
        or name.endswith(TRANSIENT_ENDINGS)
        or ".incomplete." in name
    )


def selected(manifest: dict, rel: str) -> bool:
    """Whether the manifest's include/exclude patterns select a repository path."""
    return any(fnmatch.fnmatch(rel, p) for p in manifest["include"]) and not any(
        fnmatch.fnmatch(rel, p) for p in manifest["exclude"]
    )


def wanted_from_tree(manifest: dict, root: Path) -> list[dict]:
    """An unpinned manifest selecting by patterns: the files under ``root`` it selects (a
    transfer's leftovers and rigup's own files never count)."""
    out = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if not is_transient(rel) and not rel.endswith(EDIT_ORIGINAL) and selected(manifest, rel):
            out.append({"path": rel, "dest": rel, "size": None, "sha256": None})
    return out


def recorded_files(directory: Path) -> dict[str, dict]:
    """dest -> {path, dest, size, sha256} from a rigup record (a placed copy or a backup), else
    {}."""
    try:
        record = json.loads((directory / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {f["dest"]: f for f in record.get("files", []) if f.get("sha256")}


def expected(f: dict, recorded: dict[str, dict]) -> tuple[int | None, str | None]:
    """(size, sha256) a wanted file must have: the manifest's, else the record's."""
    rec = recorded.get(f["dest"], {})
    size = f.get("size") if f.get("size") is not None else rec.get("size")
    return size, f.get("sha256") or rec.get("sha256")


def size_mismatches(
    wanted: list[dict], recorded: dict[str, dict], sizes: dict[str, int]
) -> list[dict]:
    """Wanted files (manifest ``files``, or the record's when the manifest lists none) that are
    missing from ``sizes`` (dest -> bytes of a placed copy) or differ in size, each with a
    ``"problem"``. The kept original of an edited file (config.json.rigup-orig) stands in for
    it."""
    if not wanted:
        wanted = [
            {"path": r.get("path", d), "dest": d, "size": r.get("size"), "sha256": r.get("sha256")}
            for d, r in recorded.items()
        ]
    out = []
    for f in wanted:
        size, _ = expected(f, recorded)
        rel = f["dest"]
        if rel + EDIT_ORIGINAL in sizes:
            rel += EDIT_ORIGINAL  # rigup's edit keeps the original
        if rel not in sizes:
            out.append({**f, "problem": "missing"})
        elif size is not None and sizes[rel] != size:
            out.append({**f, "problem": f"{sizes[rel]} bytes, {size} expected"})
    return out


def unexpected_files(wanted_dests: set[str], present: set[str]) -> list[str]:
    """Files in a placed directory that are not the model's (transfer leftovers, files put
    there by hand): every path in ``present`` but the wanted files, their kept originals and
    the record."""
    allowed = {RECORD} | wanted_dests | {d + EDIT_ORIGINAL for d in wanted_dests}
    return sorted(present - allowed)


def tree_sizes(root: Path) -> dict[str, int]:
    """Relative path -> size in bytes of every regular file under ``root``."""
    return {
        p.relative_to(root).as_posix(): p.stat().st_size for p in root.rglob("*") if p.is_file()
    }


def mismatches(manifest: dict, dest: Path) -> list[dict]:
    """Files of the placed directory ``dest`` that are missing or differ in size."""
    return size_mismatches(manifest["files"], recorded_files(dest), tree_sizes(dest))


def indexed_shards(index: Path) -> list[str]:
    """The shard files a checkpoint index names (its weight_map's values, relative to the
    directory holding the index), sorted. [] for an unreadable index."""
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map") or {}
    except (OSError, ValueError, AttributeError):
        return []
    return sorted({s for s in weight_map.values() if isinstance(s, str)})


def interrupted_download(root: Path, rel: str) -> str | None:
    """Where a Hugging Face download of ``rel`` was left unfinished under ``root``
    (``.cache/huggingface/download/<rel>...incomplete``), as a relative path, or None."""
    folder = root / ".cache" / "huggingface" / "download" / PurePosixPath(rel).parent
    name = PurePosixPath(rel).name
    hits = sorted(folder.glob(f"{name}*.incomplete")) if folder.is_dir() else []
    return hits[0].relative_to(root).as_posix() if hits else None


def missing_shards(root: Path, files: dict[str, Path]) -> list[str]:
    """Problems of a set of files meant to be one checkpoint: each shard an index among
    ``files`` (dest -> file on disk) names but that is not among them, with the index named and,
    when the only trace of it under ``root`` is an interrupted download, that too."""
    problems = []
    for dest, path in sorted(files.items()):
        if not dest.endswith(INDEX_ENDINGS):
            continue
        folder = PurePosixPath(dest).parent
        for shard in indexed_shards(path):
            rel = (folder / shard).as_posix() if str(folder) != "." else shard
            if rel in files:
                continue
            where = interrupted_download(root, rel)
            trace = f" (there is only an interrupted download of it: {where})" if where else ""
            problems.append(f"{dest} names {rel}, which is missing{trace}")
    return problems
