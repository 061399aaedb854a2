"""Rules for the vLLM role's settings (inventory/group_data/all.py, "vLLM")."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from roles.common.checks import (
    ENV_NAME,
    SAFE_NAME,
    UNIX_NAME,
    Check,
    boolean,
    choice,
    env_mapping,
    flag_clashes,
    host_address,
    integer,
    matches,
    number,
    python_interpreter,
    service_port,
    str_list,
)
from roles.common.locks import version_check
from roles.vllm import combinations

FILES = Path(__file__).resolve().parents[2] / "files" / "vllm"
LOCK = FILES / "requirements.lock"
CPU_LOCK = FILES / "requirements-cpu.lock"

#: vllm_device values: the rig's CUDA build, or the same release's CPU build (roles/vllm/cpu.py)
DEVICES = ("cuda", "cpu")

#: KV cache dtypes accepted by vLLM 0.22.1 (``CacheDType`` in vllm/config/cache.py). Checked here
#: only to fail early on the controller; tests/vllm re-checks this list against the installed
#: vLLM's own ``CacheDType`` so it cannot drift from the pinned release unnoticed.
KV_CACHE_DTYPES = (
    "auto",
    "float16",
    "bfloat16",
    "fp8",
    "fp8_e4m3",
    "fp8_e5m2",
    "fp8_inc",
    "fp8_ds_mla",
    "turboquant_k8v4",
    "turboquant_4bit_nc",
    "turboquant_k3v4_nc",
    "turboquant_3bit_nc",
    "int8_per_token_head",
    "fp8_per_token_head",
    "nvfp4",
)

#: KV cache dtypes that need a minimum GPU compute capability. vLLM's fp8 KV cache on CUDA is
#: FP8 E4M3 ("fp8" = "fp8_e4m3"), which its Triton attention kernels store as Triton's fp8e4nv
#: type: Ada (8.9) and newer only. On Ampere (RTX 3090: 8.6) vLLM dies at start-up with "type
#: fp8e4nv not supported in this architecture"; fp8_e5m2 takes the same memory and works there.
#: Checked against nvidia_gpu_compute_capability by roles/settings.py (it spans both roles).
KV_CACHE_MIN_COMPUTE_CAPABILITY = {"fp8": (8, 9), "fp8_e4m3": (8, 9)}

#: Text-only serving methods (docs/text-only.md).
TEXT_ONLY_METHODS = ("language_model_only", "strip_vision_config")

#: `vllm serve` flags rigup sets from its own settings (flag -> setting), so not allowed in
#: vllm_extra_args under any spelling (roles.common.checks.flag_clashes; the host's check runs
#: vLLM's own parser on the whole line as well: files/vllm/check_args.py --managed).
MANAGED: dict[str, str] = {
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
}
#: vLLM 0.22.1's other spellings of managed flags (vllm/engine/arg_utils.py)
ALIASES: dict[str, str] = {"-tp": "--tensor-parallel-size", "-sc": "--speculative-config"}


def speculative_config(value: Any) -> str | None:
    """None (speculative decoding off) or ``{"method": str, "num_speculative_tokens": 1..16}``."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        return f"must be a mapping such as {{'method': 'mtp', 'num_speculative_tokens': 3}} or None, got {value!r}"
    if not isinstance(value.get("method"), str):
        return "needs a 'method' (string), e.g. 'mtp'"
    tokens = value.get("num_speculative_tokens")
    if isinstance(tokens, bool) or not isinstance(tokens, int) or not 1 <= tokens <= 16:
        return f"needs 'num_speculative_tokens' between 1 and 16, got {tokens!r}"
    try:
        json.dumps(dict(value))
    except (TypeError, ValueError) as exc:
        return f"must be JSON-serialisable: {exc}"
    return None


#: Reasoning parsers and tool-call parsers of vLLM 0.22.1 that fit Qwen models (the full lists
#: are checked by vLLM's own parser on the host; these are the ones rigup documents).
PARSER_NAME = re.compile(r"^[a-z0-9_]{0,64}$")

#: Keys vLLM 0.22.1 honours in --override-generation-config (vllm/config/model.py).
GENERATION_KEYS = (
    "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "max_new_tokens",
)  # fmt: skip


def generation_config(value: Any) -> str | None:
    """A mapping of :data:`GENERATION_KEYS` to numbers ({} = the model's own defaults)."""
    if not isinstance(value, Mapping):
        return f"must be a mapping such as {{'temperature': 0.6}}, got {value!r}"
    unknown = sorted(set(value) - set(GENERATION_KEYS))
    if unknown:
        return (
            f"vLLM 0.22.1 ignores {', '.join(map(str, unknown))} here; it honours "
            f"{', '.join(GENERATION_KEYS)}"
        )
    bad = {k: v for k, v in value.items() if isinstance(v, bool) or not isinstance(v, (int, float))}
    if bad:
        return f"values must be numbers, got {bad}"
    tokens = value.get("max_new_tokens")
    if tokens is not None and (not isinstance(tokens, int) or tokens < 1):
        return f"max_new_tokens must be a whole number of tokens, 1 or more, got {tokens!r}"
    return None


RULES: dict[str, Check] = {
    "vllm_version": version_check(LOCK, "vllm", "vllm_version"),
    "vllm_device": choice(DEVICES),
    "vllm_cpu_memory_utilization": number(0.0, 1.0, lo_open=True),
    "vllm_user": matches(UNIX_NAME, "a Unix user name (lowercase, max 32 chars)"),
    "vllm_python": python_interpreter,
    "vllm_host": host_address,
    "vllm_port": service_port,
    "vllm_served_model_name": matches(SAFE_NAME, "a name of letters, digits, '.', '_' and '-'"),
    "vllm_tensor_parallel_size": integer(1, 16),
    "vllm_kv_cache_dtype": choice(KV_CACHE_DTYPES),
    "vllm_block_size": integer(1, 1024),
    "vllm_max_num_batched_tokens": integer(1, 10_000_000),
    "vllm_speculative_config": speculative_config,
    "vllm_max_model_len": integer(1, 10_000_000),
    "vllm_gpu_memory_utilization": number(0.0, 1.0, lo_open=True),
    "vllm_text_only_method": choice(TEXT_ONLY_METHODS),
    "vllm_reasoning_parser": matches(PARSER_NAME, "a vLLM reasoning parser name or ''"),
    "vllm_tool_call_parser": matches(PARSER_NAME, "a vLLM tool-call parser name or ''"),
    "vllm_max_num_seqs": integer(1, 1024),
    "vllm_enable_prefix_caching": boolean,
    "vllm_enable_chunked_prefill": boolean,
    "vllm_long_prefill_token_threshold": integer(0, 10_000_000),
    "vllm_override_generation_config": generation_config,
    "vllm_api_key_env": matches(ENV_NAME, "an environment variable name such as VLLM_API_KEY"),
    "vllm_extra_args": str_list,
    "vllm_start_timeout_s": integer(30, 24 * 3600),
    "vllm_env": env_mapping,
}

#: Keys that may be None (meaning: the documented default behaviour).
OPTIONAL: tuple[str, ...] = ("vllm_speculative_config",)


def consistency(values: Mapping[str, Any]) -> list[str]:
    """Rules over several vLLM keys; ``values`` holds every key that passed its own check (of
    every role: the combination rules of roles/vllm/combinations.py read the NVIDIA keys too)."""
    problems = []
    if values["vllm_device"] == "cpu":
        problem = version_check(CPU_LOCK, "vllm-cpu", "vllm_version")(values["vllm_version"])
        if problem:
            problems.append(f"vllm_version: {problem}")
    if values["vllm_max_num_batched_tokens"] < values["vllm_block_size"]:
        problems.append(
            "vllm_max_num_batched_tokens: must be at least vllm_block_size "
            f"({values['vllm_max_num_batched_tokens']} < {values['vllm_block_size']})"
        )
    threshold = values["vllm_long_prefill_token_threshold"]
    if threshold >= values["vllm_max_num_batched_tokens"]:
        problems.append(
            f"vllm_long_prefill_token_threshold: {threshold} must be below "
            f"vllm_max_num_batched_tokens ({values['vllm_max_num_batched_tokens']}), or 0 (off)"
        )
    if threshold > values["vllm_max_model_len"]:
        problems.append(
            f"vllm_long_prefill_token_threshold: {threshold} is above vllm_max_model_len "
            f"({values['vllm_max_model_len']})"
        )
    max_new = values["vllm_override_generation_config"].get("max_new_tokens")
    if max_new is not None and max_new >= values["vllm_max_model_len"]:
        problems.append(
            f"vllm_override_generation_config: max_new_tokens {max_new} leaves no room for a prompt "
            f"in vllm_max_model_len ({values['vllm_max_model_len']}); keep it below"
        )
    spec = values["vllm_speculative_config"]
    if values["vllm_enable_prefix_caching"] and spec and spec.get("method") == "mtp":
        problems.append(
            "vllm_enable_prefix_caching: with MTP (vllm_speculative_config) vLLM 0.22.1 can corrupt "
            "Qwen3.6's recurrent state from a cache hit (vllm#43559; the fix, vllm#48375, is not in "
            "this release). Keep it False, or set vllm_speculative_config = None to use it"
        )
    for clash in flag_clashes(values["vllm_extra_args"], MANAGED, ALIASES):
        problems.append(f"vllm_extra_args: {clash}; set it there instead")
    problems.extend(combinations.problems(values))
    return problems
