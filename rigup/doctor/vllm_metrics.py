"""rigup-doctor's /metrics section: vLLM's /metrics over a window."""

from __future__ import annotations

import time
from typing import Any

from rigup import diagnosis, metrics

from .core import Fetch, Runner, Section, fetch, run


def scrape(cfg: dict, get: Fetch = fetch) -> metrics.Scrape | str:
    """One /metrics answer, or why there is none."""
    status, body = get(cfg["vllm"]["metrics_url"])
    if status != 200:
        return f"GET {cfg['vllm']['metrics_url']}: " + (f"HTTP {status}" if status else body)
    try:
        return metrics.parse(body, at=time.monotonic())
    except metrics.MetricsError as exc:
        return str(exc)


def custom_all_reduce(cfg: dict, runner: Runner = run) -> bool | None:
    """Whether the running vLLM has its custom all-reduce on: tensor parallel > 1 and no
    ``--disable-custom-all-reduce`` in its main process's command line (``ps``; rigup-nvlink adds it
    when NVLink is not verified; vllm_extra_args may). None when the process cannot be read."""
    if (cfg["vllm"].get("tensor_parallel_size") or 1) < 2:
        return False
    _, out = runner(["systemctl", "show", "-pMainPID", "--value", cfg["vllm"]["unit"]])
    pid = out.strip()
    if not pid.isdigit() or pid == "0":
        return None
    code, args = runner(["ps", "-ww", "-o", "args=", "-p", pid])
    if code != 0 or not args.strip():
        return None
    return "--disable-custom-all-reduce" not in args.split()


def metrics_state(
    cfg: dict, window: dict, block: int | None, all_reduce: bool | None = None
) -> dict[str, Any]:
    """The state the metrics signatures read: a window plus what the settings say and whether
    the running vLLM has its custom all-reduce on (:func:`custom_all_reduce`)."""
    return {
        **window,
        "spec": cfg["vllm"].get("speculative_config"),
        "prefix_caching": cfg["vllm"].get("prefix_caching"),
        "tensor_parallel": cfg["vllm"].get("tensor_parallel_size") or 1,
        "custom_all_reduce": all_reduce,
        "block": block,
    }


def check_metrics(
    cfg: dict,
    first: metrics.Scrape | str,
    get: Fetch = fetch,
    block: int | None = None,
    all_reduce: bool | None = None,
) -> Section:
    """Prefix-cache hit rate, speculative-decoding acceptance, preemptions and KV cache usage
    over the window since ``first`` (or, with no prompts in it, since the engine started);
    ``all_reduce``: :func:`custom_all_reduce` of the running vLLM."""
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
    section.verdicts = diagnosis.classify_metrics(metrics_state(cfg, w, block, all_reduce))
    section.facts = {
        "window": w,
        "prefix_cache": metrics.prefix_cache(w),
        "acceptance": metrics.acceptance(w),
        "block_size": block,
    }
    return section
