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
from pathlib import Path

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


def verified_before(partial: Path, origin: str, pinned: bool) -> dict[str, dict]:
    """Files an earlier run verified in ``partial`` that this transfer can keep: all of them
    when the manifest pins every sha256 (they were checked against it), else those that came
    from the same ``origin`` (a local copy, or a hub at one commit)."""
    out = {}
    try:
        lines = (partial / VERIFIED).read_text(encoding="utf-8").splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line cut short by an interruption: that file is transferred again
        final = partial / entry["dest"]
        if (pinned or entry.get("from") == origin) and final.is_file():
            if final.stat().st_size == entry["size"]:
                out[entry["dest"]] = entry
    return out


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
    with open(partial / VERIFIED, "a", encoding="utf-8") as log:
        log.write(json.dumps({**entry, "from": origin}) + "\n")
    return entry


def _dest_of(partial: Path) -> Path:
    name = partial.name
    assert name.startswith(".") and name.endswith(".partial"), partial
    return partial.with_name(name[1 : -len(".partial")])
