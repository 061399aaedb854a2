"""files/vllm/vllm_names.py's pure parts: the messages for a name vLLM would not find at start
(tests/vllm runs the same module against the pinned vLLM's registries)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "files" / "vllm"))

import vllm_names  # noqa: E402

#: a few of vLLM 0.22.1's reasoning parsers (ReasoningParserManager.list_registered())
PARSERS = ["deepseek_r1", "glm45", "granite", "qwen3", "step3"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [("qwen4", ["qwen3"]), ("QWEN3", ["qwen3"]), ("deepseek-r1", ["deepseek_r1"]), ("xyz", [])],
)
def test_did_you_mean(value, expected):
    assert vllm_names.did_you_mean(value, PARSERS) == expected


def test_unknown_name_names_the_setting_the_guess_and_every_valid_name():
    line = vllm_names.unknown_name(
        "vllm_reasoning_parser", "reasoning parser", "qwen4", PARSERS, "get_reasoning_parser"
    )
    assert line.startswith("vllm_reasoning_parser: 'qwen4' is not a reasoning parser")
    assert "(did you mean qwen3?)" in line
    assert line.endswith("Valid: " + ", ".join(PARSERS))


def test_invalid_choice_is_explained_with_the_setting():
    message = (
        "argument --kv-cache-dtype: invalid choice: 'fp8_e5m3' (choose from 'auto', 'float16', "
        "'fp8', 'fp8_e4m3', 'fp8_e5m2')"
    )
    line = vllm_names.explain_invalid_choice(
        message, {"--kv-cache-dtype": "vllm_kv_cache_dtype"}.get
    )
    assert line == (
        "vllm_kv_cache_dtype: invalid choice 'fp8_e5m3' (did you mean fp8_e5m2 or fp8_e4m3?); "
        "valid: auto, float16, fp8, fp8_e4m3, fp8_e5m2"
    )
    assert vllm_names.explain_invalid_choice("unrecognized arguments: --x", str) is None


@pytest.mark.parametrize(
    ("from_extra", "expected"),
    [(False, "vllm_reasoning_parser"), (True, "vllm_extra_args: --reasoning-parser")],
)
def test_label_names_who_set_the_flag(from_extra, expected):
    managed = {"--reasoning-parser": "vllm_reasoning_parser"}
    assert vllm_names.label_for("--reasoning-parser", from_extra, managed) == expected
    assert vllm_names.label_for("--load-format", False, managed) == "--load-format"


def test_every_unknown_name_is_reported_at_once(monkeypatch):
    """Two bad names give two lines; a good one and an unset one give none."""
    rules = (
        vllm_names.NameRule("reasoning_parser", "reasoning parser", "src", lambda ns: PARSERS),
        vllm_names.NameRule("tool_call_parser", "tool-call parser", "src", lambda ns: ["hermes"]),
        vllm_names.NameRule("load_format", "load format", "src", lambda ns: ["auto"]),
        vllm_names.NameRule(
            "speculative_config", "speculative method", "src", lambda ns: ["mtp"], key="method"
        ),
    )
    monkeypatch.setattr(vllm_names, "RULES", rules)
    ns = SimpleNamespace(
        reasoning_parser="qwen4",
        tool_call_parser="qwen3coder",
        load_format="auto",
        speculative_config={"method": "mtp", "num_speculative_tokens": 3},
    )
    dests = ["reasoning_parser", "tool_call_parser", "load_format", "speculative_config"]
    problems = vllm_names.name_problems(ns, dests, lambda dest: f"vllm_{dest}")
    assert [p.split(":")[0] for p in problems] == ["vllm_reasoning_parser", "vllm_tool_call_parser"]
    ns.speculative_config = {"method": "mpt"}
    problems = vllm_names.name_problems(ns, ["speculative_config"], lambda dest: f"vllm_{dest}")
    assert problems and problems[0].startswith("vllm_speculative_config: method: 'mpt'")
    assert "(did you mean mtp?)" in problems[0]


def test_a_name_not_given_is_not_looked_up(monkeypatch):
    def boom(ns):
        raise AssertionError("registry read for a flag that was not given")

    monkeypatch.setattr(
        vllm_names, "RULES", (vllm_names.NameRule("reasoning_parser", "r", "s", boom),)
    )
    assert vllm_names.name_problems(SimpleNamespace(reasoning_parser="x"), [], str) == []


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("{% for m in messages %}{{ m.content }}{% endfor %}", True),  # a template itself
        ("template_chatml.jinja", True),  # a built-in name
        ("chatml", False),  # neither a file nor a built-in name
    ],
)
def test_chat_template(monkeypatch, value, ok):
    monkeypatch.setattr(vllm_names, "RULES", ())
    monkeypatch.setattr(
        vllm_names, "chat_template_names", lambda: ["template_basic.jinja", "template_chatml.jinja"]
    )
    ns = SimpleNamespace(chat_template=value)
    problems = vllm_names.name_problems(ns, ["chat_template"], lambda d: "vllm_extra_args: --x")
    assert (problems == []) is ok, problems
    if not ok:
        assert "did you mean template_chatml.jinja?" in problems[0]


def test_chat_template_file_on_the_host(monkeypatch, tmp_path):
    monkeypatch.setattr(vllm_names, "RULES", ())
    monkeypatch.setattr(vllm_names, "chat_template_names", lambda: [])
    template = tmp_path / "t.jinja"
    template.write_text("{{ messages }}")
    assert (
        vllm_names.name_problems(
            SimpleNamespace(chat_template=str(template)), ["chat_template"], str
        )
        == []
    )
    missing = SimpleNamespace(chat_template=str(tmp_path / "none.jinja"))
    assert vllm_names.name_problems(missing, ["chat_template"], str)
