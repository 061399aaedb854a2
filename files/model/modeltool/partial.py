"""Where a placement is assembled: one transfer of a model at a time (the transfer lock), the
free-space check, and the partial area (files verified before, each file checked into place)."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from modeltool.hashing import sha256_file
from modeltool.layout import (
    EXIT_BUSY,
    EXIT_SPACE,
    SPARE_BYTES,
    VERIFIED,
    FetchError,
    rejected_dir,
)
from modeltool.progress import say

#: the transfer running in this process, for the report of an interruption
current: dict = {}


# ---- one transfer at a time ----------------------------------------------------------------
def _lock_path(dest: Path, lock_dir: str) -> Path:
    base = Path(lock_dir) if lock_dir and os.access(lock_dir, os.W_OK) else None
    base = base or Path(tempfile.gettempdir())
    return base / f"rigup-model-{hashlib.sha1(str(dest).encode()).hexdigest()[:16]}.lock"


@contextlib.contextmanager
def transfer_lock(dest: Path, lock_dir: str, wait_s: float) -> Iterator[None]:
    """Hold the lock of ``dest`` for this process (released when it exits, even when killed)."""
    path = _lock_path(dest, lock_dir)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + wait_s
    said = False
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "?"
                if time.monotonic() >= deadline:
                    raise FetchError(
                        f"another transfer of {dest} is running ({holder}); wait for it to end "
                        "or stop it, then run again",
                        EXIT_BUSY,
                    ) from None
                if not said:
                    say(f"waiting for another transfer of {dest} ({holder})")
                    said = True
                time.sleep(1)
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}, since {since}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


# ---- space ------------------------------------------------------------------------------------
def check_free_space(where: Path, needed: int, name: str, spare: int = SPARE_BYTES) -> None:
    """Raise FetchError (exit 3) unless ``needed`` + ``spare`` bytes are free at ``where``."""
    free = shutil.disk_usage(where).free
    if needed + spare > free:
        raise FetchError(
            f"not enough free space for {name} on {where}: {needed / 1e9:.2f} GB to transfer "
            f"+ {spare / 2**30:.2f} GiB spare, {free / 1e9:.2f} GB free "
            f"(short by {(needed + spare - free) / 1e9:.2f} GB)",
            code=EXIT_SPACE,
        )


# ---- the partial area -------------------------------------------------------------------------
def pinned(manifest: dict) -> bool:
    """Every file listed with its sha256 (a locked manifest, or an unpinned one with a lock)."""
    return bool(manifest["files"]) and all(f.get("sha256") for f in manifest["files"])


def fingerprint(path: Path) -> dict:
    """What proves a file unchanged since it was hashed, from ``os.stat``: device, inode, size,
    mtime_ns and ctime_ns. Writing to a file, or setting its mtime back with ``os.utime``, moves
    its ctime, which no system call sets back (stat(2), "st_ctime"); another file at the path has
    another inode. The kernel stamps ctime from its coarse clock (a tick of a few ms): a write
    within the tick the file was fingerprinted in, size and mtime put back, would go unseen; the
    partial area is root's, and nothing but this tool writes there."""
    st = path.stat()
    return {
        "dev": st.st_dev,
        "ino": st.st_ino,
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "ctime_ns": st.st_ctime_ns,
    }


def verified_before(partial: Path, origin: str, manifest: dict) -> dict[str, dict]:
    """Files an earlier run verified in ``partial`` that this transfer can keep, each entry with
    ``stat``, the file's :func:`fingerprint` now. Which records count: all of them when the
    manifest pins every sha256 (and the record's sha256 is the manifest's), else those from the
    same ``origin`` (a local copy, or a hub at one commit). A file is kept only when its bytes
    are proven to be the ones hashed: its fingerprint equals the one recorded when it was
    hashed, or (another fingerprint, or a record without one) it is hashed again now and
    matches. Any other file is transferred again."""
    out: dict[str, dict] = {}
    try:
        lines = (partial / VERIFIED).read_text(encoding="utf-8").splitlines()
    except OSError:
        return out
    is_pinned = pinned(manifest)
    want = {f["dest"]: f.get("sha256") for f in manifest["files"]}
    latest: dict[str, dict] = {}  # a file verified twice: its last record counts
    for line in lines:
        try:
            entry = json.loads(line)
            dest, size, sha = entry["dest"], entry["size"], entry["sha256"]
        except (ValueError, KeyError, TypeError):
            continue  # a line cut short by an interruption: that file is transferred again
        rel = PurePosixPath(dest) if isinstance(dest, str) else None
        if rel is None or rel.is_absolute() or ".." in rel.parts or (want and dest not in want):
            continue  # not a file of this model
        if isinstance(size, int) and isinstance(sha, str):
            latest[dest] = entry
    for dest, entry in latest.items():
        sha = entry["sha256"]
        if is_pinned and want.get(dest) != sha:
            continue  # not hashed against this lock
        if not is_pinned and entry.get("from") != origin:
            continue
        final = partial / dest
        if not final.is_file() or final.stat().st_size != entry["size"]:
            continue
        now = fingerprint(final)
        if entry.get("stat") != now:
            say(f"{dest}: changed since it was verified, or not proven unchanged: hashing again")
            got = sha256_file(final)
            if got != sha:
                say(f"{dest}: sha256 {got}, {sha} expected: transferring it again")
                final.unlink()
                continue
            now = fingerprint(final)
        out[dest] = {**entry, "stat": now}
    return out


def unproven(partial: Path, entries: list[dict]) -> list[str]:
    """The files of ``entries`` (each with ``dest``, ``sha256`` and ``stat``, the fingerprint
    taken when its bytes were hashed or proven in this run) whose bytes in ``partial`` are not
    proven to be those: another fingerprint now, then another sha256. Each as
    ``"<dest>: <why>"``; [] when every file is proven. Hashes only a file whose fingerprint
    moved."""
    problems = []
    for e in entries:
        path = partial / e["dest"]
        if not path.is_file():
            problems.append(f"{e['dest']}: missing")
            continue
        if e.get("stat") == fingerprint(path):
            continue
        got = sha256_file(path)
        if got != e["sha256"]:
            problems.append(
                f"{e['dest']}: changed after it was verified: sha256 {got}, {e['sha256']} expected"
            )
    return problems


def finish_file(
    partial: Path,
    f: dict,
    origin: str,
    *,
    size: int | None,
    sha256: str | None,
    got_sha256: str,
    blob_id: str | None = None,
    got_blob_id: str | None = None,
) -> dict:
    """Check a transferred file and move it to its place in the partial area, or keep it aside
    (``.<revision>.rejected/``) and raise :class:`FetchError` naming what differs. The file is
    ``<partial>/<dest>.incomplete``; its place ``<partial>/<dest>``."""
    final = partial / f["dest"]
    tmp = final.with_name(final.name + ".incomplete")
    actual = tmp.stat().st_size
    problems = []
    if size is not None and actual != size:
        problems.append(f"{actual} bytes, {size} expected")
    if sha256 is not None and got_sha256 != sha256:
        problems.append(f"sha256 {got_sha256}, {sha256} expected")
    if blob_id is not None and got_blob_id != blob_id:
        problems.append(f"git blob id {got_blob_id}, {blob_id} expected (the hub's)")
    if problems:
        bad = rejected_dir(_dest_of(partial)) / (f["dest"] + ".bad")
        bad.parent.mkdir(parents=True, exist_ok=True)
        tmp.replace(bad)
        raise FetchError(f"{f['dest']}: {'; '.join(problems)} (kept as {bad})")
    tmp.replace(final)
    entry = {"dest": f["dest"], "path": f["path"], "size": actual, "sha256": got_sha256}
    stat = fingerprint(final)
    with open(partial / VERIFIED, "a", encoding="utf-8") as log:
        log.write(json.dumps({**entry, "from": origin, "stat": stat}) + "\n")
    return {**entry, "stat": stat}


def _dest_of(partial: Path) -> Path:
    name = partial.name
    assert name.startswith(".") and name.endswith(".partial"), partial
    return partial.with_name(name[1 : -len(".partial")])
