"""The memory-bandwidth roofline of decoding: the bytes one decode step reads from GPU memory,
over the GPU's memory bandwidth, is the most decode steps per second it can do; rigup-bench
prints the measured decode as a fraction of it.

A decode step of a 1-user batch reads every weight once (the INT4 weights with their scales, the
16-bit ones, the BF16 lm_head), the KV cache of the full-attention layers up to the current
context, and reads and writes the gated delta net's recurrent state. Read from the checkpoint's
config.json (Qwen3.5/3.6 hybrid: Qwen3_5TextConfig's fields, vLLM 0.22.1's
vllm/transformers_utils/configs/qwen3_5.py; AutoRound's quantization_config). Not counted: norms,
biases, one embedding row per token, activations (together well under 0.1 % for the 27B), and
the MTP head, which drafts with its own small steps.

Standard library only (installed on the rig inside ``rigup.bench``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

#: memory bandwidth in bytes per second, by the name nvidia-smi reports
BANDWIDTH = {
    # NVIDIA GeForce RTX 3090 specifications: "Memory Bandwidth 936 GB/s"
    # https://www.nvidia.com/en-us/geforce/graphics-cards/30-series/rtx-3090-3090ti/
    "NVIDIA GeForce RTX 3090": 936e9,
    # NVIDIA H200 product page: "GPU Memory Bandwidth 4.8TB/s" (SXM and NVL)
    # https://www.nvidia.com/en-us/data-center/h200/
    "NVIDIA H200": 4.8e12,
    "NVIDIA H200 NVL": 4.8e12,
}
#: bytes per KV-cache element by vLLM's --kv-cache-dtype ("auto": the model's BF16)
KV_BYTES = {"auto": 2, "bfloat16": 2, "float16": 2, "fp8": 1, "fp8_e5m2": 1, "fp8_e4m3": 1}
#: bytes per element of the gated delta net's recurrent state by mamba_ssm_dtype
STATE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


class RooflineError(ValueError):
    """The config lacks what the arithmetic needs (the message names the key)."""


@dataclass(frozen=True)
class StepBytes:
    """Bytes one decode step reads on one GPU (the model split over ``tensor_parallel_size``)."""

    quantized_weights: float  # packed INT4 (or INT8) decoder linears
    scales: float  # their per-group scales (16 bit)
    dense_weights: float  # 16-bit decoder linears (gated delta net in_proj_a / in_proj_b)
    lm_head: float
    kv_cache: float  # full-attention K and V up to the context
    gdn_state: float  # recurrent + conv state, read and written
    context_tokens: int
    tensor_parallel_size: int

    @property
    def total(self) -> float:
        return (
            self.quantized_weights
            + self.scales
            + self.dense_weights
            + self.lm_head
            + self.kv_cache
            + self.gdn_state
        )

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "total": self.total}


def _text(config: dict) -> dict:
    return config.get("text_config") or config


def _need(cfg: dict, key: str) -> Any:
    if cfg.get(key) is None:
        raise RooflineError(f"config.json has no {key}")
    return cfg[key]


def decode_step_bytes(
    config: dict, context_tokens: int, kv_cache_dtype: str = "auto", tensor_parallel_size: int = 1
) -> StepBytes:
    """The bytes one decode step of one sequence reads per GPU at ``context_tokens`` of context.

    ``config``: the checkpoint's config.json (a hybrid Qwen3.5/3.6 or a dense model); the
    quantization is AutoRound/GPTQ's (``bits``, ``group_size``; modules in ``extra_config`` with
    ``bits`` 16 stay 16-bit). Raises RooflineError naming a missing key or an unknown dtype."""
    t = _text(config)
    q = config.get("quantization_config") or t.get("quantization_config") or {}
    bits = q.get("bits", 16)
    group = q.get("group_size") or 0
    sixteen = {k.rsplit(".", 1)[-1] for k, v in (q.get("extra_config") or {}).items()
               if v.get("bits") == 16}  # fmt: skip
    h = _need(t, "hidden_size")
    inter = _need(t, "intermediate_size")
    layers = _need(t, "num_hidden_layers")
    types = t.get("layer_types") or ["full_attention"] * layers
    heads, kv_heads = _need(t, "num_attention_heads"), _need(t, "num_key_value_heads")
    head_dim = t.get("head_dim") or h // heads
    if kv_cache_dtype not in KV_BYTES:
        raise RooflineError(f"unknown kv_cache_dtype {kv_cache_dtype!r}; known: {sorted(KV_BYTES)}")
    gate = 2 if t.get("attn_output_gate") else 1
    attention = [("q_proj", gate * heads * head_dim, h), ("k_proj", kv_heads * head_dim, h),
                 ("v_proj", kv_heads * head_dim, h), ("o_proj", h, heads * head_dim)]  # fmt: skip
    mlp = [("gate_proj", inter, h), ("up_proj", inter, h), ("down_proj", h, inter)]
    linear: list[tuple[str, int, int]] = []
    state = 0.0
    n_linear = types.count("linear_attention")
    if n_linear:
        kh, vh = _need(t, "linear_num_key_heads"), _need(t, "linear_num_value_heads")
        kd, vd = _need(t, "linear_key_head_dim"), _need(t, "linear_value_head_dim")
        conv_dim = 2 * kh * kd + vh * vd
        linear = [("in_proj_qkv", conv_dim, h), ("in_proj_z", vh * vd, h),
                  ("in_proj_a", vh, h), ("in_proj_b", vh, h), ("out_proj", h, vh * vd)]  # fmt: skip
        dtype = t.get("mamba_ssm_dtype") or "bfloat16"
        if dtype not in STATE_BYTES:
            raise RooflineError(f"unknown mamba_ssm_dtype {dtype!r}")
        recurrent = vh * kd * vd * STATE_BYTES[dtype]
        conv = conv_dim * (_need(t, "linear_conv_kernel_dim") - 1) * 2
        state = 2 * n_linear * (recurrent + conv)  # read, then written back
    quantized = scales = dense = 0.0
    for kind in types:
        for name, out_f, in_f in (attention if kind == "full_attention" else linear) + mlp:
            if bits < 16 and name not in sixteen and group:
                quantized += out_f * in_f * bits / 8
                scales += out_f * math.ceil(in_f / group) * 2
            else:
                dense += out_f * in_f * 2
    n_full = types.count("full_attention")
    kv = n_full * 2 * kv_heads * head_dim * KV_BYTES[kv_cache_dtype] * context_tokens
    lm_head = _need(t, "vocab_size") * h * 2
    tp = tensor_parallel_size
    return StepBytes(
        quantized_weights=quantized / tp,
        scales=scales / tp,
        dense_weights=dense / tp,
        lm_head=lm_head / tp,
        kv_cache=kv / tp,
        gdn_state=state / tp,
        context_tokens=context_tokens,
        tensor_parallel_size=tp,
    )


def bandwidth(gpu_name: str) -> float | None:
    """Memory bandwidth (bytes/s) of the GPU nvidia-smi names ``gpu_name``; None if unknown."""
    return BANDWIDTH.get(gpu_name.strip())


def roofline(
    step: StepBytes, gpu_name: str, decode_tok_s: float | None, mean_acceptance: float | None
) -> dict[str, Any]:
    """The ceiling in decode steps/s on ``gpu_name`` and the measured decode as a fraction of it.

    A step of MTP yields ``mean_acceptance`` tokens (the mean acceptance length, bonus token
    included), so measured steps/s = tok/s / mean acceptance length; without drafts 1 token a
    step. ``{"gpu", "bandwidth", "bytes_per_step", "ceiling_steps_s", "measured_steps_s",
    "fraction"}`` (None where unknown)."""
    bw = bandwidth(gpu_name)
    ceiling = bw / step.total if bw else None
    steps = None if decode_tok_s is None else decode_tok_s / (mean_acceptance or 1.0)
    return {
        "gpu": gpu_name,
        "bandwidth": bw,
        "bytes_per_step": step.as_dict(),
        "ceiling_steps_s": ceiling,
        "measured_steps_s": steps,
        "fraction": steps / ceiling if steps is not None and ceiling else None,
    }


def line(r: dict[str, Any]) -> str:
    """One line for the table."""
    b = r["bytes_per_step"]
    head = (
        f"decode roofline: {b['total'] / 1e9:.2f} GB read per step per GPU "
        f"({b['context_tokens']:,}-token context, TP {b['tensor_parallel_size']})"
    )
    if not r["bandwidth"]:
        return f"{head}; {r['gpu']}: memory bandwidth unknown, no ceiling"
    out = (
        f"{head} / {r['bandwidth'] / 1e12:g} TB/s ({r['gpu']}) = ceiling "
        f"{r['ceiling_steps_s']:.0f} steps/s"
    )
    if r["fraction"] is not None:
        out += f"; measured {r['measured_steps_s']:.1f} steps/s = {100 * r['fraction']:.1f} %"
    return out
