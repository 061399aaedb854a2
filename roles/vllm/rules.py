"""vLLM's rules over settings of other roles too (the declared GPUs, their compute
capability): its footprint's ``rules`` (roles/vllm/footprint.py), run by roles/settings.py with
every other rule, before any change."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rigup import diagnosis
from roles.common.setting import RuleOver
from roles.vllm import combinations
from roles.vllm.kv_budget import kv_fit_problems
from roles.vllm.settings import KV_CACHE_MIN_COMPUTE_CAPABILITY


def tensor_parallel_fits_gpus(values: Mapping[str, Any]) -> list[str]:
    """One declared GPU per tensor-parallel shard (a host declaring 0 GPUs starts nothing)."""
    gpus, tp = values["nvidia_gpu_count"], values["vllm_tensor_parallel_size"]
    if gpus > 0 and tp > gpus:
        return [
            f"vllm_tensor_parallel_size: {tp} is more than the {gpus} GPU(s) this host declares "
            "(nvidia_gpu_count); tensor parallel needs one GPU per shard"
        ]
    return []


def cpu_binding_fits_ranks(values: Mapping[str, Any]) -> list[str]:
    """On the CPU build, ``VLLM_CPU_OMP_THREADS_BIND`` in ``vllm_env`` (core lists separated by
    ``|``, one per worker; ``auto`` and ``nobind`` are vLLM's own modes) names one list per
    engine rank on this rig: tensor × pipeline parallel ÷ rigs (``vllm_nnodes``). vLLM asserts
    it at the engine's start ("Given number of CPU id list ... doesn't match local world size":
    vllm/utils/ompmultiprocessing.py, ``parallel_config.local_world_size``), after the converge
    has restarted the service."""
    bind = (values.get("vllm_env") or {}).get("VLLM_CPU_OMP_THREADS_BIND")
    if values["vllm_device"] != "cpu" or not isinstance(bind, str) or bind in ("auto", "nobind"):
        return []
    tp, pp = values["vllm_tensor_parallel_size"], values.get("vllm_pipeline_parallel_size", 1)
    ranks = tp * pp // max(values.get("vllm_nnodes", 1), 1)
    lists = len(bind.split("|"))
    if lists == ranks:
        return []
    return [
        f"vllm_env: VLLM_CPU_OMP_THREADS_BIND {bind!r} names {lists} core list(s) and this rig "
        f"runs {ranks} engine rank(s) (vllm_tensor_parallel_size {tp} × "
        f"vllm_pipeline_parallel_size {pp} ÷ vllm_nnodes): give one list per rank, separated "
        "by '|', or set vllm_tensor_parallel_size to match"
    ]


def _capability(value: str) -> tuple[int, int]:
    major, _, minor = value.partition(".")
    return int(major), int(minor or 0)


def gpu_capability(values: Mapping[str, Any]) -> list[str]:
    """What the vLLM settings ask of the GPUs against their compute capability
    (``nvidia_gpu_compute_capability``, checked against nvidia-smi by the NVIDIA layer)."""
    capability = values["nvidia_gpu_compute_capability"]
    dtype = values["vllm_kv_cache_dtype"]
    need = KV_CACHE_MIN_COMPUTE_CAPABILITY.get(dtype)
    if need and _capability(capability) < need:
        # what vLLM would say at start-up, in the diagnosis library's words
        sig = diagnosis.by_id("vllm-kv-dtype/fp8e4nv", "vllm-log")
        return [
            f"vllm_kv_cache_dtype: {dtype} (FP8 E4M3) needs compute capability "
            f"{need[0]}.{need[1]} or newer and these GPUs are {capability} "
            f"(nvidia_gpu_compute_capability): vLLM would die at start-up: {sig.why}. "
            f"Fix: {sig.fix}"
        ]
    return []


#: vLLM's rules spanning roles, in the order they report.
RULES: tuple[RuleOver, ...] = (
    tensor_parallel_fits_gpus,
    cpu_binding_fits_ranks,
    gpu_capability,
    kv_fit_problems,
    combinations.problems,
)
