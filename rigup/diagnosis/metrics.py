"""Signatures of a window of vLLM's /metrics (rigup.metrics.window): prefix cache, speculative
decoding, preemptions, KV cache; :func:`classify_metrics`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .core import FAIL, OK, WARN, Signature, Verdict, classify_state
from .vllm_log import _two_blocks

#: Why rigup keeps prefix caching off for Qwen3.6 on vLLM 0.22.1 (roles/vllm/settings.py).
PREFIX_CACHING_OFF = (
    "vLLM 0.22.1 leaves it off for hybrid models such as Qwen3.6 (gated delta net + attention: "
    "config/model.py is_prefix_caching_supported), and rigup keeps it off "
    "(vllm_enable_prefix_caching = False): with MTP on, a cache hit can corrupt the recurrent "
    "state (vllm#43559; the fix, vllm#48375, is not in 0.22.1)"
)


def _pct(x: float | None) -> str:
    return "?" if x is None else f"{100 * x:.1f}"


def _tokens(n: Any) -> str:
    return f"{int(n):,}" if isinstance(n, (int, float)) else "?"


def _no_data(s: Mapping[str, Any]) -> bool:
    """Nothing was read: /metrics did not answer, or vLLM does not run."""
    return bool(s.get("error") or s.get("not_running"))


def _match_metrics_error(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    return {"error": s["error"]} if s.get("error") else None


def _prompts(s: Mapping[str, Any]) -> bool:
    """Prompts were prefilled in the window: prompt tokens counted, or (an excerpt without
    ``prompt_tokens_total``) prompt tokens looked up in the prefix cache, which only a prompt
    makes."""
    return not _no_data(s) and ((s.get("prompt_tokens") or 0) > 0 or (s.get("queries") or 0) > 0)


def _match_prefix_idle(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if _no_data(s) or _prompts(s):
        return None
    return {"since": s.get("since")}


def _match_prefix_off(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if not _prompts(s) or (s.get("queries") or 0) > 0:
        return None
    block = s.get("block")
    return {"since": s.get("since"), "block": block, **_two_blocks({"block": block})}


def _match_prefix_no_hits(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if not _prompts(s) or not s.get("queries") or (s.get("hits") or 0) > 0:
        return None
    return {
        "since": s.get("since"),
        "queries": _tokens(s.get("queries")),
        "block": s.get("block") or "?",
        **_blocks_words(s.get("block")),
    }


def _match_prefix_unexpected(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """vLLM looked prompts up in a prefix cache that rigup's unit does not turn on."""
    if not _prompts(s) or not s.get("queries") or s.get("prefix_caching") is not False:
        return None
    return {
        "since": s.get("since"),
        "queries": _tokens(s.get("queries")),
        "hits": _tokens(s.get("hits") or 0),
    }


def _blocks_words(block: Any) -> dict[str, str]:
    """The block size in words: vLLM's raised block from its journal, or what is not known."""
    if isinstance(block, int):
        return {
            "blocks": f"whole attention blocks of {block} tokens",
            "two": f"at least two blocks ({2 * block} tokens)",
        }
    return {
        "blocks": "whole attention blocks (vLLM raises the block size for this model, about 1600 "
        "tokens on the rig; its start-up line 'Setting attention block size' is not in this "
        "run's journal)",
        "two": "at least two such blocks",
    }


def _match_prefix_hits(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if not _prompts(s) or not s.get("hits"):
        return None
    return {
        "since": s.get("since"),
        "rate": _pct(s["hits"] / s["queries"]) if s.get("queries") else "?",
        "hits": _tokens(s.get("hits")),
        "queries": _tokens(s.get("queries")),
    }


def _spec_name(s: Mapping[str, Any]) -> str:
    spec = s.get("spec") or {}
    method = str(spec.get("method") or "") if isinstance(spec, Mapping) else ""
    return "MTP" if method in ("", "mtp") else f"speculative decoding ({method})"


def _acceptance(s: Mapping[str, Any]) -> dict[str, Any] | None:
    drafts, draft_tokens = s.get("drafts") or 0, s.get("draft_tokens") or 0
    if _no_data(s) or not drafts or not draft_tokens:
        return None
    accepted = s.get("accepted") or 0
    per_pos = s.get("per_pos") or []
    return {
        "since": s.get("since"),
        "method": _spec_name(s),
        "rate_value": accepted / draft_tokens,
        "rate": _pct(accepted / draft_tokens),
        "length": f"{1 + accepted / drafts:.2f}",
        "per_pos": ", ".join(f"{p / drafts:.2f}" for p in per_pos) or "?",
        "drafts": _tokens(drafts),
    }


#: Below this acceptance rate the drafts cost more than they save (the seed: 77.7 % at MTP 3).
LOW_ACCEPTANCE = 0.5


def _match_spec_idle(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if _no_data(s) or not s.get("spec") or s.get("drafts"):
        return None
    return {"since": s.get("since"), "method": _spec_name(s)}


#: 0 % acceptance from wrong sums of vLLM's custom all-reduce (tensor parallel > 1): the field's
#: A/B, and the arm of rigup-bench that decides it.
CUSTOM_ALL_REDUCE_ZERO = (
    "; with tensor parallel {tp} and vLLM's custom all-reduce {car_state}, suspect it as much: "
    "an all-reduce that returns wrong sums gives the same 0 % (and answers of '!!!!'): "
    "noonghunna/club-3090#922 measured 0 % with it and 100 % without on 2x3090, and a 2x A100 "
    "after a driver update to 595 the same"
)
CUSTOM_ALL_REDUCE_AB = (
    "first the A/B that decides between the two: `sudo rigup-bench --arms nvlink-off --rows "
    "decode-1` runs with --disable-custom-all-reduce (and P2P off) and prints the acceptance; "
    'if it comes back there, keep vllm_extra_args = ["--disable-custom-all-reduce"] and '
    "converge; if not, "
)


def _match_spec_none(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    a = _acceptance(s)
    if not a or s.get("accepted"):
        return None
    tp, car = s.get("tensor_parallel") or 1, s.get("custom_all_reduce")
    if tp > 1 and car is not False:
        state = "on" if car else "on unless the unit disables it (not read)"
        return {
            **a,
            "allreduce_why": CUSTOM_ALL_REDUCE_ZERO.format(tp=tp, car_state=state),
            "allreduce_fix": CUSTOM_ALL_REDUCE_AB,
        }
    return {**a, "allreduce_why": "", "allreduce_fix": ""}


def _match_spec_low(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    a = _acceptance(s)
    return a if a and a["rate_value"] < LOW_ACCEPTANCE else None


#: What a drafter that never hits means on this stack (the field and the H200 run).
MTP_HEAD_BROKEN = (
    "a missing or broken MTP head: a checkpoint exported or quantized without its mtp.* tensors, "
    "or with them quantized, still serves on vLLM 0.22.1, with a drafter whose guesses never "
    "match (0 % acceptance: z-lab/paroquant#42 on 2x3090; random weights on the H200 accepted 0 "
    "of 1,020 drafts)"
)


def _match_preemptions(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    n = s.get("preemptions") or 0
    if _no_data(s) or n <= 0:
        return None
    return {"n": _tokens(n), "since": s.get("since"), "kv": _pct(s.get("kv_usage"))}


def _match_kv_full(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if _no_data(s) or (s.get("kv_usage") or 0) < 0.9 or not s.get("waiting"):
        return None
    return {"kv": _pct(s.get("kv_usage")), "waiting": _tokens(s.get("waiting"))}


def _match_kv(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if _no_data(s) or s.get("kv_usage") is None:
        return None
    return {
        "kv": _pct(s.get("kv_usage")),
        "running": _tokens(s.get("running") or 0),
        "waiting": _tokens(s.get("waiting") or 0),
    }


_METRICS: list[Signature] = [
    Signature(
        id="metrics-not-read",
        source="metrics",
        severity=OK,
        what="vLLM's /metrics not read: {unit} is not running",
        why="the services section says why",
        fix="nothing to do here",
        matcher=lambda s: {"unit": s["not_running"]} if s.get("not_running") else None,
    ),
    Signature(
        id="metrics-unreadable",
        source="metrics",
        severity=FAIL,
        what="vLLM's /metrics did not answer",
        why="{error}",
        fix="rigup-doctor's service check says whether vllm.service runs; /metrics answers "
        "without the API key",
        matcher=_match_metrics_error,
    ),
    Signature(
        id="prefix-cache/idle",
        source="metrics",
        severity=OK,
        what="prefix cache: no prompts over {since}",
        why="nothing was prefilled, so there is no hit rate to read",
        fix="nothing to do; `rigup-doctor --window 60` watches a longer window under load",
        matcher=_match_prefix_idle,
    ),
    Signature(
        id="prefix-cache/off",
        source="metrics",
        severity=OK,
        what="prefix cache hit rate 0 % over {since}: prefix caching is off",
        why="vLLM queried no prompt tokens against a prefix cache. " + PREFIX_CACHING_OFF,
        fix="nothing to do. To use it: vllm_speculative_config = None and "
        "vllm_enable_prefix_caching = True, then converge (rigup refuses the pair with MTP); "
        "hits then need an identical prompt prefix of {two} tokens or more (two blocks of "
        "{block})",
        matcher=_match_prefix_off,
        reference="vLLM 0.22.1 config/model.py:1859-1864, arg_utils.py:2365-2403; vllm#43559, "
        "vllm#48375",
    ),
    Signature(
        id="prefix-cache/unexpected",
        source="metrics",
        severity=WARN,
        what="vLLM looked {queries} prompt tokens up in its prefix cache over {since} ({hits} "
        "hits), though rigup configured prefix caching off",
        why="vLLM 0.22.1 counts prefix-cache queries only with caching on, so the running vLLM "
        "does not run rigup's command line (vllm_enable_prefix_caching = False): a systemd "
        "drop-in, a rigup-bench arm left in place, or a unit edited by hand; with MTP on this "
        "is the pair that can corrupt Qwen3.6's recurrent state (vllm#43559)",
        fix="`systemctl cat vllm.service` shows what runs; converge to restore rigup's unit "
        "(`sudo rigup-bench --restore` after a killed benchmark)",
        matcher=_match_prefix_unexpected,
        reference="vLLM 0.22.1 v1/core/kv_cache_manager.py get_computed_blocks: prefix-cache "
        "stats only when caching is enabled); roles/doctor/config.py (prefix_caching from rigup's unit)",
    ),
    Signature(
        id="prefix-cache/self-test-miss",
        source="metrics",
        severity=FAIL,
        what="the prefix cache did not hit: the same {prompt_len}-token prompt sent twice, the "
        "second found nothing cached ({queries} prompt tokens looked up)",
        why="prefix caching is on and the prompt holds at least two attention blocks of {block} "
        "tokens, so the second request should have hit: the cache is being evicted at once (a KV "
        "cache too small for the running requests) or does not work in this configuration",
        fix="`rigup-doctor` shows KV cache use and preemptions; run the self-test again on an idle "
        "service (`sudo rigup-bench --rows decode-1`)",
        matcher=lambda s: (
            {**_match_prefix_no_hits(s), "prompt_len": s.get("prompt_len")}
            if s.get("self_test")
            and _match_prefix_no_hits(s)
            and isinstance(s.get("block"), int)
            and (s.get("prompt_len") or 0) >= 2 * s["block"]
            else None
        ),
    ),
    Signature(
        id="prefix-cache/no-hits",
        source="metrics",
        severity=OK,
        what="prefix cache hit rate 0 % over {since} ({queries} prompt tokens looked up)",
        why="prefix caching is on and was queried, with 0 hits: on this hybrid model vLLM caches "
        "{blocks} (it raised the block size so a page holds a gated-delta-net state) and a hit "
        "needs an identical prompt prefix of {two}; shorter or differing prompts never hit",
        fix="share long prefixes (a system prompt of {two} or more); `rigup-bench "
        "--self-test` sends one prompt twice and shows whether the second hits",
        matcher=_match_prefix_no_hits,
        reference="vLLM 0.22.1 platforms/interface.py:640-653; club-3090 docs/UPSTREAM.md "
        "('probe-validity rule')",
    ),
    Signature(
        id="prefix-cache/hits",
        source="metrics",
        severity=OK,
        what="prefix cache hit rate {rate} % over {since} ({hits} of {queries} prompt tokens)",
        why="prompts that repeat a cached prefix skip its prefill",
        fix="nothing to do",
        matcher=_match_prefix_hits,
        reference="vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total",
    ),
    Signature(
        id="spec-decode/idle",
        source="metrics",
        severity=OK,
        what="{method}: no drafts over {since}",
        why="speculative decoding is configured and nothing was generated in the window",
        fix="nothing to do; `rigup-doctor --window 60` under load, or rigup-bench, reads the "
        "acceptance",
        matcher=_match_spec_idle,
    ),
    Signature(
        id="spec-decode/none",
        source="metrics",
        severity=WARN,
        what="{method} accepted none of {drafts} drafts over {since} (0 % acceptance)",
        why="every drafted token was rejected, so each step drafts for nothing (slower than "
        "without MTP). The likeliest cause is " + MTP_HEAD_BROKEN + "{allreduce_why}; then "
        "sampling far from the model's own (Qwen's temperature 0.6, top_p 0.95)",
        fix="{allreduce_fix}converge: rigup's checkpoint preflight names a missing or quantized MTP head "
        "(mtp.* tensors) of the checkpoint; serve one that keeps it, or "
        "vllm_speculative_config = None (no drafts), then converge; check the clients' sampling",
        matcher=_match_spec_none,
        reference="z-lab/paroquant#42; noonghunna/club-3090#922 (0 % with custom all-reduce, "
        "100 % without); vLLM 0.22.1 v1/spec_decode/metrics.py:88-140; the H200 run of "
        "2026-12-01 (random weights: 0 of 1,020 drafts accepted)",
    ),
    Signature(
        id="spec-decode/low",
        source="metrics",
        severity=WARN,
        what="{method} acceptance {rate} % over {since} (mean acceptance length {length})",
        why="fewer than half of the drafted tokens are accepted, so the drafts cost more than "
        "they save (the seed measured 77.7 % with MTP 3 on this model); per position: {per_pos}",
        fix="check the request's sampling (Qwen's temperature 0.6, top_p 0.95); compare fewer "
        "speculative tokens with `sudo rigup-bench --arm mtp-1` (or mtp-2); if position 0 "
        "is low too, suspect the checkpoint's MTP head (a quantized or re-exported mtp.*: "
        "rigup's checkpoint preflight reads it at converge)",
        matcher=_match_spec_low,
        reference="vLLM 0.22.1 v1/spec_decode/metrics.py:88-140 (rate = accepted / draft "
        "tokens; mean length = 1 + accepted / drafts)",
    ),
    Signature(
        id="spec-decode/ok",
        source="metrics",
        severity=OK,
        what="{method} acceptance {rate} % over {since}, mean acceptance length {length}",
        why="per position: {per_pos} ({drafts} drafts)",
        fix="nothing to do",
        matcher=_acceptance,
        reference="vLLM 0.22.1 v1/spec_decode/metrics.py:88-140",
    ),
    Signature(
        id="preemptions",
        source="metrics",
        severity=WARN,
        what="vLLM preempted {n} request(s) over {since}",
        why="the KV cache ran out of blocks (now {kv} % used) and running requests were evicted "
        "and recomputed later: latency spikes",
        fix="lower vllm_max_num_seqs or the context clients send, or give the KV cache more "
        "memory (vllm_gpu_memory_utilization within the VRAM budget)",
        matcher=_match_preemptions,
        reference="vllm:num_preemptions_total (v1/metrics/loggers.py:620)",
    ),
    Signature(
        id="kv-cache/full",
        source="metrics",
        severity=WARN,
        what="the KV cache is {kv} % full with {waiting} request(s) waiting",
        why="new requests wait until running ones finish",
        fix="fewer concurrent clients, shorter contexts, or lower vllm_max_model_len for more "
        "parallel requests",
        matcher=_match_kv_full,
        reference="vllm:kv_cache_usage_perc, vllm:num_requests_waiting",
    ),
    Signature(
        id="kv-cache/ok",
        source="metrics",
        severity=OK,
        what="KV cache {kv} % used; {running} request(s) running, {waiting} waiting",
        why="read from /metrics now",
        fix="nothing to do",
        matcher=_match_kv,
    ),
]


def classify_metrics(window: Mapping[str, Any]) -> list[Verdict]:
    """The verdicts of one /metrics window (rigup.metrics.window): prefix cache, speculative
    decoding, preemptions, KV cache."""
    return classify_state("metrics", window)
