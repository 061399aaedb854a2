"""Write a safetensors file one tensor at a time (no whole-model dict in memory).

The format (https://github.com/huggingface/safetensors, "Format"): 8-byte little-endian header
length N, N bytes of JSON header ``{name: {"dtype", "shape", "data_offsets": [begin, end]}, ...,
"__metadata__": {str: str}}`` padded with spaces to a multiple of 8, then the tensors' raw
little-endian bytes back to back in header order. Offsets are relative to the end of the header.

Full-scale checkpoints are tens of GB; :func:`write` takes (name, shape, dtype, produce) entries
and calls ``produce()`` only when that tensor's bytes are due, so peak memory is one tensor.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

#: safetensors dtype name -> bytes per element (safetensors Dtype enum).
DTYPE_BYTES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
}


@dataclass(frozen=True)
class Entry:
    """One tensor to write: ``produce()`` returns its raw bytes (len = numel * DTYPE_BYTES)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    produce: Callable[[], bytes]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * DTYPE_BYTES[self.dtype]


def write(path: Path, entries: Iterable[Entry], metadata: Mapping[str, str] | None = None) -> int:
    """Write ``entries`` to ``path`` (atomically: ``path.tmp`` then rename); return bytes written.

    Raises ValueError on a duplicate name, an unknown dtype, or a ``produce()`` whose byte count
    differs from the declared shape and dtype (the file would be unreadable).
    """
    entries = list(entries)
    header: dict[str, object] = {}
    offset = 0
    for e in entries:
        if e.dtype not in DTYPE_BYTES:
            raise ValueError(f"{e.name}: unknown safetensors dtype {e.dtype!r}")
        if e.name in header:
            raise ValueError(f"duplicate tensor name {e.name!r}")
        header[e.name] = {
            "dtype": e.dtype,
            "shape": list(e.shape),
            "data_offsets": [offset, offset + e.nbytes],
        }
        offset += e.nbytes
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    tmp = path.with_name(path.name + ".tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        for e in entries:
            data = e.produce()
            if len(data) != e.nbytes:
                raise ValueError(f"{e.name}: produced {len(data)} bytes, expected {e.nbytes}")
            f.write(data)
    tmp.replace(path)
    return 8 + len(raw) + offset
