"""The quality set (files/vllm/quality-set.json): questions with known answers the engine gate
asks a served model, and the scoring of its answers against them.

Standard library only, beside roles/vllm/api_checks.py (it runs where api_checks runs). Scoring
reads ``content`` only: with a reasoning parser the thinking is apart in ``reasoning``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from roles.vllm import api_checks

QUALITY_SET = Path(__file__).resolve().parents[2] / "files" / "vllm" / "quality-set.json"
#: tokens left for the answer (and the thinking, with thinking on) of each question
ANSWER_TOKENS = {False: 64, True: 512}
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$")


def load(path: Path = QUALITY_SET) -> list[dict]:
    """The set's items: ``[{"id", "prompt", "expect", "answer", ...}]``; ValueError naming the
    items whose ``expect`` is unknown."""
    items = json.loads(path.read_text(encoding="utf-8"))["items"]
    bad = [i["id"] for i in items if i["expect"] not in ("number", "word", "json", "tool")]
    if bad:
        raise ValueError(f"{path}: items {bad} expect what the scoring does not know")
    return items


def score(item: dict, message: dict, finish_reason: str | None) -> dict:
    """One answer against ``item``: ``{"id", "ok", "why"}`` (``why`` "" when right). ``number``:
    the content holds exactly one number and it is the answer; ``word``: the content contains the
    answer (any case) as a word; ``json``: the content (code fences allowed) is the answer's JSON
    object; ``tool``: :func:`api_checks.check_tool_answer` with the answer as the wanted call.
    An answer cut at ``max_tokens`` (finish_reason "length") or holding tool markup (a call
    where an answer was asked) is wrong."""
    content = (message.get("content") or "").strip()
    why = ""
    if item["expect"] == "tool":
        try:
            api_checks.check_tool_answer(
                message, finish_reason, [api_checks.WEATHER_TOOL], want=item["answer"]
            )
        except api_checks.CheckFailed as exc:
            why = str(exc)
    elif api_checks.markup_in(content):
        why = f"tool markup {api_checks.markup_in(content)} in the answer: {content[:200]!r}"
    elif finish_reason == "length":
        why = f"cut at max_tokens: {content[-200:]!r}"
    elif item["expect"] == "number":
        numbers = [float(n.replace(",", "")) for n in _NUMBER.findall(content)]
        if numbers != [item["answer"]]:
            why = f"numbers {numbers} in {content[:200]!r}, not [{item['answer']}]"
    elif item["expect"] == "word":
        if not re.search(rf"\b{re.escape(item['answer'])}\b", content, re.IGNORECASE):
            why = f"{item['answer']!r} is not in {content[:200]!r}"
    else:
        try:
            got = json.loads(_FENCE.sub("", content))
        except ValueError:
            got = None
        if got != item["answer"]:
            why = f"{content[:200]!r} is not the JSON object {item['answer']}"
    return {"id": item["id"], "ok": not why, "why": why}


def haystack(item: dict, filler_tokens: int, room_tokens: int) -> str:
    """The needle item's context: its filler repeated to fill ``room_tokens`` tokens (one filler
    is ``filler_tokens`` tokens), its needle in the middle. ValueError when not one filler
    fits."""
    n = room_tokens // max(filler_tokens, 1)
    if n < 1:
        raise ValueError(f"needle: {room_tokens} tokens of room, one filler takes {filler_tokens}")
    fillers = [item["filler"]] * n
    fillers.insert(n // 2, item["needle"])
    return " ".join(fillers)


def messages(api: api_checks.Api, item: dict, max_model_len: int, thinking: bool) -> list[dict]:
    """The chat of ``item``; for the needle the longest the settings allow: ``max_model_len``
    (tokens) less the answer's :data:`ANSWER_TOKENS`, counted with the engine's own /tokenize
    (the chat as its template renders it) and less 1 % for the filler's joins."""
    ask = [{"role": "user", "content": item["prompt"]}]
    if "needle" not in item:
        return ask

    def tokens(text: str) -> int:
        body = {"model": api.model, "messages": [{"role": "user", "content": text}]}
        body["chat_template_kwargs"] = {"enable_thinking": thinking}
        return api.json("/tokenize", body)["count"]

    base = tokens(f"{item['needle']}\n\n{item['prompt']}")
    unit = tokens(f"{item['filler']} {item['needle']}\n\n{item['prompt']}") - base
    room = int((max_model_len - ANSWER_TOKENS[thinking] - base) * 0.99)
    return [{"role": "user", "content": f"{haystack(item, unit, room)}\n\n{item['prompt']}"}]


def ask_all(
    api: api_checks.Api, max_model_len: int, thinking: bool = False, items: list[dict] | None = None
) -> list[dict]:
    """Every item asked (temperature 0) and scored: ``[{"id", "ok", "why"}]``; a request that
    fails is a wrong answer naming why."""
    out = []
    for item in load() if items is None else items:
        extra = {"tools": [api_checks.WEATHER_TOOL]} if item["expect"] == "tool" else {}
        try:
            reply = api.chat(
                messages(api, item, max_model_len, thinking),
                max_tokens=ANSWER_TOKENS[thinking],
                temperature=0,
                chat_template_kwargs={"enable_thinking": thinking},
                **extra,
            )
            choice = reply["choices"][0]
            out.append(score(item, choice["message"], choice.get("finish_reason")))
        except (api_checks.CheckFailed, ValueError, KeyError) as exc:
            out.append({"id": item["id"], "ok": False, "why": f"{type(exc).__name__}: {exc}"})
    return out
