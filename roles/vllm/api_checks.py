"""The checks of vLLM's OpenAI-compatible API that tests/infra runs against a rig and the GPU
serving check (benchmarks/gpu-serve) runs against an engine it started: one copy of each.

Standard library only (urllib): it runs where neither testinfra nor the ``openai`` client is
installed. Each check takes an :class:`Api` and returns what it saw (a dict for the record), or
raises :class:`CheckFailed` (an AssertionError, so pytest reports it as a failed assertion)
with a message naming the problem.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: a tool the model may call (the shape every OpenAI-style client sends)
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
#: /metrics families a served engine exports (vLLM 0.22.1, v1/metrics/loggers.py)
ENGINE_METRICS = (
    "vllm:num_requests_running",
    "vllm:kv_cache_usage_perc",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
)
#: the speculative-decoding counters (v1/spec_decode/metrics.py), exported with MTP on
SPEC_METRICS = (
    "vllm:spec_decode_num_drafts_total",
    "vllm:spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total",
)


class CheckFailed(AssertionError):
    """A check of the API failed; the message says what was seen."""


@dataclass(frozen=True)
class Api:
    """vLLM's API at ``base_url`` (``http://127.0.0.1:8000``), serving ``model``; ``key``: the
    API key, or None. ``timeout`` in seconds per request."""

    base_url: str
    model: str
    key: str | None = None
    timeout: float = 300

    def request(self, path: str, body: dict | None = None, key: str | None = "") -> tuple[int, str]:
        """``GET`` (``body`` None) or ``POST`` JSON to ``path``: (HTTP status, text); status 0
        with the reason when nothing answered. ``key``: "" sends the API's key, None none."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.base_url}{path}", data=data)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        key = self.key if key == "" else key
        if key:
            req.add_header("Authorization", f"Bearer {key}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:  # noqa: S310
                return r.status, r.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode("utf-8", "replace")
        except (urllib.error.URLError, OSError) as e:
            return 0, str(getattr(e, "reason", e))

    def json(self, path: str, body: dict | None = None) -> dict:
        status, text = self.request(path, body)
        if status != 200:
            raise CheckFailed(f"{path} answered {status or 'nothing'}: {text[:500]}")
        return json.loads(text)

    def chat(self, messages: list[dict], **extra: Any) -> dict:
        return self.json(
            "/v1/chat/completions", {"model": self.model, "messages": messages, **extra}
        )


def health(api: Api) -> dict:
    status, text = api.request("/health", key=None)
    if status != 200:
        raise CheckFailed(f"/health answered {status or 'nothing'}: {text[:200]}")
    return {"status": status}


def models(api: Api) -> dict:
    """/v1/models lists the served name."""
    names = [m["id"] for m in api.json("/v1/models")["data"]]
    if api.model not in names:
        raise CheckFailed(f"/v1/models lists {names}, not {api.model!r}")
    return {"models": names}


#: why tokens can come back without text: the tokenizer lacks the ids the model emits (a
#: tokenizer smaller than config.json's vocab_size: the full-size random-weight run on the H200,
#: tests/fixtures/vllm-cuda/h200-runs) or the model emits only special tokens
UNDECODED = (
    "{n} tokens generated, none decoded to text: the tokenizer lacks the ids the model emits "
    "(fewer ids than config.json's vocab_size?) or the model emits only special tokens"
)


def completion(api: Api) -> dict:
    """A plain completion generates tokens that decode to text (a completion cut at
    ``max_tokens`` with no text is :data:`UNDECODED`)."""
    got = api.json(
        "/v1/completions",
        {
            "model": api.model,
            "prompt": "The capital of France is",
            "max_tokens": 16,
            "temperature": 0,
        },
    )
    tokens, choice = got["usage"]["completion_tokens"], got["choices"][0]
    if tokens <= 0:
        raise CheckFailed(f"a completion generated no tokens: {got}")
    if not choice["text"] and choice.get("finish_reason") == "length":
        raise CheckFailed(f"{UNDECODED.format(n=tokens)}: {got}")
    return {"completion_tokens": tokens, "text": choice["text"]}


def reasoning_of(message: dict) -> str | None:
    """The reasoning vLLM 0.22.1 split from the content: ``reasoning`` (``reasoning_content`` was
    removed, vllm#33402)."""
    return message.get("reasoning")


def chat_reasoning_apart(api: Api, reasoning_parser: bool = True) -> dict:
    """A chat answer; with a reasoning parser, no ``<think>`` tag is left in ``content``."""
    reply = api.chat([{"role": "user", "content": "Hello!"}], max_tokens=64, temperature=0)
    message = reply["choices"][0]["message"]
    content, reasoning = message.get("content") or "", reasoning_of(message)
    tokens = reply["usage"]["completion_tokens"]
    if tokens <= 0 or not (content or reasoning):
        why = UNDECODED.format(n=tokens) if tokens > 0 else "no tokens generated"
        raise CheckFailed(f"an empty answer ({why}): {reply}")
    if reasoning_parser and ("<think>" in content or "</think>" in content):
        raise CheckFailed(f"reasoning landed in content: {content!r}")
    if message.get("reasoning_content") is not None:
        raise CheckFailed(
            "the answer carries reasoning_content, which vLLM 0.22.1 no longer sends "
            f"(vllm#33402: the thinking is `reasoning`): {reply}"
        )
    return {"content": content, "reasoning": reasoning}


def stream(api: Api) -> dict:
    """A streamed chat arrives as server-sent events: chunks, then ``data: [DONE]``."""
    status, text = api.request(
        "/v1/chat/completions",
        {
            "model": api.model,
            "messages": [{"role": "user", "content": "Count to five."}],
            "max_tokens": 32,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    if status != 200:
        raise CheckFailed(f"a streamed chat answered {status or 'nothing'}: {text[:300]}")
    events = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
    if not events or events[-1] != "[DONE]":
        raise CheckFailed(f"the stream did not end with [DONE]: {text[-300:]!r}")
    chunks = [json.loads(e) for e in events[:-1]]
    pieces = sum(
        1
        for c in chunks
        for ch in c.get("choices", [])
        if (ch.get("delta") or {}).get("content") or reasoning_of(ch.get("delta") or {})
    )
    if not pieces:
        usage = next((c["usage"] for c in reversed(chunks) if c.get("usage")), None)
        why = f" ({UNDECODED.format(n=usage['completion_tokens'])})" if usage else ""
        raise CheckFailed(f"{len(chunks)} chunks, none with text{why}")
    return {"chunks": len(chunks), "with_text": pieces}


def tool_call(api: Api) -> dict:
    """``tools`` is accepted (vLLM refuses it without --enable-auto-tool-choice); a tool call the
    model makes comes back parsed: a function name and JSON arguments."""
    reply = api.chat(
        [{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[WEATHER_TOOL],
        tool_choice="auto",
        max_tokens=96,
        temperature=0,
        chat_template_kwargs={"enable_thinking": False},
    )
    calls = reply["choices"][0]["message"].get("tool_calls") or []
    seen = []
    for call in calls:
        fn = call.get("function") or {}
        if not fn.get("name"):
            raise CheckFailed(f"a tool call without a name: {call}")
        try:
            seen.append({"name": fn["name"], "arguments": json.loads(fn.get("arguments") or "")})
        except ValueError as exc:
            raise CheckFailed(f"tool call arguments are not JSON: {fn.get('arguments')!r}") from exc
    return {"tool_calls": seen}


def metrics(api: Api, speculative: bool = False) -> dict:
    """/metrics exports the engine's figures (and the spec-decode counters with MTP on)."""
    status, text = api.request("/metrics", key=None)
    if status != 200:
        raise CheckFailed(f"/metrics answered {status or 'nothing'}")
    wanted = ENGINE_METRICS + (SPEC_METRICS if speculative else ())
    missing = [m for m in wanted if m not in text]
    if missing:
        raise CheckFailed(f"/metrics lacks {missing}")
    return {"families": len(wanted)}


def run_all(checks: list[tuple[str, Callable[[], dict]]]) -> list[dict[str, Any]]:
    """Every check, in order, each to the end: ``[{"check", "ok", "seen" | "error"}]``."""
    out = []
    for name, check in checks:
        try:
            out.append({"check": name, "ok": True, "seen": check()})
        except (CheckFailed, ValueError, KeyError) as exc:
            out.append({"check": name, "ok": False, "error": f"{type(exc).__name__}: {exc}"})
    return out
