"""rigup-doctor's /metrics section: vLLM's /metrics over a window."""

from __future__ import annotations

import time
from typing import Any

from rigup import diagnosis, metrics

from .core import Fetch, Section, fetch


def scrape(cfg: dict, get: Fetch = fetch) -> metrics.Scrape | str:
    """One /metrics answer, or why there is none."""
    status, body = get(cfg["vllm"]["metrics_url"])
    if status != 200:
        return f"GET {cfg['vllm']['metrics_url']}: " + (f"HTTP {status}" if status else body)
    try:
        return metrics.parse(body, at=time.monotonic())
    except metrics.MetricsError as exc:
        return str(exc)


def metrics_state(cfg: dict, window: dict, block: int | None) -> dict[str, Any]:
    """The state the metrics signatures read: a window plus what the settings say."""
    return {
        **window,
        "spec": cfg["vllm"].get("speculative_config"),
        "prefix_caching": cfg["vllm"].get("prefix_caching"),
        "block": block,
    }


def check_metrics(
    cfg: dict, first: metrics.Scrape | str, get: Fetch = fetch, block: int | None = None
) -> Section:
    """Prefix-cache hit rate, speculative-decoding acceptance, preemptions and KV cache usage
    over the window since ``first`` (or, with no prompts in it, since the engine started)."""
    section = Section("metrics")
    second = scrape(cfg, get)
    if isinstance(first, str) or isinstance(second, str):
        error = first if isinstance(first, str) else second
        section.verdicts = diagnosis.classify_metrics({"error": error})
        return section
    seconds = second.at - first.at
    w = metrics.window(first, second, since=f"the last {seconds:.0f} s")
    if not w.get("prompt_tokens") and not w.get("generation_tokens"):
        w = metrics.window(None, second, since="the engine's whole run (no requests in the window)")
    section.verdicts = diagnosis.classify_metrics(metrics_state(cfg, w, block))
    section.facts = {
        "window": w,
        "prefix_cache": metrics.prefix_cache(w),
        "acceptance": metrics.acceptance(w),
        "block_size": block,
    }
    return section
