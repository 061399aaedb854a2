"""rigup's diagnoses: one table of signatures, and the functions that turn tool output into verdicts.

Standard library only and pure (no I/O): the deploy imports it from the controller, and rigup
installs it on the host in the package rigup (rigup.diagnosis, beside rigup.nvidia), where the boot units
(rigup-gpu-power, rigup-nvlink), rigup-nvidia-diagnose and testinfra's messages use the same
verdicts. A fault is described here once.

A :class:`Signature` is data: an ``id`` (``kind/cause`` for one diagnosis with several causes),
the ``source`` of the text it reads (:data:`SOURCES`), a ``severity`` (ok / warn / fail), what is
wrong, why, the fix, and how it is recognised: a regular expression searched in each line, the
tool's exit status, or a ``matcher`` over structured state (the driver state). Templates name
fields in braces (``{bus}``): the regular expression's named groups, ``context`` expressions
searched in the whole text, and what ``derive`` computes from them. The order of
:data:`SIGNATURES` is the priority: the first signature that recognises a line names it.

The sources: nvidia-smi, the kernel log (Xid events, module loading, CPU traps, the OOM killer),
DKMS, mokutil and the driver state (the NVIDIA layer); vLLM's journal (why the engine did not
start or died: :func:`classify_vllm_log`), a window of vLLM's /metrics (prefix cache,
speculative decoding, preemptions, KV cache: :func:`classify_metrics`), the GPUs' and NVLink's
state, a systemd service's state (crash loops: :func:`classify_unit`), the media services'
journals (:func:`classify_service_log`), any service's journal for a write that found its file
system full (:func:`classify_no_space`), free disk and a venv against its lock, and a rig's part
in a cluster of rigs (its supervisor and peers: :func:`classify_cluster`) (rigup-doctor,
roles/doctor). A source's rows are read by :func:`classify_lines` (text) or
:func:`classify_state` (structured state).

The modules: ``core`` (the types and the readers), one module per source of signatures
(``nvidia_smi``; ``gpu_reset`` (GSP timeouts, Xid 154, the Xids that need a reset) and
``kernel_log``; ``dkms`` with Secure Boot; ``driver``; vLLM's journal in ``vllm_native`` (CUDA
errors of native code, followed to their code path and setting), ``vllm_cuda`` (the CUDA
engine's kernel failures at start), ``vllm_memory`` (memory, and when it ran out) and
``vllm_log`` (the rest, and :func:`classify_vllm_log`); ``media_log`` (ComfyUI's and
VoxCPM2's journals); ``metrics``; ``gpus`` with NVLink; ``services``; ``disk`` with venvs and
ENOSPC; ``routine`` (the warnings a healthy start prints, never a cause); ``cluster``);
this package assembles the table.
"""

from __future__ import annotations

from .boot import _BOOT, classify_boot, crash_files, ended_cleanly
from .cluster import _CLUSTER, classify_cluster
from .comfyui_jobs import _COMFYUI_JOB, JobError, classify_jobs, job_errors
from .core import (
    FAIL,
    OK,
    SEVERITIES,
    SOURCES,
    WARN,
    Signature,
    Verdict,
    by_id,
    classify_exit,
    classify_lines,
    classify_state,
    clean_lines,
    exit_status,
    failures,
    first_match,
    refine,
    signatures,
    verdict,
    worst,
)
from .disk import (
    _DISK,
    _SERVICE_LOG,
    _VENV,
    DF_ARGS,
    DISK_FULL_GIB,
    classify_no_space,
    first_no_space_path,
    parse_df,
)
from .dkms import _DKMS, _MOKUTIL, DKMS_CAUSES, SecureBoot, classify_dkms, secure_boot
from .driver import _DRIVER_STATE, NOT_LOADED, classify_driver_state
from .driver_branches import _DRIVER_BRANCHES, DriverPackage, driver_package_of, installed_driver
from .gpu_reset import _GPU_RESET, gpu_labels, pci_slot
from .gpus import _GPU_STATE, _NVLINK, classify_gpus, classify_nvlink
from .kernel_log import (
    _KERNEL_LOG,
    MTP_GDN_CRASH,
    MTP_GDN_CRASH_FIX,
    classify_kernel_log,
    oom_units,
)
from .media_log import _COMFYUI_LOG, _VOXCPM_LOG, classify_service_log
from .metrics import _METRICS, LOW_ACCEPTANCE, PREFIX_CACHING_OFF, classify_metrics
from .nvidia_smi import _NVIDIA_SMI, DIAGNOSE, LOST_GPU_FIX, classify_nvidia_smi
from .routine import ROUTINE_WARNINGS, RoutineWarning, is_routine
from .services import _UNIT_STATE, classify_unit
from .unit_log import _UNIT_LOG, CRASH_SIGNALS, RAM_FIXES, classify_unit_log, ram_fix
from .vllm_cuda import _VLLM_CUDA
from .vllm_log import _VLLM_LOG, DOCTOR, classify_vllm_log
from .vllm_memory import _VLLM_MEMORY, PHASES, phase_at
from .vllm_native import _VLLM_NATIVE, CODE_PATHS

#: The table, in priority order: the first signature that recognises a line names it.
SIGNATURES: tuple[Signature, ...] = (
    *_NVIDIA_SMI,
    *_GPU_RESET,
    *_KERNEL_LOG,
    *_DKMS,
    *_MOKUTIL,
    *_DRIVER_STATE,
    *_DRIVER_BRANCHES,
    *_VLLM_NATIVE,
    *_VLLM_CUDA,
    *_VLLM_MEMORY,
    *_VLLM_LOG,
    *_COMFYUI_LOG,
    *_COMFYUI_JOB,
    *_VOXCPM_LOG,
    *_METRICS,
    *_GPU_STATE,
    *_NVLINK,
    *_UNIT_STATE,
    *_UNIT_LOG,
    *_SERVICE_LOG,
    *_DISK,
    *_VENV,
    *_CLUSTER,
    *_BOOT,
)

__all__ = [
    "DriverPackage",
    "driver_package_of",
    "installed_driver",
    "OK",
    "WARN",
    "FAIL",
    "SEVERITIES",
    "SOURCES",
    "Signature",
    "Verdict",
    "clean_lines",
    "verdict",
    "signatures",
    "by_id",
    "classify_lines",
    "first_match",
    "classify_state",
    "classify_exit",
    "worst",
    "exit_status",
    "failures",
    "refine",
    "LOST_GPU_FIX",
    "DIAGNOSE",
    "classify_nvidia_smi",
    "MTP_GDN_CRASH",
    "MTP_GDN_CRASH_FIX",
    "classify_kernel_log",
    "oom_units",
    "gpu_labels",
    "pci_slot",
    "DKMS_CAUSES",
    "classify_dkms",
    "SecureBoot",
    "secure_boot",
    "NOT_LOADED",
    "classify_driver_state",
    "DOCTOR",
    "classify_vllm_log",
    "PHASES",
    "CODE_PATHS",
    "phase_at",
    "classify_service_log",
    "JobError",
    "job_errors",
    "classify_jobs",
    "PREFIX_CACHING_OFF",
    "LOW_ACCEPTANCE",
    "classify_metrics",
    "classify_gpus",
    "classify_nvlink",
    "classify_unit",
    "CRASH_SIGNALS",
    "RAM_FIXES",
    "ram_fix",
    "classify_unit_log",
    "DISK_FULL_GIB",
    "classify_no_space",
    "DF_ARGS",
    "parse_df",
    "first_no_space_path",
    "ROUTINE_WARNINGS",
    "RoutineWarning",
    "is_routine",
    "classify_cluster",
    "classify_boot",
    "ended_cleanly",
    "crash_files",
    "SIGNATURES",
]
