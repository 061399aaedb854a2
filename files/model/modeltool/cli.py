"""The command line of model_fetch.py: place, verify and back up models described by rigup
manifests.

    model_fetch.py place  --manifest M.json --dest DIR --sources local,huggingface
                          [--local-dir ROOT ...] [--link copy|hardlink] [--hf-endpoint URL]
                          [--hf-token-file FILE] [--modelscope-endpoint URL]
                          [--modelscope-token-file FILE] [--replace-mismatched]
                          [--verify-sha256] [--report FILE]
    model_fetch.py verify --dir DIR [--manifest M.json]   (size, sha256, shards, stray files)
    model_fetch.py backup --store DIR --to DIR [--prefix DIR [--index URL ...]] [--report FILE]

Output: progress lines on stderr (every 5 s: bytes, percent, rate) and one JSON line on stdout
(also written to --report): {"status": "placed"|"present"|"repaired"|"mismatch"|"interrupted"|
"error", "bytes_transferred": N, "seconds": S, ...}. Exit 0 on success, 1 on error, 3 when the
free space does not fit, 4 when another transfer of the model runs, 5 when a placed model (or
the directory verified) does not match, 130 when interrupted (a signal, or the controller's
connection closed: what was verified is kept and the next run resumes).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from modeltool import place as placing
from modeltool.backup import cmd_backup
from modeltool.layout import EXIT_MISMATCH, SPARE_BYTES, FetchError
from modeltool.progress import Guard, say
from modeltool.verify import cmd_verify


def write_report(path: str, result: dict) -> None:
    """Write the result JSON line to ``path`` atomically (a reader never sees half of it)."""
    if not path:
        return
    report = Path(path)
    report.parent.mkdir(parents=True, exist_ok=True)
    tmp = report.with_name(f".{report.name}.tmp")
    tmp.write_text(json.dumps(result) + "\n", encoding="utf-8")
    os.replace(tmp, report)


def interrupted_result(command: str, reason: str, started: float) -> dict:
    """The record of an interrupted command: where it stopped, what it had moved."""
    progress = placing.current.get("progress")
    if progress:
        progress.refresh()
    result = {
        "status": "interrupted",
        "reason": reason,
        "bytes_transferred": progress.done if progress else 0,
        "seconds": round(time.monotonic() - started, 2),
    }
    for key in ("dest", "partial"):
        if key in placing.current:
            result[key] = placing.current[key]
    result["resume"] = f"run {command} again: what was verified is kept"
    return result


def build_parser() -> argparse.ArgumentParser:
    cli = argparse.ArgumentParser(
        prog="model_fetch.py",
        description="Place, verify and back up models described by rigup manifests.",
    )
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
    p.add_argument("--verify-sha256", action="store_true", help="hash every file of a placed copy")
    p.add_argument("--report", default="")
    p.add_argument("--spare-bytes", type=int, default=SPARE_BYTES, help="keep this much free")
    p.add_argument("--lock-dir", default="/run/lock", help="where the per-model transfer lock is")
    p.add_argument("--lock-wait", type=float, default=60.0, help="seconds to wait for it")
    v = sub.add_parser("verify")
    v.add_argument("--dir", required=True)
    v.add_argument("--manifest", default="")
    b = sub.add_parser("backup")
    b.add_argument("--store", required=True)
    b.add_argument("--to", required=True)
    b.add_argument("--report", default="")
    b.add_argument("--spare-bytes", type=int, default=SPARE_BYTES, help="keep this much free")
    b.add_argument("--prefix", default="", help="rigup_prefix: also back up what its venvs need")
    b.add_argument("--index", action="append", default=[], help="package index for the wheels")
    return cli


COMMANDS = {"place": placing.cmd_place, "verify": cmd_verify, "backup": cmd_backup}


def main(argv: list[str], watch: bool = True) -> int:
    opts = build_parser().parse_args(argv)
    started = time.monotonic()
    report = getattr(opts, "report", "")

    def on_interrupt(reason: str) -> None:
        result = interrupted_result(opts.command, reason, started)
        write_report(report, result)
        say(f"model_fetch: INTERRUPTED ({reason}): {json.dumps(result)}")

    code = 0
    with Guard(on_interrupt, watch=watch):
        try:
            result = COMMANDS[opts.command](opts)
            if result["status"] == "mismatch":
                code = EXIT_MISMATCH
        except FetchError as e:
            status = "mismatch" if e.code == EXIT_MISMATCH else "error"
            result, code = {"status": status, "error": str(e)}, e.code
        result.setdefault("seconds", round(time.monotonic() - started, 2))
        write_report(report, result)
    if result["status"] in ("error", "mismatch") and "error" in result:
        say(f"model_fetch: ERROR: {result['error']}")
    elif opts.command == "place":
        say(placing.describe(result))
    try:
        print(json.dumps(result), flush=True)
    except OSError:  # the controller is gone; the report holds the result
        pass
    return code


def run() -> None:
    sys.exit(main(sys.argv[1:]))
