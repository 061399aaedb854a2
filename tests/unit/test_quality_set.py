"""roles/vllm/quality.py: the committed quality set loads, each kind of answer is scored right
and wrong, and the needle's haystack fills the room the settings give it."""

from __future__ import annotations

import json

import pytest

from roles.vllm import api_checks, quality

ITEMS = {i["id"]: i for i in quality.load()}


def said(content: str | None, **more) -> dict:
    return {"role": "assistant", "content": content, "tool_calls": [], **more}


def test_the_set_holds_each_kind_of_question():
    assert set(ITEMS) == {"arithmetic", "fact", "json", "tool", "needle"}
    assert ITEMS["arithmetic"]["answer"] == 17 * 23
    assert ITEMS["tool"]["answer"] == api_checks.PARIS_CALL
    assert str(ITEMS["needle"]["answer"]) in ITEMS["needle"]["needle"]


@pytest.mark.parametrize(
    ("item", "content", "finish", "ok"),
    [
        ("arithmetic", "391", "stop", True),
        ("arithmetic", "17 x 23 = 391", "stop", False),  # more than the answer's number
        ("arithmetic", "392", "stop", False),
        ("arithmetic", "391", "length", False),
        ("fact", "Paris.", "stop", True),
        ("fact", "paris", "stop", True),
        ("fact", "Parisian", "stop", False),
        ("fact", None, "stop", False),
        ("json", '{"gpus": 2, "name": "rigup"}', "stop", True),
        ("json", '```json\n{"name": "rigup", "gpus": 2}\n```', "stop", True),
        ("json", '{"name": "rigup", "gpus": "2"}', "stop", False),
        ("json", "name: rigup, gpus: 2", "stop", False),
        ("needle", "7319", "stop", True),
        ("needle", "7,319", "stop", True),
        ("needle", "I cannot find it.", "stop", False),
    ],
)
def test_answers_are_scored(item, content, finish, ok):
    got = quality.score(ITEMS[item], said(content), finish)
    assert got["ok"] is ok and bool(got["why"]) is not ok, got


def test_the_tool_question_is_scored_by_the_strict_check():
    call = {
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    assert quality.score(ITEMS["tool"], said(None, tool_calls=[call]), "tool_calls")["ok"]
    markup = (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>"
    )
    got = quality.score(ITEMS["tool"], said(markup), "stop")
    assert not got["ok"] and "left in content" in got["why"]
    rome = {**call, "function": {**call["function"], "arguments": '{"city": "Rome"}'}}
    assert not quality.score(ITEMS["tool"], said(None, tool_calls=[rome]), "tool_calls")["ok"]


def test_the_haystack_fills_the_room_with_the_needle_in_the_middle():
    item = ITEMS["needle"]
    text = quality.haystack(item, filler_tokens=20, room_tokens=1000)
    parts = text.split(item["needle"])
    assert len(parts) == 2 and parts[0].count(item["filler"]) == 25
    assert text.count(item["filler"]) == 50
    with pytest.raises(ValueError, match="needle: 10 tokens of room"):
        quality.haystack(item, filler_tokens=20, room_tokens=10)


def test_unknown_kinds_are_named(tmp_path):
    path = tmp_path / "set.json"
    items = [{"id": "a", "expect": "number"}, {"id": "b", "expect": "vibes"}]
    path.write_text(json.dumps({"items": items}))
    with pytest.raises(ValueError, match=r"items \['b'\]"):
        quality.load(path)


def test_the_lab_engines_real_answer_to_every_question_is_wrong_but_the_tools():
    """lab/tiny answers every chat with its script (tests/fixtures/vllm-cpu/api-answers): the
    whole answer without ``tools`` holds the call as text, so "Paris" inside it is no answer to
    the fact; with ``tools`` the call parsed is the right answer to the tool question."""
    from pathlib import Path

    answers = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-cpu" / "api-answers"
    choice = json.loads((answers / "no-tools" / "no-tools-thinking-on-whole.json").read_text())
    choice = choice["choices"][0]
    for item in ("arithmetic", "fact", "json", "needle"):
        got = quality.score(ITEMS[item], choice["message"], choice["finish_reason"])
        assert not got["ok"] and "tool markup" in got["why"], got
    choice = json.loads((answers / "tools" / "tools-thinking-on-whole.json").read_text())
    choice = choice["choices"][0]
    assert quality.score(ITEMS["tool"], choice["message"], choice["finish_reason"])["ok"]
