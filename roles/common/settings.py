"""Validation of rigup's settings (inventory/group_data/all.py plus per-host overrides).

Every deploy calls :func:`require_valid_settings` before it plans a single operation, so a bad
value stops the run with a message naming the key, before anything changes on a host.

The rules are pure: :func:`validate` takes a mapping (a pyinfra ``host.data`` or a plain dict) and
returns the list of problems, which the unit tests exercise directly.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from pyinfra.api.exceptions import DeployError

#: KV cache dtypes accepted by vLLM 0.22.1 (``CacheDType`` in vllm/config/cache.py). Checked here
#: only to fail early on the controller; tests/infra re-checks this list against the installed
#: vLLM's own ``CacheDType`` so it cannot drift from the pinned release unnoticed.
VLLM_KV_CACHE_DTYPES = (
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

#: Text-only serving methods (docs/text-only.md).
TEXT_ONLY_METHODS = ("language_model_only", "strip_vision_config")

#: Install paths of the NVIDIA driver (inventory/group_data/all.py explains each).
NVIDIA_INSTALL_PATHS = ("ubuntu", "nvidia-repo")

#: Settings that may be None (meaning: the documented default behaviour).
OPTIONAL_KEYS = ("vllm_speculative_config", "nvidia_power_limit_w")

#: Model sources (roles/model, files/model/model_fetch.py).
MODEL_SOURCES = ("local", "huggingface", "modelscope")

_UNIX_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_VERSION = re.compile(r"^\d+(\.\d+){1,3}([a-z0-9.+-]*)$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class SettingsError(DeployError):
    """Raised when settings are invalid; the message lists every bad key with the reason."""


Check = Callable[[Any], "str | None"]


def _integer(lo: int, hi: int) -> Check:
    def check(value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int):
            return f"must be an integer, got {value!r}"
        if not lo <= value <= hi:
            return f"must be between {lo} and {hi}, got {value}"
        return None

    return check


def _number(lo: float, hi: float, *, lo_open: bool = False) -> Check:
    def check(value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"must be a number, got {value!r}"
        if value > hi or value < lo or (lo_open and value == lo):
            bracket = "(" if lo_open else "["
            return f"must be in {bracket}{lo}, {hi}], got {value}"
        return None

    return check


def _matches(pattern: re.Pattern[str], what: str) -> Check:
    def check(value: Any) -> str | None:
        if not isinstance(value, str) or not pattern.match(value):
            return f"must be {what}, got {value!r}"
        return None

    return check


def _choice(choices: tuple[str, ...]) -> Check:
    def check(value: Any) -> str | None:
        if value not in choices:
            return f"must be one of {', '.join(choices)}; got {value!r}"
        return None

    return check


def _abs_path(value: Any) -> str | None:
    if not isinstance(value, str) or not value.startswith("/") or value.rstrip("/") == "":
        return f"must be an absolute path other than /, got {value!r}"
    if any(part in ("..", ".") for part in value.split("/")) or any(c in value for c in "\n\0 "):
        return f"must be a plain absolute path (no '..', spaces or control characters): {value!r}"
    return None


def _boolean(value: Any) -> str | None:
    return None if isinstance(value, bool) else f"must be True or False, got {value!r}"


def _driver_branch(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 100 <= value <= 9999:
        return f"must be a driver branch number such as 580, got {value!r}"
    if value < 580:
        return (
            f"{value} is too old: vLLM 0.22.1's CUDA 13 wheels need an R580 or newer driver "
            "(CUDA 13.0 minimum driver 580)"
        )
    return None


def _sha256_or_empty(value: Any) -> str | None:
    if value == "" or (isinstance(value, str) and re.fullmatch(r"[0-9a-f]{64}", value)):
        return None
    return f"must be a sha256 (64 lowercase hex digits) or '', got {value!r}"


def _https_url(value: Any) -> str | None:
    if not isinstance(value, str) or not re.match(r"^https://[A-Za-z0-9.-]+(/[\w./%+-]*)?$", value):
        return f"must be an https:// URL, got {value!r}"
    return None


def _host_address(value: Any) -> str | None:
    if not isinstance(value, str) or not re.match(r"^[A-Za-z0-9.:_-]+$", value):
        return f"must be an IP address or host name to bind, got {value!r}"
    return None


def _location_or_empty(value: Any, *, paths: bool) -> str | None:
    """ "" (unset), an http(s):// or file:// URL, or (``paths``) an absolute path."""
    if value == "":
        return None
    if isinstance(value, str) and re.match(r"^(https?|file)://[^\s'\"]+$", value):
        return None
    if paths and isinstance(value, str) and value.startswith("/"):
        return _abs_path(value)
    what = (
        "an http(s):// or file:// URL, an absolute path"
        if paths
        else "an http(s):// or file:// URL"
    )
    return f'must be "" or {what}, got {value!r}'


def _str_list(value: Any) -> str | None:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        return f"must be a list of strings, got {value!r}"
    return None


def _package_list(value: Any) -> str | None:
    problem = _str_list(value)
    if problem:
        return problem
    bad = [v for v in value if not re.match(r"^[a-z0-9][a-z0-9+.-]+$", v)]
    return f"has invalid Debian package names: {bad}" if bad else None


def _env_mapping(value: Any) -> str | None:
    if not isinstance(value, Mapping):
        return f"must be a mapping of NAME: value, got {value!r}"
    for name, val in value.items():
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            return f"has an invalid variable name {name!r}"
        if not isinstance(val, (str, int, float)) or "\n" in str(val):
            return f"{name} must be a one-line string or number, got {val!r}"
    return None


def _speculative_config(value: Any) -> str | None:
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


# --- Models (issue 5) ---
def _model_sources(value: Any) -> str | None:
    problem = _str_list(value)
    if problem:
        return problem
    if not value:
        return f"must name at least one of {', '.join(MODEL_SOURCES)}"
    bad = [v for v in value if v not in MODEL_SOURCES]
    if bad or len(set(value)) != len(value):
        return f"must be distinct values of {', '.join(MODEL_SOURCES)}; got {list(value)!r}"
    return None


def _abs_path_list(value: Any) -> str | None:
    problem = _str_list(value)
    if problem:
        return problem
    return next((f"{v!r}: {p}" for v in value if (p := _abs_path(v))), None)


def _abs_path_or_empty(value: Any) -> str | None:
    return None if value == "" else _abs_path(value)


def _url_or_empty(value: Any) -> str | None:
    if value == "":
        return None
    if not isinstance(value, str) or not re.match(
        r"^https?://[A-Za-z0-9.:\[\]_-]+(/[\w./~%-]*)?$", value
    ):
        return f"must be empty or an http(s) URL such as https://hf-mirror.com, got {value!r}"
    return None


def _manifest_ref(value: Any) -> str | None:
    if not isinstance(value, str) or not (value.startswith("/") or _SAFE_NAME.match(value)):
        return (
            f"must be a manifest name (files/model/manifests/<name>.toml) or a path, got {value!r}"
        )
    from roles.model.manifest import ManifestError, load_manifest

    try:
        load_manifest(value)
    except ManifestError as exc:
        return " ".join(str(exc).split())
    return None


#: key -> (check, source). The source is quoted in error messages so a user knows what to look at.
RULES: dict[str, Check] = {
    "nvidia_gpu_count": _integer(0, 16),
    "rigup_prefix": _abs_path,
    "rigup_etc_dir": _abs_path,
    "rigup_state_dir": _abs_path,
    "rigup_tmp_dir": _abs_path,
    "uv_cache_dir": _abs_path,
    "base_apt_packages": _package_list,
    "uv_version": _matches(_VERSION, "a release number such as 0.13.9"),
    "vllm_version": _matches(_VERSION, "a release number such as 0.22.1"),
    "vllm_user": _matches(_UNIX_NAME, "a Unix user name (lowercase, max 32 chars)"),
    "vllm_python": _matches(
        re.compile(r"^(/[\w./+-]+|python3(\.\d+)?)$"), "python3, python3.X or an absolute path"
    ),
    "vllm_host": _host_address,
    "vllm_port": _integer(1, 65535),
    "vllm_served_model_name": _matches(_SAFE_NAME, "a name of letters, digits, '.', '_' and '-'"),
    "vllm_tensor_parallel_size": _integer(1, 16),
    "vllm_kv_cache_dtype": _choice(VLLM_KV_CACHE_DTYPES),
    "vllm_block_size": _integer(1, 1024),
    "vllm_max_num_batched_tokens": _integer(1, 10_000_000),
    "vllm_speculative_config": _speculative_config,
    "vllm_max_model_len": _integer(1, 10_000_000),
    "vllm_gpu_memory_utilization": _number(0.0, 1.0, lo_open=True),
    "vllm_text_only_method": _choice(TEXT_ONLY_METHODS),
    "vllm_extra_args": _str_list,
    "vllm_start_timeout_s": _integer(30, 24 * 3600),
    "vllm_env": _env_mapping,
    "model_store_dir": _abs_path,
    # --- Models (issue 5) ---
    "model_llm_manifest": _manifest_ref,
    "model_sources": _model_sources,
    "model_local_dirs": _abs_path_list,
    "model_local_link": _choice(("copy", "hardlink")),
    "hf_endpoint": _url_or_empty,
    "hf_token_env": _matches(_ENV_NAME, "an environment variable name such as HF_TOKEN"),
    "modelscope_endpoint": _url_or_empty,
    "modelscope_token_env": _matches(_ENV_NAME, "an environment variable name"),
    "model_replace_mismatched": _boolean,
    "model_backup_dir": _abs_path_or_empty,
    "model_tool_python": _matches(
        re.compile(r"^(/[\w./+-]+|python3(\.\d+)?)$"), "python3, python3.X or an absolute path"
    ),
    # --- NVIDIA layer (roles/nvidia) ---
    "nvidia_install_path": _choice(NVIDIA_INSTALL_PATHS),
    "nvidia_driver_branch": _driver_branch,
    "nvidia_cuda_repo_url": _https_url,
    "nvidia_cuda_keyring_deb": _matches(
        re.compile(r"^cuda-keyring_[\w.+~-]+_all\.deb$"),
        "a cuda-keyring_<version>_all.deb file name",
    ),
    "nvidia_cuda_keyring_sha256": _sha256_or_empty,
    "cuda_toolkit_version": _matches(_VERSION, "a release number such as 13.0.2"),
    "nvidia_persistence_mode": _boolean,
    "nvidia_power_limit_w": _integer(50, 1000),
    "nvlink_required": _boolean,
    "nvlink_expected_links": _integer(1, 18),
    "nvlink_link_gbps": _number(0.0, 1000.0, lo_open=True),
    "nvidia_reboot_allowed": _boolean,
    "nvidia_reboot_timeout_s": _integer(60, 7200),
    "nvidia_gpu_compute_capability": _matches(
        re.compile(r"^\d{1,2}\.\d$"), 'a compute capability such as "8.6" (RTX 3090), a string'
    ),
    # --- VoxCPM2 (issue 4) ---
    "voxcpm_python_version": _matches(
        re.compile(r"^3\.(10|11|12)\.\d+$"),
        "an exact CPython 3.10.x-3.12.x release such as 3.12.16 (voxcpm 2.0.3 supports 3.10-3.12)",
    ),
    "voxcpm_python_install_mirror": lambda v: _location_or_empty(v, paths=False),
    "voxcpm_python_downloads_json": lambda v: _location_or_empty(v, paths=True),
    "voxcpm_version": _matches(_VERSION, "a release number such as 2.0.3"),
    "voxcpm_user": _matches(_UNIX_NAME, "a Unix user name (lowercase, max 32 chars)"),
    "voxcpm_host": _host_address,
    "voxcpm_port": _integer(1, 65535),
    "voxcpm_served_model_name": _matches(_SAFE_NAME, "a name of letters, digits, '.', '_' and '-'"),
    "voxcpm_model_manifest": _matches(
        _SAFE_NAME, "a manifest name (files/model/manifests/<name>.toml)"
    ),
    "voxcpm_gpu_index": _integer(0, 15),
    "voxcpm_vram_gib": _number(0.0, 1024.0, lo_open=True),
    "voxcpm_cfg_value": _number(0.0, 20.0, lo_open=True),
    "voxcpm_inference_timesteps": _integer(1, 1000),
    "voxcpm_torch_compile": _boolean,
    "voxcpm_start_timeout_s": _integer(30, 24 * 3600),
    "voxcpm_test_double_synthesizer": _boolean,
}


# --- GPU modes, VRAM budget and ComfyUI (issue 4) -----------------------------------------------
#: GPU modes (roles/modes/budget.py MODES): the systemd target each one starts
GPU_MODES = ("llm", "media")

#: ComfyUI flags rigup sets from its own settings (roles/comfyui/flags.py), so not allowed in
#: comfyui_extra_args.
COMFYUI_MANAGED_FLAGS = (
    "--listen",
    "--port",
    "--base-directory",
    "--database-url",
    "--cuda-device",
    "--reserve-vram",
    "--cpu",
)
#: ComfyUI flags refused on 24 GB cards: they keep every model in VRAM and defeat the
#: offloading FLUX.2 Dev and LTX-2.3 need there (comfy/cli_args.py, "vram_group" of the pinned
#: release; --high-vram is the common misspelling of --highvram and does not exist).
COMFYUI_REFUSED_FLAGS = ("--highvram", "--gpu-only", "--high-vram")

_GIT_COMMIT = re.compile(r"^[0-9a-f]{40}$")


def _boolean(value: Any) -> str | None:
    if not isinstance(value, bool):
        return f"must be True or False, got {value!r}"
    return None


def _git_source(value: Any) -> str | None:
    """A git URL (https://, ssh://, git@host:path) or an absolute path to a local mirror."""
    if isinstance(value, str) and value.startswith("/"):
        return _abs_path(value)
    if not isinstance(value, str) or not re.match(r"^(https://|ssh://|git@)[^\s'\"]+$", value):
        return f"must be an https://, ssh:// or git@ URL, or an absolute path to a mirror; got {value!r}"
    return None


def _manifest_list(value: Any) -> str | None:
    """Model manifest references: names (files/model/manifests/<name>.toml) or absolute .toml
    paths on the controller (issue 5's manifest format, for tests and labs)."""
    problem = _str_list(value)
    if problem:
        return problem
    bad = [
        v
        for v in value
        if not (_SAFE_NAME.match(v) or (v.endswith(".toml") and _abs_path(v) is None))
    ]
    return f"has invalid names (a manifest name or an absolute .toml path): {bad}" if bad else None


RULES.update(
    {
        "rigup_mode": _choice(GPU_MODES),
        "nvidia_gpu_vram_gib": _number(1.0, 1024.0),
        "cuda_context_gib": _number(0.0, 16.0),
        "comfyui_install": _boolean,
        "comfyui_git_url": _git_source,
        "comfyui_commit": _matches(_GIT_COMMIT, "a full 40-character git commit id"),
        "comfyui_version": _matches(_VERSION, "a release number such as 0.8.0"),
        "comfyui_user": _matches(_UNIX_NAME, "a Unix user name (lowercase, max 32 chars)"),
        "comfyui_python": _matches(
            re.compile(r"^(/[\w./+-]+|python3(\.\d+)?)$"), "python3, python3.X or an absolute path"
        ),
        "comfyui_host": _host_address,
        "comfyui_port": _integer(1, 65535),
        "comfyui_base_dir": _abs_path,
        "comfyui_cpu": _boolean,
        "comfyui_gpu_index": _integer(0, 15),
        "comfyui_reserve_vram_gib": _number(0.0, 1024.0),
        "comfyui_extra_args": _str_list,
        "comfyui_start_timeout_s": _integer(10, 24 * 3600),
        "comfyui_env": _env_mapping,
        "comfyui_models": _manifest_list,
    }
)


def _modes_consistency(values: Mapping[str, Any], data: Mapping[str, Any] | Any) -> list[str]:
    """Issue 4 rules over several keys: ComfyUI flags, and the per-GPU VRAM budget of each mode
    (roles/modes/budget.py; ``data`` gives the VoxCPM2 keys that may not be in RULES)."""
    from roles.modes.budget import budget_problems

    problems = []
    flags = {a.split("=", 1)[0] for a in values["comfyui_extra_args"]}
    managed = sorted(flags & set(COMFYUI_MANAGED_FLAGS))
    if managed:
        problems.append(
            f"comfyui_extra_args: {', '.join(managed)} is set by its own setting (comfyui_host, "
            "comfyui_port, comfyui_base_dir, comfyui_gpu_index, comfyui_reserve_vram_gib, "
            "comfyui_cpu); set it there instead"
        )
    refused = sorted(flags & set(COMFYUI_REFUSED_FLAGS))
    if refused:
        problems.append(
            f"comfyui_extra_args: {', '.join(refused)} keeps every model in VRAM and defeats "
            "ComfyUI's offloading, which FLUX.2 Dev and LTX-2.3 need on 24 GB cards; remove it"
        )
    if values["comfyui_base_dir"].rstrip("/") in (
        values["model_store_dir"].rstrip("/"),
        values["rigup_prefix"].rstrip("/"),
    ):
        problems.append(
            "comfyui_base_dir: must be a directory of its own (it holds user outputs), not "
            f"{values['comfyui_base_dir']}"
        )
    # The VoxCPM2 keys belong to its role's rules; until those are merged, check their types
    # here so that the budget below never sees a value it cannot add up.
    voxcpm = {k: data.get(k) for k in ("voxcpm_vram_gib", "voxcpm_gpu_index", "voxcpm_install")}
    for key, check in (
        ("voxcpm_vram_gib", _number(0.0, 1024.0)),
        ("voxcpm_gpu_index", _integer(0, 15)),
    ):
        problem = None if voxcpm[key] is None else check(voxcpm[key])
        if problem and key not in RULES:
            problems.append(f"{key}: {problem}")
    if not problems:
        problems.extend(budget_problems({**voxcpm, **values}))
    return problems


def _consistency(data: Mapping[str, Any]) -> list[str]:
    """Rules that relate several keys; only called once every key passed its own check."""
    problems = []
    gpus = data["nvidia_gpu_count"]
    tp = data["vllm_tensor_parallel_size"]
    if gpus > 0 and tp > gpus:
        problems.append(
            f"vllm_tensor_parallel_size: {tp} is more than the {gpus} GPU(s) this host declares "
            "(nvidia_gpu_count); tensor parallel needs one GPU per shard"
        )
    if data["vllm_max_num_batched_tokens"] < data["vllm_block_size"]:
        problems.append(
            "vllm_max_num_batched_tokens: must be at least vllm_block_size "
            f"({data['vllm_max_num_batched_tokens']} < {data['vllm_block_size']})"
        )
    extra = data["vllm_extra_args"]
    managed = {"--port", "--host", "--tensor-parallel-size", "--served-model-name", "--model"}
    clash = sorted({a.split("=", 1)[0] for a in extra} & managed)
    if clash:
        problems.append(
            f"vllm_extra_args: {', '.join(clash)} is set by its own setting "
            "(vllm_port, vllm_host, ...); set it there instead"
        )
    # --- Models (issue 5) ---
    store = data["model_store_dir"].rstrip("/") + "/"
    for root in data["model_local_dirs"]:
        if (root.rstrip("/") + "/").startswith(store) or store.startswith(root.rstrip("/") + "/"):
            problems.append(
                f"model_local_dirs: {root} and model_store_dir {data['model_store_dir']} must "
                "not contain one another (the store is where models are placed, not a source)"
            )
    backup = data["model_backup_dir"].rstrip("/") + "/"
    if data["model_backup_dir"] and (backup.startswith(store) or store.startswith(backup)):
        problems.append(
            f"model_backup_dir: {data['model_backup_dir']} and model_store_dir must not contain "
            "one another (a backup belongs on another disk)"
        )
    if data["nvidia_install_path"] == "nvidia-repo" and not data["nvidia_cuda_keyring_sha256"]:
        problems.append(
            "nvidia_cuda_keyring_sha256: the nvidia-repo install path needs the sha256 of "
            f"{data['nvidia_cuda_keyring_deb']} pinned (download it once from "
            f"{data['nvidia_cuda_repo_url']}/ on a trusted network, run sha256sum, set it here)"
        )
    return problems


def _voxcpm_consistency(data: Mapping[str, Any]) -> list[str]:
    """VoxCPM2 (issue 4): rules relating its settings to the rest."""
    problems = []
    gpus, index = data["nvidia_gpu_count"], data["voxcpm_gpu_index"]
    if gpus > 0 and index >= gpus:
        problems.append(
            f"voxcpm_gpu_index: GPU {index} does not exist on a host that declares {gpus} GPU(s) "
            f"(nvidia_gpu_count); use 0..{gpus - 1}"
        )
    if data["voxcpm_port"] == data["vllm_port"]:
        problems.append(
            f"voxcpm_port: {data['voxcpm_port']} is vllm_port too; give each service its own port"
        )
    return problems


# --- NVIDIA layer: the GPUs' compute capability against what other roles ask of them. These rules
# belong to the NVIDIA role's own settings module once each role owns its rules.

#: KV cache dtypes that need a minimum compute capability. vLLM's fp8 KV cache on CUDA is FP8
#: E4M3 ("fp8" = "fp8_e4m3"), which its Triton attention kernels store as Triton's fp8e4nv type:
#: Ada (8.9) and newer only. On Ampere (RTX 3090: 8.6) vLLM dies at start-up with "type fp8e4nv
#: not supported in this architecture"; fp8_e5m2 takes the same memory and works there.
KV_CACHE_MIN_COMPUTE_CAPABILITY = {"fp8": (8, 9), "fp8_e4m3": (8, 9)}


def _capability(value: str) -> tuple[int, int]:
    major, _, minor = value.partition(".")
    return int(major), int(minor or 0)


def nvidia_consistency(values: Mapping[str, Any]) -> list[str]:
    """NVIDIA layer rules over several keys: the KV cache dtype against the GPUs' compute
    capability (``nvidia_gpu_compute_capability``). Only called once every key passed its own
    check."""
    problems = []
    capability = values.get("nvidia_gpu_compute_capability")
    dtype = values.get("vllm_kv_cache_dtype")
    need = KV_CACHE_MIN_COMPUTE_CAPABILITY.get(dtype)
    if capability and need and _capability(capability) < need:
        problems.append(
            f"vllm_kv_cache_dtype: {dtype} (FP8 E4M3) needs compute capability "
            f"{need[0]}.{need[1]} or newer and these GPUs are {capability} "
            '(nvidia_gpu_compute_capability): vLLM would die at start-up with "type fp8e4nv not '
            'supported in this architecture". Use vllm_kv_cache_dtype = "fp8_e5m2" (the same '
            "memory; the seed runs it on its RTX 3090s)"
        )
    return problems


def validate(data: Mapping[str, Any] | Any) -> list[str]:
    """Return every problem with the settings, one ``"key: reason"`` string each ([] when valid).

    ``data`` is a mapping or a pyinfra ``HostData`` (anything with ``.get``). Missing keys are
    reported too: every key in :data:`RULES` must be set (inventory/group_data/all.py sets them).
    """
    values: dict[str, Any] = {}
    problems: list[str] = []
    for key, check in RULES.items():
        value = data.get(key)
        if value is None:
            if key not in OPTIONAL_KEYS:
                problems.append(f"{key}: missing (set it in inventory/group_data/all.py)")
            continue
        problem = check(value)
        if problem:
            problems.append(f"{key}: {problem}")
        else:
            values[key] = value
    if not problems:
        problems.extend(_consistency(values))
        problems.extend(_voxcpm_consistency(values))
        problems.extend(nvidia_consistency(values))
        problems.extend(_modes_consistency(values, data))  # issue 4
    return problems


def require_valid_settings(data: Any, host_name: str = "") -> None:
    """Raise :class:`SettingsError` listing every bad setting; return None when all are valid."""
    problems = validate(data)
    if problems:
        where = f" for host {host_name}" if host_name else ""
        lines = "\n".join(f"  - {p}" for p in problems)
        raise SettingsError(
            f"invalid rigup settings{where} (nothing was changed on any host):\n{lines}\n"
            "Fix them in inventory/group_data/all.py, in the inventory file, or in the --data "
            "options of this command line."
        )
