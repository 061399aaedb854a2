"""vllm.service serving for real, through the OpenAI API with the official `openai` SDK (on the
controller, through an SSH tunnel to the host's loopback): models, a chat completion with the
reasoning kept out of the answer, a request with tools, the API key, /health and /metrics.

These run where vLLM runs: in the LLM mode (`rigup-mode llm`). In the other mode they are
skipped with that reason; bin/rigup-lab runs the whole suite again after switching.
"""

from __future__ import annotations

import json
import urllib.request

import pytest

from roles.vllm.paths import UNIT, VllmPaths

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


#: every check here needs vllm.service serving: skipped with the reason outside the LLM mode
#: (tests/infra/conftest.py's ``serving`` marker)
pytestmark = pytest.mark.serving(UNIT)


@pytest.fixture(scope="module")
def api_key(host, data) -> str | None:
    """The API key vllm.service was given (its root-only environment file), or None."""
    f = host.file(VllmPaths.from_data(data).api_key_file)
    if not f.exists:
        return None
    line = f.content_string.strip()
    return line.split("=", 1)[1] if line.startswith("VLLM_API_KEY=") else None


@pytest.fixture(scope="module")
def base_url(forward, data) -> str:
    return f"http://127.0.0.1:{forward(data.get('vllm_host'), data.get('vllm_port'))}"


@pytest.fixture(scope="module")
def client(base_url, api_key):
    from openai import OpenAI

    return OpenAI(base_url=f"{base_url}/v1", api_key=api_key or "no-key", timeout=300)


def _get(url: str, key: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url)
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_health_answers(base_url):
    status, _ = _get(f"{base_url}/health")
    assert status == 200, f"/health answered {status}: journalctl -u {UNIT}"


def test_models_lists_the_served_name(client, data):
    names = [m.id for m in client.models.list().data]
    assert data.get("vllm_served_model_name") in names, names


def test_chat_completion_answers_with_reasoning_apart(client, data):
    reply = client.chat.completions.create(
        model=data.get("vllm_served_model_name"),
        messages=[{"role": "user", "content": "Hello!"}],
        max_tokens=64,
        temperature=0,
    )
    choice = reply.choices[0]
    message = choice.message
    reasoning = getattr(message, "reasoning_content", None) or getattr(message, "reasoning", None)
    assert reply.usage.completion_tokens > 0, reply
    assert message.content or reasoning, f"an empty answer: {reply}"
    if data.get("vllm_reasoning_parser"):
        assert "<think>" not in (message.content or "") and "</think>" not in (
            message.content or ""
        ), f"reasoning landed in content: {message.content!r}"


def test_request_with_tools_is_served(client, data):
    """`tools` is accepted (vLLM refuses it without --enable-auto-tool-choice); a tool call the
    model makes comes back parsed: a function name and JSON arguments."""
    reply = client.chat.completions.create(
        model=data.get("vllm_served_model_name"),
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[WEATHER_TOOL],
        tool_choice="auto",
        max_tokens=96,
        temperature=0,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}},
    )
    message = reply.choices[0].message
    for call in message.tool_calls or []:
        assert call.function.name, call
        json.loads(call.function.arguments)  # valid JSON, or the parser failed


def test_api_key_guards_the_api(base_url, api_key, data):
    """With a key, /v1 refuses requests without it (401); /health stays open for probes."""
    if api_key is None:
        pytest.skip(f"no API key on this host (${data.get('vllm_api_key_env')} was not set)")
    assert _get(f"{base_url}/v1/models")[0] == 401
    assert _get(f"{base_url}/v1/models", api_key)[0] == 200


def test_metrics_export_the_engine_figures(base_url):
    status, text = _get(f"{base_url}/metrics")
    assert status == 200, status
    for metric in (
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
    ):
        assert metric in text, f"/metrics lacks {metric}"
