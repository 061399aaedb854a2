"""``place``: put a model at ``DEST``, verified and atomically, from the first source that can
provide it; check (and, when asked, repair) a model already placed there.

A placement is assembled in ``<parent>/.<revision>.partial``: each file is transferred to
``<dest>.incomplete``, checked (size, sha256: the manifest's or lock's, else the hash the source
publishes or recorded), renamed to its place and logged in ``.rigup-verified.jsonl``. Only when
every file is verified, every shard a checkpoint index names is there and nothing else is left,
the record ``.rigup-manifest.json`` is written and the directory renamed to ``DEST``: a placed
directory is always complete, and holds nothing but the model and its record. A file that fails
its check is kept in ``.<revision>.rejected/`` (outside the model) until the model is placed.

One transfer of a model at a time: a second ``place`` of the same ``DEST`` waits for the first
(up to ``--lock-wait`` seconds), then refuses with the first one's pid and start time.

An unpinned manifest (no commit, no sha256) from Hugging Face is locked on its first placement:
its ref resolves to a commit, the files at that commit are checked against the hashes the hub
publishes, and the record carries the commit and every file's size and sha256 (the controller
writes the model's lock file from it).

The partial area, the transfer lock and the free-space check are in :mod:`modeltool.partial`;
each source's transfer into the partial area in :mod:`modeltool.sources`."""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
from pathlib import Path

from modeltool.hashing import sha256_file
from modeltool.layout import (
    DOWNLOAD,
    EDIT_ORIGINAL,
    EXIT_BUSY,
    EXIT_MISMATCH,
    EXIT_SPACE,
    RECORD,
    VERIFIED,
    FetchError,
    SourceError,
    partial_dir,
    rejected_dir,
    replaced_dir,
)
from modeltool.partial import current, transfer_lock, unproven
from modeltool.progress import human_bytes, say
from modeltool.snapshot import (
    expected,
    missing_shards,
    recorded_files,
    size_mismatches,
    tree_sizes,
    unexpected_files,
)
from modeltool.sources import SOURCES

FATAL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO)


# ---- publishing -------------------------------------------------------------------------------
def publish(partial: Path, dest: Path, record: dict, entries: list[dict]) -> list[str]:
    """Make ``partial`` the placed model ``dest``: nothing but the verified files and the record
    in it, every indexed shard present, every file's bytes proven to be the ones hashed in this
    run (``entries``: each with its ``stat`` fingerprint then, :func:`modeltool.partial.unproven`),
    root-owned and read-only, renamed atomically. Returns what was removed (a transfer's
    leftovers). Raises :class:`FetchError` for an incomplete checkpoint or an unproven file."""
    changed = unproven(partial, entries)
    if changed:
        raise FetchError(
            "refusing to place files whose bytes are not those verified: " + "; ".join(changed)
        )
    for junk in (partial / DOWNLOAD, partial / VERIFIED):
        if junk.is_dir():
            shutil.rmtree(junk)
        elif junk.exists():
            junk.unlink()
    wanted = {e["dest"] for e in record["files"]}
    removed = unexpected_files(wanted, set(tree_sizes(partial)) - {RECORD})
    for rel in removed:
        (partial / rel).unlink()
    for d in sorted({p for p in partial.rglob("*") if p.is_dir()}, reverse=True):
        if not any(d.iterdir()):
            d.rmdir()
    broken = missing_shards(partial, {d: partial / d for d in wanted})
    if broken:
        raise FetchError("refusing to place an incomplete checkpoint: " + "; ".join(broken))
    (partial / RECORD).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    for p in [partial, *partial.rglob("*")]:
        if os.geteuid() == 0:
            os.chown(p, 0, 0, follow_symlinks=False)
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    os.sync()
    partial.rename(dest)
    rejected = rejected_dir(dest)
    if rejected.exists():
        shutil.rmtree(rejected)
        removed.append(f"{rejected} (files rejected by an earlier attempt)")
    return removed


def _recorded(entry: dict) -> dict:
    """A verified file as the record lists it: dest, path, size, sha256 (not this run's
    fingerprint of the partial area)."""
    return {k: entry[k] for k in ("dest", "path", "size", "sha256")}


def _classify(source: str, exc: Exception) -> FetchError:
    """A library's exception as a source failure, or as a fatal error of this machine."""
    text = " ".join(str(exc).split())[:500]
    if isinstance(exc, OSError) and exc.errno in FATAL_ERRNOS:
        return FetchError(f"{source}: {type(exc).__name__}: {text}")
    return SourceError(f"{type(exc).__name__}: {text}")


def place_from_sources(manifest: dict, partial: Path, dest: Path, sources: list[str], opts):
    """Try each source in order; return (entries, origin, progress) of the first that
    provides every file. Raises :class:`FetchError` with every source's reason."""
    errors = []
    for source in sources:
        try:
            return SOURCES[source](manifest, partial, opts)
        except SourceError as e:
            errors.append(f"{source}: {e}")
        except FetchError as e:
            if e.code in (EXIT_SPACE, EXIT_BUSY):
                raise
            errors.append(f"{source}: {e}")
        except Exception as e:  # a hub library's network, HTTP or auth error
            classified = _classify(source, e)
            if not isinstance(classified, SourceError):
                raise classified from e
            errors.append(f"{source}: {classified}")
    raise FetchError(" | ".join(errors))


def place_new(manifest: dict, dest: Path, sources: list[str], opts) -> dict:
    name = f"{manifest['name']}@{manifest['revision']}"
    partial = partial_dir(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial.mkdir(exist_ok=True)
    current.update(dest=str(dest), partial=str(partial))
    try:
        entries, origin, progress = place_from_sources(manifest, partial, dest, sources, opts)
    except FetchError as e:
        raise FetchError(
            f"no source could provide {name} (partial copy kept in {partial}): {e}", e.code
        ) from None
    record = {
        "manifest": manifest,
        **origin,
        "placed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "files": [_recorded(e) for e in entries],
    }
    removed = publish(partial, dest, record, entries)
    out = {
        "status": "placed",
        "dest": str(dest),
        **origin,
        "files": len(entries),
        "bytes_total": sum(e["size"] for e in entries),
        **progress.summary(),
    }
    if removed:
        out["removed"] = removed
    return out


# ---- a model already placed -------------------------------------------------------------------
def placed_problems(manifest: dict, dest: Path, full: bool) -> tuple[list[dict], list[str], int]:
    """(files to replace, each with its ``problem``; stray files; sha256 checked) of the placed
    directory ``dest``: missing or of another size (cheap), or, with ``full``, of another
    sha256 than the manifest's or the record's. The kept original of an edited file stands in
    for it."""
    recorded = recorded_files(dest)
    sizes = tree_sizes(dest)
    wanted = manifest["files"] or [
        {"path": r.get("path", d), "dest": d, "size": r.get("size"), "sha256": r.get("sha256")}
        for d, r in recorded.items()
    ]
    bad = size_mismatches(wanted, recorded, sizes)
    checked = 0
    known_bad = {f["dest"] for f in bad}
    for f in wanted:
        _, sha = expected(f, recorded)
        rec_sha = recorded.get(f["dest"], {}).get("sha256")
        if f["dest"] in known_bad:
            continue
        if sha and rec_sha and sha != rec_sha:
            bad.append({**f, "problem": f"placed with sha256 {rec_sha}, {sha} expected"})
        elif full and sha:
            path = dest / f["dest"]
            if (dest / (f["dest"] + EDIT_ORIGINAL)).is_file():
                path = dest / (f["dest"] + EDIT_ORIGINAL)
            checked += 1
            got = sha256_file(path)
            if got != sha:
                bad.append({**f, "problem": f"sha256 {got}, {sha} expected"})
    strays = unexpected_files({f["dest"] for f in wanted}, set(sizes))
    return bad, strays, checked


def cmd_place(opts) -> dict:
    manifest = json.loads(Path(opts.manifest).read_text(encoding="utf-8"))
    dest = Path(opts.dest)
    sources = [s for s in opts.sources.split(",") if s]
    with transfer_lock(dest, opts.lock_dir, opts.lock_wait):
        if dest.is_dir() and not any(dest.iterdir()):
            dest.rmdir()  # an empty directory holds no model: the placement takes its place
        if not dest.is_dir():
            return place_new(manifest, dest, sources, opts)
        bad, strays, checked = placed_problems(manifest, dest, opts.verify_sha256)
        listed = [f"{f['dest']}: {f['problem']}" for f in bad] + [
            f"{s}: not part of the model" for s in strays
        ]
        if not listed:
            out = {"status": "present", "dest": str(dest), "bytes_transferred": 0}
            return {**out, "sha256_checked": checked} if opts.verify_sha256 else out
        if not opts.replace_mismatched:
            raise FetchError(
                f"{dest} does not match its manifest and record: {'; '.join(listed)}. Kept as "
                "it is; set model_replace_mismatched = True to replace these files (the old "
                "ones are kept aside)",
                EXIT_MISMATCH,
            )
        return repair(manifest, dest, bad, strays, sources, opts)


def repair(manifest: dict, dest: Path, bad: list[dict], strays: list[str], sources, opts) -> dict:
    """Replace the files of a placed copy that do not match with verified ones and move stray
    files out; what is replaced is kept in ``.<revision>.replaced-<UTC time>/``."""
    recorded = recorded_files(dest)
    record = json.loads((dest / RECORD).read_text(encoding="utf-8")) if recorded else {}
    sub = {
        **manifest,
        "commit": manifest.get("commit") or record.get("commit"),
        "files": [
            {
                "path": f["path"],
                "dest": f["dest"],
                "size": expected(f, recorded)[0],
                "sha256": expected(f, recorded)[1],
            }
            for f in bad
        ],
    }
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    aside = replaced_dir(dest, stamp)
    entries: list[dict] = []
    result: dict = {"bytes_transferred": 0}
    if bad:
        work = dest.parent / f".{dest.name}.repair"
        if work.exists():
            shutil.rmtree(work)
        (work / ".placed.partial").mkdir(parents=True)
        current.update(dest=str(dest), partial=str(work))
        entries, origin, progress = place_from_sources(
            sub, work / ".placed.partial", work / "placed", sources, opts
        )
        result = {**origin, **progress.summary()}
        changed = unproven(work / ".placed.partial", entries)
        if changed:
            raise FetchError(
                "refusing to put in files whose bytes are not those verified: " + "; ".join(changed)
            )
        for e in entries:
            target = dest / e["dest"]
            if target.exists():
                (aside / e["dest"]).parent.mkdir(parents=True, exist_ok=True)
                target.replace(aside / e["dest"])
            target.parent.mkdir(parents=True, exist_ok=True)
            (work / ".placed.partial" / e["dest"]).replace(target)
            os.chmod(target, 0o644)
        shutil.rmtree(work)
    for rel in strays:
        (aside / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).replace(aside / rel)
    if record:
        fresh = {e["dest"]: _recorded(e) for e in entries}
        record["files"] = [fresh.get(f["dest"], f) for f in record["files"]]
        record["repaired_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        tmp = dest / (RECORD + ".tmp")
        tmp.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        os.chmod(tmp, 0o644)
        tmp.replace(dest / RECORD)
    os.sync()
    say(f"repaired {dest}: {len(entries)} file(s) replaced, {len(strays)} stray file(s) moved "
        f"out; the old ones are in {aside}")  # fmt: skip
    return {
        **result,
        "status": "repaired",
        "dest": str(dest),
        "replaced": [e["dest"] for e in entries],
        "moved_out": strays,
        "kept_aside": str(aside),
    }


def describe(result: dict) -> str:
    """The closing line of a placement for stderr."""
    done = result.get("bytes_transferred") or 0
    return (
        f"place: {result['status']}: {human_bytes(done)} transferred in "
        f"{result['seconds']:.1f} s ({result.get('rate_mb_s') or 0:.1f} MB/s)"
    )
