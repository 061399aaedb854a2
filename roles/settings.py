"""rigup's settings, read and checked once per host, before any change.

Each role declares its settings once, as a typed class in ``roles/<role>/settings.py`` (name,
type, check and, for a managed service flag, the flag: roles.common.setting), from which its
``SETTINGS``, ``RULES`` and ``OPTIONAL`` derive, and holds its rules over several keys
(``consistency``). This module sits above the roles: it gathers their declarations, adds the
rules that span roles (tensor parallel vs declared GPUs, GPU indexes, ports, directories, the
per-GPU VRAM budget of each mode) and refuses every key that is neither a setting nor pyinfra's
own. A deploy file calls :func:`host_settings` once and hands the result to every role it runs.

The rules are pure: :func:`validate` takes a mapping (a pyinfra ``host.data`` or a plain dict) and
returns the list of problems, which the unit tests exercise directly.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from pyinfra import host
from pyinfra.api.exceptions import DeployError

from rigup import diagnosis
from roles.base import settings as base_settings
from roles.comfyui import settings as comfyui_settings
from roles.common.checks import Check, contains
from roles.common.converge import hold_converge_lock
from roles.common.pyinfra_keys import is_pyinfra_key, pyinfra_keys
from roles.common.setting import Checked, RuleOver, Setting, each_rule, optional, rules
from roles.doctor import settings as doctor_settings
from roles.model import settings as model_settings
from roles.model.manifest import ManifestError, load_manifest
from roles.modes import settings as modes_settings
from roles.modes.budget import budget_problems
from roles.nvidia import settings as nvidia_settings
from roles.vllm import combinations
from roles.vllm import settings as vllm_settings
from roles.vllm.kv_budget import kv_fit_problems
from roles.vllm.settings import KV_CACHE_MIN_COMPUTE_CAPABILITY
from roles.voxcpm import settings as voxcpm_settings

__all__ = [
    "RULES",
    "SETTINGS",
    "SettingsError",
    "host_settings",
    "require_valid_settings",
    "validate",
]


class SettingsError(DeployError):
    """Raised when settings are invalid; the message lists every bad key with the reason."""


#: Every role's settings module, in the order of deploys/full.py.
ROLE_SETTINGS: tuple[ModuleType, ...] = (
    base_settings,
    nvidia_settings,
    model_settings,
    vllm_settings,
    voxcpm_settings,
    comfyui_settings,
    modes_settings,
    doctor_settings,
)

#: Every setting, as its role declares it (roles/<role>/settings.py ``SETTINGS``).
SETTINGS: tuple[Setting, ...] = tuple(s for m in ROLE_SETTINGS for s in m.SETTINGS)
RULES: dict[str, Check] = rules(SETTINGS)
OPTIONAL_KEYS: tuple[str, ...] = optional(SETTINGS)

#: Settings that inventories may set for rigup's own tooling (the lab), never read by a role.
TOOLING_KEYS: tuple[str, ...] = ()


def unknown_keys(keys: set[str]) -> list[str]:
    """Problems for keys that are neither a rigup setting nor pyinfra's own
    (:func:`roles.common.pyinfra_keys.pyinfra_keys`), whatever their name, with the likely
    intended key among both: ``["vlm_host: not a rigup setting (did you mean vllm_host?); ..."]``,
    ``["ssh_prot: not a rigup setting (did you mean ssh_port?); ..."]``."""
    problems = []
    known = [*RULES, *sorted(pyinfra_keys())]
    for key in sorted(keys):
        if key in RULES or key in TOOLING_KEYS or is_pyinfra_key(key):
            continue
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        problems.append(
            f"{key}: not a rigup setting{hint}; inventory/group_data/all.py lists every setting"
        )
    return problems


def tensor_parallel_fits_gpus(values: Mapping[str, Any]) -> list[str]:
    """One declared GPU per tensor-parallel shard (a host declaring 0 GPUs starts nothing)."""
    gpus, tp = values["nvidia_gpu_count"], values["vllm_tensor_parallel_size"]
    if gpus > 0 and tp > gpus:
        return [
            f"vllm_tensor_parallel_size: {tp} is more than the {gpus} GPU(s) this host declares "
            "(nvidia_gpu_count); tensor parallel needs one GPU per shard"
        ]
    return []


def speech_gpu_exists(values: Mapping[str, Any]) -> list[str]:
    """VoxCPM2's GPU index is one of the declared GPUs."""
    gpus, index = values["nvidia_gpu_count"], values["voxcpm_gpu_index"]
    if values["voxcpm_install"] and gpus > 0 and index >= gpus:
        return [
            f"voxcpm_gpu_index: GPU {index} does not exist on a host that declares {gpus} GPU(s) "
            f"(nvidia_gpu_count); use 0..{gpus - 1}"
        ]
    return []


def ports_distinct(values: Mapping[str, Any]) -> list[str]:
    """Each installed service listens on a port of its own."""
    ports: dict[int, list[str]] = {}
    for key, installed in (
        ("vllm_port", True),
        ("voxcpm_port", values["voxcpm_install"]),
        ("comfyui_port", values["comfyui_install"]),
    ):
        if installed:
            ports.setdefault(values[key], []).append(key)
    return [
        f"{keys[1]}: {port} is {' and '.join(keys[:-1])} too; give each service its own port"
        for port, keys in sorted(ports.items())
        if len(keys) > 1
    ]


def manifests_fit_locks(values: Mapping[str, Any]) -> list[str]:
    """Every installed service's model manifests load with their locks (from model_lock_dir)."""
    problems = []
    manifests = [("model_llm_manifest", [values["model_llm_manifest"]])]
    if values["voxcpm_install"]:
        manifests.append(("voxcpm_model_manifest", [values["voxcpm_model_manifest"]]))
    if values["comfyui_install"]:
        manifests.append(("comfyui_models", list(values["comfyui_models"])))
    for key, refs in manifests:
        for ref in refs:
            try:
                load_manifest(ref, values["model_lock_dir"])
            except ManifestError as exc:  # a lock that does not fit its manifest
                problems.append(f"{key}: {' '.join(str(exc).split())}")
    return problems


def comfyui_base_dir_apart(values: Mapping[str, Any]) -> list[str]:
    """ComfyUI's base directory (user outputs) neither inside nor around rigup's own trees."""
    base = values["comfyui_base_dir"]
    return [
        f"comfyui_base_dir: must be a directory of its own (it holds user outputs), not "
        f"inside or around {key} ({values[key]})"
        for key in ("model_store_dir", "rigup_prefix", "rigup_state_dir", "rigup_etc_dir")
        if contains(base, values[key]) or contains(values[key], base)
    ]


def _capability(value: str) -> tuple[int, int]:
    major, _, minor = value.partition(".")
    return int(major), int(minor or 0)


def gpu_capability(values: Mapping[str, Any]) -> list[str]:
    """What the vLLM settings ask of the GPUs against their compute capability
    (``nvidia_gpu_compute_capability``, checked against nvidia-smi by the NVIDIA layer)."""
    capability = values["nvidia_gpu_compute_capability"]
    dtype = values["vllm_kv_cache_dtype"]
    need = KV_CACHE_MIN_COMPUTE_CAPABILITY.get(dtype)
    if need and _capability(capability) < need:
        # what vLLM would say at start-up, in the diagnosis library's words
        sig = diagnosis.by_id("vllm-kv-dtype/fp8e4nv", "vllm-log")
        return [
            f"vllm_kv_cache_dtype: {dtype} (FP8 E4M3) needs compute capability "
            f"{need[0]}.{need[1]} or newer and these GPUs are {capability} "
            f"(nvidia_gpu_compute_capability): vLLM would die at start-up: {sig.why}. "
            f"Fix: {sig.fix}"
        ]
    return []


#: The rules over several settings, each run on its own over the settings that passed their own
#: checks (roles.common.setting.each_rule): every role's ``consistency``, then those spanning roles.
ACROSS: tuple[RuleOver, ...] = (
    *(m.consistency for m in ROLE_SETTINGS),
    tensor_parallel_fits_gpus,
    speech_gpu_exists,
    ports_distinct,
    manifests_fit_locks,
    comfyui_base_dir_apart,
    gpu_capability,
    budget_problems,
    kv_fit_problems,
    combinations.problems,
)


def validate(data: Mapping[str, Any] | Any) -> list[str]:
    """Return every problem with the settings, one ``"key: reason"`` string each ([] when valid).

    ``data`` is a mapping or a pyinfra ``HostData`` (anything with ``.get``; ``.dict()`` or the
    mapping's keys are searched for misspelled keys). Missing keys are reported too: every key
    of :data:`RULES` must be set (inventory/group_data/all.py sets them). Every problem of the
    run is listed: a value's own check, a key that is no setting, and each rule over several
    keys whose keys all passed their own checks.
    """
    values: dict[str, Any] = {}
    problems: list[str] = []
    for key, check in RULES.items():
        value = data.get(key)
        if value is None:
            if key not in OPTIONAL_KEYS:
                problems.append(f"{key}: missing (set it in inventory/group_data/all.py)")
            else:
                values[key] = None
            continue
        problem = check(value)
        if problem:
            problems.append(f"{key}: {problem}")
        else:
            values[key] = value
    keys = set(data.dict() if hasattr(data, "dict") else data)
    problems.extend(unknown_keys(keys))
    problems.extend(each_rule(Checked(values), ACROSS))
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


def host_settings() -> Any:
    """The current host's settings (its ``host.data``), checked, with this run holding the host's
    converge lock (:func:`roles.common.converge.hold_converge_lock`): call once at the top of a
    deploy file and pass the result to each role. Raises :class:`SettingsError` for bad settings
    and ``DeployError`` while another converge runs on the host, both before any change."""
    require_valid_settings(host.data, host.name)
    hold_converge_lock()
    return host.data
