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


#: tool-call markup vLLM 0.22.1's tool parsers cut out of the text when they parse a call
#: (tool_parsers/hermes_tool_parser.py:35-36, qwen3coder_tool_parser.py:54-59,
#: qwen3xml_tool_parser.py:45-50 and :258): any of it left in ``content`` is a call the parser
#: missed (vllm-project/vllm#42021: the call in ``content``, ``tool_calls: []``)
TOOL_MARKUP = (
    "<tool_call>",
    "</tool_call>",
    "<function=",
    "<function name=",
    "</function>",
    "<parameter=",
    "</parameter>",
)
#: the thinking's tags the qwen3 reasoning parser splits off (reasoning/qwen3_reasoning_parser.py:56,61)
THINK_MARKUP = ("<think>", "</think>")
#: the call the weather question asks for (lab/tiny's scripted answer, and any working model's)
PARIS_CALL = {"name": "get_weather", "arguments": {"city": "Paris"}}


def markup_in(text: str | None, markup: tuple[str, ...] = TOOL_MARKUP) -> list[str]:
    """The pieces of ``markup`` found in ``text``, in ``markup``'s order."""
    return [m for m in markup if m in (text or "")]


def assemble_stream(text: str) -> dict:
    """A streamed chat's server-sent events put together as the OpenAI stream format defines:
    ``content`` and ``reasoning`` are the deltas' text joined; ``tool_calls[i]`` starts at the
    first delta naming index ``i`` (its ``id``, ``type``, ``function.name``) and its
    ``function.arguments`` is every later fragment of that index joined. Returns ``{"content",
    "reasoning", "tool_calls", "finish_reason", "chunks"}``; raises :class:`CheckFailed` when the
    stream does not end with ``data: [DONE]`` or a tool-call fragment names no index."""
    events = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
    if not events or events[-1] != "[DONE]":
        raise CheckFailed(f"the stream did not end with [DONE]: {text[-300:]!r}")
    content, reasoning, calls, finish = [], [], {}, None
    for event in events[:-1]:
        for choice in json.loads(event).get("choices", []):
            delta = choice.get("delta") or {}
            content.append(delta.get("content") or "")
            reasoning.append(reasoning_of(delta) or "")
            for part in delta.get("tool_calls") or []:
                if "index" not in part:
                    raise CheckFailed(f"a streamed tool-call fragment without an index: {part}")
                call = calls.setdefault(
                    part["index"], {"id": None, "type": None, "function": {"name": ""}}
                )
                call["id"] = call["id"] or part.get("id")
                call["type"] = call["type"] or part.get("type")
                fn = part.get("function") or {}
                call["function"]["name"] += fn.get("name") or ""
                args = call["function"].get("arguments", "") + (fn.get("arguments") or "")
                call["function"]["arguments"] = args
            finish = choice.get("finish_reason") or finish
    return {
        "content": "".join(content),
        "reasoning": "".join(reasoning) or None,
        "tool_calls": [calls[i] for i in sorted(calls)],
        "finish_reason": finish,
        "chunks": len(events) - 1,
    }


def _parsed_call(call: dict, tools: list[dict]) -> dict:
    """One entry of ``tool_calls`` as ``{"name", "arguments"}``, or :class:`CheckFailed` when its
    name is not an offered tool's or its arguments are not a JSON object of that tool's
    parameters (every required one present, none it does not declare)."""
    fn = call.get("function") or {}
    offered = {t["function"]["name"]: t["function"].get("parameters") or {} for t in tools}
    if fn.get("name") not in offered:
        raise CheckFailed(f"a tool call to {fn.get('name')!r}, not an offered tool: {call}")
    try:
        args = json.loads(fn.get("arguments") or "")
    except ValueError as exc:
        raise CheckFailed(f"tool call arguments are not JSON: {fn.get('arguments')!r}") from exc
    schema = offered[fn["name"]]
    declared = set(schema.get("properties") or {})
    if not isinstance(args, dict):
        raise CheckFailed(f"tool call arguments are not a JSON object: {args!r}")
    missing = [k for k in schema.get("required") or [] if k not in args]
    unknown = sorted(set(args) - declared) if declared else []
    if missing or unknown:
        raise CheckFailed(f"tool call arguments {args} lack {missing} / add undeclared {unknown}")
    return {"name": fn["name"], "arguments": args}


def check_tool_answer(
    message: dict,
    finish_reason: str | None,
    tools: list[dict],
    reasoning_parser: bool = True,
    want: dict | None = None,
) -> dict:
    """The strict reading of a chat answer to a request with ``tools``: every call in
    ``tool_calls`` names an offered tool with JSON arguments of its parameters, no
    :data:`TOOL_MARKUP` is left in ``content`` or ``reasoning`` (a call the parser missed,
    vllm#42021), no :data:`THINK_MARKUP` in ``content`` with a reasoning parser, calls end the
    answer with ``finish_reason`` "tool_calls" and that reason comes with calls; ``want`` (``{"name", "arguments"}``): the one
    call the answer must be (a model whose answer is known). Returns ``{"tool_calls":
    [{"name", "arguments"}], "content", "reasoning"}``; raises :class:`CheckFailed`."""
    content, reasoning = message.get("content"), reasoning_of(message)
    left = markup_in(content)
    if left:
        raise CheckFailed(
            f"tool markup {left} left in content (a call the tool parser did not parse, "
            f"vllm#42021), tool_calls {message.get('tool_calls')}: {content!r}"
        )
    if markup_in(reasoning):
        raise CheckFailed(f"tool markup {markup_in(reasoning)} left in reasoning: {reasoning!r}")
    if reasoning_parser and markup_in(content, THINK_MARKUP):
        raise CheckFailed(f"reasoning landed in content: {content!r}")
    seen = [_parsed_call(call, tools) for call in message.get("tool_calls") or []]
    if seen and finish_reason != "tool_calls":
        raise CheckFailed(f"{len(seen)} tool calls but finish_reason {finish_reason!r}")
    if not seen and finish_reason == "tool_calls":
        raise CheckFailed(
            "finish_reason 'tool_calls' with no call delivered (the stream of a parser that "
            f"did not parse the call): content {content!r}"
        )
    if want is not None and seen != [want]:
        raise CheckFailed(f"the tool calls are {seen}, not [{want}]; content {content!r}")
    return {"tool_calls": seen, "content": content, "reasoning": reasoning}


def tool_call(
    api: Api,
    thinking: bool = False,
    stream: bool = False,
    reasoning_parser: bool = True,
    want: dict | None = None,
) -> dict:
    """The weather question with ``tools`` (vLLM refuses it without --enable-auto-tool-choice),
    read by :func:`check_tool_answer`. ``thinking``: the chat template's ``enable_thinking`` (on
    is the template's default, and many clients' too); ``stream``: as server-sent events, put
    together by :func:`assemble_stream`; ``reasoning_parser``: the engine has one; ``want``:
    the call the answer must be (:data:`PARIS_CALL` for a model known to make it)."""
    body = {
        "model": api.model,
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": [WEATHER_TOOL],
        "tool_choice": "auto",
        "max_tokens": 96,
        "temperature": 0,
        "chat_template_kwargs": {"enable_thinking": thinking},
    }
    if not stream:
        choice = api.json("/v1/chat/completions", body)["choices"][0]
        got = check_tool_answer(
            choice["message"], choice.get("finish_reason"), [WEATHER_TOOL], reasoning_parser, want
        )
        return got
    status, text = api.request("/v1/chat/completions", {**body, "stream": True})
    if status != 200:
        raise CheckFailed(
            f"a streamed chat with tools answered {status or 'nothing'}: {text[:300]}"
        )
    message = assemble_stream(text)
    got = check_tool_answer(
        message, message["finish_reason"], [WEATHER_TOOL], reasoning_parser, want
    )
    return {**got, "chunks": message["chunks"]}


def tool_call_every_way(api: Api, reasoning_parser: bool = True, want: dict | None = None) -> dict:
    """:func:`tool_call` with thinking off and on, each streamed and not: ``{"thinking off":
    seen, "thinking off, streamed": seen, ...}``; the first failure raises."""
    return {
        f"thinking {'on' if thinking else 'off'}{', streamed' if stream else ''}": tool_call(
            api, thinking, stream, reasoning_parser, want
        )
        for thinking in (False, True)
        for stream in (False, True)
    }


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
