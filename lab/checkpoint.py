"""Build a tiny checkpoint directory shaped like Qwen3.6-27B AutoRound INT4.

rigup never downloads the real model in tests (it is ~18 GB and the lab has no Hugging Face
access). What the on-target checks need is a directory that vLLM's *config* code reads exactly
like the real one: the same ``config.json`` (architecture, text/vision sub-configs, MTP fields,
AutoRound ``quantization_config``), the same side files, and a safetensors index whose tensor
NAMES follow the real checkpoint. Tensor SHAPES are tiny placeholders (a few bytes each): no
test may load these weights into a model.

Field names follow vLLM 0.22.1's ``vllm/transformers_utils/configs/qwen3_5.py``
(``Qwen3_5Config`` / ``Qwen3_5TextConfig`` / ``Qwen3_5VisionConfig``), the Qwen3.5 model code
(``vllm/model_executor/models/qwen3_5.py``, ``qwen3_5_mtp.py``, ``qwen3_vl.py``,
``layers/mamba/gdn/qwen_gdn_linear_attn.py``) and vLLM's AutoRound reader
(``vllm/model_executor/layers/quantization/inc.py``, ``INCConfig.from_config``).

NOT VERIFIED against the real files (no Hugging Face access from the lab):
- text/vision values are the Qwen3.5-27B dense values as published in third-party copies of its
  config.json (hidden 5120, 64 layers = 3 x linear_attention + 1 x full_attention repeated,
  24 q heads / 4 kv heads x 256, gated-delta-net 16 k-heads / 48 v-heads x 128, conv kernel 4,
  vocab 248320, MTP 1 layer, vision depth 27 x 1152 -> out_hidden_size 5120); Qwen3.6-27B is
  assumed to share the architecture;
- the AutoRound ``quantization_config`` (``block_name_to_quantize``, the ``extra_config`` that
  keeps ``linear_attn.in_proj_a``/``in_proj_b`` at 16 bit, version fields) follows what public
  Qwen3.6-27B AutoRound model cards describe (vision, MTP, lm_head, norms and in_proj_a/b left
  unquantized), not a downloaded file;
- special-token ids other than image/video/vision start/end and eos/pad, the chat template, the
  generation defaults and the preprocessor values are plausible stand-ins;
- unquantized tensors are stored as F16 (numpy has no bfloat16; the real files use BF16).

Runs with the controller venv (numpy + safetensors, no torch): ``safetensors.numpy.save_file``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

VARIANTS = ("qwen3.6-27b-autoround-int4",)

# ---- the real 27B's shape (see the NOT VERIFIED note above) ---------------------------------
NUM_LAYERS = 64
FULL_ATTENTION_INTERVAL = 4
HIDDEN = 5120
VISION_DEPTH = 27
MTP_LAYERS = 1
LAYER_TYPES = [
    "full_attention" if (i + 1) % FULL_ATTENTION_INTERVAL == 0 else "linear_attention"
    for i in range(NUM_LAYERS)
]

# Qwen3.5 special tokens (Qwen2.5 layout shifted by +96401; image/video/vision ids are the ones
# Qwen3_5Config defaults to in vLLM 0.22.1, eos/pad those of the published config).
SPECIAL_TOKENS = {
    "<|endoftext|>": 248044,
    "<|im_start|>": 248045,
    "<|im_end|>": 248046,
    "<|object_ref_start|>": 248047,
    "<|object_ref_end|>": 248048,
    "<|box_start|>": 248049,
    "<|box_end|>": 248050,
    "<|quad_start|>": 248051,
    "<|quad_end|>": 248052,
    "<|vision_start|>": 248053,
    "<|vision_end|>": 248054,
    "<|vision_pad|>": 248055,
    "<|image_pad|>": 248056,
    "<|video_pad|>": 248057,
    "<tool_call>": 248058,
    "</tool_call>": 248059,
    "<tool_response>": 248066,
    "</tool_response>": 248067,
    "<think>": 248068,
    "</think>": 248069,
}
# Tokens that are plain text pieces in Qwen tokenizers (special=false): the reasoning/tool tags.
NON_SPECIAL = {
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
}

LM = "model.language_model"
VISUAL = "model.visual"


def text_config() -> dict:
    return {
        "model_type": "qwen3_5_text",
        "architectures": None,
        "vocab_size": 248320,
        "hidden_size": HIDDEN,
        "intermediate_size": 17408,
        "num_hidden_layers": NUM_LAYERS,
        "num_attention_heads": 24,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "hidden_act": "silu",
        "max_position_embeddings": 262144,
        "initializer_range": 0.02,
        "rms_norm_eps": 1e-06,
        "use_cache": True,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_output_gate": True,
        "full_attention_interval": FULL_ATTENTION_INTERVAL,
        "layer_types": LAYER_TYPES,
        # gated delta net (linear attention)
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 48,
        "mamba_ssm_dtype": "float32",
        # multi-token prediction head (what `--speculative-config {"method":"mtp"}` uses)
        "mtp_num_hidden_layers": MTP_LAYERS,
        "mtp_use_dedicated_embeddings": False,
        "mlp_only_layers": [],
        "partial_rotary_factor": 0.25,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000000,
            "partial_rotary_factor": 0.25,
            "mrope_interleaved": True,
            "mrope_section": [11, 11, 10],
        },
        "dtype": "bfloat16",
        "bos_token_id": None,
        "eos_token_id": 248044,
        "pad_token_id": None,
    }


def vision_config() -> dict:
    return {
        "model_type": "qwen3_5",
        "depth": VISION_DEPTH,
        "hidden_size": 1152,
        "hidden_act": "gelu_pytorch_tanh",
        "intermediate_size": 4304,
        "num_heads": 16,
        "in_channels": 3,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        # the language model's hidden size; vLLM's Qwen3_5VisionConfig defaults to 3584
        "out_hidden_size": HIDDEN,
        "num_position_embeddings": 2304,
        "deepstack_visual_indexes": [],
        "initializer_range": 0.02,
    }


def quantization_config() -> dict:
    # AutoRound "auto_gptq" packing, W4 g128 symmetric. Only the decoder blocks are quantized
    # (block_name_to_quantize); vision, MTP and lm_head stay 16-bit. extra_config keeps the tiny
    # gated-delta-net in_proj_a / in_proj_b at 16 bit, as the public model cards describe.
    extra = {}
    for i, kind in enumerate(LAYER_TYPES):
        if kind == "linear_attention":
            for name in ("in_proj_a", "in_proj_b"):
                extra[f"{LM}.layers.{i}.linear_attn.{name}"] = {"bits": 16, "data_type": "float"}
    return {
        "quant_method": "auto-round",
        "packing_format": "auto_round:auto_gptq",
        "bits": 4,
        "group_size": 128,
        "sym": True,
        "data_type": "int",
        "iters": 200,
        "autoround_version": "0.10.0",
        "block_name_to_quantize": f"{LM}.layers",
        "extra_config": extra,
    }


def config_json() -> dict:
    return {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "text_config": text_config(),
        "vision_config": vision_config(),
        "image_token_id": SPECIAL_TOKENS["<|image_pad|>"],
        "video_token_id": SPECIAL_TOKENS["<|video_pad|>"],
        "vision_start_token_id": SPECIAL_TOKENS["<|vision_start|>"],
        "vision_end_token_id": SPECIAL_TOKENS["<|vision_end|>"],
        "tie_word_embeddings": False,
        "dtype": "bfloat16",
        "transformers_version": "5.6.0",
        "quantization_config": quantization_config(),
    }


# ---- tensors ---------------------------------------------------------------------------------
def _quantized(prefix: str) -> dict[str, np.ndarray]:
    """GPTQ-packed int4 linear as AutoRound exports it: qweight/qzeros int32, scales f16."""
    return {
        f"{prefix}.qweight": np.zeros((2, 4), dtype=np.int32),
        # symmetric 4-bit: every nibble holds zero-point 8 stored as 7 (GPTQ v1)
        f"{prefix}.qzeros": np.full((1, 1), 0x77777777, dtype=np.int32),
        f"{prefix}.scales": np.ones((1, 4), dtype=np.float16),
    }


def _dense(name: str, shape: tuple[int, ...] = (2, 2), fill: float = 0.0) -> dict:
    return {name: np.full(shape, fill, dtype=np.float16)}


def _norm(name: str) -> dict:
    return {name: np.ones((2,), dtype=np.float16)}


def _decoder_layer(i: int) -> dict[str, np.ndarray]:
    p = f"{LM}.layers.{i}"
    t: dict[str, np.ndarray] = {}
    t |= _norm(f"{p}.input_layernorm.weight")
    t |= _norm(f"{p}.post_attention_layernorm.weight")
    if LAYER_TYPES[i] == "linear_attention":
        a = f"{p}.linear_attn"
        t |= _quantized(f"{a}.in_proj_qkv")
        t |= _quantized(f"{a}.in_proj_z")
        t |= _quantized(f"{a}.out_proj")
        t |= _dense(f"{a}.in_proj_a.weight")
        t |= _dense(f"{a}.in_proj_b.weight")
        t |= _dense(f"{a}.conv1d.weight", (2, 1, 4))
        t |= {f"{a}.A_log": np.zeros((2,), dtype=np.float32)}
        t |= _dense(f"{a}.dt_bias", (2,), 1.0)
        t |= _norm(f"{a}.norm.weight")
    else:
        a = f"{p}.self_attn"
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            t |= _quantized(f"{a}.{proj}")
        t |= _norm(f"{a}.q_norm.weight")
        t |= _norm(f"{a}.k_norm.weight")
    for proj in ("gate_proj", "up_proj", "down_proj"):
        t |= _quantized(f"{p}.mlp.{proj}")
    return t


def _visual() -> dict[str, np.ndarray]:
    t: dict[str, np.ndarray] = {}
    t |= _dense(f"{VISUAL}.patch_embed.proj.weight", (2, 3, 2, 2, 2))
    t |= _dense(f"{VISUAL}.patch_embed.proj.bias", (2,))
    t |= _dense(f"{VISUAL}.pos_embed.weight")
    for j in range(VISION_DEPTH):
        b = f"{VISUAL}.blocks.{j}"
        for n in ("norm1", "norm2"):
            t |= _norm(f"{b}.{n}.weight") | _dense(f"{b}.{n}.bias", (2,))
        for lin in ("attn.qkv", "attn.proj", "mlp.linear_fc1", "mlp.linear_fc2"):
            t |= _dense(f"{b}.{lin}.weight") | _dense(f"{b}.{lin}.bias", (2,))
    m = f"{VISUAL}.merger"
    t |= _norm(f"{m}.norm.weight") | _dense(f"{m}.norm.bias", (2,))
    for lin in ("linear_fc1", "linear_fc2"):
        t |= _dense(f"{m}.{lin}.weight") | _dense(f"{m}.{lin}.bias", (2,))
    return t


def _mtp() -> dict[str, np.ndarray]:
    # MTP head kept in 16 bit (not under block_name_to_quantize).
    t: dict[str, np.ndarray] = {}
    t |= _dense("mtp.fc.weight")
    for n in ("norm", "pre_fc_norm_embedding", "pre_fc_norm_hidden"):
        t |= _norm(f"mtp.{n}.weight")
    for k in range(MTP_LAYERS):
        p = f"mtp.layers.{k}"
        t |= _norm(f"{p}.input_layernorm.weight") | _norm(f"{p}.post_attention_layernorm.weight")
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            t |= _dense(f"{p}.self_attn.{proj}.weight")
        t |= _norm(f"{p}.self_attn.q_norm.weight") | _norm(f"{p}.self_attn.k_norm.weight")
        for proj in ("gate_proj", "up_proj", "down_proj"):
            t |= _dense(f"{p}.mlp.{proj}.weight")
    return t


def shards() -> dict[str, dict[str, np.ndarray]]:
    """Two shards: embeddings + first half of the decoder / the rest, vision, MTP, lm_head."""
    first: dict[str, np.ndarray] = _dense(f"{LM}.embed_tokens.weight")
    for i in range(NUM_LAYERS // 2):
        first |= _decoder_layer(i)
    second: dict[str, np.ndarray] = {}
    for i in range(NUM_LAYERS // 2, NUM_LAYERS):
        second |= _decoder_layer(i)
    second |= _norm(f"{LM}.norm.weight")
    second |= _dense("lm_head.weight")
    second |= _visual()
    second |= _mtp()
    return {
        "model-00001-of-00002.safetensors": first,
        "model-00002-of-00002.safetensors": second,
    }


# ---- tokenizer and side files ----------------------------------------------------------------
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'system' or message['role'] == 'user' %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- elif message['role'] == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- elif message['role'] == 'tool' %}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + message['content']"
    " + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- else %}"
    "{{- '<think>\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)


def tokenizer_json() -> dict:
    """A valid byte-level BPE tokenizer.json: 256 byte symbols, no merges, Qwen specials."""
    # GPT-2 byte-to-unicode table, as byte-level BPE tokenizers spell their vocab:
    # printable bytes map to themselves, the others to 256, 257, ... in byte order.
    printable = {*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)}
    byte_char: dict[int, str] = {}
    shifted = 256
    for b in range(256):
        if b in printable:
            byte_char[b] = chr(b)
        else:
            byte_char[b] = chr(shifted)
            shifted += 1
    vocab = {byte_char[b]: b for b in range(256)}
    # The special tokens also sit in the model vocab at their real ids: `tokenizers` keeps an
    # added token's id only when the model vocab already has it (otherwise it appends it after
    # the vocab), and a real 248k-entry vocab would not be tiny.
    vocab |= SPECIAL_TOKENS
    added = [
        {
            "id": tid,
            "content": tok,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": tok not in NON_SPECIAL,
        }
        for tok, tid in SPECIAL_TOKENS.items()
    ]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {
            "type": "ByteLevel",
            "add_prefix_space": False,
            "trim_offsets": False,
            "use_regex": True,
        },
        "post_processor": {
            "type": "ByteLevel",
            "add_prefix_space": False,
            "trim_offsets": False,
            "use_regex": False,
        },
        "decoder": {
            "type": "ByteLevel",
            "add_prefix_space": False,
            "trim_offsets": False,
            "use_regex": False,
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": "",
            "end_of_word_suffix": "",
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": [],
        },
    }


def tokenizer_config() -> dict:
    return {
        "tokenizer_class": "Qwen2Tokenizer",
        "model_max_length": 262144,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "errors": "replace",
        "split_special_tokens": False,
        "clean_up_tokenization_spaces": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(tid): {
                "content": tok,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": tok not in NON_SPECIAL,
            }
            for tok, tid in SPECIAL_TOKENS.items()
        },
        "chat_template": CHAT_TEMPLATE,
    }


def generation_config() -> dict:
    return {
        "bos_token_id": 248044,
        "eos_token_id": [248046, 248044],
        "pad_token_id": 248044,
        "do_sample": True,
        "temperature": 0.6,
        "top_k": 20,
        "top_p": 0.95,
        "transformers_version": "5.6.0",
    }


def preprocessor_config() -> dict:
    return {
        "image_processor_type": "Qwen2VLImageProcessorFast",
        "processor_class": "Qwen3VLProcessor",
        "do_rescale": True,
        "do_normalize": True,
        "rescale_factor": 0.00392156862745098,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "patch_size": 16,
        "temporal_patch_size": 2,
        "merge_size": 2,
        "size": {"shortest_edge": 65536, "longest_edge": 16777216},
    }


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def build_checkpoint(dest: Path, *, variant: str = "qwen3.6-27b-autoround-int4") -> Path:
    """Write the tiny checkpoint into ``dest`` (created if missing) and return ``dest``."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown checkpoint variant {variant!r}; known: {', '.join(VARIANTS)}")
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)

    _write_json(dest / "config.json", config_json())
    _write_json(dest / "generation_config.json", generation_config())
    _write_json(dest / "preprocessor_config.json", preprocessor_config())
    _write_json(dest / "tokenizer_config.json", tokenizer_config())
    _write_json(dest / "tokenizer.json", tokenizer_json())

    weight_map: dict[str, str] = {}
    total = 0
    for filename, tensors in shards().items():
        save_file(tensors, str(dest / filename), metadata={"format": "pt"})
        for name, array in tensors.items():
            weight_map[name] = filename
            total += array.nbytes
    _write_json(
        dest / "model.safetensors.index.json",
        {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))},
    )
    return dest


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: checkpoint.py DEST", file=sys.stderr)
        return 2
    print(build_checkpoint(Path(argv[0])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
