"""The tiny checkpoint's sizes and its config files (config.json, generation_config.json,
preprocessor_config.json), named as in Qwen3.6-27B's (vllm/transformers_utils/configs/qwen3_5.py
of vLLM 0.22.1)."""

from __future__ import annotations

from tokenizers import Tokenizer

VARIANTS = ("hybrid", "hybrid-int4", "dense")

# ---- tiny sizes (all divisible as vLLM / the CPU kernels need) --------------------------------
VOCAB = 1024  # config vocab_size (embedding rows); the tokenizer uses fewer ids
HIDDEN = 128
INTERMEDIATE = 256
NUM_LAYERS = 4  # 3 x linear_attention + 1 x full_attention (full_attention_interval 4)
FULL_ATTENTION_INTERVAL = 4
HEADS, KV_HEADS, HEAD_DIM = 4, 2, 64  # CPU attention head sizes: 32, 64, 80, ... (cpu_attn.py)
PARTIAL_ROTARY = 0.25  # rotary_dim 16 -> 8 frequency pairs
MROPE_SECTION = [3, 3, 2]  # sums to rotary_dim/2 (the 27B: [11, 11, 10] for rotary_dim 64)
LIN_K_HEADS, LIN_V_HEADS, LIN_K_DIM, LIN_V_DIM, CONV_K = 2, 4, 32, 32, 4
MTP_LAYERS = 1
GROUP = 128  # AutoRound group size; every quantized in_features is a multiple of it
VISION = dict(depth=2, hidden_size=64, intermediate_size=128, num_heads=2, patch_size=16,
              temporal_patch_size=2, spatial_merge_size=2, num_position_embeddings=64)  # fmt: skip
LAYER_TYPES = [
    "full_attention" if (i + 1) % FULL_ATTENTION_INTERVAL == 0 else "linear_attention"
    for i in range(NUM_LAYERS)
]
KEY_DIM, VALUE_DIM = LIN_K_HEADS * LIN_K_DIM, LIN_V_HEADS * LIN_V_DIM
CONV_DIM = 2 * KEY_DIM + VALUE_DIM

LM = "model.language_model"
VISUAL = "model.visual"


def text_config(tok: Tokenizer) -> dict:
    return {
        "model_type": "qwen3_5_text",
        "vocab_size": VOCAB,
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": NUM_LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
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
        "linear_conv_kernel_dim": CONV_K,
        "linear_key_head_dim": LIN_K_DIM,
        "linear_value_head_dim": LIN_V_DIM,
        "linear_num_key_heads": LIN_K_HEADS,
        "linear_num_value_heads": LIN_V_HEADS,
        "mamba_ssm_dtype": "float32",
        "mtp_num_hidden_layers": MTP_LAYERS,
        "mtp_use_dedicated_embeddings": False,
        "mlp_only_layers": [],
        "partial_rotary_factor": PARTIAL_ROTARY,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000000,
            "partial_rotary_factor": PARTIAL_ROTARY,
            "mrope_interleaved": True,
            "mrope_section": MROPE_SECTION,
        },
        "dtype": "bfloat16",
        "bos_token_id": None,
        "eos_token_id": tok.token_to_id("<|endoftext|>"),
        "pad_token_id": None,
    }


def quantization_config() -> dict:
    extra = {}
    for i, kind in enumerate(LAYER_TYPES):
        if kind == "linear_attention":
            for name in ("in_proj_a", "in_proj_b"):
                extra[f"{LM}.layers.{i}.linear_attn.{name}"] = {"bits": 16, "data_type": "float"}
    return {
        "quant_method": "auto-round",
        "packing_format": "auto_round:auto_gptq",
        "bits": 4,
        "group_size": GROUP,
        "sym": True,
        "data_type": "int",
        "iters": 200,
        "autoround_version": "0.10.0",
        "block_name_to_quantize": f"{LM}.layers",
        "extra_config": extra,
    }


def config_json(tok: Tokenizer, variant: str) -> dict:
    tid = tok.token_to_id
    if variant == "dense":
        return {
            "architectures": ["Qwen3ForCausalLM"],
            "model_type": "qwen3",
            "vocab_size": VOCAB,
            "hidden_size": HIDDEN,
            "intermediate_size": INTERMEDIATE,
            "num_hidden_layers": NUM_LAYERS,
            "num_attention_heads": HEADS,
            "num_key_value_heads": KV_HEADS,
            "head_dim": HEAD_DIM,
            "hidden_act": "silu",
            "max_position_embeddings": 262144,
            "rms_norm_eps": 1e-06,
            "rope_theta": 1000000,
            "tie_word_embeddings": False,
            "attention_bias": False,
            "torch_dtype": "bfloat16",
            "bos_token_id": tid("<|endoftext|>"),
            "eos_token_id": tid("<|im_end|>"),
        }
    v = VISION
    cfg = {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "text_config": text_config(tok),
        "vision_config": {
            "model_type": "qwen3_5",
            "depth": v["depth"],
            "hidden_size": v["hidden_size"],
            "hidden_act": "gelu_pytorch_tanh",
            "intermediate_size": v["intermediate_size"],
            "num_heads": v["num_heads"],
            "in_channels": 3,
            "patch_size": v["patch_size"],
            "spatial_merge_size": v["spatial_merge_size"],
            "temporal_patch_size": v["temporal_patch_size"],
            "out_hidden_size": HIDDEN,
            "num_position_embeddings": v["num_position_embeddings"],
            "deepstack_visual_indexes": [],
            "initializer_range": 0.02,
        },
        "image_token_id": tid("<|image_pad|>"),
        "video_token_id": tid("<|video_pad|>"),
        "vision_start_token_id": tid("<|vision_start|>"),
        "vision_end_token_id": tid("<|vision_end|>"),
        "tie_word_embeddings": False,
        "dtype": "bfloat16",
        "transformers_version": "5.6.0",
    }
    if variant == "hybrid-int4":
        cfg["quantization_config"] = quantization_config()
    return cfg


def generation_config(tok: Tokenizer) -> dict:
    return {
        "bos_token_id": tok.token_to_id("<|endoftext|>"),
        "eos_token_id": [tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")],
        "pad_token_id": tok.token_to_id("<|endoftext|>"),
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
        "patch_size": VISION["patch_size"],
        "temporal_patch_size": VISION["temporal_patch_size"],
        "merge_size": VISION["spatial_merge_size"],
        "size": {"shortest_edge": 65536, "longest_edge": 16777216},
    }
