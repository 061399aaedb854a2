#!/usr/bin/env python3
"""Place a model described by a rigup manifest, verified and atomically; back up a model store.

Runs on the target with the model tool venv's python (<rigup_prefix>/model/venv, built by uv from
files/model/requirements.lock: huggingface_hub, hf_xet, modelscope). Installed by roles/model.

    model_fetch.py place  --manifest M.json --dest DIR --sources local,huggingface
                          [--local-dir ROOT ...] [--link copy|hardlink] [--hf-endpoint URL]
                          [--hf-token-file FILE] [--modelscope-endpoint URL]
                          [--modelscope-token-file FILE]
                          [--replace-mismatched] [--report FILE]
    model_fetch.py verify --manifest M.json --dir DIR          (full size + sha256 check)
    model_fetch.py backup --store DIR --to DIR [--report FILE]

place: the files go to ``<parent>/.<revision>.partial`` first (an interrupted run resumes there:
complete files are kept, a half-copied file continues at its offset, huggingface_hub resumes its
own ``.incomplete`` downloads), each is checked against the manifest's size and sha256 (and, from
a rigup backup, the sha256 the backup recorded), then the directory is renamed to DEST. DEST is
never overwritten: when it exists, files that do not match are reported and kept, unless
--replace-mismatched (then the mismatching file is set aside as ``<file>.rigup-mismatch-<UTC>``
and a verified copy takes its place). Free space is checked against what is left to transfer
before anything is written.

Sources, tried in --sources order; the first that provides every file wins:
- local: each --local-dir ROOT is searched for ``ROOT/<name>/<revision>`` (a rigup store or
  backup), ``ROOT/<name>``, ``ROOT/<repo basename>``, and a Hugging Face cache
  ``ROOT/models--<org>--<repo>`` resolved by huggingface_hub offline (HF_HUB_OFFLINE=1) at the
  manifest's revision (or its ref while unpinned). Files are copied (hashed while copied) or,
  with --link hardlink on the same filesystem, hard-linked and then hashed.
- huggingface: huggingface_hub.snapshot_download at the pinned commit into the partial area
  (Xet transfers through hf_xet; --hf-endpoint for a mirror; token read from --hf-token-file).
- modelscope: modelscope.snapshot_download of modelscope_id at modelscope_revision
  (--modelscope-endpoint, token from --modelscope-token-file); every file must still match the
  manifest's sha256.

Output: progress lines on stderr (every 5 s: bytes, percent, rate) and one JSON line on stdout:
{"status": "placed"|"present"|"mismatch"|"repaired"|"error", "bytes_transferred": N,
 "bytes_total": N, "seconds": S, "rate_mb_s": R, "source": "...", ...}. Exit 0 on success, 1 on
error, 3 when the free space does not fit (numbers in "error").
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

CHUNK = 16 * 1024 * 1024  # bytes per read/write; large enough for disk throughput, small RAM
PROGRESS_EVERY_S = 5.0
RECORD = ".rigup-manifest.json"  # what was placed: manifest, source, files with size + sha256
VERIFIED = ".rigup-verified.jsonl"  # partial area: files already copied and verified
DOWNLOAD = ".download"  # partial area: where hub libraries download (their resume state)
SPARE_BYTES = 1 << 30  # keep 1 GiB free after a transfer (logs, journald, apt need room)


class FetchError(Exception):
    """A problem the caller must fix; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


class Progress:
    """Counts bytes moved and prints a progress line to stderr at most every 5 s."""

    def __init__(self, label: str, total: int | None):
        self.label, self.total = label, total
        self.done = 0
        self.started = self.last = time.monotonic()

    def add(self, n: int, current: str = "") -> None:
        self.done += n
        now = time.monotonic()
        if now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            rate = self.done / max(now - self.started, 1e-9) / 1e6
            pct = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
            total = f"/{self.total / 1e9:.2f}" if self.total else ""
            print(
                f"{self.label}: {self.done / 1e9:.2f}{total} GB{pct}, {rate:.0f} MB/s {current}",
                file=sys.stderr,
                flush=True,
            )

    def summary(self) -> dict:
        seconds = time.monotonic() - self.started
        return {
            "bytes_transferred": self.done,
            "seconds": round(seconds, 2),
            "rate_mb_s": round(self.done / seconds / 1e6, 1) if seconds > 0 else None,
        }


def human_bytes(n: int) -> str:
    """``466428`` -> ``"466,428 B (466.4 kB)"``; decimal units (GB = 1e9 bytes)."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n:,} B ({n / size:.1f} {unit})"
    return f"{n:,} B"


# ---- hashing and copying --------------------------------------------------------------------
def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def copy_hashed(src: Path, dst: Path, progress: Progress) -> str:
    """Copy ``src`` to ``dst`` (resuming at ``dst``'s current size when it is a shorter prefix)
    and return the sha256 of the whole file. Only the bytes copied count as transferred."""
    h = hashlib.sha256()
    size = src.stat().st_size
    offset = dst.stat().st_size if dst.exists() else 0
    if offset > size:
        dst.unlink()
        offset = 0
    if offset:
        with open(dst, "rb") as f:  # hash the part copied by an earlier, interrupted run
            remaining = offset
            while remaining and (chunk := f.read(min(CHUNK, remaining))):
                h.update(chunk)
                remaining -= len(chunk)
    with open(src, "rb") as fin, open(dst, "ab") as fout:
        fin.seek(offset)
        while chunk := fin.read(CHUNK):
            h.update(chunk)
            fout.write(chunk)
            progress.add(len(chunk), src.name)
    return h.hexdigest()


# ---- what is wanted -------------------------------------------------------------------------
def wanted_from_tree(manifest: dict, root: Path) -> list[dict]:
    """An unpinned manifest selecting by patterns: the files under ``root`` it selects."""
    out = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if rel == RECORD or rel.startswith((".cache/", DOWNLOAD + "/")):
            continue
        if any(fnmatch.fnmatch(rel, p) for p in manifest["include"]) and not any(
            fnmatch.fnmatch(rel, p) for p in manifest["exclude"]
        ):
            out.append({"path": rel, "dest": rel, "size": None, "sha256": None})
    return out


def recorded_hashes(directory: Path) -> dict[str, dict]:
    """dest -> {size, sha256} from a rigup record (a placed copy or a backup), else {}."""
    try:
        record = json.loads((directory / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {f["dest"]: f for f in record.get("files", []) if f.get("sha256")}


# ---- sources --------------------------------------------------------------------------------
def hf_cache_snapshot(manifest: dict, root: Path) -> Path | None:
    """Resolve the manifest's snapshot in a Hugging Face cache under ``root`` with
    huggingface_hub, offline. Locked: the commit; unpinned: the manifest's ref."""
    org, _, repo = manifest["repo_id"].partition("/")
    if not (root / f"models--{org}--{repo}").is_dir():
        return None
    os.environ["HF_HUB_OFFLINE"] = "1"
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    revision = manifest["revision"] if manifest["state"] == "locked" else manifest["ref"]
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


def complete_local_copy(manifest: dict, roots: list[str]) -> tuple[Path, str, list[dict]]:
    """The first local candidate holding every wanted file: (directory, layout, files).
    Raises FetchError saying what each candidate lacks."""
    candidates = local_candidates(manifest, roots)
    if not candidates:
        raise FetchError(f"no copy under {', '.join(roots) or '(no --local-dir)'}")
    why = []
    for src, layout in candidates:
        files = manifest["files"] or wanted_from_tree(manifest, src)
        missing = [f["dest"] for f in files if source_file(src, f) is None]
        if files and not missing:
            return src, layout, files
        why.append(
            f"{src} ({layout}) "
            + (f"lacks {', '.join(missing[:5])}" if files else "holds no file the manifest selects")
        )
    raise FetchError("no complete copy: " + "; ".join(why))


def source_file(src: Path, f: dict) -> Path | None:
    for rel in (f["dest"], f["path"]):
        if (src / rel).is_file():
            return src / rel
    return None


def read_token(path: str) -> str | None:
    """The token in ``path`` (root-only, written by rigup), or None when there is none."""
    if path and Path(path).is_file():
        return Path(path).read_text(encoding="utf-8").strip() or None
    return None


def hub_download(kind: str, manifest: dict, files: list[dict], partial: Path, opts) -> Path:
    """Download ``files`` with the hub library into ``partial/.download``; returns that dir."""
    if manifest["state"] != "locked":
        raise FetchError(
            f"{kind}: manifest {manifest['name']} is unpinned (no commit, no sha256): rigup "
            "downloads only locked manifests (run files/model/model_lock.py where the hub is "
            "reachable), or place it from a local copy"
        )
    target = partial / DOWNLOAD
    target.mkdir(parents=True, exist_ok=True)
    patterns = [f["path"] for f in files]
    if kind == "huggingface":
        os.environ.pop("HF_HUB_OFFLINE", None)
        from huggingface_hub import snapshot_download

        token = read_token(opts.hf_token_file)
        snapshot_download(
            manifest["repo_id"],
            revision=manifest["revision"],
            local_dir=str(target),
            allow_patterns=patterns,
            endpoint=opts.hf_endpoint or None,
            token=token if token else False,
        )
    else:
        if not manifest.get("modelscope_id"):
            raise FetchError(f"modelscope: manifest {manifest['name']} has no modelscope_id")
        from modelscope import snapshot_download

        snapshot_download(
            model_id=manifest["modelscope_id"],
            revision=manifest.get("modelscope_revision") or "master",
            local_dir=str(target),
            allow_patterns=patterns,
            endpoint=opts.modelscope_endpoint or None,
            token=read_token(opts.modelscope_token_file),
        )
    return target


# ---- place ----------------------------------------------------------------------------------
def _verified(partial: Path) -> dict[str, dict]:
    out = {}
    try:
        for line in (partial / VERIFIED).read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            out[entry["dest"]] = entry
    except (OSError, ValueError):
        pass
    return out


def _expect(
    f: dict, recorded: dict[str, dict], src_file: Path | None
) -> tuple[int | None, str | None]:
    rec = recorded.get(f["dest"], {})
    size = f.get("size") if f.get("size") is not None else rec.get("size")
    if size is None and src_file is not None:
        size = src_file.stat().st_size
    return size, f.get("sha256") or rec.get("sha256")


def check_free_space(where: Path, needed: int, name: str, spare: int = SPARE_BYTES) -> None:
    """Raise FetchError (exit 3) unless ``needed`` + ``spare`` bytes are free at ``where``."""
    free = shutil.disk_usage(where).free
    if needed + spare > free:
        raise FetchError(
            f"not enough free space for {name} on {where}: {needed / 1e9:.2f} GB to transfer "
            f"+ {spare / 2**30:.2f} GiB spare, {free / 1e9:.2f} GB free "
            f"(short by {(needed + spare - free) / 1e9:.2f} GB)",
            code=3,
        )


def _finish_file(
    tmp: Path, final: Path, f: dict, size: int | None, sha: str | None, got: str, partial: Path
) -> dict:
    actual = tmp.stat().st_size
    problems = []
    if size is not None and actual != size:
        problems.append(f"{actual} bytes, {size} expected")
    if sha is not None and got != sha:
        problems.append(f"sha256 {got}, {sha} expected")
    if problems:
        bad = tmp.with_name(tmp.name + ".bad")
        tmp.replace(bad)  # kept for inspection; the next run starts this file again
        raise FetchError(f"{f['dest']}: {'; '.join(problems)} (kept as {bad})")
    tmp.replace(final)
    entry = {"dest": f["dest"], "path": f["path"], "size": actual, "sha256": got}
    with open(partial / VERIFIED, "a", encoding="utf-8") as log:
        log.write(json.dumps(entry) + "\n")
    return entry


def place_from_local(
    manifest, files, src: Path, partial: Path, link: str, progress: Progress
) -> list[dict]:
    recorded = recorded_hashes(src)
    done = _verified(partial)
    entries = []
    for f in files:
        s = source_file(src, f)
        if s is None:
            raise FetchError(f"{f['dest']}: not in {src}")
        size, sha = _expect(f, recorded, s)
        final = partial / f["dest"]
        if (
            f["dest"] in done
            and final.is_file()
            and final.stat().st_size == done[f["dest"]]["size"]
        ):
            entries.append(done[f["dest"]])  # verified by an earlier, interrupted run
            continue
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.with_name(final.name + ".incomplete")
        if link == "hardlink" and s.stat().st_dev == partial.stat().st_dev:
            tmp.unlink(missing_ok=True)
            os.link(s.resolve(), tmp)
            got = sha256_file(tmp)
        else:
            got = copy_hashed(s.resolve(), tmp, progress)
        entries.append(_finish_file(tmp, final, f, size, sha, got, partial))
    return entries


def place_from_download(files, download: Path, partial: Path) -> list[dict]:
    entries = []
    for f in files:
        got_file = download / f["path"]
        if not got_file.is_file():
            raise FetchError(f"{f['path']}: the download did not produce it")
        final = partial / f["dest"]
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.with_name(final.name + ".incomplete")
        got_file.replace(tmp)
        entries.append(
            _finish_file(tmp, final, f, f.get("size"), f.get("sha256"), sha256_file(tmp), partial)
        )
    return entries


def _tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def _publish(partial: Path, dest: Path, record: dict) -> None:
    for junk in (partial / DOWNLOAD, partial / VERIFIED):
        if junk.is_dir():
            shutil.rmtree(junk)  # the hub libraries' resume state inside rigup's own partial area
        elif junk.exists():
            junk.unlink()
    (partial / RECORD).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    for p in [partial, *partial.rglob("*")]:
        if os.geteuid() == 0:
            os.chown(p, 0, 0, follow_symlinks=False)
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    os.sync()
    partial.rename(dest)


def size_mismatches(
    wanted: list[dict], recorded: dict[str, dict], sizes: dict[str, int]
) -> list[dict]:
    """Wanted files (manifest ``files``, or the record's when the manifest lists none) that are
    missing from ``sizes`` (dest -> bytes of a placed copy) or differ in size, each with a
    ``"problem"``. The text-only edit's kept original stands in for config.json. Pure."""
    if not wanted:
        wanted = [
            {"path": r.get("path", d), "dest": d, "size": r.get("size"), "sha256": r.get("sha256")}
            for d, r in recorded.items()
        ]
    out = []
    for f in wanted:
        size, _ = _expect(f, recorded, None)
        rel = f["dest"]
        if rel == "config.json" and "config.json.rigup-orig" in sizes:
            rel = "config.json.rigup-orig"  # rigup's text-only edit keeps the original
        if rel not in sizes:
            out.append({**f, "problem": "missing"})
        elif size is not None and sizes[rel] != size:
            out.append({**f, "problem": f"{sizes[rel]} bytes, {size} expected"})
    return out


def tree_sizes(root: Path) -> dict[str, int]:
    """Relative path -> size in bytes of every regular file under ``root``."""
    return {
        p.relative_to(root).as_posix(): p.stat().st_size for p in root.rglob("*") if p.is_file()
    }


def mismatches(manifest: dict, dest: Path) -> list[dict]:
    """Files of the placed directory ``dest`` that are missing or differ in size."""
    return size_mismatches(manifest["files"], recorded_hashes(dest), tree_sizes(dest))


def cmd_place(opts) -> dict:
    manifest = json.loads(Path(opts.manifest).read_text(encoding="utf-8"))
    dest = Path(opts.dest)
    name = f"{manifest['name']}@{manifest['revision']}"
    partial = dest.parent / f".{dest.name}.partial"
    sources = [s for s in opts.sources.split(",") if s]

    if dest.is_dir():
        bad = mismatches(manifest, dest)
        if not bad:
            return {"status": "present", "dest": str(dest), "bytes_transferred": 0}
        if not opts.replace_mismatched:
            return {
                "status": "mismatch",
                "dest": str(dest),
                "kept": [f"{f['dest']}: {f['problem']}" for f in bad],
                "bytes_transferred": 0,
            }
        return repair(manifest, bad, dest, partial, sources, opts)

    dest.parent.mkdir(parents=True, exist_ok=True)
    partial.mkdir(exist_ok=True)
    errors = []
    for source in sources:
        try:
            return place_with(source, manifest, partial, dest, name, opts)
        except FetchError as e:
            if e.code == 3:
                raise
            errors.append(f"{source}: {e}")
        except Exception as e:  # a library's network/auth error: try the next source
            errors.append(f"{source}: {type(e).__name__}: {' '.join(str(e).split())[:500]}")
    raise FetchError(
        f"no source could provide {name} (partial copy kept in {partial}): " + " | ".join(errors)
    )


def place_with(source: str, manifest: dict, partial: Path, dest: Path, name: str, opts) -> dict:
    if source == "local":
        src, layout, files = complete_local_copy(manifest, opts.local_dir)
        recorded = recorded_hashes(src)
        done = _verified(partial)
        needed = 0
        for f in files:
            s = source_file(src, f)
            if f["dest"] in done:
                continue
            size = _expect(f, recorded, s)[0] or 0
            tmp = partial / (f["dest"] + ".incomplete")
            needed += size - (tmp.stat().st_size if tmp.exists() else 0)
        if opts.link == "hardlink" and src.stat().st_dev == partial.stat().st_dev:
            needed = 0
        check_free_space(partial, needed, name, opts.spare_bytes)
        progress = Progress(f"{name} from {src}", needed)
        entries = place_from_local(manifest, files, src, partial, opts.link, progress)
        origin = {"source": "local", "from": str(src), "layout": layout}
    else:
        files = manifest["files"]
        if manifest["state"] == "locked":
            have = _tree_bytes(partial / DOWNLOAD)
            needed = max(sum(f["size"] for f in files) - have, 0)
            check_free_space(partial, needed, name, opts.spare_bytes)
        progress = Progress(f"{name} from {source}", None)
        before = _tree_bytes(partial / DOWNLOAD)
        download = hub_download(source, manifest, files, partial, opts)
        progress.done = max(_tree_bytes(download) - before, 0)
        entries = place_from_download(files, download, partial)
        origin = {"source": source, "repo_id": manifest["repo_id"]}
    record = {
        "manifest": manifest,
        **origin,
        "placed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "files": entries,
    }
    _publish(partial, dest, record)
    return {
        "status": "placed",
        "dest": str(dest),
        **origin,
        "files": len(entries),
        "bytes_total": sum(e["size"] for e in entries),
        **progress.summary(),
    }


def repair(manifest, bad, dest: Path, partial: Path, sources, opts) -> dict:
    """Replace mismatching files of a placed copy with verified ones; the old ones are kept."""
    sub = {
        **manifest,
        "files": [{k: f[k] for k in ("path", "dest", "size", "sha256")} for f in bad],
    }
    work = partial.with_name(partial.name + "-repair")
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    result = place_with_sources(sub, work, sources, opts)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    kept = []
    for f in sub["files"]:
        target = dest / f["dest"]
        if target.exists():
            aside = target.with_name(f"{target.name}.rigup-mismatch-{stamp}")
            target.replace(aside)
            kept.append(str(aside))
        target.parent.mkdir(parents=True, exist_ok=True)
        (work / "placed" / f["dest"]).replace(target)
    shutil.rmtree(work)
    return {**result, "status": "repaired", "dest": str(dest), "kept_aside": kept}


def place_with_sources(manifest, work: Path, sources, opts) -> dict:
    errors = []
    partial = work / ".placed.partial"
    partial.mkdir()
    for source in sources:
        try:
            return place_with(source, manifest, partial, work / "placed", manifest["name"], opts)
        except FetchError as e:
            errors.append(f"{source}: {e}")
    raise FetchError("no source could provide the replacement files: " + " | ".join(errors))


# ---- verify and backup ----------------------------------------------------------------------
def cmd_verify(opts) -> dict:
    manifest = json.loads(Path(opts.manifest).read_text(encoding="utf-8"))
    directory = Path(opts.dir)
    recorded = recorded_hashes(directory)
    wanted = manifest["files"] or [{"dest": d, **r} for d, r in recorded.items()]
    problems = [f"{f['dest']}: {f['problem']}" for f in mismatches(manifest, directory)]
    checked = 0
    for f in wanted:
        sha = f.get("sha256") or recorded.get(f["dest"], {}).get("sha256")
        path = directory / f["dest"]
        if sha and path.is_file() and not any(p.startswith(f["dest"] + ":") for p in problems):
            if f["dest"] == "config.json" and (directory / "config.json.rigup-orig").is_file():
                path = directory / "config.json.rigup-orig"
            checked += 1
            if sha256_file(path) != sha:
                problems.append(f"{f['dest']}: sha256 differs from {sha}")
    return {
        "status": "ok" if not problems else "mismatch",
        "dir": str(directory),
        "sha256_checked": checked,
        "problems": problems,
    }


def cmd_backup(opts) -> dict:
    store, to = Path(opts.store), Path(opts.to)
    to.mkdir(parents=True, exist_ok=True)
    copied, total, models = 0, 0, []
    started = time.monotonic()
    for record_file in sorted(store.glob(f"*/*/{RECORD}")):
        placed = record_file.parent
        record = json.loads(record_file.read_text(encoding="utf-8"))
        manifest = record["manifest"]
        target = to / placed.parent.name / placed.name
        entry = {"model": f"{placed.parent.name}@{placed.name}", "dest": str(target)}
        if target.is_dir() and not mismatches({**manifest, "files": []}, target):
            entry["status"] = "present"
        else:
            partial = target.parent / f".{target.name}.partial"
            partial.mkdir(parents=True, exist_ok=True)
            files = [
                {"path": f["path"], "dest": f["dest"], "size": f["size"], "sha256": f["sha256"]}
                for f in record["files"]
            ]
            needed = sum(f["size"] for f in files) - _tree_bytes(partial)
            check_free_space(partial, max(needed, 0), entry["model"], opts.spare_bytes)
            progress = Progress(f"backup {entry['model']}", needed)
            place_from_local(manifest, files, placed, partial, "copy", progress)
            (partial / VERIFIED).unlink(missing_ok=True)
            (partial / RECORD).write_text(record_file.read_text(encoding="utf-8"), encoding="utf-8")
            os.sync()
            partial.rename(target)
            copied += progress.done
            entry["status"] = "copied"
        total += sum(f["size"] for f in record["files"])
        models.append(entry)
    summary = {
        "status": "ok",
        "to": str(to),
        "models": models,
        "bytes_total": total,
        "bytes_transferred": copied,
        "seconds": round(time.monotonic() - started, 2),
    }
    (to / "rigup-backup.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return summary


def main(argv: list[str]) -> int:
    cli = argparse.ArgumentParser(prog="model_fetch.py", description=__doc__.split("\n")[0])
    sub = cli.add_subparsers(dest="command", required=True)
    p = sub.add_parser("place")
    p.add_argument("--manifest", required=True)
    p.add_argument("--dest", required=True)
    p.add_argument("--sources", default="local")
    p.add_argument("--local-dir", action="append", default=[])
    p.add_argument("--link", choices=("copy", "hardlink"), default="copy")
    p.add_argument("--hf-endpoint", default="")
    p.add_argument("--hf-token-file", default="")
    p.add_argument("--modelscope-endpoint", default="")
    p.add_argument("--modelscope-token-file", default="")
    p.add_argument("--replace-mismatched", action="store_true")
    p.add_argument("--report", default="")
    p.add_argument("--spare-bytes", type=int, default=SPARE_BYTES, help="keep this much free")
    v = sub.add_parser("verify")
    v.add_argument("--manifest", required=True)
    v.add_argument("--dir", required=True)
    b = sub.add_parser("backup")
    b.add_argument("--store", required=True)
    b.add_argument("--to", required=True)
    b.add_argument("--report", default="")
    b.add_argument("--spare-bytes", type=int, default=SPARE_BYTES, help="keep this much free")
    opts = cli.parse_args(argv)
    started = time.monotonic()
    try:
        result = {"place": cmd_place, "verify": cmd_verify, "backup": cmd_backup}[opts.command](
            opts
        )
        code = 1 if result["status"] == "mismatch" and opts.command == "verify" else 0
    except FetchError as e:
        result, code = {"status": "error", "error": str(e)}, e.code
    result.setdefault("seconds", round(time.monotonic() - started, 2))
    line = json.dumps(result)
    if getattr(opts, "report", ""):
        Path(opts.report).parent.mkdir(parents=True, exist_ok=True)
        Path(opts.report).write_text(line + "\n", encoding="utf-8")
    if result.get("bytes_transferred") is not None and result["status"] != "error":
        done = result["bytes_transferred"]
        print(
            f"{opts.command}: {result['status']}: {human_bytes(done)} transferred in "
            f"{result['seconds']:.1f} s ({result.get('rate_mb_s') or 0:.1f} MB/s)",
            file=sys.stderr,
        )
    elif result["status"] == "error":
        print(f"model_fetch: ERROR: {result['error']}", file=sys.stderr)
    print(line, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
