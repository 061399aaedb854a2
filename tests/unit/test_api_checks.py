"""roles/vllm/api_checks.py's own logic: every check runs to the end, the reasoning field's two
names, and the server-sent-event stream as the OpenAI API frames it (a local HTTP server sends
the bytes; what vLLM really answers is checked by tests/infra in the lab and by
benchmarks/gpu-serve on a GPU)."""

from __future__ import annotations

import ast
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from roles.vllm import api_checks as c


def test_every_check_runs_and_failures_are_named():
    def boom():
        raise c.CheckFailed("no tokens")

    got = c.run_all([("a", lambda: {"x": 1}), ("b", boom), ("c", lambda: {})])
    assert [r["ok"] for r in got] == [True, False, True]
    assert got[1]["error"] == "CheckFailed: no tokens"
    assert issubclass(c.CheckFailed, AssertionError)  # pytest reports it as an assertion


def test_reasoning_is_read_under_its_0_22_1_name_only():
    """vLLM 0.22.1 sends the thinking as ``reasoning``; ``reasoning_content`` was removed
    (vllm#33402), so a client reading it gets nothing."""
    assert c.reasoning_of({"reasoning": "r"}) == "r"
    assert c.reasoning_of({"reasoning_content": "r2"}) is None
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


RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-cuda" / "h200-runs"
RUNS_2 = RUNS.with_name("h200-runs-2026-12-02")


def _recorded(run: str, check: str) -> dict:
    """One check's record in a gpu-serve run's summary.json."""
    summary = json.loads((RUNS / run / "summary.json").read_text(encoding="utf-8"))
    return next(r for r in summary["checks"] if r["check"] == check)


def _json(body: dict) -> bytes:
    return json.dumps(body).encode()


def test_the_full_size_random_models_answer_is_named_undecoded(sse_server):
    """The chat reply vLLM gave on the H200 (full-size shape, random weights, the tokenizer then
    smaller than the 248,320-id vocabulary): 64 tokens, ``content`` None, ``reasoning`` ''. The
    check fails, and says why."""
    url, bodies = sse_server
    api = c.Api(url, "qwen3.6-27b", timeout=10)
    error = _recorded("full-mtp", "chat, reasoning apart")["error"]
    reply = ast.literal_eval(error.split("an empty answer: ", 1)[1])
    bodies.append(_json(reply))
    with pytest.raises(c.CheckFailed, match="64 tokens generated, none decoded to text"):
        c.chat_reasoning_apart(api)


def test_the_full_size_answers_with_the_whole_vocabulary_pass(sse_server):
    """The same shape on 2026-12-02, its tokenizer now covering all 248,320 ids: the reasoning
    the random model gave decodes (filler tokens " w<id>"), so the chat and stream checks pass
    on what vLLM really answered, and an answer of the same tokens without text still fails."""
    url, bodies = sse_server
    api = c.Api(url, "qwen3.6-27b", timeout=10)
    summary = json.loads((RUNS_2 / "full-mtp" / "summary.json").read_text(encoding="utf-8"))
    seen = next(r for r in summary["checks"] if r["check"] == "chat, reasoning apart")["seen"]
    assert seen["reasoning"].split()[0].startswith("w") and seen["content"] == ""
    message = {"role": "assistant", "content": seen["content"], "reasoning": seen["reasoning"]}
    reply = {"choices": [{"message": message}], "usage": {"completion_tokens": 64}}
    bodies.append(_json(reply))
    assert c.chat_reasoning_apart(api) == seen
    message["reasoning"] = ""
    bodies.append(_json(reply))
    with pytest.raises(c.CheckFailed, match="64 tokens generated, none decoded to text"):
        c.chat_reasoning_apart(api)


def test_a_completion_cut_at_max_tokens_without_text_fails(sse_server):
    """The recorded completion of the same run (16 tokens, text '') passed before; it is the same
    fault, so it fails now. A completion with text passes, and so does an empty one that stopped
    (the model's end-of-sequence token)."""
    url, bodies = sse_server
    api = c.Api(url, "qwen3.6-27b", timeout=10)
    seen = _recorded("full-nomtp", "completion")["seen"]
    assert seen == {"completion_tokens": 16, "text": ""}

    def reply(text: str, tokens: int, finish: str) -> bytes:
        choice = {"index": 0, "text": text, "finish_reason": finish}
        return _json({"choices": [choice], "usage": {"completion_tokens": tokens}})

    bodies.append(reply(seen["text"], seen["completion_tokens"], "length"))
    with pytest.raises(c.CheckFailed, match="16 tokens generated, none decoded to text"):
        c.completion(api)
    tiny = _recorded("tiny-graphs", "completion")["seen"]
    bodies.append(reply(tiny["text"], tiny["completion_tokens"], "stop"))
    assert c.completion(api) == tiny
    bodies.append(reply("", 1, "stop"))
    assert c.completion(api) == {"completion_tokens": 1, "text": ""}


def test_a_stream_without_text_names_the_tokens_it_generated(sse_server):
    """The stream of that run: 2 chunks, none with text (the role, then the finish); with
    ``stream_options.include_usage`` vLLM adds a usage chunk, so the failure names the count."""
    url, bodies = sse_server
    api = c.Api(url, "qwen3.6-27b", timeout=10)
    usage = "data: " + json.dumps({"choices": [], "usage": {"completion_tokens": 32}}) + "\n\n"
    bodies.append(
        (
            _event({"role": "assistant", "content": ""}) + _event({}) + usage + "data: [DONE]\n\n"
        ).encode()  # fmt: skip
    )
    with pytest.raises(c.CheckFailed, match=r"3 chunks, none with text \(32 tokens generated"):
        c.stream(api)
