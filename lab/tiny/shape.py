"""A Qwen3.6-shaped checkpoint's sizes (:class:`Shape`: the lab's tiny one, the real 27B's text
shape) and its config files (config.json, generation_config.json, preprocessor_config.json),
named as in Qwen3.6-27B's (vllm/transformers_utils/configs/qwen3_5.py of vLLM 0.22.1)."""

from __future__ import annotations

from tokenizers import Tokenizer

from roles.common.model_shape import QWEN36_27B, Shape

VARIANTS = ("hybrid", "hybrid-int4", "dense")

LM = "model.language_model"
VISUAL = "model.visual"


#: The lab's tiny model: every size divisible as vLLM and the CPU kernels need.
TINY = Shape(
    name="tiny",
    vocab=1024,  # the tokenizer covers every id (lab/tiny/tokenizer.py build_tokenizer)
    hidden=128,
    intermediate=256,
    # 8 layers, full attention at 3 and 7 (Qwen3.6's every 4th): each stage of a 2-stage pipeline
    # split keeps a full-attention layer (a 4-layer model fails vLLM's page-size check under
    # pipeline parallel 2, upstream vllm#51752)
    num_layers=8,
    full_attention_interval=4,
    heads=4,
    kv_heads=2,
    head_dim=64,  # CPU attention head sizes: 32, 64, 80, ... (cpu_attn.py)
    partial_rotary=0.25,  # rotary_dim 16 -> 8 frequency pairs
    mrope_section=(3, 3, 2),  # sums to rotary_dim/2 (the 27B: [11, 11, 10] for rotary_dim 64)
    # key head dim == value head dim: the CUDA build's fused GDN prefill kernel
    # (fla/ops/fused_gdn_prefill_post_conv.py) fails to compile for K 32 / V 64
    # (tests/fixtures/vllm-cuda/fail-gdn-prefill-k32-v64.log); the 27B has 128 = 128.
    # 32, not 64: vLLM 0.22.1's CPU build dies at the first request with a GDN key head dim of 64
    # on an AMX host ("Worker proc VllmWorker-0 died unexpectedly", the kernel's "trap invalid
    # opcode"; K 32 serves there, measured in the lab on 2026-12-01). This shape served on the
    # H200's CUDA build too (tests/fixtures/vllm-cuda/h200-runs-2026-12-02); the runs of
    # 2026-12-01 used K = V = 64 with 4 value heads (tests/fixtures/vllm-cuda/h200-runs).
    # value dim 8 x 32 = 256: split over 2 tensor-parallel ranks each keeps 128 input features of
    # the INT4 out_proj, one AutoRound group (a rank with less than a group kills the CPU worker);
    # 2 key heads so tensor parallel 2 splits them too
    lin_k_heads=2,
    lin_v_heads=8,
    lin_k_dim=32,
    lin_v_dim=32,
    conv_k=4,
    mtp_layers=1,
    group=128,  # every quantized in_features is a multiple of it
)

SHAPES = {s.name: s for s in (TINY, QWEN36_27B)}


def text_config(tok: Tokenizer, shape: Shape = TINY) -> dict:
    """Qwen3_5TextConfig of ``shape``, with the tokenizer's end-of-text id."""
    s = shape
    return {
        "model_type": "qwen3_5_text",
        "vocab_size": s.vocab,
        "hidden_size": s.hidden,
        "intermediate_size": s.intermediate,
        "num_hidden_layers": s.num_layers,
        "num_attention_heads": s.heads,
        "num_key_value_heads": s.kv_heads,
        "head_dim": s.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": 262144,
        "initializer_range": 0.02,
        "rms_norm_eps": 1e-06,
        "use_cache": True,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_output_gate": True,
        "full_attention_interval": s.full_attention_interval,
        "layer_types": s.layer_types,
        "linear_conv_kernel_dim": s.conv_k,
        "linear_key_head_dim": s.lin_k_dim,
        "linear_value_head_dim": s.lin_v_dim,
        "linear_num_key_heads": s.lin_k_heads,
        "linear_num_value_heads": s.lin_v_heads,
        "mamba_ssm_dtype": "float32",
        "mtp_num_hidden_layers": s.mtp_layers,
        "mtp_use_dedicated_embeddings": False,
        "mlp_only_layers": [],
        "partial_rotary_factor": s.partial_rotary,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000000,
            "partial_rotary_factor": s.partial_rotary,
            "mrope_interleaved": True,
            "mrope_section": list(s.mrope_section),
        },
        "dtype": "bfloat16",
        "bos_token_id": None,
        "eos_token_id": tok.token_to_id("<|endoftext|>"),
        "pad_token_id": None,
    }


def quantization_config(shape: Shape = TINY) -> dict:
    """AutoRound's quantization_config (auto_round:auto_gptq, W4 g128 symmetric): the decoder
    blocks quantized, every gated-delta-net in_proj_a / in_proj_b kept at 16 bit."""
    extra = {}
    for i, kind in enumerate(shape.layer_types):
        if kind == "linear_attention":
            for name in ("in_proj_a", "in_proj_b"):
                extra[f"{LM}.layers.{i}.linear_attn.{name}"] = {"bits": 16, "data_type": "float"}
    return {
        "quant_method": "auto-round",
        "packing_format": "auto_round:auto_gptq",
        "bits": 4,
        "group_size": shape.group,
        "sym": True,
        "data_type": "int",
        "iters": 200,
        "autoround_version": "0.10.0",
        "block_name_to_quantize": f"{LM}.layers",
        "extra_config": extra,
    }


def config_json(tok: Tokenizer, variant: str, shape: Shape = TINY) -> dict:
    """config.json of ``variant`` (VARIANTS) at ``shape``."""
    s = shape
    tid = tok.token_to_id
    if variant == "dense":
        return {
            "architectures": ["Qwen3ForCausalLM"],
            "model_type": "qwen3",
            "vocab_size": s.vocab,
            "hidden_size": s.hidden,
            "intermediate_size": s.intermediate,
            "num_hidden_layers": s.num_layers,
            "num_attention_heads": s.heads,
            "num_key_value_heads": s.kv_heads,
            "head_dim": s.head_dim,
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
    v = s.vision_sizes
    cfg = {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "text_config": text_config(tok, s),
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
            "out_hidden_size": s.hidden,
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
        cfg["quantization_config"] = quantization_config(s)
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


def preprocessor_config(shape: Shape = TINY) -> dict:
    v = shape.vision_sizes
    return {
        "image_processor_type": "Qwen2VLImageProcessorFast",
        "processor_class": "Qwen3VLProcessor",
        "do_rescale": True,
        "do_normalize": True,
        "rescale_factor": 0.00392156862745098,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "patch_size": v["patch_size"],
        "temporal_patch_size": v["temporal_patch_size"],
        "merge_size": v["spatial_merge_size"],
        "size": {"shortest_edge": 65536, "longest_edge": 16777216},
    }
