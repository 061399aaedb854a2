"""The speech server's command line (files/voxcpm/voxcpm_server.py) run for real on a loopback
port, with the test-double synthesizer and an API key: the unit tests' live server."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SERVER = REPO / "files" / "voxcpm" / "voxcpm_server.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ready_status(base: str) -> tuple[int, dict]:
    """GET ``base``/ready: (HTTP status, its JSON body), a refusal's body too."""
    try:
        with urllib.request.urlopen(f"{base}/ready", timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@contextlib.contextmanager
def speech_server(model_parent: Path, key: str, load_seconds: float = 0.0) -> Iterator[str]:
    """Start the speech server (a stand-in VoxCPM2 directory below ``model_parent``, API key
    ``key``, the double's load time ``load_seconds`` in s) and yield its base URL once /ready
    answers 200; stopped on exit. Raises AssertionError when it exits or is not ready in 60 s."""
    model = model_parent / "voxcpm2"
    model.mkdir(parents=True, exist_ok=True)
    (model / "config.json").write_text(json.dumps({"architecture": "voxcpm2"}))
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "--model-dir", str(model), "--port", str(port),
         "--synthesizer", "test-double", "--test-double-load-seconds", str(load_seconds)],
        env={**os.environ, "VOXCPM_API_KEY": key},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                if ready_status(base)[0] == 200:
                    break
            except OSError:
                pass
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "the server did not get ready in 60 s"
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)
