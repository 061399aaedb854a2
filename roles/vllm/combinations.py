"""Settings that break vLLM only together: rules over the user's settings and what rigup derives
from them (the interconnect rigup-nvlink sets up, CUDA graphs, tensor parallel, the GPUs' arch).

Each rule is one :class:`Combination` in :data:`COMBINATIONS`: when its predicate holds over
:class:`Derived` (the facts, computed once from the settings), the settings check refuses the
run before any change, naming every key that takes part, why vLLM would fail and the fix in the
user's settings. A rule with a diagnosis signature (rigup/diagnosis) takes its why and
fix from it; the same signature names the journal line when the combination reaches a host
anyway (a unit edited by hand), so the refusal and rigup-doctor say the same thing.

Rules: expandable segments + custom all-reduce + CUDA graphs (vllm#42609); a KV cache dtype the
GPUs' compute capability cannot run (the table generated from the pinned vLLM's code,
:data:`KV_CACHE_SUPPORT`).

Called from roles/vllm/settings.py ``consistency``; pure, tested in tests/unit/test_vllm_combinations.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rigup import diagnosis

#: PyTorch's allocator settings: PYTORCH_ALLOC_CONF (torch >= 2.9) and its older name, both
#: read by torch 2.11 (c10/core/AllocatorConfig.cpp); ``key:value`` pairs joined by ``,``.
ALLOC_CONF_VARS = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")


def alloc_conf(env: Mapping[str, Any]) -> dict[str, str]:
    """PyTorch allocator options set in ``env`` (``vllm_env``):
    ``{"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,max_split_size_mb:512"}`` ->
    ``{"expandable_segments": "True", "max_split_size_mb": "512"}``. A later variable of
    :data:`ALLOC_CONF_VARS` does not override an earlier one's keys (torch reads the first set)."""
    options: dict[str, str] = {}
    for var in ALLOC_CONF_VARS:
        for item in str(env.get(var) or "").split(","):
            key, sep, value = item.partition(":")
            if sep and key.strip():
                options.setdefault(key.strip(), value.strip())
    return options


@dataclass(frozen=True)
class Derived:
    """What the settings add up to on the rig.

    ``custom_all_reduce``: vLLM's custom all-reduce can run: the CUDA build, tensor parallel
    over 2+ GPUs, and no ``--disable-custom-all-reduce`` in ``vllm_extra_args``; rigup-nvlink
    leaves it on whenever it verifies the NVLink bridge at boot (rigup/nvidia/nvlink.py
    ``interconnect_env``), and ``nvlink_required`` keeps vLLM down without one.
    ``cuda_graphs``: the CUDA build without ``--enforce-eager``. ``compute_capability``:
    ``(8, 6)`` for an RTX 3090 (``nvidia_gpu_compute_capability``)."""

    device: str
    tensor_parallel: int
    nvlink_required: bool
    custom_all_reduce: bool
    cuda_graphs: bool
    compute_capability: tuple[int, int]
    alloc_conf: Mapping[str, str]
    kv_cache_dtype: str

    @property
    def interconnect(self) -> str:
        """The interconnect in words, for messages."""
        if not self.custom_all_reduce:
            return "custom all-reduce off"
        when = "always: nvlink_required = True" if self.nvlink_required else "when it verifies one"
        return (
            f"custom all-reduce, which rigup leaves on over a verified NVLink bridge ({when}; "
            f"vllm_tensor_parallel_size = {self.tensor_parallel})"
        )


#: Keys of other roles the rules read (besides every ``vllm_*`` key): a caller that checks the
#: vLLM role's rules alone (roles/doctor/settings.py ``arm_problems``) passes these too.
OTHER_ROLE_KEYS = ("nvlink_required", "nvidia_gpu_compute_capability")


def derive(values: Mapping[str, Any]) -> Derived:
    """The facts of :class:`Derived` from checked settings: every ``vllm_*`` key and
    :data:`OTHER_ROLE_KEYS`, each valid. Raises KeyError naming a missing key."""
    extra = [str(a) for a in values.get("vllm_extra_args") or []]
    cuda = values["vllm_device"] == "cuda"
    major, _, minor = str(values["nvidia_gpu_compute_capability"]).partition(".")
    return Derived(
        device=values["vllm_device"],
        tensor_parallel=int(values["vllm_tensor_parallel_size"]),
        nvlink_required=bool(values["nvlink_required"]),
        custom_all_reduce=cuda
        and int(values["vllm_tensor_parallel_size"]) > 1
        and "--disable-custom-all-reduce" not in extra,
        cuda_graphs=cuda and "--enforce-eager" not in extra,
        compute_capability=(int(major), int(minor or 0)),
        alloc_conf=alloc_conf(values.get("vllm_env") or {}),
        kv_cache_dtype=str(values["vllm_kv_cache_dtype"]),
    )


#: What the pinned vLLM cannot run where: ``{"refused": {kv_cache_dtype: {capability: reason}}}``,
#: generated from vLLM's own code by files/vllm/kv_cache_support.py (tests/vllm regenerates it
#: with the pinned vLLM and compares).
KV_CACHE_SUPPORT: dict = json.loads((Path(__file__).with_name("kv_cache_support.json")).read_text())


def kv_cache_refusal(dtype: str, capability: tuple[int, int]) -> str | None:
    """Why vLLM cannot run KV cache dtype ``dtype`` on ``capability`` ((8, 6): RTX 3090), or
    None (it can, or the capability is not one :data:`KV_CACHE_SUPPORT` was generated for)."""
    return KV_CACHE_SUPPORT["refused"].get(dtype, {}).get(f"{capability[0]}.{capability[1]}")


def kv_cache_dtypes_for(capability: tuple[int, int]) -> list[str]:
    """The KV cache dtypes vLLM can run on ``capability``, for messages."""
    from roles.vllm.settings import KV_CACHE_DTYPES

    return [d for d in KV_CACHE_DTYPES if kv_cache_refusal(d, capability) is None]


def _signature(sig_id: str) -> tuple[Callable[[Derived], str], Callable[[Derived], str]]:
    """``(why, fix)`` of a diagnosis signature of vLLM's journal, for a rule (its ``what``
    quotes the journal line, which a refusal before the start does not have)."""
    sig = diagnosis.by_id(sig_id, "vllm-log")
    return (lambda d: sig.why), (lambda d: sig.fix)


@dataclass(frozen=True)
class Combination:
    """One rule: when ``applies(derived)``, the run is refused with
    ``"<keys[0]>: <detail> (with <other keys>): vLLM would fail. Why: <why>. Fix: <fix> [<source>]"``.
    ``signature``: the diagnosis signature of the same failure in vLLM's journal, if it has one
    (then ``why`` and ``fix`` are the signature's)."""

    id: str
    keys: tuple[str, ...]
    applies: Callable[[Derived], bool]
    detail: Callable[[Derived], str]
    why: Callable[[Derived], str]
    fix: Callable[[Derived], str]
    source: str
    signature: str | None = None


def _kv_cache_rule_applies(d: Derived) -> bool:
    from roles.vllm.settings import KV_CACHE_MIN_COMPUTE_CAPABILITY

    # the FP8 E4M3 dtypes are refused by roles/vllm/rules.py gpu_capability with the journal's
    # own signature (vllm-kv-dtype/fp8e4nv); tests check that rule agrees with this table
    return (
        d.device == "cuda"
        and d.kv_cache_dtype not in KV_CACHE_MIN_COMPUTE_CAPABILITY
        and kv_cache_refusal(d.kv_cache_dtype, d.compute_capability) is not None
    )


_ALLREDUCE_WHY, _ALLREDUCE_FIX = _signature("vllm-custom-allreduce/expandable-segments")

COMBINATIONS: tuple[Combination, ...] = (
    Combination(
        id="expandable-segments+custom-all-reduce+cuda-graphs",
        keys=("vllm_env", "nvlink_required", "vllm_extra_args"),
        applies=lambda d: (
            d.custom_all_reduce
            and d.cuda_graphs
            and d.alloc_conf.get("expandable_segments") == "True"
        ),
        detail=lambda d: (
            "expandable_segments:True in vllm_env's PyTorch allocator settings, with "
            f"{d.interconnect} and CUDA graphs (no --enforce-eager in vllm_extra_args)"
        ),
        why=_ALLREDUCE_WHY,
        fix=_ALLREDUCE_FIX,
        source="vllm#42609 (2x3090 NV4, vLLM 0.22; the fixes are not in 0.22.1)",
        signature="vllm-custom-allreduce/expandable-segments",
    ),
    Combination(
        id="kv-cache-dtype+gpu-arch",
        keys=("vllm_kv_cache_dtype", "nvidia_gpu_compute_capability"),
        applies=_kv_cache_rule_applies,
        detail=lambda d: (
            f"{d.kv_cache_dtype} on GPUs of compute capability "
            f"{d.compute_capability[0]}.{d.compute_capability[1]}"
        ),
        why=lambda d: str(kv_cache_refusal(d.kv_cache_dtype, d.compute_capability)),
        fix=lambda d: (
            "choose a KV cache dtype these GPUs run: "
            f"{', '.join(kv_cache_dtypes_for(d.compute_capability))} (the seed runs fp8_e5m2 "
            "on its 3090s), then converge"
        ),
        source="vLLM 0.22.1's attention backends and platform code, "
        "roles/vllm/kv_cache_support.json (files/vllm/kv_cache_support.py)",
    ),
)


def problems(values: Mapping[str, Any]) -> list[str]:
    """One ``"key: ..."`` line per rule of :data:`COMBINATIONS` that the settings meet, naming
    every key of the rule, what vLLM would do and the fix."""
    derived = derive(values)
    return [
        f"{rule.keys[0]}: {rule.detail(derived)} (with {', '.join(rule.keys[1:])}): vLLM would "
        f"fail. Why: {rule.why(derived)}. Fix: {rule.fix(derived)} [{rule.source}]"
        for rule in COMBINATIONS
        if rule.applies(derived)
    ]
