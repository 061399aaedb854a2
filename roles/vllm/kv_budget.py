"""Does the context fit? vLLM 0.22.1's KV-cache arithmetic for a hybrid Qwen3.6 model on one GPU
of a tensor-parallel group, before anything starts.

What vLLM does (the files are vLLM 0.22.1's):

- attention page per token = K and V x KV heads per GPU x head dim x bytes of the KV dtype
  (v1/kv_cache_interface.py FullAttentionSpec);
- the gated delta net's state per layer (its "mamba page") = the conv state (conv channels per
  GPU x (kernel - 1 + speculative tokens), BF16) + the recurrent state (value heads per GPU x
  value dim x key dim, float32 as mamba_ssm_dtype says)
  (model_executor/layers/mamba/mamba_utils.py gated_delta_net_state_shape);
- the attention block size is raised to the smallest multiple of the kernel's block alignment
  (16 for FlashInfer, or the asked block size if larger) whose page holds one mamba page, and
  the mamba page is padded to it (platforms/interface.py _align_hybrid_block_size: "Setting
  attention block size to N tokens");
- layers are grouped by type into groups of equal size (the smaller type's count, the MTP
  drafter's attention layer included); memory = group size x page x blocks, where a request
  needs ceil(max_model_len / block) blocks of the attention group and 1 + speculative tokens of
  each mamba group (v1/core/kv_cache_utils.py _get_kv_cache_groups_uniform_page_size,
  _max_memory_usage_bytes_from_groups; v1/kv_cache_interface.py MambaSpec).

Checked against what vLLM printed on an H200 (2026-12-01, tests/unit/test_kv_budget.py,
tests/fixtures/vllm-cuda/h200-runs): the block sizes 1568 / 1600 (MTP), "9.13 GiB KV cache is
needed" for 262144 tokens with MTP 3, "the estimated maximum model length is 56000" with 2.46 GiB
available, and "GPU KV cache size: 99,076 tokens" without MTP at 56000 with 3.33 GiB.

Pure: used by the settings check on the controller (roles/settings.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from roles.common.model_shape import QWEN36_27B, Shape

GIB = 1 << 30
#: bytes per KV-cache element by --kv-cache-dtype ("auto": the model's BF16)
KV_BYTES = {"auto": 2, "bfloat16": 2, "float16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
#: the smallest block FlashInfer's kernels take (v1/attention/backends/flashinfer.py
#: get_supported_kernel_block_sizes: 16, 32, 64): the alignment of the raised block size
KERNEL_BLOCK_ALIGNMENT = 16
CONV_STATE_BYTES = 2  # BF16: mamba_cache_dtype "auto" = the model's dtype
RECURRENT_STATE_BYTES = 4  # float32: Qwen3.6's mamba_ssm_dtype


@dataclass(frozen=True)
class KvLayout:
    """vLLM's KV-cache layout on one GPU: ``block_size`` (tokens), ``page_bytes`` (one block of
    one layer; the padded mamba page too), ``group_size`` (layers per group), the number of
    attention and mamba groups, and ``mamba_blocks`` a request takes in each mamba group."""

    block_size: int
    page_bytes: int
    group_size: int
    attention_groups: int
    mamba_groups: int
    mamba_blocks: int

    def needed_bytes(self, max_model_len: int) -> int:
        """KV memory one request of ``max_model_len`` tokens needs: what vLLM checks at start."""
        blocks = self.attention_groups * math.ceil(max_model_len / self.block_size)
        blocks += self.mamba_groups * self.mamba_blocks
        return self.group_size * self.page_bytes * blocks

    def estimated_max_model_len(self, available_bytes: float) -> int:
        """The longest context whose :meth:`needed_bytes` fits ``available_bytes`` (vLLM's
        "estimated maximum model length"); 0 when not even one block fits."""
        blocks = int(available_bytes // (self.group_size * self.page_bytes))
        blocks -= self.mamba_groups * self.mamba_blocks
        return max(0, blocks // self.attention_groups) * self.block_size

    def pool_tokens(self, available_bytes: float, max_model_len: int) -> int:
        """vLLM's "GPU KV cache size: N tokens": requests of ``max_model_len`` the pool holds,
        times ``max_model_len``."""
        blocks = int(available_bytes // self.page_bytes // self.group_size)
        per_request = self.needed_bytes(max_model_len) // (self.group_size * self.page_bytes)
        return int(blocks / per_request * max_model_len)


def layout(
    shape: Shape = QWEN36_27B,
    kv_cache_dtype: str = "fp8_e5m2",
    tensor_parallel_size: int = 1,
    speculative_tokens: int = 0,
    block_size: int = 16,
) -> KvLayout:
    """The layout vLLM 0.22.1 chooses for ``shape`` on each GPU. Raises ValueError for a KV
    dtype this arithmetic does not know or heads that do not split over the GPUs."""
    if kv_cache_dtype not in KV_BYTES:
        raise ValueError(f"kv cache dtype {kv_cache_dtype!r}: known {sorted(KV_BYTES)}")
    tp = tensor_parallel_size
    if shape.kv_heads % tp or shape.lin_v_heads % tp or shape.conv_dim % tp:
        raise ValueError(f"{shape.name}'s heads do not split over {tp} GPUs")
    attn_token = 2 * (shape.kv_heads // tp) * shape.head_dim * KV_BYTES[kv_cache_dtype]
    conv = (shape.conv_dim // tp) * (shape.conv_k - 1 + speculative_tokens) * CONV_STATE_BYTES
    recurrent = (shape.lin_v_heads // tp) * shape.lin_v_dim * shape.lin_k_dim
    mamba_page = conv + recurrent * RECURRENT_STATE_BYTES
    align = max(KERNEL_BLOCK_ALIGNMENT, block_size)
    block = align * math.ceil(mamba_page / (align * attn_token))
    types = shape.layer_types
    attention_layers = types.count("full_attention") + (
        shape.mtp_layers if speculative_tokens else 0
    )
    mamba_layers = types.count("linear_attention")
    group = min(attention_layers, mamba_layers)
    if max(attention_layers, mamba_layers) < 1.5 * group:
        group = max(attention_layers, mamba_layers)
    return KvLayout(
        block_size=block,
        page_bytes=block * attn_token,
        group_size=group,
        attention_groups=math.ceil(attention_layers / group),
        mamba_groups=math.ceil(mamba_layers / group),
        mamba_blocks=1 + speculative_tokens,
    )


@dataclass(frozen=True)
class Footprint:
    """What a model takes on one GPU besides its KV cache, measured: ``weights_gib`` (vLLM's
    "Model loading took ... GiB", split over tensor parallel ranks) and ``other_gib`` (the rest
    of the budget that is not KV: the activation peak at the batched-token limit, the estimated
    CUDA-graph pool, the CUDA context and non-torch memory = budget - weights - vLLM's
    "Available KV cache memory")."""

    weights_gib: float
    other_gib: float


@dataclass(frozen=True)
class ServedModel:
    """A known model's :class:`Footprint` with MTP off and on (the MTP head is extra weights,
    its drafter extra activations) and where the figures were measured."""

    shape: Shape
    without_mtp: Footprint
    with_mtp: Footprint
    source: str

    def footprint(self, mtp: bool) -> Footprint:
        return self.with_mtp if mtp else self.without_mtp


#: the budget of the measured runs: --gpu-memory-utilization 0.1709 of the H200's 143,771 MiB
#: (nvidia-smi) = 23.99 GiB, a 3090's 24 GiB (tests/fixtures/vllm-cuda/h200-runs)
H200_RUN_BUDGET_GIB = 0.1709 * 143771 / 1024

#: model_llm_manifest -> its measured footprint. Qwen3.6-27B AutoRound INT4's text shape with
#: random weights (lab/tiny --shape qwen3.6-27b) on one H200 at that budget, tensor parallel 1,
#: fp8_e5m2, 16384 batched tokens, CUDA graphs (tests/fixtures/vllm-cuda/h200-runs, 2026-12-01):
#: MTP 3: "Model loading took 17.62 GiB", "Available KV cache memory: 2.46 GiB" (other 3.91);
#: MTP off: 16.83 GiB and 3.33 GiB (other 3.83). Tensor parallel 2 is not measured yet (no two-GPU machine
#: was lent): its weights are taken as halved and its rest as the same as on one GPU.
KNOWN_MODELS = {
    "qwen3.6-27b-int4-autoround": ServedModel(
        QWEN36_27B,
        without_mtp=Footprint(16.83, H200_RUN_BUDGET_GIB - 16.83 - 3.33),
        with_mtp=Footprint(17.62, H200_RUN_BUDGET_GIB - 17.62 - 2.46),
        source="measured on an H200 at a 24 GiB budget, 2026-12-01",
    ),
}


def kv_fit_problems(values: dict) -> list[str]:
    """The settings check: ``vllm_max_model_len`` against what one GPU's budget
    (``nvidia_gpu_vram_gib`` x ``vllm_gpu_memory_utilization``) leaves for the KV cache after a
    known model's measured weights (split over ``vllm_tensor_parallel_size``) and the rest; []
    when it fits, the build is not CUDA, or the model is not in :data:`KNOWN_MODELS`."""
    model = KNOWN_MODELS.get(values.get("model_llm_manifest"))
    if model is None or values.get("vllm_device") != "cuda":
        return []
    dtype = values["vllm_kv_cache_dtype"]
    if dtype not in KV_BYTES:
        return []
    tp = values["vllm_tensor_parallel_size"]
    spec = values.get("vllm_speculative_config") or {}
    tokens = spec.get("num_speculative_tokens", 0) if spec.get("method") == "mtp" else 0
    try:
        kv = layout(model.shape, dtype, tp, tokens, values["vllm_block_size"])
    except ValueError as exc:
        return [f"vllm_tensor_parallel_size: {exc}"]
    card, share = values["nvidia_gpu_vram_gib"], values["vllm_gpu_memory_utilization"]
    budget = card * share
    used = model.footprint(tokens > 0)
    left = budget - used.weights_gib / tp - used.other_gib
    length = values["vllm_max_model_len"]
    needed = kv.needed_bytes(length) / GIB
    if needed <= left:
        return []
    fits = kv.estimated_max_model_len(max(0.0, left) * GIB)
    return [
        f"vllm_max_model_len: {length} tokens need {needed:.2f} GiB of KV cache on each GPU "
        f"(vLLM 0.22.1's arithmetic: blocks of {kv.block_size} tokens, {kv.group_size} layers a "
        f"group, {dtype}), but each GPU's budget, {card:g} GiB x {share:g} = {budget:.2f} GiB, "
        f"leaves {left:.2f} GiB after the weights ({used.weights_gib:g} GiB over {tp} GPU(s)) "
        f"and the rest ({used.other_gib:.2f} GiB), {model.source}: about {fits:,} tokens fit. "
        "Lower vllm_max_model_len, or raise vllm_tensor_parallel_size or "
        "vllm_gpu_memory_utilization"
    ]
