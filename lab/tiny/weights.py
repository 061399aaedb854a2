"""A Qwen3.6-shaped checkpoint's tensors with the real tensor names, BF16 or AutoRound
(GPTQ-packed) INT4, at any :class:`~lab.tiny.shape.Shape`, saved as safetensors (BF16 included:
numpy has no bfloat16 and safetensors.numpy cannot write it).

Two kinds of values, one layout (:class:`Weights` names and shapes every tensor once):

- ``scripted`` (the tiny lab model): float weights quantized like AutoRound does, with the
  token chain lab/tiny's docstring describes, computed when planned (small);
- ``random`` (the full-size shape): random bits drawn only when a shard is written, so a
  18.6 GB checkpoint is written shard by shard in seconds without holding it in memory. Values
  are bounded (BF16 of magnitude 2**-6 .. 2**-5, INT4 nibbles with one scale per group) so the
  engine runs on them; the text it generates is noise.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lab.tiny.shape import LM, TINY, VISUAL, Shape

#: safetensors dtype -> bytes per element
DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "I32": 4}
_NUMPY = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32, "I32": np.int32}
#: BF16 exponent field of the random values: 2**(121 - 127) = 2**-6, so |x| in [0.0156, 0.031)
_RANDOM_BF16_EXPONENT = 121
_RANDOM_BF16_WORD = (_RANDOM_BF16_EXPONENT << 7) * 0x0001000100010001
#: GPTQ v1 symmetric 4-bit: every nibble of qzeros holds the zero point 8 stored as 7
_QZEROS_SYMMETRIC = 0x77777777


def to_bf16(a: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (uint16), rounded to nearest even."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


@dataclass(frozen=True)
class Planned:
    """One tensor as planned: safetensors ``dtype``, ``shape``, and ``make()`` -> its array
    (uint16 bits for BF16), called when its shard is written."""

    dtype: str
    shape: tuple[int, ...]
    make: Callable[[], np.ndarray]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * DTYPE_BYTES[self.dtype]


def _fixed(dtype: str, a: np.ndarray) -> Planned:
    return Planned(dtype, tuple(a.shape), lambda: a)


def save_safetensors(tensors: dict[str, Planned], path: Path) -> int:
    """Write ``tensors`` (sorted by name) as one safetensors file at ``path``, each made just
    before it is written; returns the data bytes. Raises ValueError when a made array does not
    have its planned dtype and shape."""
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name in sorted(tensors):
        t = tensors[name]
        header[name] = {"dtype": t.dtype, "shape": list(t.shape),
                        "data_offsets": [offset, offset + t.nbytes]}  # fmt: skip
        offset += t.nbytes
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for name in sorted(tensors):
            t = tensors[name]
            a = np.ascontiguousarray(t.make())
            if a.dtype != _NUMPY[t.dtype] or tuple(a.shape) != t.shape:
                raise ValueError(f"{name}: made {a.dtype}{a.shape}, planned {t.dtype}{t.shape}")
            f.write(memoryview(a).cast("B"))
    return offset


def shard_plan(tensors: dict[str, Planned], max_shard_bytes: int) -> list[dict[str, Planned]]:
    """Tensors split into ``model-0000i-of-0000n`` shards in name order, each at most
    ``max_shard_bytes`` (a larger tensor alone in its shard); a checkpoint smaller than that is
    split in two halves, like the real checkpoint's two shards."""
    names = sorted(tensors)
    total = sum(t.nbytes for t in tensors.values())
    shards: list[dict[str, Planned]] = [{}]
    filled = 0
    for name in names:
        t = tensors[name]
        if total <= max_shard_bytes:
            full = len(shards) == 1 and shards[0] and filled + t.nbytes / 2 > total / 2
        else:
            full = shards[-1] and filled + t.nbytes > max_shard_bytes
        if full:
            shards.append({})
            filled = 0
        shards[-1][name] = t
        filled += t.nbytes
    return shards


class Weights:
    """The checkpoint's tensors by name (``self.t``: name -> :class:`Planned`) at ``shape``.

    ``chain`` (token id -> next id) scripts the tiny model's output; ``random=True`` plans
    random values instead (no chain: the full-size shape)."""

    def __init__(
        self,
        seed: int,
        variant: str,
        chain: dict[int, int],
        shape: Shape = TINY,
        random: bool = False,
    ):
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.variant = variant
        self.chain = chain
        self.s = shape
        self.random = random
        self.t: dict[str, Planned] = {}
        self._streams = 0
        # token embeddings: N(0, 1) rows, near-orthogonal in the hidden dims (scripted only)
        self.embed = (
            None
            if random
            else self.rng.standard_normal((shape.vocab, shape.hidden)).astype(np.float32)
        )

    # ---- values -------------------------------------------------------------------------------
    def _stream(self) -> np.random.Generator:
        """An independent generator per random tensor: the output does not depend on the order
        shards are written in."""
        self._streams += 1
        return np.random.default_rng([self.seed, self._streams])

    def _random(self, dtype: str, shape: tuple[int, ...], mask: int = ~0, bits: int = 0):
        """A tensor of raw random 64-bit words (numpy's fastest draw), each word ANDed with
        ``mask`` and ORed with ``bits``, viewed as ``dtype``."""
        bit_generator = self._stream().bit_generator
        size = math.prod(shape) * DTYPE_BYTES[dtype]

        def make() -> np.ndarray:
            words = bit_generator.random_raw(-(-size // 8))
            if mask != ~0:
                words &= np.uint64(mask)
            if bits:
                words |= np.uint64(bits)
            return words.view(np.uint8)[:size].view(_NUMPY[dtype]).reshape(shape)

        return Planned(dtype, shape, make)

    def _random_bf16(self, shape: tuple[int, ...]) -> Planned:
        # per BF16: sign and mantissa random, exponent _RANDOM_BF16_EXPONENT
        return self._random("BF16", shape, 0x807F807F807F807F, _RANDOM_BF16_WORD)

    def rand(self, shape, std=0.02):
        return (self.rng.standard_normal(shape) * std).astype(np.float32)

    def dense(self, name, shape, std=0.02, value=None):
        shape = tuple(shape)
        if value is not None:
            bits = to_bf16(np.array([value], np.float32))[0]
            self.t[name] = Planned("BF16", shape, lambda: np.full(shape, bits, np.uint16))
        elif self.random:
            self.t[name] = self._random_bf16(shape)
        else:
            self.t[name] = _fixed("BF16", to_bf16(self.rand(shape, std)))

    def linear(self, prefix, out_f, in_f, std=0.02, quantize=False):
        """A linear layer: BF16 ``.weight`` [out, in], or AutoRound/GPTQ int4: ``qweight``
        [in/8, out] int32, ``qzeros`` [in/G, out/8] int32, ``scales`` [in/G, out] F16,
        ``g_idx`` [in] int32."""
        if not quantize:
            self.dense(f"{prefix}.weight", (out_f, in_f), std)
            return
        g = self.s.group
        if in_f % g or out_f % 8:
            raise ValueError(f"{prefix}: [{out_f}, {in_f}] does not pack into int4 groups of {g}")
        zeros = np.full((in_f // g, out_f // 8), _QZEROS_SYMMETRIC, np.uint32).view(np.int32)
        g_idx = (np.arange(in_f) // g).astype(np.int32)
        if self.random:
            # symmetric int4 in -8..7 has std ~4.6: scale so the weights' std is ~``std``
            scale = np.float16(std / 4.6)
            self.t[f"{prefix}.qweight"] = self._random("I32", (in_f // 8, out_f))
            self.t[f"{prefix}.scales"] = Planned(
                "F16", (in_f // g, out_f), lambda: np.full((in_f // g, out_f), scale)
            )
        else:
            wt = self.rand((out_f, in_f), std).T  # [in, out], GPTQ packs along the input dim
            groups = wt.reshape(in_f // g, g, out_f)
            scales = np.maximum(np.abs(groups).max(axis=1) / 7.0, 1e-8)  # [in/G, out], sym int4
            q = np.clip(np.rint(groups / scales[:, None, :]), -8, 7).astype(np.int32) + 8
            q = q.reshape(in_f, out_f).astype(np.uint32)
            packed = np.zeros((in_f // 8, out_f), np.uint32)
            for j in range(8):  # nibble j of row r holds input row 8r+j
                packed |= q[j::8] << (4 * j)
            self.t[f"{prefix}.qweight"] = _fixed("I32", packed.view(np.int32))
            self.t[f"{prefix}.scales"] = _fixed("F16", scales.astype(np.float16))
        self.t[f"{prefix}.qzeros"] = _fixed("I32", zeros)
        self.t[f"{prefix}.g_idx"] = _fixed("I32", g_idx)

    def gemma_norm(self, name, dim):
        # Qwen3.5 RMSNorms are Gemma-style (x * (1 + w)): zeros = identity scale
        self.dense(name, (dim,), value=0.0)

    # ---- layout -------------------------------------------------------------------------------
    def decoder_layer(self, p: str, kind: str, quantize: bool):
        s, q = self.s, quantize
        small = 0.002  # output projections: keep each block's write to the residual tiny
        self.gemma_norm(f"{p}.input_layernorm.weight", s.hidden)
        self.gemma_norm(f"{p}.post_attention_layernorm.weight", s.hidden)
        if kind == "linear_attention":
            a = f"{p}.linear_attn"
            self.linear(f"{a}.in_proj_qkv", s.conv_dim, s.hidden, quantize=q)
            self.linear(f"{a}.in_proj_z", s.value_dim, s.hidden, quantize=q)
            self.linear(f"{a}.in_proj_b", s.lin_v_heads, s.hidden)  # 16-bit in AutoRound's export
            self.linear(f"{a}.in_proj_a", s.lin_v_heads, s.hidden)
            self.dense(f"{a}.conv1d.weight", (s.conv_dim, 1, s.conv_k), std=0.3)
            a_log = np.log(self.rng.uniform(1, 16, s.lin_v_heads)).astype(np.float32)
            self.t[f"{a}.A_log"] = _fixed("F32", a_log)
            self.dense(f"{a}.dt_bias", (s.lin_v_heads,), value=1.0)
            self.dense(f"{a}.norm.weight", (s.lin_v_dim,), value=1.0)  # RMSNormGated: plain scale
            self.linear(f"{a}.out_proj", s.hidden, s.value_dim, std=small, quantize=q)
        else:
            a = f"{p}.self_attn"
            self.linear(f"{a}.q_proj", 2 * s.heads * s.head_dim, s.hidden, quantize=q)  # q + gate
            self.linear(f"{a}.k_proj", s.kv_heads * s.head_dim, s.hidden, quantize=q)
            self.linear(f"{a}.v_proj", s.kv_heads * s.head_dim, s.hidden, quantize=q)
            self.linear(f"{a}.o_proj", s.hidden, s.heads * s.head_dim, std=small, quantize=q)
            self.gemma_norm(f"{a}.q_norm.weight", s.head_dim)
            self.gemma_norm(f"{a}.k_norm.weight", s.head_dim)
        self.linear(f"{p}.mlp.gate_proj", s.intermediate, s.hidden, quantize=q)
        self.linear(f"{p}.mlp.up_proj", s.intermediate, s.hidden, quantize=q)
        self.linear(f"{p}.mlp.down_proj", s.hidden, s.intermediate, std=small, quantize=q)

    def lm_head(self):
        """Scripted: rows of tiny noise, plus for each scripted successor the direction of its
        predecessor (logit ~30 vs ~N(0, 2.7) for the others). Random: random rows."""
        s = self.s
        if self.random:
            self.dense("lm_head.weight", (s.vocab, s.hidden))
            return
        head = self.rand((s.vocab, s.hidden), 0.02)
        unit = self.embed / np.linalg.norm(self.embed, axis=1, keepdims=True)
        for prev, nxt in self.chain.items():
            head[nxt] += 30.0 / np.sqrt(s.hidden) * unit[prev]
        self.t["lm_head.weight"] = _fixed("BF16", to_bf16(head))

    def embed_tokens(self, name: str):
        if self.random:
            self.dense(name, (self.s.vocab, self.s.hidden))
        else:
            self.t[name] = _fixed("BF16", to_bf16(self.embed))

    def visual(self):
        v = self.s.vision_sizes
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
        self.dense(f"{m}.linear_fc2.weight", (self.s.hidden, merged))
        self.dense(f"{m}.linear_fc2.bias", (self.s.hidden,), value=0.0)

    def mtp(self):
        # qwen3_5_mtp.py: fc [H, 2H] over concat(norm(embed(t+1)), norm(hidden(t))); scripted,
        # fc = [identity | 0] -> embed(t+1), so drafts follow the chain. BF16 (not quantized).
        h = self.s.hidden
        if self.random:
            self.dense("mtp.fc.weight", (h, 2 * h))
        else:
            fc = np.concatenate([np.eye(h), np.zeros((h, h))], axis=1)
            self.t["mtp.fc.weight"] = _fixed("BF16", to_bf16(fc + self.rand(fc.shape, 0.001)))
        for n in ("norm", "pre_fc_norm_embedding", "pre_fc_norm_hidden"):
            self.gemma_norm(f"mtp.{n}.weight", h)
        for k in range(self.s.mtp_layers):
            self.decoder_layer(f"mtp.layers.{k}", "full_attention", quantize=False)

    def build_hybrid(self, quantize: bool):
        """Qwen3_5ForConditionalGeneration: embeddings, decoder, norm, lm_head, vision, MTP."""
        self.embed_tokens(f"{LM}.embed_tokens.weight")
        for i, kind in enumerate(self.s.layer_types):
            self.decoder_layer(f"{LM}.layers.{i}", kind, quantize)
        self.gemma_norm(f"{LM}.norm.weight", self.s.hidden)
        self.lm_head()
        self.visual()
        self.mtp()

    def build_dense(self):
        """Qwen3ForCausalLM: standard RMSNorm (weight multiplies: ones), no output gate."""
        s = self.s
        self.embed_tokens("model.embed_tokens.weight")
        for i in range(s.num_layers):
            p = f"model.layers.{i}"
            self.dense(f"{p}.input_layernorm.weight", (s.hidden,), value=1.0)
            self.dense(f"{p}.post_attention_layernorm.weight", (s.hidden,), value=1.0)
            a = f"{p}.self_attn"
            self.linear(f"{a}.q_proj", s.heads * s.head_dim, s.hidden)
            self.linear(f"{a}.k_proj", s.kv_heads * s.head_dim, s.hidden)
            self.linear(f"{a}.v_proj", s.kv_heads * s.head_dim, s.hidden)
            self.linear(f"{a}.o_proj", s.hidden, s.heads * s.head_dim, std=0.002)
            self.dense(f"{a}.q_norm.weight", (s.head_dim,), value=1.0)
            self.dense(f"{a}.k_norm.weight", (s.head_dim,), value=1.0)
            self.linear(f"{p}.mlp.gate_proj", s.intermediate, s.hidden)
            self.linear(f"{p}.mlp.up_proj", s.intermediate, s.hidden)
            self.linear(f"{p}.mlp.down_proj", s.hidden, s.intermediate, std=0.002)
        self.dense("model.norm.weight", (s.hidden,), value=1.0)
        self.lm_head()

    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.t.values())

    def params(self) -> Iterator[tuple[str, int]]:
        """(name, parameter count) of every tensor; an int4 ``qweight`` counts 8 per int32."""
        for name, t in self.t.items():
            n = math.prod(t.shape)
            yield name, n * 8 if name.endswith(".qweight") else n
