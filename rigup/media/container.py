"""What is inside ComfyUI's output files, read with the standard library: a PNG's size (its IHDR
chunk, PNG spec 11.2.2) and an MP4's tracks (ISO/IEC 14496-12 boxes: moov/trak with tkhd,
mdhd, hdlr, stsd, stsz), enough to check that SaveImage and SaveVideo wrote what was asked.
"""

from __future__ import annotations

import struct

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: boxes that only contain other boxes (ISO/IEC 14496-12 8.x): walked into
_CONTAINERS = {b"moov", b"trak", b"mdia", b"minf", b"stbl", b"edts", b"dinf"}


class ContainerError(ValueError):
    """The bytes are not the format asked for (the message says what was found)."""


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) in pixels of a PNG. Raises ContainerError when ``data`` is not a PNG."""
    if data[:8] != PNG_SIGNATURE or data[12:16] != b"IHDR":
        raise ContainerError(f"not a PNG (starts {data[:16]!r})")
    return struct.unpack(">II", data[16:24])


def _boxes(data: bytes, start: int, end: int):
    i = start
    while i + 8 <= end:
        size, kind = struct.unpack(">I4s", data[i : i + 8])
        head = 8
        if size == 1:
            size = struct.unpack(">Q", data[i + 8 : i + 16])[0]
            head = 16
        elif size == 0:
            size = end - i
        if size < head or i + size > end:
            raise ContainerError(f"box {kind!r} at {i}: size {size} outside its parent")
        yield kind, i + head, i + size
        i += size


def _track(data: bytes, start: int, end: int) -> dict:
    t: dict = {}

    def walk(s: int, e: int) -> None:
        for kind, b, f in _boxes(data, s, e):
            if kind in _CONTAINERS:
                walk(b, f)
            elif kind == b"tkhd":
                # 14496-12 8.3.2: width and height (16.16 fixed point) close the box, after
                # the 36-byte matrix; 76 bytes in for version 0, 88 for version 1
                at = b + (88 if data[b] == 1 else 76)
                w, h = struct.unpack(">II", data[at : at + 8])
                t["width"], t["height"] = w >> 16, h >> 16
            elif kind == b"mdhd":
                version = data[b]
                if version == 1:
                    t["timescale"], t["duration"] = struct.unpack(">IQ", data[b + 20 : b + 32])
                else:
                    t["timescale"], t["duration"] = struct.unpack(">II", data[b + 12 : b + 20])
            elif kind == b"hdlr":
                t["handler"] = data[b + 8 : b + 12].decode("latin-1")
            elif kind == b"stsd":
                entry = data[b + 8 : f]
                t["codec"] = entry[4:8].decode("latin-1")
                if t.get("handler") == "soun" and len(entry) >= 36:
                    t["channels"] = struct.unpack(">H", entry[24:26])[0]
                    t["sample_rate"] = struct.unpack(">I", entry[32:36])[0] >> 16
            elif kind == b"stsz":
                size, count = struct.unpack(">II", data[b + 4 : b + 12])
                t["samples"] = count

    walk(start, end)
    if t.get("handler") != "vide":
        t.pop("width", None), t.pop("height", None)
    return t


def mp4_tracks(data: bytes) -> list[dict]:
    """The tracks of an MP4: ``{"handler": "vide"|"soun", "codec": "avc1"|"mp4a"|...,
    "samples": frames or audio packets, "timescale", "duration" (in timescale units), and
    "width"/"height" (video, px) or "channels"/"sample_rate" (audio, Hz)}``. Raises
    ContainerError when there is no ftyp box or no moov box."""
    top = list(_boxes(data, 0, len(data)))
    kinds = [k for k, _, _ in top]
    if b"ftyp" not in kinds or b"moov" not in kinds:
        raise ContainerError(f"not an MP4 (top-level boxes {kinds[:8]})")
    _, b, f = next(x for x in top if x[0] == b"moov")
    tracks = []
    for kind, tb, tf in _boxes(data, b, f):
        if kind == b"trak":
            tracks.append(_track(data, tb, tf))
    return tracks
