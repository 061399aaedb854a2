#!/usr/bin/env python3
"""Place a model described by a rigup manifest, verified and atomically; verify a placed model;
back up a model store. The entry point of rigup's model tool (the ``modeltool`` package next to
this file; its command line: modeltool/cli.py). Installed by roles/model in
``<rigup_prefix>/model/bin`` and run by the model tool venv's python.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from modeltool.cli import run  # noqa: E402

if __name__ == "__main__":
    run()
