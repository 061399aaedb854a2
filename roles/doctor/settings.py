"""Rules for the doctor's and the benchmark's settings (inventory/group_data/all.py, "Doctor and
benchmark")."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from roles.common.checks import ENV_NAME, SAFE_NAME, Check, env_mapping, integer, number
from roles.common.setting import Setting, TypedSettings, declared, optional, rules, setting
from roles.vllm import combinations
from roles.vllm import settings as vllm_settings

#: What a bench row reports, from vLLM's result JSON (``vllm bench serve --save-result``):
#: decode 1000 / median TPOT (tok/s of one stream), prefill input tokens / median TTFT (tok/s),
#: throughput output tokens / duration (tok/s, all streams), e2e median end-to-end latency (s),
#: cold-ttft median TTFT (s) of prompts no cache has seen.
FIGURES = {
    "decode": "tok/s",
    "prefill": "tok/s",
    "throughput": "tok/s",
    "e2e": "s",
    "cold-ttft": "s",
}
ROW_KEYS = {
    "id": "a name of letters, digits, '.', '_' and '-'",
    "label": "the row's name in the table",
    "figure": f"one of {', '.join(FIGURES)}",
    "concurrency": "requests at once (vllm bench serve --max-concurrency)",
    "input_len": "prompt tokens",
    "output_len": "generated tokens",
    "prompts": "requests in the row (--num-prompts)",
}
ROW_OPTIONAL = ("seed", "seed_from", "baseline_concurrency")
#: The settings an arm may change: vLLM's serving flags (each checked by the vLLM role's rule).
ARM_SETTINGS = (
    "vllm_speculative_config",
    "vllm_long_prefill_token_threshold",
    "vllm_max_num_seqs",
    "vllm_max_num_batched_tokens",
    "vllm_enable_chunked_prefill",
    "vllm_enable_prefix_caching",
    "vllm_extra_args",
)


def _positive_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def bench_rows(value: Any) -> str | None:
    """A list of rows, each a mapping of :data:`ROW_KEYS` (and optionally the seed's figure
    ``seed``, ``seed_from`` with ``baseline_concurrency``: the figure at that concurrency first,
    as in "latency 3 s -> 5 s"), ids unique."""
    if not isinstance(value, (list, tuple)) or not value:
        return f"must be a non-empty list of rows, got {value!r}"
    seen: set[str] = set()
    for row in value:
        if not isinstance(row, Mapping):
            return f"every row must be a mapping, got {row!r}"
        missing = [k for k in ROW_KEYS if k not in row]
        unknown = [k for k in row if k not in ROW_KEYS and k not in ROW_OPTIONAL]
        if missing or unknown:
            return f"row {row.get('id')!r}: missing {missing}, unknown {unknown}; keys: {ROW_KEYS}"
        rid = row["id"]
        if not isinstance(rid, str) or not SAFE_NAME.match(rid) or rid in seen:
            return f"row id {rid!r} must be a unique name of letters, digits, '.', '_' and '-'"
        seen.add(rid)
        if row["figure"] not in FIGURES:
            return f"row {rid}: figure must be one of {', '.join(FIGURES)}, got {row['figure']!r}"
        for key in ("concurrency", "input_len", "output_len", "prompts"):
            if integer(1, 10_000_000)(row[key]):
                return f"row {rid}: {key} must be a positive integer, got {row[key]!r}"
        if row["prompts"] < row["concurrency"]:
            return f"row {rid}: prompts ({row['prompts']}) below concurrency ({row['concurrency']})"
        for key in ("seed", "seed_from"):
            if row.get(key) is not None and not _positive_number(row[key]):
                return f"row {rid}: {key} must be a positive number or None, got {row[key]!r}"
        if ("seed_from" in row) != ("baseline_concurrency" in row):
            return f"row {rid}: seed_from and baseline_concurrency go together"
        if "baseline_concurrency" in row and integer(1, 1024)(row["baseline_concurrency"]):
            return f"row {rid}: baseline_concurrency must be a positive integer"
    return None


def bench_arms(value: Any) -> str | None:
    """``{name: {"what": str, "env": {NAME: value}, "unset": [NAME], "settings": {vllm_*: value},
    "seed": {row id: figure}, "rows": [row id]}}``: an A/B arm of rigup-bench (every key but
    "what" optional; ``rows``: what the arm runs unless --rows says, else the rows of its seed,
    else all)."""
    if not isinstance(value, Mapping):
        return f"must be a mapping of arm name -> arm, got {value!r}"
    for name, arm in value.items():
        if not isinstance(name, str) or not SAFE_NAME.match(name):
            return f"arm name {name!r} must be letters, digits, '.', '_' and '-'"
        if not isinstance(arm, Mapping) or not isinstance(arm.get("what"), str):
            return f"arm {name}: must be a mapping with a 'what' sentence"
        unknown = set(arm) - {"what", "env", "unset", "settings", "seed", "rows"}
        if unknown:
            return f"arm {name}: unknown keys {sorted(unknown)}"
        if (problem := env_mapping(arm.get("env", {}))) is not None:
            return f"arm {name}: env {problem}"
        if vllm_settings.DEV_MODE_ENV in arm.get("env", {}):
            return (
                f"arm {name}: env {vllm_settings.DEV_MODE_ENV} opens vLLM's unguarded dev-mode "
                "routes; rigup sets it from vllm_server_dev_mode alone (checked against vllm_host)"
            )
        unset = arm.get("unset", [])
        if not isinstance(unset, (list, tuple)) or not all(
            isinstance(u, str) and ENV_NAME.match(u) for u in unset
        ):
            return f"arm {name}: unset must be a list of environment variable names"
        changes = arm.get("settings", {})
        if not isinstance(changes, Mapping):
            return f"arm {name}: settings must be a mapping"
        for key, val in changes.items():
            if key not in ARM_SETTINGS:
                return f"arm {name}: {key} cannot change in an arm (allowed: {', '.join(ARM_SETTINGS)})"
            if val is None and key in vllm_settings.OPTIONAL:
                continue
            if (problem := vllm_settings.RULES[key](val)) is not None:
                return f"arm {name}: {key} {problem}"
        if not (arm.get("env") or unset or changes):
            return f"arm {name}: changes nothing (give env, unset or settings)"
        rows = arm.get("rows", [])
        if not isinstance(rows, (list, tuple)) or not all(isinstance(r, str) for r in rows):
            return f"arm {name}: rows must be a list of row ids"
        seed = arm.get("seed", {})
        if not isinstance(seed, Mapping) or not all(_positive_number(v) for v in seed.values()):
            return f"arm {name}: seed must map row ids to positive numbers"
    return None


@dataclass(frozen=True)
class DoctorSettings(TypedSettings):
    """The doctor's and the benchmark's settings, each declared once: name, the type code reads,
    check. Defaults, meaning and sources: inventory/group_data/all.py ("Doctor and benchmark").
    ``DoctorSettings.of(host.data)`` reads them into typed attributes."""

    doctor_window_s: int = setting(integer(1, 600))
    doctor_disk_warn_gib: float = setting(number(0.0, 100_000.0))
    bench_seed_source: str = setting(
        lambda v: None if isinstance(v, str) and v else "must be a sentence"
    )
    bench_rows: list[Mapping[str, Any]] = setting(bench_rows)
    bench_seed_acceptance: float = setting(number(0.0, 1.0))
    bench_arms: Mapping[str, Mapping[str, Any]] = setting(bench_arms)


SETTINGS: tuple[Setting, ...] = declared(DoctorSettings)

RULES: dict[str, Check] = rules(SETTINGS)
OPTIONAL: tuple[str, ...] = optional(SETTINGS)


def consistency(values: Mapping[str, Any]) -> list[str]:
    """An arm's seed names rows that exist. (An arm whose flags the vLLM role's rules refuse
    together with the other settings is not refused here: rigup-bench says it is unavailable and
    why, :func:`arm_problems`.)"""
    problems = []
    rows = {r["id"] for r in values["bench_rows"]}
    for name, arm in values["bench_arms"].items():
        unknown = sorted((set(arm.get("seed", {})) | set(arm.get("rows", []))) - rows)
        if unknown:
            problems.append(f"bench_arms: arm {name} names rows {unknown} not in bench_rows")
    return problems


def arm_problems(values: Mapping[str, Any] | Any, arm: Mapping[str, Any]) -> list[str]:
    """What the vLLM role's rules say about the settings with the arm's changes applied, beyond
    what they say about the settings themselves ([] when the arm can run)."""
    if not arm.get("settings"):
        return []
    base = {k: values.get(k) for k in (*vllm_settings.RULES, *combinations.OTHER_ROLE_KEYS)}
    own = {*vllm_settings.consistency(base), *combinations.problems(base)}
    merged = {**base, **arm["settings"]}
    found = [*vllm_settings.consistency(merged), *combinations.problems(merged)]
    return [p for p in found if p not in own]
