"""What rigup-bench shares: the keys of vLLM's result it records, the figures' units, how it
runs commands on the host (:class:`Host`)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from rigup import doctor

RESULT_KEYS = (
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "max_concurrency",
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "median_itl_ms",
    "median_e2el_ms",
    "p99_e2el_ms",
    "spec_decode_acceptance_rate",
    "spec_decode_acceptance_length",
)
#: What each figure is, in the table's "how" column.
HOW = {
    "decode": "1000 / median TPOT",
    "prefill": "input tokens / median TTFT",
    "throughput": "output tokens / duration, all users",
    "e2e": "median end-to-end latency",
    "cold-ttft": "median TTFT, fresh cache_salt and seed",
}
UNITS = {"decode": "tok/s", "prefill": "tok/s", "throughput": "tok/s", "e2e": "s", "cold-ttft": "s"}
GPU_FIELDS = (
    "index",
    "temperature.gpu",
    "clocks.sm",
    "clocks.max.sm",
    "power.draw",
    "power.limit",
    "clocks_event_reasons.hw_thermal_slowdown",
    "clocks_event_reasons.sw_thermal_slowdown",
    "clocks_event_reasons.sw_power_cap",
)
#: A card this much warmer after a run than before is heat-soaked (C).
HEAT_SOAK_C = 10.0


class Refused(Exception):
    """rigup-bench will not run here (the message says why and what to do); nothing started."""


class Interrupted(Exception):
    """A signal ended the run (SIGINT, SIGTERM, SIGHUP)."""


def run(argv: list[str], env: dict[str, str] | None = None, timeout: float | None = None):
    """Run a command to its end: ``(exit status, stdout + stderr)``; 127 when it is missing. An
    exception while it runs (a signal: :class:`Interrupted`) kills it (subprocess.run does)."""
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
            env={**os.environ, **(env or {})},
        )
    except FileNotFoundError:
        return 127, f"{argv[0]}: command not found"
    return proc.returncode, proc.stdout + proc.stderr


@dataclass
class Host:
    """How rigup-bench reaches the host: commands, HTTP, time. The defaults are the real ones."""

    runner: Callable[..., tuple[int, str]] = run
    get: Callable[[str], tuple[int, str]] = doctor.fetch
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    log: Callable[[str], None] = print
