"""The strict tool-call check (roles/vllm/api_checks.py) on captured answers of both engines:
vLLM 0.22.1's CUDA build on an H200 (tests/fixtures/vllm-cuda/client-answers-cudagraphs.txt) and
its CPU build in the lab (tests/fixtures/vllm-cpu/api-answers/, README there). The real parsed
answers pass; the same answers with the call left as markup in ``content`` and ``tool_calls: []``
(vllm-project/vllm#42021's shape) fail, and so do the lab's real answers to a request without
``tools``, where the engine leaves the call as text."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from roles.vllm import api_checks as c

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CUDA_ANSWERS = FIXTURES / "vllm-cuda" / "client-answers-cudagraphs.txt"
CPU_ANSWERS = FIXTURES / "vllm-cpu" / "api-answers"
TOOLS = [c.WEATHER_TOOL]
#: the qwen3_coder call lab/tiny's weights emit (lab/tiny, docs/serving.md)
CALL_TEXT = (
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
    "</tool_call>"
)


def cuda_choice() -> dict:
    """The choice of the CUDA engine's answer to the weather question with tools (the client's
    line is cut after the choice; the choice itself is whole)."""
    line = next(x for x in CUDA_ANSWERS.read_text().splitlines() if x.startswith("== chat_tools"))
    return json.JSONDecoder().raw_decode(line, line.index('{"index":0,"message"'))[0]


def broken(message: dict, call_text: str = CALL_TEXT) -> dict:
    """``message`` as vllm#42021 answers it: the call's text in ``content``, ``tool_calls``
    empty."""
    return {**message, "content": (message.get("content") or "") + call_text, "tool_calls": []}


def test_the_cuda_engines_parsed_call_passes_and_its_42021_shape_fails():
    choice = cuda_choice()
    message = choice["message"]
    assert choice["finish_reason"] == "tool_calls" and message["content"] is None
    seen = c.check_tool_answer(message, choice["finish_reason"], TOOLS, want=c.PARIS_CALL)
    assert seen["tool_calls"] == [c.PARIS_CALL]
    with pytest.raises(c.CheckFailed, match=r"tool markup \['<tool_call>'.* left in content"):
        c.check_tool_answer(broken(message), "stop", TOOLS)
    hermes = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    with pytest.raises(c.CheckFailed, match="vllm#42021"):
        c.check_tool_answer(broken(message, hermes), "stop", TOOLS)


@pytest.mark.parametrize("markup", c.TOOL_MARKUP)
def test_each_parsers_markup_left_in_content_fails(markup):
    """Every start/end token vLLM 0.22.1's hermes, qwen3_coder and qwen3_xml parsers cut out."""
    message = {"role": "assistant", "content": f"Sure. {markup}", "tool_calls": []}
    with pytest.raises(c.CheckFailed, match="left in content"):
        c.check_tool_answer(message, "stop", TOOLS)


def test_calls_are_read_strictly():
    """A call to a tool not offered, arguments that are not a JSON object of the tool's
    parameters, a call without finish_reason "tool_calls", thinking tags in content with a
    reasoning parser, and a known model that did not make the wanted call all fail."""
    message = cuda_choice()["message"]
    fn = message["tool_calls"][0]["function"]

    def call(**changes) -> dict:
        return {
            **message,
            "tool_calls": [{**message["tool_calls"][0], "function": {**fn, **changes}}],
        }

    cases = [
        (call(name="get_time"), "tool_calls", "not an offered tool"),
        (call(arguments="{'city': 'Paris'}"), "tool_calls", "not JSON"),
        (call(arguments='["Paris"]'), "tool_calls", "not a JSON object"),
        (call(arguments="{}"), "tool_calls", r"lack \['city'\]"),
        (call(arguments='{"city": "Paris", "unit": "C"}'), "tool_calls", r"undeclared \['unit'\]"),
        (message, "stop", "finish_reason 'stop'"),
        ({**message, "content": "<think>hm</think>"}, "tool_calls", "reasoning landed in content"),
        ({**message, "reasoning": CALL_TEXT}, "tool_calls", "left in reasoning"),
    ]
    for answer, finish, why in cases:
        with pytest.raises(c.CheckFailed, match=why):
            c.check_tool_answer(answer, finish, TOOLS)
    no_call = {**message, "content": "It is sunny.", "tool_calls": []}
    assert c.check_tool_answer(no_call, "stop", TOOLS)["tool_calls"] == []
    with pytest.raises(c.CheckFailed, match=r"the tool calls are \[\], not"):
        c.check_tool_answer(no_call, "stop", TOOLS, want=c.PARIS_CALL)
    think = {**message, "content": "<think>hm</think>"}
    assert c.check_tool_answer(think, "tool_calls", TOOLS, reasoning_parser=False)


def test_a_stream_is_put_together_by_index():
    """Fragments of two calls interleaved, the second's name in two pieces: each call gets its
    id and type from its first fragment and its arguments from all of them."""

    def event(**delta) -> str:
        return "data: " + json.dumps({"choices": [{"index": 0, "delta": delta}]}) + "\n\n"

    def part(i: int, **fields) -> dict:
        return {"index": i, **fields}

    text = (
        event(role="assistant", content="")
        + event(reasoning="Weather.")
        + event(tool_calls=[part(0, id="a", type="function", function={"name": "get_weather"})])
        + event(tool_calls=[part(1, id="b", type="function", function={"name": "get_"})])
        + event(tool_calls=[part(0, function={"arguments": '{"city": '})])
        + event(tool_calls=[part(1, function={"name": "weather", "arguments": '{"city": "Rome"}'})])
        + event(tool_calls=[part(0, function={"arguments": '"Paris"}'})])
        + "data: "
        + json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
        + "\n\ndata: [DONE]\n\n"
    )
    got = c.assemble_stream(text)
    assert got["reasoning"] == "Weather." and got["content"] == "" and got["chunks"] == 8
    assert [
        (t["id"], t["function"]["name"], t["function"]["arguments"]) for t in got["tool_calls"]
    ] == [
        ("a", "get_weather", '{"city": "Paris"}'),
        ("b", "get_weather", '{"city": "Rome"}'),
    ]
    seen = c.check_tool_answer(got, got["finish_reason"], TOOLS)
    assert [s["arguments"]["city"] for s in seen["tool_calls"]] == ["Paris", "Rome"]
    with pytest.raises(c.CheckFailed, match="without an index"):
        c.assemble_stream(event(tool_calls=[{"function": {"name": "x"}}]) + "data: [DONE]\n\n")
    with pytest.raises(c.CheckFailed, match=r"did not end with \[DONE\]"):
        c.assemble_stream(event(content="x"))


def cpu_answer(folder: str, name: str) -> tuple[dict, str | None, int | None]:
    """A captured CPU-engine answer as (message, finish_reason, chunks): a ``.json`` answer's
    first choice, an ``.sse`` stream put together by :func:`api_checks.assemble_stream`."""
    text = (CPU_ANSWERS / folder / name).read_text(encoding="utf-8")
    if name.endswith(".sse"):
        got = c.assemble_stream(text)
        return got, got["finish_reason"], got["chunks"]
    choice = json.loads(text)["choices"][0]
    return choice["message"], choice["finish_reason"], None


MODES = [
    f"thinking-{t}-{s}" for t in ("off", "on") for s in ("whole.json", "stream.sse")
]  # fmt: skip


@pytest.mark.parametrize("mode", MODES)
def test_the_cpu_engines_parsed_calls_pass(mode):
    """lab/tiny's call through the qwen3_coder parser, thinking on and off, whole and streamed:
    the call in ``tool_calls``, the reasoning apart, the greeting (thinking on) in content."""
    message, finish, _ = cpu_answer("tools", f"tools-{mode}")
    seen = c.check_tool_answer(message, finish, TOOLS, want=c.PARIS_CALL)
    assert seen["tool_calls"] == [c.PARIS_CALL]
    assert (seen["reasoning"] or "").startswith("The user says") is mode.startswith("thinking-on")


UNPARSED = [("broken-hermes-parser", f"tools-{m}") for m in MODES] + [
    ("no-tools", f"no-tools-{m}") for m in MODES if m.endswith("whole.json")
]


@pytest.mark.parametrize(("folder", "name"), UNPARSED)
def test_the_cpu_engines_unparsed_calls_fail(folder, name):
    """The call left as text (a hermes parser on a qwen3_coder model; no ``tools`` sent) fails
    the strict check even where nobody knows which call was due (``want`` None): markup in
    content, or a stream that ends with "tool_calls" and delivers none."""
    message, finish, _ = cpu_answer(folder, name)
    assert not message.get("tool_calls")
    with pytest.raises(c.CheckFailed, match=r"left in content|no call delivered"):
        c.check_tool_answer(message, finish, TOOLS)


@pytest.mark.parametrize("mode", [m for m in MODES if m.endswith("stream.sse")])
def test_streamed_answers_without_tools_come_parsed(mode):
    """vLLM 0.22.1 with --enable-auto-tool-choice parses a streamed call even when the request
    sent no ``tools`` (the whole answer keeps it as text): what it streamed passes."""
    message, finish, _ = cpu_answer("no-tools", f"no-tools-{mode}")
    assert c.check_tool_answer(message, finish, TOOLS, want=c.PARIS_CALL)


def test_the_42021_shape_of_the_cpu_engines_answer_fails():
    """The real parsed answer (thinking on) made vllm#42021's: its call back as the text the
    model emitted, ``tool_calls`` empty; it is byte for byte what the engine answered without
    ``tools`` (no-tools/)."""
    message, _, _ = cpu_answer("tools", "tools-thinking-on-whole.json")
    shaped = broken(message)
    real, _, _ = cpu_answer("no-tools", "no-tools-thinking-on-whole.json")
    assert shaped["content"] == real["content"] and shaped["tool_calls"] == real["tool_calls"]
    with pytest.raises(c.CheckFailed, match="vllm#42021"):
        c.check_tool_answer(shaped, "stop", TOOLS)


class _Replay(BaseHTTPRequestHandler):
    """Answers every POST with the next captured body (``server.bodies``)."""

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        body = self.server.bodies.pop(0)  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_tool_call_every_way_reads_the_captured_bodies_over_http():
    """:func:`api_checks.tool_call_every_way` against the captured bodies replayed over HTTP:
    the real engine's pass, the broken candidate's first answer fails."""
    server = HTTPServer(("127.0.0.1", 0), _Replay)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    api = c.Api(f"http://127.0.0.1:{server.server_address[1]}", "qwen3.6-27b", timeout=10)
    try:
        server.bodies = [(CPU_ANSWERS / "tools" / f"tools-{m}").read_bytes() for m in MODES]
        seen = c.tool_call_every_way(api, want=c.PARIS_CALL)
        assert list(seen) == [
            "thinking off", "thinking off, streamed", "thinking on", "thinking on, streamed"
        ]  # fmt: skip
        assert seen["thinking on, streamed"]["chunks"] == 8
        server.bodies = [
            (CPU_ANSWERS / "broken-hermes-parser" / f"tools-{m}").read_bytes() for m in MODES
        ]
        with pytest.raises(c.CheckFailed, match="vllm#42021"):
            c.tool_call_every_way(api)
    finally:
        server.shutdown()
