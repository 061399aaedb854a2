"""A benchmark row: its shape, ``vllm bench serve``'s argv, its passes and figures, with
/metrics deltas; and the prefix-cache self-test."""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any

from rigup import diagnosis, doctor, metrics

from .core import HOW, RESULT_KEYS, UNITS, Host


@dataclass(frozen=True)
class Shape:
    """A row as it runs: lengths and counts after ``--scale`` and the served context."""

    concurrency: int
    input_len: int
    output_len: int
    prompts: int


def shape(row: dict, max_model_len: int, scale: float = 1.0, concurrency: int | None = None):
    """The row's lengths times ``scale`` (at least 1 token, 2 generated for a TPOT), its prompt
    count times ``scale`` (at least the concurrency), the input capped so that input + output
    fit ``max_model_len``."""
    c = concurrency or row["concurrency"]
    out = max(
        2 if row["figure"] in ("decode", "e2e", "throughput") else 1,
        round(row["output_len"] * scale),
    )
    inp = max(1, round(row["input_len"] * scale))
    inp = min(inp, max_model_len - out - 1)
    prompts = max(c, round(row["prompts"] * scale))
    return Shape(c, inp, out, prompts)


def bench_argv(
    cfg: dict, s: Shape, *, seed: int, salt: str, result_dir: str, filename: str, label: str
) -> list[str]:
    """``vllm bench serve`` for one pass: the random dataset (no shared prefix), exactly
    ``output_len`` tokens per request (--ignore-eos), the four latency percentiles (e2el must be
    asked for), a per-run ``cache_salt``, no ready-check request (rigup-bench checked /health;
    the check would send the first prompt twice)."""
    v = cfg["vllm"]
    return [
        *v["cli"],
        "bench",
        "serve",
        "--backend",
        "openai",
        "--base-url",
        v["base_url"],
        "--endpoint",
        "/v1/completions",
        "--model",
        v["served_model_name"],
        "--tokenizer",
        v["model_dir"],
        "--dataset-name",
        "random",
        "--random-input-len",
        str(s.input_len),
        "--random-output-len",
        str(s.output_len),
        "--random-range-ratio",
        "0",
        "--num-prompts",
        str(s.prompts),
        "--max-concurrency",
        str(s.concurrency),
        "--request-rate",
        "inf",
        "--ignore-eos",
        "--seed",
        str(seed),
        "--extra-body",
        json.dumps({"cache_salt": salt}),
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,99",
        "--ready-check-timeout-sec",
        "0",
        "--disable-tqdm",
        "--label",
        label,
        "--save-result",
        "--result-dir",
        result_dir,
        "--result-filename",
        filename,
    ]


def figure(kind: str, result: dict, s: Shape) -> float | None:
    """The row's figure from vLLM's result JSON (None when vLLM did not report it)."""
    try:
        if kind == "decode":
            return 1000.0 / result["median_tpot_ms"]
        if kind == "prefill":
            return s.input_len / (result["median_ttft_ms"] / 1000.0)
        if kind == "throughput":
            return float(result["output_throughput"])
        if kind == "e2e":
            return result["median_e2el_ms"] / 1000.0
        if kind == "cold-ttft":
            return result["median_ttft_ms"] / 1000.0
    except (KeyError, TypeError, ZeroDivisionError):
        return None
    raise ValueError(f"unknown figure {kind!r}")


def read_scrape(cfg: dict, host: Host) -> metrics.Scrape:
    got = doctor.scrape(cfg, host.get)
    if isinstance(got, str):
        raise RuntimeError(f"vLLM's /metrics: {got}")
    return got


def api_key_env(cfg: dict) -> dict[str, str]:
    """``OPENAI_API_KEY`` for vLLM's benchmark from the root-only key file (vllm bench serve
    sends it as the bearer token); {} when vLLM has no key."""
    try:
        with open(cfg["vllm"]["api_key_file"], encoding="utf-8") as f:
            for line in f:
                key, sep, value = line.strip().partition("=")
                if sep and key == "VLLM_API_KEY" and value:
                    return {"OPENAI_API_KEY": value}
    except OSError:
        pass
    return {}


def run_pass(cfg: dict, host: Host, s: Shape, label: str, *, seed=None, salt=None) -> dict:
    """One ``vllm bench serve`` pass with /metrics read before and after: ``{"result": vLLM's
    JSON (RESULT_KEYS), "window": the /metrics window, "seconds", "seed", "salt"}``."""
    seed = random.randrange(1, 2**31) if seed is None else seed
    salt = salt or f"rigup-bench-{os.urandom(8).hex()}"
    tmp = tempfile.mkdtemp(prefix="rigup-bench-")
    try:
        argv = bench_argv(
            cfg, s, seed=seed, salt=salt, result_dir=tmp, filename="result.json", label=label
        )
        before = read_scrape(cfg, host)
        started = host.clock()
        code, out = host.runner(argv, env=api_key_env(cfg))
        seconds = host.clock() - started
        after = read_scrape(cfg, host)
        path = os.path.join(tmp, "result.json")
        if code != 0 or not os.path.exists(path):
            tail = "\n".join(out.strip().splitlines()[-12:])
            raise RuntimeError(f"vllm bench serve failed (exit {code}):\n{tail}")
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    window = metrics.window(before, after, since=f"the {label} pass")
    return {
        "result": {k: raw.get(k) for k in RESULT_KEYS if k in raw},
        "window": window,
        "seconds": round(seconds, 1),
        "seed": seed,
        "salt": salt,
    }


def run_row(cfg: dict, host: Host, row: dict, scale: float = 1.0) -> dict:
    """One row: its pass (and the baseline pass of an "a -> b" row), the figure, the /metrics
    deltas (prefix cache, speculative decoding, preemptions) and, for a cold row, the proof
    that nothing hit the prefix cache."""
    max_len = cfg["vllm"]["max_model_len"]
    s = shape(row, max_len, scale)
    entry: dict[str, Any] = {
        "id": row["id"],
        "label": row["label"],
        "figure": row["figure"],
        "unit": UNITS[row["figure"]],
        "seed": row.get("seed"),
        "seed_from": row.get("seed_from"),
        **s.__dict__,
        "how": f"c={s.concurrency}, {s.input_len:,} in / {s.output_len:,} out, "
        f"{s.prompts} request{'s' if s.prompts > 1 else ''}; {HOW[row['figure']]}",
    }
    if row.get("baseline_concurrency"):
        b = shape(row, max_len, scale, row["baseline_concurrency"])
        base = run_pass(cfg, host, b, f"{row['id']} c={b.concurrency}")
        entry["value_from"] = figure(row["figure"], base["result"], b)
        entry["baseline"] = {**b.__dict__, "result": base["result"]}
        entry["how"] = f"c={b.concurrency} -> " + entry["how"]
    got = run_pass(cfg, host, s, row["id"])
    w = got["window"]
    entry.update(
        value=figure(row["figure"], got["result"], s),
        result=got["result"],
        seconds=got["seconds"],
        prefix_cache=metrics.prefix_cache(w),
        acceptance=metrics.acceptance(w),
        preemptions=w.get("preemptions"),
        prompt_tokens=w.get("prompt_tokens"),
    )
    if row["figure"] == "cold-ttft":
        hits = w.get("hits") or 0
        entry["cold"] = hits == 0
        entry["cold_proof"] = f"Δvllm:prefix_cache_hits_total = {hits:g}" + (
            ", prefix caching off" if not w.get("queries") else ""
        )
    return entry


def merged_acceptance(rows: list[dict]) -> dict | None:
    """Speculative decoding over every row of an arm, from the rows' /metrics deltas."""
    total = {"drafts": 0.0, "draft_tokens": 0.0, "accepted": 0.0, "per_pos": []}
    for r in rows:
        a = r.get("acceptance")
        if not a:
            continue
        total["drafts"] += a["drafts"]
        total["draft_tokens"] += a["draft_tokens"]
        total["accepted"] += a["accepted"]
        per = [p * a["drafts"] for p in a["per_position"]]
        total["per_pos"] = [
            x + y
            for x, y in zip(
                total["per_pos"] + [0.0] * (len(per) - len(total["per_pos"])),
                per + [0.0] * (len(total["per_pos"]) - len(per)),
                strict=True,
            )
        ]
    return metrics.acceptance(total)


def self_test(cfg: dict, host: Host, block: int | None) -> dict:
    """The thread's method: one prompt of at least two attention blocks, sent twice with the same
    cache_salt; the second must raise Δvllm:prefix_cache_hits_total above 0. Its verdict, from
    the diagnosis library, says why when it does not."""
    block = block or cfg["vllm"]["block_size"]
    max_len = cfg["vllm"]["max_model_len"]
    length = min(max_len - 2, 3 * block + 16)
    s = Shape(1, length, 1, 1)
    seed, salt = random.randrange(1, 2**31), f"rigup-self-test-{os.urandom(8).hex()}"
    first = run_pass(cfg, host, s, "self-test 1/2", seed=seed, salt=salt)
    second = run_pass(cfg, host, s, "self-test 2/2", seed=seed, salt=salt)
    w1, w2 = first["window"], second["window"]
    state = {
        **doctor.metrics_state(cfg, w2, block),
        "since": "the second of two identical prompts",
        "self_test": True,
        "prompt_len": length,
    }
    verdicts = [v for v in diagnosis.classify_metrics(state) if v.kind == "prefix-cache"]
    hits2 = w2.get("hits") or 0
    status = (
        "hit" if hits2 > 0 else ("off" if not (w1.get("queries") or w2.get("queries")) else "miss")
    )
    return {
        "status": status,
        "passed": status in ("hit", "off"),
        "prompt_len": length,
        "block_size": block,
        "first": metrics.prefix_cache(w1),
        "second": metrics.prefix_cache(w2),
        "verdict": verdicts[0].as_dict() if verdicts else None,
    }
