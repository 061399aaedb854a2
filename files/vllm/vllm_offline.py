"""Helpers shared by rigup's on-target vLLM checks (check_args.py, text_only_check.py).

Installed next to them (``<prefix>/vllm/bin``) and imported from the script's own directory.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable


def claim_stdout():
    """Return a writer for the real stdout and point fd 1 at stderr.

    vLLM logs to stdout by default (VLLM_LOGGING_STREAM) and argparse prints help there; a
    check's JSON result must be the only thing on stdout.
    """
    sys.stdout.flush()
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    return out


def json_result_writer() -> Callable[[dict], None]:
    """Claim stdout (see :func:`claim_stdout`) and return ``emit(payload)``, which adds
    ``"seconds"`` (wall time since this call) and writes the payload as one JSON line."""
    started = time.monotonic()
    out = claim_stdout()

    def emit(payload: dict) -> None:
        payload["seconds"] = round(time.monotonic() - started, 2)
        out.write(json.dumps(payload, default=str) + "\n")
        out.flush()

    return emit


def ensure_platform() -> str:
    """Give vLLM a platform when it detects none; returns a description of the platform used.

    Building vLLM 0.22.1's parser or configs instantiates DeviceConfig(), which raises "Failed to
    infer device type" on a host without an accelerator (the lab, CI). vLLM itself handles this
    for `vllm bench` (vllm/entrypoints/cli/main.py:54-65) by assigning CpuPlatform() when
    current_platform.is_unspecified(); this does the same, and only then. On a host where vLLM
    detects a GPU nothing is overridden.
    """
    from vllm import platforms

    if not platforms.current_platform.is_unspecified():
        return f"{platforms.current_platform.device_type} (detected)"
    from vllm.platforms.cpu import CpuPlatform

    platforms.current_platform = CpuPlatform()
    return "cpu (no accelerator detected; vLLM's `vllm bench` fallback)"
