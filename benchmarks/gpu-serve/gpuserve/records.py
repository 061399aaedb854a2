"""A run's records packed to come back from the GPU machine in one piece.

The device tool hands back what a call writes under ``$OUT`` only within its limits: at most 8
files, each at most 16 MiB, no more than 2 folders deep (the device README). A run's records
(``engine.log``, ``engine.json``, ``summary.json``, ``served.json``, ``bench/<machine>/<id>.json``)
lie 3 folders deep under ``~/rigup-gpu/runs`` and are more than 8 files, so ``cp -r`` loses them.
:func:`pack` writes them as one gzip tar per call (cut into pieces of at most 16 MiB when
larger), named by the caller, with a sha256 for each piece.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

#: the device tool's limits on what comes back from ``$OUT`` (/work/.library/device/README.md)
MAX_FILE_BYTES = 16 << 20
MAX_FILES = 8


class RecordsError(ValueError):
    """Nothing to pack, or more than comes back."""


def pack(runs: list[Path], out: Path, max_bytes: int = MAX_FILE_BYTES) -> list[dict]:
    """Tar and gzip the run directories ``runs`` (each under its own name) into ``out``; when
    the result is larger than ``max_bytes``, into ``out.000``, ``out.001`` ... of at most
    ``max_bytes`` each (join with ``cat``). Returns ``[{"file", "bytes", "sha256"}]``.
    Raises RecordsError naming every missing run, or when more than :data:`MAX_FILES` pieces
    would be needed; nothing is written then."""
    missing = [str(r) for r in runs if not r.is_dir()]
    if not runs or missing:
        raise RecordsError(f"no run directory to pack: {', '.join(missing) or 'none named'}")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for run in runs:
            tar.add(run, arcname=run.name)
    data = buf.getvalue()
    chunks = [data[i : i + max_bytes] for i in range(0, len(data), max_bytes)] or [b""]
    if len(chunks) > MAX_FILES:
        raise RecordsError(
            f"{len(data)} bytes packed need {len(chunks)} pieces of {max_bytes} bytes; the "
            f"device hands back {MAX_FILES} files: pack fewer runs per call"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    names = [out] if len(chunks) == 1 else [Path(f"{out}.{k:03d}") for k in range(len(chunks))]
    written = []
    for name, chunk in zip(names, chunks, strict=True):
        name.write_bytes(chunk)
        written.append(
            {"file": str(name), "bytes": len(chunk), "sha256": hashlib.sha256(chunk).hexdigest()}
        )
    return written
