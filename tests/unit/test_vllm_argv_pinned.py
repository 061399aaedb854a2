"""The argv and the managed-flag table rigup rendered for the shipped settings and a few variants,
pinned verbatim: the settings declarations (roles/vllm/settings.py) derive both, and a change of
either must be deliberate."""

import pytest

from roles.vllm.flags import managed_args, serve_args
from roles.vllm.settings import ALIASES, MANAGED

MODEL = "/srv/rigup/models/qwen3.6-27b-int4-autoround/mirror-2026-11"

SHIPPED = [
    MODEL,
    "--served-model-name", "qwen3.6-27b",
    "--host", "127.0.0.1",
    "--port", "8000",
    "--tensor-parallel-size", "2",
    "--kv-cache-dtype", "fp8_e5m2",
    "--block-size", "16",
    "--max-num-batched-tokens", "16384",
    "--max-model-len", "262144",
    "--gpu-memory-utilization", "0.94",
    "--speculative-config", '{"method":"mtp","num_speculative_tokens":3}',
    "--language-model-only",
    "--max-num-seqs", "8",
    "--no-enable-prefix-caching",
    "--enable-chunked-prefill",
    "--long-prefill-token-threshold", "2048",
    "--reasoning-parser", "qwen3",
    "--enable-auto-tool-choice",
    "--tool-call-parser", "qwen3_coder",
    "--override-generation-config",
    '{"max_new_tokens":32768,"min_p":0.0,"repetition_penalty":1.0,"temperature":0.6,"top_k":20,"top_p":0.95}',
]  # fmt: skip

#: every optional flag off, both switches flipped, the strip method, one extra flag
OFF = {
    "vllm_reasoning_parser": "",
    "vllm_tool_call_parser": "",
    "vllm_long_prefill_token_threshold": 0,
    "vllm_override_generation_config": {},
    "vllm_speculative_config": None,
    "vllm_enable_prefix_caching": True,
    "vllm_enable_chunked_prefill": False,
    "vllm_text_only_method": "strip_vision_config",
    "vllm_extra_args": ["--enforce-eager"],
}
OFF_ARGV = [
    MODEL,
    "--served-model-name", "qwen3.6-27b",
    "--host", "127.0.0.1",
    "--port", "8000",
    "--tensor-parallel-size", "2",
    "--kv-cache-dtype", "fp8_e5m2",
    "--block-size", "16",
    "--max-num-batched-tokens", "16384",
    "--max-model-len", "262144",
    "--gpu-memory-utilization", "0.94",
    "--max-num-seqs", "8",
    "--enable-prefix-caching",
    "--no-enable-chunked-prefill",
    "--enforce-eager",
]  # fmt: skip


def test_shipped_argv(settings):
    assert serve_args(settings, MODEL) == SHIPPED
    assert managed_args(settings, MODEL) == SHIPPED


def test_argv_with_every_optional_flag_off(settings):
    settings.update(OFF)
    assert serve_args(settings, MODEL) == OFF_ARGV


@pytest.mark.parametrize(
    "key,value,pair",
    [
        ("vllm_port", 8123, ["--port", "8123"]),
        ("vllm_gpu_memory_utilization", 0.9, ["--gpu-memory-utilization", "0.9"]),
        (
            "vllm_speculative_config",
            {"num_speculative_tokens": 1, "method": "mtp"},
            ["--speculative-config", '{"num_speculative_tokens":1,"method":"mtp"}'],
        ),
        (
            "vllm_override_generation_config",
            {"top_p": 0.8, "temperature": 0.7},
            ["--override-generation-config", '{"temperature":0.7,"top_p":0.8}'],
        ),
        ("vllm_tool_call_parser", "hermes", ["--tool-call-parser", "hermes"]),
    ],
)
def test_one_value_changes_one_place(settings, key, value, pair):
    settings[key] = value
    argv = serve_args(settings, MODEL)
    at = SHIPPED.index(pair[0])
    assert argv == [*SHIPPED[:at], *pair, *SHIPPED[at + 2 :]]


def test_managed_flag_table():
    # in this order: it decides which flag an abbreviation is reported as
    # (roles.common.checks.flag_clashes)
    assert list(MANAGED.items()) == list(
        {
            "--model": "model_llm_manifest",
            "--served-model-name": "vllm_served_model_name",
            "--host": "vllm_host",
            "--port": "vllm_port",
            "--tensor-parallel-size": "vllm_tensor_parallel_size",
            "--kv-cache-dtype": "vllm_kv_cache_dtype",
            "--block-size": "vllm_block_size",
            "--max-num-batched-tokens": "vllm_max_num_batched_tokens",
            "--max-model-len": "vllm_max_model_len",
            "--gpu-memory-utilization": "vllm_gpu_memory_utilization",
            "--speculative-config": "vllm_speculative_config",
            "--language-model-only": "vllm_text_only_method",
            "--max-num-seqs": "vllm_max_num_seqs",
            "--enable-prefix-caching": "vllm_enable_prefix_caching",
            "--no-enable-prefix-caching": "vllm_enable_prefix_caching",
            "--enable-chunked-prefill": "vllm_enable_chunked_prefill",
            "--no-enable-chunked-prefill": "vllm_enable_chunked_prefill",
            "--long-prefill-token-threshold": "vllm_long_prefill_token_threshold",
            "--reasoning-parser": "vllm_reasoning_parser",
            "--enable-auto-tool-choice": "vllm_tool_call_parser",
            "--tool-call-parser": "vllm_tool_call_parser",
            "--override-generation-config": "vllm_override_generation_config",
            "--api-key": "vllm_api_key_env",
            "--enable-sleep-mode": "vllm_enable_sleep_mode",
            # many rigs (roles/cluster): the multi-node flags
            "--pipeline-parallel-size": "vllm_pipeline_parallel_size",
            "--nnodes": "vllm_nnodes",
            "--node-rank": "vllm_node_rank",
            "--master-addr": "cluster_private_address (the leader's)",
            "--master-port": "vllm_master_port",
            "--headless": "vllm_node_rank (followers)",
        }.items()
    )
    assert ALIASES == {
        "-tp": "--tensor-parallel-size",
        "-sc": "--speculative-config",
        "-pp": "--pipeline-parallel-size",
        "-n": "--nnodes",
        "-r": "--node-rank",
    }
