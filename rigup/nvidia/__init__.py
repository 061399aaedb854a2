"""Parsers for ``nvidia-smi`` and related tool output. Pure functions, standard library only.

This package (rigup.nvidia) is also installed on the target with the on-target scripts
(files/nvidia/rigup-gpu-power, files/nvidia/rigup-nvlink), so the deploy, the boot-time units and
the tests read the tools' output with the same code. Every parser is tested on real captured
output (tests/fixtures: 2x H200 captured with driver 580.159.04; RTX 3090 layouts from owners'
reports).

What a failure means lives in the diagnosis table (rigup.diagnosis, beside this package): the readers here return its verdicts for what they cannot
read as data, and never raise on a tool's output, whatever its exit status.

Shapes (units in the names): power in W, link speed in GB/s, versions as strings.

The modules, by what they read: ``gpus`` (``--query-gpu``, ``-pl``, power limits), ``nvlink``
(NVLink, the topology, the interconnect), ``driver`` (the driver and kernel state, its
diagnosis), ``host`` (running the tools on the host), ``core`` (what they share).
"""

from __future__ import annotations

from .core import ParseError, strip_ansi
from .driver import (
    DRIVER_KINDS,
    DRIVER_STATE_COMMAND,
    DkmsEntry,
    diagnose_driver,
    explain,
    parse_dkms_status,
    parse_driver_state,
    parse_proc_driver_version,
    parse_secure_boot,
)
from .gpus import (
    GPU_QUERY_COMMAND,
    GPU_QUERY_FIELDS,
    GPU_QUERY_FORMAT,
    GpuInfo,
    GpuQuery,
    PowerLimitAnswer,
    PowerLimitError,
    parse_gpu_query,
    parse_power_limit_answer,
    plan_power_limits,
    power_limit_mismatches,
    read_gpu_query,
)
from .host import driver_state, query_gpus, run
from .nvlink import (
    RTX3090_LINK_GBPS,
    GpuLinks,
    Interconnect,
    interconnect_env,
    nvlink_count,
    parse_nvlink_errors,
    parse_nvlink_status,
    parse_p2p_matrix,
    parse_topology,
    verify_interconnect,
)

__all__ = [
    "ParseError",
    "strip_ansi",
    "GPU_QUERY_FIELDS",
    "GPU_QUERY_FORMAT",
    "GPU_QUERY_COMMAND",
    "GpuInfo",
    "parse_gpu_query",
    "GpuQuery",
    "read_gpu_query",
    "PowerLimitAnswer",
    "parse_power_limit_answer",
    "PowerLimitError",
    "plan_power_limits",
    "power_limit_mismatches",
    "GpuLinks",
    "parse_nvlink_status",
    "parse_nvlink_errors",
    "parse_topology",
    "nvlink_count",
    "parse_p2p_matrix",
    "Interconnect",
    "RTX3090_LINK_GBPS",
    "verify_interconnect",
    "interconnect_env",
    "parse_proc_driver_version",
    "parse_secure_boot",
    "DkmsEntry",
    "parse_dkms_status",
    "DRIVER_STATE_COMMAND",
    "DRIVER_KINDS",
    "parse_driver_state",
    "diagnose_driver",
    "explain",
    "run",
    "driver_state",
    "query_gpus",
]
