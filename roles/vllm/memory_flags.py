"""vLLM flags that move its memory accounting: refused in ``vllm_extra_args``, each with why.

rigup checks that the model, its KV cache for ``vllm_max_model_len`` and the other services fit
the GPUs (roles/vllm/kv_budget.py, roles/modes/budget.py) from the settings it manages; vLLM
sizes its KV cache as ``vllm_gpu_memory_utilization`` of the card minus what profiling measured.
A flag that sets the cache's size directly, skips the profiling, moves weights or KV blocks to
system memory, or changes the bytes per token or per recurrent state makes vLLM follow another
budget than the one rigup printed: the engine boots healthy and dies on the first long request
(vllm-project/vllm#53787 section 4: ``--kv-cache-memory-bytes`` skips profiling and ignores
``--gpu-memory-utilization``).

Derived from vLLM 0.22.1's own argument code (vllm/engine/arg_utils.py ``add_cli_args``): the
argument groups ``CacheConfig`` and ``OffloadConfig`` are where vLLM declares what sizes its
memory (CUDA graphs are profiled inside ``--gpu-memory-utilization``: v1/worker/gpu_worker.py
``determine_available_memory``). Each flag of those groups is managed by a setting
(roles/vllm/settings.py MANAGED), refused here, or listed in :data:`NOT_MEMORY` with why not;
tests/vllm/test_memory_flags.py checks that partition against the pinned vLLM's parser.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from roles.common.checks import flag_matches

#: vLLM 0.22.1's argument groups that declare its memory accounting (arg_utils.py).
MEMORY_GROUPS = ("CacheConfig", "OffloadConfig")

_BUDGET = "rigup's VRAM budget (vllm_gpu_memory_utilization, vllm_max_model_len) would not be what vLLM allocates"

#: flag -> why it is refused in vllm_extra_args (and the managed setting to use, if any).
MEMORY_FLAGS: dict[str, str] = {
    "--kv-cache-memory-bytes": "it sets the KV cache's size directly: vLLM skips its memory "
    "profiling and ignores --gpu-memory-utilization (vllm#53787), so " + _BUDGET + "; the engine "
    "starts and dies on the first long request. Set vllm_gpu_memory_utilization instead",
    "--num-gpu-blocks-override": "it fixes the number of KV-cache blocks whatever profiling "
    "found free, so " + _BUDGET + ". Set vllm_gpu_memory_utilization instead",
    "--kv-offloading-size": "it adds a KV cache in system memory (GiB) that no budget of "
    "rigup's counts (neither the VRAM budget nor the host's RAM)",
    "--kv-offloading-backend": "it chooses where KV blocks are offloaded to system memory "
    "(with --kv-offloading-size), outside rigup's budgets",
    "--offload-backend": "it moves model weights to system memory, so the VRAM budget that "
    "counts them on the GPU and the host's RAM are both wrong",
    "--cpu-offload-gb": "it keeps that many GiB of weights per GPU in system memory and reads "
    "them over PCIe every step: the VRAM budget counts them on the GPU, the host's RAM not at "
    "all, and decode slows by the PCIe transfer",
    "--cpu-offload-params": "it picks which weights --cpu-offload-gb moves to system memory "
    "(outside rigup's budgets)",
    "--offload-group-size": "it turns on prefetch offloading of weights to system memory "
    "(outside rigup's budgets)",
    "--offload-num-in-group": "it sets how many layers of each group prefetch offloading keeps "
    "in system memory (outside rigup's budgets)",
    "--offload-prefetch-step": "it tunes prefetch offloading of weights to system memory "
    "(outside rigup's budgets)",
    "--offload-params": "it picks which weights prefetch offloading moves to system memory "
    "(outside rigup's budgets)",
    "--kv-cache-dtype-skip-layers": "it keeps some layers' KV cache in the model's dtype: the "
    "budget counts vllm_kv_cache_dtype's bytes for every layer. Set vllm_kv_cache_dtype instead",
    "--mamba-cache-dtype": "it changes the bytes of the gated-delta-net state (rigup's budget "
    "counts BF16 conv and float32 recurrent state, as Qwen3.6's config says)",
    "--mamba-ssm-cache-dtype": "it changes the bytes of the recurrent state (rigup's budget "
    "counts float32, as Qwen3.6's config says)",
    "--mamba-block-size": "it changes the recurrent state's block and, with it, the attention "
    "block size vLLM derives (vllm_block_size, the page rigup's budget computes)",
    "--mamba-cache-mode": "it makes vLLM keep a recurrent state per cached block (all, align) "
    "instead of one per request: more memory per request than the budget counts; "
    "vllm_enable_prefix_caching chooses it",
}

#: Flags of :data:`MEMORY_GROUPS` that move no memory, with why (not managed, not refused).
NOT_MEMORY: dict[str, str] = {
    "--prefix-caching-hash-algo": "the hash of prefix-cache keys",
    "--calculate-kv-scales": "computes FP8 KV scales; the same bytes (deprecated in 0.22.1)",
    "--kv-sharing-fast-prefill": "a prefill shortcut for models that share KV between layers",
}


def memory_flag_problems(values: Mapping[str, Any], aliases: Mapping[str, str]) -> list[str]:
    """On the GPU build (``vllm_device = "cuda"``: the VRAM budget applies), ``vllm_extra_args``
    sets no flag of :data:`MEMORY_FLAGS`, under any spelling (the flag, ``--flag=value``,
    underscores, an abbreviation: roles.common.checks.flag_matches). The CPU build has no VRAM
    budget to keep true: the lab's CPU machines size their KV cache in bytes
    (lab/pair_inventory.py)."""
    if values.get("vllm_device", "cuda") != "cuda":
        return []
    return [
        f"vllm_extra_args: {token}{how} changes vLLM's memory accounting: {MEMORY_FLAGS[flag]}"
        for token, flag, how in flag_matches(values["vllm_extra_args"], MEMORY_FLAGS, aliases)
    ]
