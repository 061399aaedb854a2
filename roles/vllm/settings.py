"""Rules for the vLLM role's settings (inventory/group_data/all.py, "vLLM")."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roles.cluster.settings import CLUSTER_ALIASES, CLUSTER_FLAGS
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
from roles.common.setting import (
    Flag,
    JsonFlag,
    Marker,
    Setting,
    Switch,
    TypedSettings,
    Withheld,
    declared,
    each_rule,
    managed_flags,
    optional,
    rules,
    setting,
)
from roles.common.urls import is_loopback
from roles.vllm.memory_flags import memory_flag_problems

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
#: Checked against nvidia_gpu_compute_capability by roles/vllm/rules.py gpu_capability.
KV_CACHE_MIN_COMPUTE_CAPABILITY = {"fp8": (8, 9), "fp8_e4m3": (8, 9)}

#: The routes vLLM 0.22.1 adds with VLLM_SERVER_DEV_MODE=1 (method, path), from its own code:
#: vllm/entrypoints/serve/sleep/api_router.py, rpc/api_router.py, cache/api_router.py,
#: rlhf/api_router.py (attached by entrypoints/openai/api_server.py) and
#: instrumentator/server_info.py. vLLM's --api-key guards only paths that start with /v1, /v2 or
#: /inference (entrypoints/openai/server_utils.py GUARDED_PREFIX), none of these: whoever reaches
#: the port puts the engine to sleep, pauses it, swaps its weights or calls any worker method by
#: name (/collective_rpc). The lab checks each against the running vLLM's /openapi.json
#: (tests/lab/test_scenario_modes.py test_vllm_dev_mode_routes_answer_on_loopback_only).
DEV_MODE_ROUTES: tuple[tuple[str, str], ...] = (
    ("POST", "/sleep"),
    ("POST", "/wake_up"),
    ("GET", "/is_sleeping"),
    ("POST", "/collective_rpc"),
    ("POST", "/reset_prefix_cache"),
    ("POST", "/reset_mm_cache"),
    ("POST", "/reset_encoder_cache"),
    ("POST", "/pause"),
    ("POST", "/resume"),
    ("GET", "/is_paused"),
    ("POST", "/init_weight_transfer_engine"),
    ("POST", "/start_weight_update"),
    ("POST", "/update_weights"),
    ("POST", "/finish_weight_update"),
    ("GET", "/get_world_size"),
    ("GET", "/server_info"),
)

#: The environment variable that turns those routes on (vllm/envs.py: ``bool(int(value))``).
DEV_MODE_ENV = "VLLM_SERVER_DEV_MODE"

#: Text-only serving methods (docs/text-only.md).
TEXT_ONLY_METHODS = ("language_model_only", "strip_vision_config")


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


@dataclass(frozen=True)
class VllmSettings(TypedSettings):
    """The vLLM role's settings, each declared once: its name, the type code reads, its check and,
    for a `vllm serve` flag rigup manages, the flag it renders; defaults, meaning and sources are
    in inventory/group_data/all.py ("vLLM"). The flags render in this order after the checkpoint
    (roles/vllm/flags.py ``managed_args``), and ``vllm_extra_args`` may not set them under any
    spelling (:data:`MANAGED`). A new served flag: one field here, its default and source in
    all.py. ``VllmSettings.of(host.data)`` reads them into typed attributes."""

    vllm_version: str = setting(version_check(LOCK, "vllm", "vllm_version"))
    vllm_device: str = setting(choice(DEVICES))
    vllm_cpu_memory_utilization: float = setting(number(0.0, 1.0, lo_open=True))
    vllm_user: str = setting(matches(UNIX_NAME, "a Unix user name (lowercase, max 32 chars)"))
    vllm_python: str = setting(python_interpreter)
    vllm_served_model_name: str = setting(
        matches(SAFE_NAME, "a name of letters, digits, '.', '_' and '-'"),
        flag=Flag("--served-model-name"),
    )
    vllm_host: str = setting(host_address, flag=Flag("--host"))
    vllm_port: int = setting(service_port, flag=Flag("--port"))
    vllm_tensor_parallel_size: int = setting(integer(1, 16), flag=Flag("--tensor-parallel-size"))
    vllm_kv_cache_dtype: str = setting(choice(KV_CACHE_DTYPES), flag=Flag("--kv-cache-dtype"))
    vllm_block_size: int = setting(integer(1, 1024), flag=Flag("--block-size"))
    vllm_max_num_batched_tokens: int = setting(
        integer(1, 10_000_000), flag=Flag("--max-num-batched-tokens")
    )
    vllm_max_model_len: int = setting(integer(1, 10_000_000), flag=Flag("--max-model-len"))
    vllm_gpu_memory_utilization: float = setting(
        number(0.0, 1.0, lo_open=True), flag=Flag("--gpu-memory-utilization")
    )
    # None: speculative decoding off
    vllm_speculative_config: Mapping[str, Any] | None = setting(
        speculative_config, optional=True, flag=JsonFlag("--speculative-config")
    )
    vllm_text_only_method: str = setting(
        choice(TEXT_ONLY_METHODS), flag=Marker("--language-model-only", when="language_model_only")
    )
    vllm_max_num_seqs: int = setting(integer(1, 1024), flag=Flag("--max-num-seqs"))
    vllm_enable_prefix_caching: bool = setting(boolean, flag=Switch("--enable-prefix-caching"))
    vllm_enable_chunked_prefill: bool = setting(boolean, flag=Switch("--enable-chunked-prefill"))
    vllm_long_prefill_token_threshold: int = setting(
        integer(0, 10_000_000), flag=Flag("--long-prefill-token-threshold", omit_off=True)
    )
    vllm_reasoning_parser: str = setting(
        matches(PARSER_NAME, "a vLLM reasoning parser name or ''"),
        flag=Flag("--reasoning-parser", omit_off=True),
    )
    vllm_tool_call_parser: str = setting(
        matches(PARSER_NAME, "a vLLM tool-call parser name or ''"),
        flag=Flag("--tool-call-parser", omit_off=True, lead=("--enable-auto-tool-choice",)),
    )
    vllm_override_generation_config: Mapping[str, float] = setting(
        generation_config, flag=JsonFlag("--override-generation-config", sort_keys=True)
    )
    # the key reaches vLLM through its environment (VLLM_API_KEY), never argv
    vllm_api_key_env: str = setting(
        matches(ENV_NAME, "an environment variable name such as VLLM_API_KEY"),
        flag=Withheld("--api-key"),
    )
    # VLLM_SERVER_DEV_MODE=1 in the service's environment (no flag): the routes of
    # :data:`DEV_MODE_ROUTES`, which vLLM's --api-key does not guard
    vllm_server_dev_mode: bool = setting(boolean)
    vllm_enable_sleep_mode: bool = setting(boolean, flag=Marker("--enable-sleep-mode"))
    vllm_extra_args: list[str] = setting(str_list)
    vllm_start_timeout_s: int = setting(integer(30, 24 * 3600))
    vllm_env: Mapping[str, str | int | float] = setting(env_mapping)


SETTINGS: tuple[Setting, ...] = declared(VllmSettings)
RULES: dict[str, Check] = rules(SETTINGS)
OPTIONAL: tuple[str, ...] = optional(SETTINGS)

#: `vllm serve` flags rigup sets from its own settings (flag -> setting), so not allowed in
#: vllm_extra_args under any spelling (roles.common.checks.flag_clashes; the host's check runs
#: vLLM's own parser on the whole line as well: files/vllm/check_args.py --managed). The
#: checkpoint is `vllm serve`'s positional argument (``--model`` is its other spelling), the placed
#: model_llm_manifest; every other flag is declared in :data:`SETTINGS`.
MANAGED: dict[str, str] = {
    "--model": "model_llm_manifest",
    **managed_flags(SETTINGS),
    **CLUSTER_FLAGS,  # many rigs (roles/cluster): the multi-node flags
}
#: vLLM 0.22.1's other spellings of managed flags (vllm/engine/arg_utils.py)
ALIASES: dict[str, str] = {
    "-tp": "--tensor-parallel-size",
    "-sc": "--speculative-config",
    **CLUSTER_ALIASES,
}


def cpu_build_lock(values: Mapping[str, Any]) -> list[str]:
    """The CPU build (vllm_device = "cpu") is pinned by its own lock, at the same release."""
    if values["vllm_device"] != "cpu":
        return []
    problem = version_check(CPU_LOCK, "vllm-cpu", "vllm_version")(values["vllm_version"])
    return [f"vllm_version: {problem}"] if problem else []


def batch_fits_blocks(values: Mapping[str, Any]) -> list[str]:
    """A scheduler step holds at least one KV block."""
    if values["vllm_max_num_batched_tokens"] < values["vllm_block_size"]:
        return [
            "vllm_max_num_batched_tokens: must be at least vllm_block_size "
            f"({values['vllm_max_num_batched_tokens']} < {values['vllm_block_size']})"
        ]
    return []


def long_prefill_threshold(values: Mapping[str, Any]) -> list[str]:
    """The long-prefill cap is below the step's token budget and the context (or 0: off)."""
    problems = []
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
    return problems


def max_new_tokens_fits(values: Mapping[str, Any]) -> list[str]:
    """The server-wide answer cap (max_new_tokens of vllm_override_generation_config) leaves room
    for a prompt in the context."""
    max_new = values["vllm_override_generation_config"].get("max_new_tokens")
    if max_new is not None and max_new >= values["vllm_max_model_len"]:
        return [
            f"vllm_override_generation_config: max_new_tokens {max_new} leaves no room for a prompt "
            f"in vllm_max_model_len ({values['vllm_max_model_len']}); keep it below"
        ]
    return []


def prefix_caching_with_mtp(values: Mapping[str, Any]) -> list[str]:
    """Prefix caching with MTP corrupts Qwen3.6's recurrent state on vLLM 0.22.1 (vllm#43559)."""
    spec = values["vllm_speculative_config"]
    if values["vllm_enable_prefix_caching"] and spec and spec.get("method") == "mtp":
        return [
            "vllm_enable_prefix_caching: with MTP (vllm_speculative_config) vLLM 0.22.1 can corrupt "
            "Qwen3.6's recurrent state from a cache hit (vllm#43559; the fix, vllm#48375, is not in "
            "this release). Keep it False, or set vllm_speculative_config = None to use it"
        ]
    return []


def extra_args_unmanaged(values: Mapping[str, Any]) -> list[str]:
    """vllm_extra_args sets no flag of :data:`MANAGED`, under any spelling, and no other flag
    that moves vLLM's memory accounting (roles/vllm/memory_flags.py, with the reason)."""
    return [
        f"vllm_extra_args: {clash}; set it there instead"
        for clash in flag_clashes(values["vllm_extra_args"], MANAGED, ALIASES)
    ] + memory_flag_problems(values, ALIASES)


def dev_mode_on_loopback(values: Mapping[str, Any]) -> list[str]:
    """vLLM's dev-mode routes (:data:`DEV_MODE_ROUTES`) answer without the API key, so with
    ``vllm_server_dev_mode`` vLLM listens on loopback only, whatever else asks for an address
    (a router's replica, the API of a cluster's leader): refused otherwise. Sleep mode needs
    the dev routes (nothing else can put it to sleep or wake it)."""
    problems = []
    host = str(values["vllm_host"])
    if values["vllm_server_dev_mode"] and not is_loopback(host):
        problems.append(
            f"vllm_server_dev_mode: True with vllm_host {host}, not loopback: vLLM's dev-mode "
            "routes (/sleep, /wake_up, /collective_rpc, /pause, /update_weights, ...) answer "
            "without the API key (it guards /v1 alone), so anyone who reaches the port could "
            "sleep the engine or call its workers. Keep vllm_host loopback (a router's replica "
            "cannot: dev mode stays off there), or set vllm_server_dev_mode = False"
        )
    if values["vllm_enable_sleep_mode"] and not values["vllm_server_dev_mode"]:
        problems.append(
            "vllm_enable_sleep_mode: True needs vllm_server_dev_mode = True: only the dev-mode "
            "routes (/sleep, /wake_up) put vLLM to sleep and wake it"
        )
    if DEV_MODE_ENV in (values["vllm_env"] or {}):
        problems.append(
            f"vllm_env: {DEV_MODE_ENV} is rigup's (vllm_server_dev_mode, checked against "
            "vllm_host); set vllm_server_dev_mode instead"
        )
    return problems


#: The rules over several vLLM keys, each run on its own (roles.common.setting.each_rule).
CONSISTENCY = (
    cpu_build_lock,
    batch_fits_blocks,
    long_prefill_threshold,
    max_new_tokens_fits,
    prefix_caching_with_mtp,
    extra_args_unmanaged,
    dev_mode_on_loopback,
)


def consistency(values: Mapping[str, Any]) -> list[str]:
    """Problems of the rules over several vLLM keys (:data:`CONSISTENCY`); ``values`` holds the
    keys that passed their own checks, and a rule that reads any other key is skipped."""
    return each_rule(values, CONSISTENCY)
