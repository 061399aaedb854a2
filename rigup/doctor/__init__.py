"""rigup-doctor's checks: read the host, name what is wrong with the diagnosis library.

Standard library only; part of the package rigup (as rigup.doctor, with rigup.diagnosis,
rigup.nvidia, rigup.units and rigup.metrics), installed in the doctor's ``lib`` on the host. Read-only: it runs
nvidia-smi's queries, ``systemctl show``, ``journalctl``, ``uv pip sync --dry-run``, reads vLLM's
/health and /metrics and the filesystem's free space; it changes nothing. Every verdict comes from the one table of
signatures (rigup.diagnosis): this package only gathers what the signatures read.

The host's facts come from the doctor's configuration (``/etc/rigup/doctor/doctor.json``,
rendered from the settings by roles/doctor/config.py). Commands go through a ``runner``
(``argv -> (exit status, output)``) and HTTP through a ``fetch`` (``url -> (status, text)``).

The modules: ``core`` (the configuration, the runner, :class:`Section`), one module per
section (``boot`` for how the previous boot ended; ``gpus`` for the driver, the GPUs and
NVLink; ``services``; ``vllm_metrics``; ``disk``
for free disk and the venvs; ``cluster`` for a rig of a cluster of rigs), and ``summary`` (the whole diagnosis, its JSON and its text).
"""

from __future__ import annotations

from .boot import boot_state, check_boot
from .cluster import boot_time, check_cluster, cluster_state, peer_words, read_watch_state
from .core import (
    APPS_QUERY,
    CONFIG,
    SECTIONS,
    TELEMETRY_FIELDS,
    ConfigError,
    Fetch,
    Runner,
    Section,
    fetch,
    load_config,
    run,
)
from .disk import (
    check_disk,
    check_venvs,
    drift_lines,
    existing,
    out_of_reach,
    uv_dry_run_argv,
)
from .gpus import _number as _number  # read by rigup.report
from .gpus import (
    check_driver,
    check_gpus,
    check_nvlink,
    gpu_holders,
    holders_sentence,
    parse_telemetry,
    unit_of_pid,
)
from .services import arm_in_place, block_size, check_services
from .summary import doctor, render, report
from .vllm_metrics import check_metrics, custom_all_reduce, metrics_state, scrape

__all__ = [
    "Runner",
    "Fetch",
    "CONFIG",
    "SECTIONS",
    "TELEMETRY_FIELDS",
    "APPS_QUERY",
    "run",
    "fetch",
    "ConfigError",
    "load_config",
    "Section",
    "parse_telemetry",
    "unit_of_pid",
    "gpu_holders",
    "holders_sentence",
    "boot_state",
    "check_boot",
    "check_driver",
    "check_gpus",
    "check_nvlink",
    "arm_in_place",
    "block_size",
    "check_services",
    "scrape",
    "metrics_state",
    "check_metrics",
    "custom_all_reduce",
    "existing",
    "check_disk",
    "uv_dry_run_argv",
    "drift_lines",
    "check_venvs",
    "out_of_reach",
    "peer_words",
    "cluster_state",
    "boot_time",
    "read_watch_state",
    "check_cluster",
    "doctor",
    "report",
    "render",
]
