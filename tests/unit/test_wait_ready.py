"""files/common/wait-ready, the ExecStartPost= readiness wait of vllm.service and comfyui.service,
run for real against a loopback HTTP server and real processes."""

from __future__ import annotations

import http.server
import subprocess
import threading
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "files" / "common" / "wait-ready"


@pytest.fixture
def server():
    class Quiet(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_returns_once_the_url_answers(server):
    live = subprocess.Popen(["sleep", "30"])
    try:
        out = subprocess.run(
            ["sh", str(SCRIPT), f"{server}/health", str(live.pid)],
            capture_output=True,
            text=True,
            timeout=20,
        )
    finally:
        live.kill()
    assert out.returncode == 0 and "answers" in out.stdout


def test_fails_fast_when_the_server_process_is_gone(server):
    dead = subprocess.Popen(["true"])
    dead.wait()
    out = subprocess.run(
        ["sh", str(SCRIPT), f"{server}/not-ready", str(dead.pid)],
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert out.returncode == 1 and f"(pid {dead.pid}) exited" in out.stderr


def test_keeps_waiting_while_the_server_process_lives(server):
    live = subprocess.Popen(["sleep", "30"])
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            subprocess.run(
                ["sh", str(SCRIPT), f"{server}/not-ready", str(live.pid)],
                capture_output=True,
                timeout=5,
            )
    finally:
        live.kill()
