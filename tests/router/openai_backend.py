"""A tiny OpenAI-compatible HTTP server (python stdlib) standing in for one vLLM replica in
front of which the real vllm-router binary runs: ``python openai_backend.py PORT NAME``.

It answers ``GET /health`` (200, empty body: vLLM's own /health), ``GET /v1/models`` and
``POST /v1/chat/completions`` / ``/v1/completions`` (non-streamed), naming itself (``NAME``) in
the answer's ``system_fingerprint`` so that a test sees which replica answered, and records the
``Authorization`` header it got as ``x-seen-authorization`` in the answer (the test checks that
the client's key reaches the replica through the router). With ``RIGUP_BACKEND_KEY`` in its
environment, /v1/* without ``Authorization: Bearer <key>`` gets 401, as vLLM's ``--api-key``
does (vllm/entrypoints/openai/api_server.py: /health stays open).
"""

from __future__ import annotations

import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "rigup-test-model"


def make_handler(name: str, key: str | None) -> type[BaseHTTPRequestHandler]:
    """The request handler of replica ``name``; ``key`` the API key /v1/* needs (None: open)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt: str, *args: object) -> None:
            sys.stderr.write(f"[{name}] {fmt % args}\n")

        def _send(self, status: int, body: dict | None) -> None:
            raw = b"" if body is None else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def _authorized(self) -> bool:
            if key is None or not self.path.startswith("/v1/"):
                return True
            if self.headers.get("Authorization") == f"Bearer {key}":
                return True
            self._send(401, {"error": {"message": "Unauthorized", "code": 401}})
            return False

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path == "/health":
                self._send(200, None)
            elif not self._authorized():
                return
            elif self.path == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
            else:
                self._send(404, {"error": {"message": f"no {self.path}"}})

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            request = json.loads(self.rfile.read(length) or b"{}")
            if not self._authorized():
                return
            seen = self.headers.get("Authorization") or ""
            if self.path == "/v1/chat/completions":
                choice = {
                    "index": 0,
                    "message": {"role": "assistant", "content": f"hello from {name}"},
                    "finish_reason": "stop",
                }
                kind = "chat.completion"
            elif self.path == "/v1/completions":
                choice = {"index": 0, "text": f"hello from {name}", "finish_reason": "stop"}
                kind = "text_completion"
            else:
                self._send(404, {"error": {"message": f"no {self.path}"}})
                return
            self._send(
                200,
                {
                    "id": f"cmpl-{name}-{time.monotonic_ns()}",
                    "object": kind,
                    "created": int(time.time()),
                    "model": request.get("model", MODEL),
                    "system_fingerprint": name,
                    "x-seen-authorization": seen,
                    "choices": [choice],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 3, "total_tokens": 4},
                },
            )

    return Handler


def main() -> None:
    port, name = int(sys.argv[1]), sys.argv[2]
    server = ThreadingHTTPServer(
        ("127.0.0.1", port), make_handler(name, os.environ.get("RIGUP_BACKEND_KEY"))
    )
    server.serve_forever()


if __name__ == "__main__":
    main()
