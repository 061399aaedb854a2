"""Build a tiny, LOADABLE checkpoint in the shape of Qwen3.6-27B (Qwen3.5 hybrid architecture).

Unlike lab/checkpoint.py (real config values, placeholder tensor shapes, never loaded),
every tensor here has the shape vLLM 0.22.1 expects for the tiny config written next to it, so
the CPU engine loads and runs it. Tensor NAMES are the real checkpoint's:

  model.language_model.embed_tokens.weight, model.language_model.norm.weight, lm_head.weight
  model.language_model.layers.{i}.input_layernorm / post_attention_layernorm .weight
  linear-attention layers (gated delta net), vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py:
    .linear_attn.in_proj_qkv [2*key_dim+value_dim, H]  .in_proj_z [value_dim, H]
    .linear_attn.in_proj_b / in_proj_a [num_v_heads, H]  .conv1d.weight [conv_dim, 1, K]
    .linear_attn.A_log (F32) / dt_bias [num_v_heads]     .norm.weight [head_v_dim]
    .linear_attn.out_proj [H, value_dim]
  full-attention layers (Qwen3NextAttention, attn_output_gate: q_proj is 2x):
    .self_attn.q_proj [2*heads*head_dim, H]  k_proj/v_proj [kv_heads*head_dim, H]
    .self_attn.o_proj [H, heads*head_dim]    q_norm/k_norm [head_dim]
  .mlp.gate_proj/up_proj [I, H], down_proj [H, I]
  model.visual.* (Qwen3_VisionTransformer, tiny), mtp.* (qwen3_5_mtp.py: fc [H, 2H], norm,
  pre_fc_norm_embedding, pre_fc_norm_hidden, layers.0.* = one full-attention decoder layer)

Variants:
  hybrid       Qwen3_5ForConditionalGeneration, BF16 weights (what the real model is, unquantized)
  hybrid-int4  the same with AutoRound's quantization_config (auto_round:auto_gptq, W4 g128 sym):
               decoder linears as GPTQ-packed qweight/qzeros/scales/g_idx; in_proj_a/b, MTP,
               vision, lm_head, embeddings stay BF16 (as the public Qwen3.6 AutoRound cards say)
  dense        fallback: Qwen3ForCausalLM (plain attention + MLP), BF16

The weights are random but scripted so the output is deterministic and exercises the parsers:
every block's output projection is tiny, so the residual stream is ~ the token embedding, and
lm_head rows are built so token -> next token is a fixed chain (a bigram "script"):
  prompt ending "<think>\\n" (thinking on)  -> "<reasoning sentence>" "</think>" "\\n\\n<answer>" <|im_end|>
  prompt ending "</think>\\n\\n" (thinking off) -> "<tool_call>" "\\n<function=get_weather>"
      "\\n<parameter=city>" "\\nParis" "\\n</parameter>" "\\n</function>\\n" "</tool_call>" <|im_end|>
The MTP head predicts the same chain (fc = [identity | 0]), so drafts would be accepted.
Any other prompt ending gives pseudo-random tokens (fine for benchmarks with ignore_eos).

Only the standard library, numpy and tokenizers are needed (safetensors files are written
directly, BF16 included: numpy has no bfloat16, safetensors.numpy cannot write it).

Sizes (``--shape``, lab/tiny/shape.py): ``tiny`` (the lab's; scripted values as above) or
``qwen3.6-27b`` (the real model's text shape: hidden 5120, 64 layers, gated delta net 16 key /
48 value heads x 128, intermediate 17408, vocab 248320, MTP head; random values, about 18.6 GB
for hybrid-int4, written shard by shard: the GPU serving check, benchmarks/gpu-serve). The
layout code is the same at both sizes; only where the values come from differs.

Only the standard library, numpy and tokenizers are needed (safetensors files are written
directly, BF16 included: numpy has no bfloat16, safetensors.numpy cannot write it).

usage: python -m lab.tiny DEST [--variant hybrid|hybrid-int4|dense] [--shape tiny|qwen3.6-27b]
                               [--seed N] [--max-shard-gib G]
"""

from __future__ import annotations

import argparse
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tokenizers import Tokenizer

from lab.tiny.shape import (
    SHAPES,
    TINY,
    VARIANTS,
    Shape,
    config_json,
    generation_config,
    preprocessor_config,
)
from lab.tiny.tokenizer import build_tokenizer, script_chain, tokenizer_config
from lab.tiny.weights import Weights, save_safetensors, shard_plan

#: shard size limit of the written checkpoint (Hugging Face's save_pretrained splits at 5 GB;
#: 1 GiB keeps each shard's random draw short and gives the full-size shape ~18 shards, like
#: the published INT4 checkpoints)
MAX_SHARD_BYTES = 1 << 30


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def plan_weights(
    variant: str = "hybrid", shape: Shape = TINY, seed: int = 0, tok: Tokenizer | None = None
) -> Weights:
    """Every tensor of ``variant`` at ``shape``, planned (values drawn when written): scripted
    at the tiny shape, random at any other. ``tok``: the checkpoint's tokenizer (built when
    None). Raises ValueError for an unknown variant."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; known: {', '.join(VARIANTS)}")
    tok = tok or build_tokenizer(shape.vocab)
    w = Weights(seed, variant, script_chain(tok), shape, random=shape is not TINY)
    if variant == "dense":
        w.build_dense()
    else:
        w.build_hybrid(quantize=variant == "hybrid-int4")
    return w


def build_checkpoint(
    dest: Path,
    variant: str = "hybrid",
    seed: int = 0,
    shape: Shape = TINY,
    max_shard_bytes: int = MAX_SHARD_BYTES,
) -> Path:
    """Write the checkpoint (config, tokenizer, safetensors shards + index) into ``dest``
    (created if missing) and return ``dest``. Raises ValueError for an unknown variant."""
    tok = build_tokenizer(shape.vocab)
    w = plan_weights(variant, shape, seed, tok)
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    tok.save(str(dest / "tokenizer.json"))
    _write_json(dest / "tokenizer_config.json", tokenizer_config(tok))
    _write_json(dest / "config.json", config_json(tok, variant, shape))
    _write_json(dest / "generation_config.json", generation_config(tok))
    if variant != "dense":
        _write_json(dest / "preprocessor_config.json", preprocessor_config(shape))
    shards = shard_plan(w.t, max_shard_bytes)
    files = {f"model-{k:05d}-of-{len(shards):05d}.safetensors": part
             for k, part in enumerate(shards, 1)}  # fmt: skip
    # numpy's draws and the writes release the GIL: shards are written by parallel threads
    with ThreadPoolExecutor(max_workers=min(len(files), os.cpu_count() or 1)) as pool:
        sizes = pool.map(lambda item: save_safetensors(item[1], dest / item[0]), files.items())
        total = sum(sizes)
    weight_map = {n: fn for fn, part in files.items() for n in part}
    _write_json(dest / "model.safetensors.index.json",
                {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))})  # fmt: skip
    return dest


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dest", type=Path)
    ap.add_argument("--variant", choices=VARIANTS, default="hybrid")
    ap.add_argument("--shape", choices=sorted(SHAPES), default=TINY.name)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-shard-gib", type=float, default=MAX_SHARD_BYTES / (1 << 30))
    args = ap.parse_args(argv)
    print(
        build_checkpoint(
            args.dest,
            args.variant,
            args.seed,
            SHAPES[args.shape],
            int(args.max_shard_gib * (1 << 30)),
        )
    )
    return 0
