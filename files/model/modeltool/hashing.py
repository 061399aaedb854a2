"""Hashes (sha256, git blob ids) and the copy that resumes an interrupted one only after
comparing what it left with the source."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from modeltool.progress import Progress

CHUNK = 16 * 1024 * 1024  # bytes per read/write: large enough for disk throughput, small RAM


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def file_hashes(path: Path) -> tuple[str, str]:
    """``(sha256, git blob id)`` of a file in one read. The git blob id (sha1 of ``blob <size>\\0``
    and the bytes) is what a Hugging Face repository publishes for a file not stored in LFS."""
    sha, git = hashlib.sha256(), hashlib.sha1()
    git.update(f"blob {path.stat().st_size}\0".encode())
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            sha.update(chunk)
            git.update(chunk)
    return sha.hexdigest(), git.hexdigest()


@dataclass(frozen=True)
class Copied:
    """What :func:`copy_resuming` did: the sha256 of the source bytes (which the copy now holds),
    ``kept`` bytes of an earlier copy that matched the source, ``dropped`` bytes of it that did
    not (or that were past the source's end)."""

    sha256: str
    kept: int
    dropped: int


def _first_difference(a: bytes, b: bytes) -> int:
    """Index of the first byte where ``a`` and ``b`` differ (their common length if none)."""
    lo, hi = 0, min(len(a), len(b))
    while hi - lo > 4096:  # halve to a 4 KiB window, then compare bytes
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return next((i for i in range(lo, hi) if a[i] != b[i]), hi)


def copy_resuming(src: Path, dst: Path, progress: Progress) -> Copied:
    """Copy ``src`` to ``dst``, continuing what an interrupted run left at ``dst``.

    The bytes already at ``dst`` are compared with the source first; the copy continues after
    the longest matching prefix and the rest of ``dst`` is rewritten from the source (a partial
    file is never trusted: a zeroed or foreign block is found and replaced). Only the bytes
    written count as transferred. Returns the sha256 of the source bytes, which the copy holds.
    """
    h = hashlib.sha256()
    size = src.stat().st_size
    offset = dst.stat().st_size if dst.exists() else 0
    kept = 0
    with open(src, "rb") as fin:
        if offset:
            with open(dst, "rb") as old:
                while kept < min(offset, size):
                    want = min(CHUNK, min(offset, size) - kept)
                    a, b = fin.read(want), old.read(want)
                    same = _first_difference(a, b) if a != b else len(a)
                    h.update(a[:same])
                    kept += same
                    if same < want:
                        break
        fin.seek(kept)
        with open(dst, "r+b" if dst.exists() else "wb") as fout:
            fout.truncate(kept)
            fout.seek(kept)
            while chunk := fin.read(CHUNK):
                h.update(chunk)
                fout.write(chunk)
                progress.add(len(chunk), src.name)
            fout.flush()
            os.fsync(fout.fileno())
    return Copied(sha256=h.hexdigest(), kept=kept, dropped=offset - kept)
