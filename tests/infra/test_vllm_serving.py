"""vllm.service serving for real, through the OpenAI-compatible API (on the controller, through
an SSH tunnel to the host's loopback): models, a completion, a chat completion with the
reasoning kept out of the answer, a streamed chat, a request with tools, the API key, /health
and /metrics. The API checks are roles/vllm/api_checks.py's, which the GPU serving check
(benchmarks/gpu-serve) runs too.

These run where vLLM runs: in the LLM mode (`rigup-mode llm`). In the other mode they are
skipped with that reason; bin/rigup-lab runs the whole suite again after switching.
"""

from __future__ import annotations

import json

import pytest

from roles.vllm import api_checks
from roles.vllm.paths import UNIT, VllmPaths

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
def api(base_url, api_key, data) -> api_checks.Api:
    """vLLM's API as roles/vllm/api_checks.py checks it (the GPU serving check runs the same)."""
    return api_checks.Api(base_url, data.get("vllm_served_model_name"), api_key)


def test_health_answers(api):
    try:
        api_checks.health(api)
    except api_checks.CheckFailed as exc:
        raise AssertionError(f"{exc}: journalctl -u {UNIT}") from exc


def test_models_lists_the_served_name(api):
    api_checks.models(api)


def test_completion_generates(api):
    api_checks.completion(api)


def test_chat_completion_answers_with_reasoning_apart(api, data):
    api_checks.chat_reasoning_apart(api, bool(data.get("vllm_reasoning_parser")))


def test_streamed_chat_arrives_as_events(api):
    api_checks.stream(api)


@pytest.fixture(scope="module")
def scripted(host, llm_dir) -> bool:
    """Whether the served checkpoint is lab/tiny's scripted one (its chat template is lab/tiny's),
    whose answer to the weather question is known: a get_weather call for Paris."""
    from lab.tiny.tokenizer import CHAT_TEMPLATE

    f = host.file(f"{llm_dir}/tokenizer_config.json")
    return f.exists and json.loads(f.content_string).get("chat_template") == CHAT_TEMPLATE


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("thinking", [False, True], ids=["thinking off", "thinking on"])
def test_request_with_tools_is_served(api, data, scripted, thinking, stream):
    """The strict tool-call check (roles/vllm/api_checks.py: the call in ``tool_calls``, no tool
    markup left in ``content``); lab/tiny answers the weather question with the call in every
    mode, so there the call must be get_weather for Paris."""
    want = api_checks.PARIS_CALL if scripted else None
    reasoning = bool(data.get("vllm_reasoning_parser"))
    seen = api_checks.tool_call(api, thinking, stream, reasoning, want)
    assert not scripted or seen["tool_calls"] == [api_checks.PARIS_CALL], seen


def test_api_key_guards_the_api(api, api_key, data):
    """With a key, /v1 refuses requests without it (401); /health stays open for probes."""
    if api_key is None:
        pytest.skip(f"no API key on this host (${data.get('vllm_api_key_env')} was not set)")
    assert api.request("/v1/models", key=None)[0] == 401
    assert api.request("/v1/models")[0] == 200


def test_metrics_export_the_engine_figures(api, data):
    """The engine's figures; with MTP, the spec-decode counters (the CPU build serves without
    MTP: roles/vllm/cpu.py)."""
    spec = data.get("vllm_device") != "cpu" and bool(data.get("vllm_speculative_config"))
    api_checks.metrics(api, speculative=spec)
