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
    gpu_capability,
    kv_fit_problems,
    combinations.problems,
)
