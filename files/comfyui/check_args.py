#!/usr/bin/env python3
"""Check ComfyUI's main.py arguments with the pinned ComfyUI's own parser.

Usage: check_args.py <checkout> <args.json>

Imports ``comfy/cli_args.py`` from the checkout with argument parsing enabled, exactly as
``main.py`` does, so an unknown or misspelled flag fails here with argparse's own message (exit 1)
instead of at service start. Also refuses ``--highvram``/``--gpu-only`` (they keep every model
in VRAM, which defeats offloading on 24 GB cards). Needs only the standard library: cli_args.py
imports nothing else from ComfyUI but ``comfy.options``.

Prints one JSON line: ``{"ok": true, "listen": ..., "port": ..., "base_directory": ...,
"cpu": ..., "cuda_device": ..., "reserve_vram": ...}`` or ``{"ok": false, "error": ...}``.
"""

import contextlib
import io
import json
import sys


def main() -> int:
    checkout, args_file = sys.argv[1], sys.argv[2]
    with open(args_file) as f:
        argv = json.load(f)
    sys.path.insert(0, checkout)
    sys.argv = ["main.py", *argv]
    import comfy.options

    comfy.options.enable_args_parsing()
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            from comfy.cli_args import args
    except SystemExit:
        error = stderr.getvalue().strip().splitlines()
        print(json.dumps({"ok": False, "error": error[-1] if error else "argparse exit"}))
        return 1
    refused = [
        f"--{name.replace('_', '-')}" for name in ("highvram", "gpu_only") if getattr(args, name)
    ]
    if refused:
        print(json.dumps({"ok": False, "error": f"{', '.join(refused)} defeats offloading"}))
        return 1
    print(
        json.dumps(
            {
                "ok": True,
                "listen": args.listen,
                "port": args.port,
                "base_directory": args.base_directory,
                "database_url": args.database_url,
                "cpu": args.cpu,
                "cuda_device": args.cuda_device,
                "reserve_vram": args.reserve_vram,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
