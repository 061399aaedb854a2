"""roles/vllm/api_checks.py's own logic: every check runs to the end, the reasoning field's two
names, and the server-sent-event stream as the OpenAI API frames it (a local HTTP server sends
the bytes; what vLLM really answers is checked by tests/infra in the lab and by
benchmarks/gpu-serve on a GPU)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from roles.vllm import api_checks as c


def test_every_check_runs_and_failures_are_named():
    def boom():
        raise c.CheckFailed("no tokens")

    got = c.run_all([("a", lambda: {"x": 1}), ("b", boom), ("c", lambda: {})])
    assert [r["ok"] for r in got] == [True, False, True]
    assert got[1]["error"] == "CheckFailed: no tokens"
    assert issubclass(c.CheckFailed, AssertionError)  # pytest reports it as an assertion


def test_reasoning_under_either_name():
    assert c.reasoning_of({"reasoning": "r"}) == "r"
    assert c.reasoning_of({"reasoning_content": "r2"}) == "r2"
    assert c.reasoning_of({"content": "x"}) is None


@pytest.fixture
def sse_server():
    bodies: list[bytes] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            body = bodies.pop(0)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", bodies
    server.shutdown()


def _event(delta: dict) -> str:
    return "data: " + json.dumps({"choices": [{"index": 0, "delta": delta}]}) + "\n\n"


def test_stream_counts_chunks_with_text(sse_server):
    url, bodies = sse_server
    api = c.Api(url, "m", timeout=10)
    bodies.append(
        (
            _event({"role": "assistant"})
            + _event({"reasoning": "hm"})
            + _event({"content": "1"})
            + "data: [DONE]\n\n"
        ).encode()  # fmt: skip
    )
    assert c.stream(api) == {"chunks": 3, "with_text": 2}
    bodies.append((_event({"content": "1"})).encode())
    with pytest.raises(c.CheckFailed, match=r"did not end with \[DONE\]"):
        c.stream(api)
    bodies.append((_event({"role": "assistant"}) + "data: [DONE]\n\n").encode())
    with pytest.raises(c.CheckFailed, match="none with text"):
        c.stream(api)


def test_nothing_listening_is_named():
    api = c.Api("http://127.0.0.1:9", "m", timeout=2)
    status, why = api.request("/health")
    assert status == 0 and why
    with pytest.raises(c.CheckFailed, match="/health answered nothing"):
        c.health(api)
