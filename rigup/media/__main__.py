"""``python3 -m rigup.media WORKFLOW.json [--url http://127.0.0.1:8188] [--set key=value ...]
[--tiny-text-encoder] [--capture DIR] [--timeout S]``: run one of rigup's workflows on ComfyUI
and print its result as JSON (status, outputs, error, timings); exit 0 on success, 1 otherwise.
``--capture DIR`` also writes the /ws messages (ws.jsonl: ``{"t": s, "msg": ...}`` per line) and
the /history answer (history.json) there.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from pathlib import Path

from rigup.media import comfyui, workflows


def _value(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text


def main(argv: list[str] | None = None) -> int:
    """CLI entry point (see the module docstring)."""
    ap = argparse.ArgumentParser(prog="python3 -m rigup.media")
    ap.add_argument("workflow", type=Path)
    ap.add_argument("--url", default="http://127.0.0.1:8188")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument(
        "--tiny-text-encoder",
        action="store_true",
        help=workflows.tiny_text_encoder.__doc__.split(".")[0],
    )
    ap.add_argument("--capture", type=Path)
    ap.add_argument("--timeout", type=float, default=3600.0)
    args = ap.parse_args(argv)
    name = args.workflow.name.removesuffix(".json")
    try:
        params = dict(kv.split("=", 1) for kv in args.set)
    except ValueError:
        ap.error(f"--set takes KEY=VALUE: {args.set}")
    try:
        wf = workflows.apply(
            name, workflows.load(args.workflow), {k: _value(v) for k, v in params.items()}
        )
    except workflows.WorkflowError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.tiny_text_encoder:
        wf = workflows.tiny_text_encoder(wf)
    result = comfyui.run(args.url, wf, timeout=args.timeout)
    if args.capture:
        args.capture.mkdir(parents=True, exist_ok=True)
        with open(args.capture / "ws.jsonl", "w") as f:
            for t, msg in result.messages:
                f.write(json.dumps({"t": round(t, 4), "msg": msg}) + "\n")
        if result.prompt_id:
            with urllib.request.urlopen(f"{args.url}/history/{result.prompt_id}", timeout=30) as r:
                (args.capture / "history.json").write_bytes(r.read())
    out = {k: v for k, v in vars(result).items() if k != "messages"}
    print(json.dumps(out, indent=2))
    return 0 if result.status == "success" else 1


if __name__ == "__main__":
    raise SystemExit(main())
