"""rigup-bench: the seed's benchmark rows with vLLM's own ``vllm bench serve``, against the
running vllm.service, with /metrics deltas, GPU readings, a prefix-cache self-test, A/B arms and
a JSON record per run.

Standard library only; part of the package rigup on the host (rigup.bench). The load generator
is vLLM's: ``<vLLM venv>/bin/python <vLLM bin>/vllm_cli.py bench serve ...`` (the same entry point
on the GPU and the CPU build of vLLM), with the served model's tokenizer from the placed
checkpoint.
Figures are printed and recorded, never judged: a row's figure is what vLLM's result JSON says
(roles/doctor/settings.py FIGURES).

An arm restarts vllm.service with a temporary drop-in under /run (rendered at converge:
``<etc>/doctor/arms/<arm>.conf``), runs its rows, then removes it, restarts the configured
service and verifies it (no drop-in of rigup-bench, the same ExecStart and environment files as
before, /health and /v1/models answering), also when the run is interrupted (SIGINT, SIGTERM,
SIGHUP); a reboot removes a drop-in left by a killed run, and ``rigup-bench --restore`` too.

The modules: ``core`` (the record's keys, the host's commands), ``rows`` (a row's passes with
vLLM's load generator, its figures, the prefix-cache self-test), ``gpus`` (readings before and
after), ``arms`` (the temporary drop-in, restored and verified; the preconditions), ``runs``
(the run and its records), ``render`` (the table) and ``media`` (the media mode's rows through
ComfyUI, ``rigup-bench --media``).
"""

from __future__ import annotations

from .arms import Signals, apply_arm, refuse_unless_ready, restart, restore, service_snapshot
from .core import GPU_FIELDS, HEAT_SOAK_C, HOW, RESULT_KEYS, UNITS, Host, Interrupted, Refused, run
from .gpus import gpu_line, heat_note, read_gpus
from .media import bench_media, llm_mode_hint, parse_sets, refuse_unless_media, rows_listing
from .render import fmt, row_cells, table
from .rows import (
    Shape,
    api_key_env,
    bench_argv,
    figure,
    merged_acceptance,
    read_scrape,
    run_pass,
    run_row,
    self_test,
    shape,
)
from .runs import Plan, bench, latest, plan, run_arm, save

__all__ = [
    "RESULT_KEYS",
    "HOW",
    "UNITS",
    "GPU_FIELDS",
    "HEAT_SOAK_C",
    "Refused",
    "Interrupted",
    "run",
    "Host",
    "Shape",
    "shape",
    "bench_argv",
    "figure",
    "read_scrape",
    "api_key_env",
    "run_pass",
    "run_row",
    "merged_acceptance",
    "self_test",
    "read_gpus",
    "heat_note",
    "gpu_line",
    "service_snapshot",
    "restart",
    "apply_arm",
    "restore",
    "Signals",
    "refuse_unless_ready",
    "Plan",
    "plan",
    "run_arm",
    "bench",
    "save",
    "latest",
    "fmt",
    "row_cells",
    "table",
    "bench_media",
    "llm_mode_hint",
    "parse_sets",
    "refuse_unless_media",
    "rows_listing",
]
