"""The tiny checkpoint's tensors: random but scripted weights written with the real tensor names,
BF16 or AutoRound (GPTQ-packed) INT4, saved as safetensors (BF16 included: numpy has no bfloat16
and safetensors.numpy cannot write it)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from lab.tiny.shape import (
    CONV_DIM,
    CONV_K,
    GROUP,
    HEAD_DIM,
    HEADS,
    HIDDEN,
    INTERMEDIATE,
    KV_HEADS,
    LAYER_TYPES,
    LIN_V_DIM,
    LIN_V_HEADS,
    LM,
    MTP_LAYERS,
    NUM_LAYERS,
    VALUE_DIM,
    VISION,
    VISUAL,
    VOCAB,
)  # fmt: skip


def to_bf16(a: np.ndarray) -> np.ndarray:
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even


class BF16(np.ndarray):
    """Marker: a uint16 array holding bfloat16 bits."""


def bf16(a: np.ndarray) -> np.ndarray:
    return to_bf16(a).view(BF16)


def save_safetensors(tensors: dict[str, np.ndarray], path: Path) -> int:
    header: dict = {"__metadata__": {"format": "pt"}}
    blobs, offset = [], 0
    for name in sorted(tensors):
        a = tensors[name]
        if isinstance(a, BF16):
            dtype = "BF16"
        else:
            dtype = {np.float32: "F32", np.float16: "F16", np.int32: "I32"}[a.dtype.type]
        data = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(data)]}  # fmt: skip
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    return offset


class Weights:
    def __init__(self, seed: int, variant: str, chain: dict[int, int]):
        self.rng = np.random.default_rng(seed)
        self.variant = variant
        self.chain = chain
        self.t: dict[str, np.ndarray] = {}
        # token embeddings: N(0, 1) rows, near-orthogonal in 128 dims
        self.embed = self.rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32)

    def rand(self, shape, std=0.02):
        return (self.rng.standard_normal(shape) * std).astype(np.float32)

    def dense(self, name, shape, std=0.02, value=None):
        a = np.full(shape, value, np.float32) if value is not None else self.rand(shape, std)
        self.t[name] = bf16(a)

    def linear(self, prefix, out_f, in_f, std=0.02, quantize=False):
        """A linear layer: BF16 `.weight`, or AutoRound/GPTQ int4 (qweight/qzeros/scales/g_idx)."""
        w = self.rand((out_f, in_f), std)
        if not quantize:
            self.t[f"{prefix}.weight"] = bf16(w)
            return
        assert in_f % GROUP == 0 and out_f % 8 == 0, (prefix, out_f, in_f)
        wt = w.T  # [in, out], GPTQ packs along the input dim
        groups = wt.reshape(in_f // GROUP, GROUP, out_f)
        scales = np.maximum(np.abs(groups).max(axis=1) / 7.0, 1e-8)  # [in/G, out], sym int4
        q = np.clip(np.rint(groups / scales[:, None, :]), -8, 7).astype(np.int32) + 8  # 0..15
        q = q.reshape(in_f, out_f).astype(np.uint32)
        packed = np.zeros((in_f // 8, out_f), np.uint32)
        for j in range(8):  # nibble j of row r holds input row 8r+j
            packed |= q[j::8] << (4 * j)
        zeros = np.zeros((in_f // GROUP, out_f // 8), np.uint32)
        for j in range(8):  # GPTQ v1: stored zero point = 8 - 1 = 7
            zeros |= np.uint32(7) << (4 * j)
        self.t[f"{prefix}.qweight"] = packed.view(np.int32)
        self.t[f"{prefix}.qzeros"] = zeros.view(np.int32)
        self.t[f"{prefix}.scales"] = scales.astype(np.float16)
        self.t[f"{prefix}.g_idx"] = (np.arange(in_f) // GROUP).astype(np.int32)

    def gemma_norm(self, name, dim):
        # Qwen3.5 RMSNorms are Gemma-style (x * (1 + w)): zeros = identity scale
        self.dense(name, (dim,), value=0.0)

    def decoder_layer(self, p: str, kind: str, quantize: bool):
        q = quantize
        small = 0.002  # output projections: keep each block's write to the residual tiny
        self.gemma_norm(f"{p}.input_layernorm.weight", HIDDEN)
        self.gemma_norm(f"{p}.post_attention_layernorm.weight", HIDDEN)
        if kind == "linear_attention":
            a = f"{p}.linear_attn"
            self.linear(f"{a}.in_proj_qkv", CONV_DIM, HIDDEN, quantize=q)
            self.linear(f"{a}.in_proj_z", VALUE_DIM, HIDDEN, quantize=q)
            self.linear(f"{a}.in_proj_b", LIN_V_HEADS, HIDDEN)  # 16-bit in AutoRound's export
            self.linear(f"{a}.in_proj_a", LIN_V_HEADS, HIDDEN)
            self.dense(f"{a}.conv1d.weight", (CONV_DIM, 1, CONV_K), std=0.3)
            self.t[f"{a}.A_log"] = np.log(self.rng.uniform(1, 16, LIN_V_HEADS)).astype(np.float32)
            self.dense(f"{a}.dt_bias", (LIN_V_HEADS,), value=1.0)
            self.dense(f"{a}.norm.weight", (LIN_V_DIM,), value=1.0)  # RMSNormGated: plain scale
            self.linear(f"{a}.out_proj", HIDDEN, VALUE_DIM, std=small, quantize=q)
        else:
            a = f"{p}.self_attn"
            self.linear(f"{a}.q_proj", 2 * HEADS * HEAD_DIM, HIDDEN, quantize=q)  # q + gate
            self.linear(f"{a}.k_proj", KV_HEADS * HEAD_DIM, HIDDEN, quantize=q)
            self.linear(f"{a}.v_proj", KV_HEADS * HEAD_DIM, HIDDEN, quantize=q)
            self.linear(f"{a}.o_proj", HIDDEN, HEADS * HEAD_DIM, std=small, quantize=q)
            self.gemma_norm(f"{a}.q_norm.weight", HEAD_DIM)
            self.gemma_norm(f"{a}.k_norm.weight", HEAD_DIM)
        self.linear(f"{p}.mlp.gate_proj", INTERMEDIATE, HIDDEN, quantize=q)
        self.linear(f"{p}.mlp.up_proj", INTERMEDIATE, HIDDEN, quantize=q)
        self.linear(f"{p}.mlp.down_proj", HIDDEN, INTERMEDIATE, std=small, quantize=q)

    def lm_head(self) -> np.ndarray:
        """Rows: tiny noise, plus for each scripted successor the direction of its predecessor."""
        head = self.rand((VOCAB, HIDDEN), 0.02)
        unit = self.embed / np.linalg.norm(self.embed, axis=1, keepdims=True)
        for prev, nxt in self.chain.items():
            head[nxt] += 30.0 / np.sqrt(HIDDEN) * unit[prev]  # logit ~30 vs ~N(0, 2.7) others
        return head

    def visual(self):
        v = VISION
        d, inter = v["hidden_size"], v["intermediate_size"]
        k = (d, 3, v["temporal_patch_size"], v["patch_size"], v["patch_size"])
        self.dense(f"{VISUAL}.patch_embed.proj.weight", k)
        self.dense(f"{VISUAL}.patch_embed.proj.bias", (d,), value=0.0)
        self.dense(f"{VISUAL}.pos_embed.weight", (v["num_position_embeddings"], d))
        for j in range(v["depth"]):
            b = f"{VISUAL}.blocks.{j}"
            for n in ("norm1", "norm2"):  # LayerNorm
                self.dense(f"{b}.{n}.weight", (d,), value=1.0)
                self.dense(f"{b}.{n}.bias", (d,), value=0.0)
            for lin, (o, i) in {"attn.qkv": (3 * d, d), "attn.proj": (d, d),
                                "mlp.linear_fc1": (inter, d), "mlp.linear_fc2": (d, inter)}.items():  # fmt: skip
                self.dense(f"{b}.{lin}.weight", (o, i))
                self.dense(f"{b}.{lin}.bias", (o,), value=0.0)
        m = f"{VISUAL}.merger"
        merged = d * v["spatial_merge_size"] ** 2
        self.dense(f"{m}.norm.weight", (d,), value=1.0)
        self.dense(f"{m}.norm.bias", (d,), value=0.0)
        self.dense(f"{m}.linear_fc1.weight", (merged, merged))
        self.dense(f"{m}.linear_fc1.bias", (merged,), value=0.0)
        self.dense(f"{m}.linear_fc2.weight", (HIDDEN, merged))
        self.dense(f"{m}.linear_fc2.bias", (HIDDEN,), value=0.0)

    def mtp(self):
        # fc maps concat(norm(embed(t+1)), norm(hidden(t))) -> embed(t+1): drafts follow the chain
        fc = np.concatenate([np.eye(HIDDEN), np.zeros((HIDDEN, HIDDEN))], axis=1)
        self.t["mtp.fc.weight"] = bf16(fc + self.rand(fc.shape, 0.001))
        for n in ("norm", "pre_fc_norm_embedding", "pre_fc_norm_hidden"):
            self.gemma_norm(f"mtp.{n}.weight", HIDDEN)
        for k in range(MTP_LAYERS):
            self.decoder_layer(f"mtp.layers.{k}", "full_attention", quantize=False)

    def build_hybrid(self, quantize: bool):
        self.t[f"{LM}.embed_tokens.weight"] = bf16(self.embed)
        for i, kind in enumerate(LAYER_TYPES):
            self.decoder_layer(f"{LM}.layers.{i}", kind, quantize)
        self.gemma_norm(f"{LM}.norm.weight", HIDDEN)
        self.t["lm_head.weight"] = bf16(self.lm_head())
        self.visual()
        self.mtp()

    def build_dense(self):
        # Qwen3ForCausalLM: standard RMSNorm (weight multiplies: ones), no output gate
        self.t["model.embed_tokens.weight"] = bf16(self.embed)
        for i in range(NUM_LAYERS):
            p = f"model.layers.{i}"
            self.dense(f"{p}.input_layernorm.weight", (HIDDEN,), value=1.0)
            self.dense(f"{p}.post_attention_layernorm.weight", (HIDDEN,), value=1.0)
            a = f"{p}.self_attn"
            self.linear(f"{a}.q_proj", HEADS * HEAD_DIM, HIDDEN)
            self.linear(f"{a}.k_proj", KV_HEADS * HEAD_DIM, HIDDEN)
            self.linear(f"{a}.v_proj", KV_HEADS * HEAD_DIM, HIDDEN)
            self.linear(f"{a}.o_proj", HIDDEN, HEADS * HEAD_DIM, std=0.002)
            self.dense(f"{a}.q_norm.weight", (HEAD_DIM,), value=1.0)
            self.dense(f"{a}.k_norm.weight", (HEAD_DIM,), value=1.0)
            self.linear(f"{p}.mlp.gate_proj", INTERMEDIATE, HIDDEN)
            self.linear(f"{p}.mlp.up_proj", INTERMEDIATE, HIDDEN)
            self.linear(f"{p}.mlp.down_proj", HIDDEN, INTERMEDIATE, std=0.002)
        self.dense("model.norm.weight", (HIDDEN,), value=1.0)
        self.t["lm_head.weight"] = bf16(self.lm_head())
