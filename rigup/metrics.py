"""vLLM's ``/metrics`` (Prometheus text) read into the figures rigup-doctor and rigup-bench use.

Standard library only and pure: part of the package rigup on the host (rigup.metrics). The metric names
are vLLM 0.22.1's (v1/metrics/loggers.py, v1/spec_decode/metrics.py); counters are exposed with
a ``_total`` suffix by prometheus_client. Every family is summed over its ``engine`` label (one
engine per data-parallel rank).

Rates are read from the difference of two scrapes (a *window*), never from cumulative values,
as vLLM's own docstring computes them (``rate(accepted)/rate(draft_tokens)``):

+ prefix-cache hit rate = Δ``vllm:prefix_cache_hits_total`` / Δ``vllm:prefix_cache_queries_total``
  (tokens); queries stay 0 while prefix caching is off;
+ MTP acceptance rate = Δaccepted / Δdraft tokens; mean acceptance length = 1 + Δaccepted /
  Δdrafts (it counts the bonus token); per position i = Δaccepted_per_pos{position=i} / Δdrafts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

PROMPT_TOKENS = "vllm:prompt_tokens_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
REQUESTS = "vllm:request_success_total"
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
PREEMPTIONS = "vllm:num_preemptions_total"
KV_USAGE = "vllm:kv_cache_usage_perc"  # a fraction: 1 = 100 %
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"

#: Counters a window subtracts (name in the window -> metric).
COUNTERS = {
    "prompt_tokens": PROMPT_TOKENS,
    "generation_tokens": GENERATION_TOKENS,
    "requests": REQUESTS,
    "queries": PREFIX_QUERIES,
    "hits": PREFIX_HITS,
    "preemptions": PREEMPTIONS,
    "drafts": DRAFTS,
    "draft_tokens": DRAFT_TOKENS,
    "accepted": ACCEPTED,
}
#: Gauges a window reads from its second scrape.
GAUGES = {"kv_usage": KV_USAGE, "running": RUNNING, "waiting": WAITING}

_SAMPLE = re.compile(
    r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\S+)?$"
)
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


class MetricsError(ValueError):
    """The text is not Prometheus exposition text (says why)."""


@dataclass(frozen=True)
class Scrape:
    """One ``/metrics`` answer: ``samples[name]`` is a list of ``(labels, value)``, ``at`` the
    monotonic time it was read (seconds)."""

    samples: dict[str, list[tuple[dict[str, str], float]]] = field(default_factory=dict)
    at: float = 0.0

    def total(self, name: str) -> float | None:
        """The family ``name`` summed over every label set; None when vLLM does not export it
        (spec-decode counters exist only with speculative decoding)."""
        rows = self.samples.get(name)
        return None if rows is None else sum(v for _, v in rows)

    def by_label(self, name: str, label: str) -> dict[str, float]:
        """``{label value: sum}`` of family ``name`` (``position`` of the per-position counter)."""
        out: dict[str, float] = {}
        for labels, value in self.samples.get(name, []):
            key = labels.get(label, "")
            out[key] = out.get(key, 0.0) + value
        return out

    def per_position(self) -> list[float]:
        """Accepted draft tokens per draft position, position 0 first."""
        rows = self.by_label(ACCEPTED_PER_POS, "position")
        return [rows[k] for k in sorted(rows, key=lambda k: int(k) if k.isdigit() else 1 << 30)]


def parse(text: str, at: float = 0.0) -> Scrape:
    """Read Prometheus exposition text. Comments and blank lines are skipped; a line that is no
    sample raises :class:`MetricsError` naming it (an HTML error page is not metrics)."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise MetricsError(f"not a Prometheus sample: {line[:120]!r}")
        try:
            value = float(m.group("value"))
        except ValueError as exc:
            raise MetricsError(f"not a number in {line[:120]!r}") from exc
        labels = dict(_LABEL.findall(m.group("labels") or ""))
        samples.setdefault(m.group("name"), []).append((labels, value))
    if not any(name.startswith("vllm:") for name in samples):
        raise MetricsError("no vllm:* metric in the answer (is this vLLM's /metrics?)")
    return Scrape(samples, at)


def window(before: Scrape | None, after: Scrape, since: str = "") -> dict[str, Any]:
    """The figures between two scrapes (``before`` None: everything since the engine started).

    Counters are differences (a restart in between makes one negative: then ``after`` alone
    counts); gauges come from ``after``; ``per_pos`` lists the accepted tokens per draft
    position. ``since`` names the window in verdicts ("the last 5 s")."""
    out: dict[str, Any] = {"since": since}
    restarted = False
    for name in COUNTERS.values():
        now = after.total(name)
        then = before.total(name) if before else 0.0
        if now is not None and then is not None and now < then:
            restarted = True
    for key, name in COUNTERS.items():
        now = after.total(name)
        then = 0.0 if before is None or restarted else before.total(name)
        out[key] = None if now is None else now - (then or 0.0)
    pos_now = after.per_position()
    pos_then = before.per_position() if before and not restarted else []
    out["per_pos"] = [
        n - (pos_then[i] if i < len(pos_then) else 0.0) for i, n in enumerate(pos_now)
    ]
    for key, name in GAUGES.items():
        out[key] = after.total(name)
    out["seconds"] = (after.at - before.at) if before and not restarted else None
    out["restarted"] = restarted
    return out


def acceptance(w: dict[str, Any]) -> dict[str, Any] | None:
    """Speculative decoding over a window: ``{"rate", "mean_length", "per_position", "drafts",
    "draft_tokens", "accepted"}`` (rates as fractions), None without drafts."""
    drafts, draft_tokens = w.get("drafts") or 0, w.get("draft_tokens") or 0
    if not drafts or not draft_tokens:
        return None
    accepted = w.get("accepted") or 0
    return {
        "rate": accepted / draft_tokens,
        "mean_length": 1 + accepted / drafts,
        "per_position": [p / drafts for p in w.get("per_pos") or []],
        "drafts": drafts,
        "draft_tokens": draft_tokens,
        "accepted": accepted,
    }


#: vLLM 0.22.1's own spec-decode log line (v1/spec_decode/metrics.py:101), one per stats interval
#: (``VLLM_LOG_STATS_INTERVAL``, 10 s) in which drafts were made, counting that interval only
_LOGGED_SPEC = re.compile(
    r"SpecDecoding metrics: Mean acceptance length: (?P<mean>[\d.]+),.*?"
    r"Accepted: (?P<accepted>\d+) tokens, Drafted: (?P<drafted>\d+) tokens"
)


def logged_acceptance(log: str) -> dict[str, Any] | None:
    """MTP acceptance from the engine's log: its ``SpecDecoding metrics`` lines summed over the
    run: ``{"rate", "draft_tokens", "accepted", "lines"}`` (rate a fraction). None when the log
    has no such line: vLLM writes one only when a stats interval (10 s) ends with drafts made
    in it, and none with ``--disable-log-stats``, so None says "not logged", not "no drafts"."""
    rows = [(int(m["accepted"]), int(m["drafted"])) for m in _LOGGED_SPEC.finditer(log)]
    if not rows:
        return None
    accepted, drafted = sum(a for a, _ in rows), sum(d for _, d in rows)
    return {
        "rate": accepted / drafted if drafted else None,
        "draft_tokens": drafted,
        "accepted": accepted,
        "lines": len(rows),
    }


def prefix_cache(w: dict[str, Any]) -> dict[str, Any]:
    """Prefix cache over a window: ``{"queries", "hits", "rate"}`` (rate None without queries)."""
    queries, hits = w.get("queries") or 0, w.get("hits") or 0
    return {"queries": queries, "hits": hits, "rate": hits / queries if queries else None}
