"""The per-GPU VRAM budget of each GPU mode, as pure functions of the settings.

A mode is a set of services that run together (:data:`MODES`). rigup refuses, before any change
on a host, a configuration in which the services of one mode would need more memory on a GPU
than the card has (:func:`budget_problems`, called from settings validation). Both modes are
checked, whichever is the default, because ``rigup-mode`` can switch to either at any time.

What each service takes on a GPU, in GiB (2**30 bytes), is its footprint's VRAM formula
(``vram`` in roles/<role>/footprint.py, with its source); the services are those of
roles/services.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from roles import services as registry
from roles.common.footprint import MODES, GpuShare

__all__ = [
    "MODES",
    "GpuShare",
    "budget_problems",
    "budget_report",
    "format_gpu",
    "mode_shares",
    "per_gpu",
]


def mode_shares(data: Mapping[str, Any] | Any) -> dict[str, list[GpuShare]]:
    """Every service's share of every GPU it uses, per mode: ``{"llm": [GpuShare...], ...}``.

    ``data`` is the settings mapping (``host.data`` or a dict, already validated for types), the
    services those of roles/services.py. Services that are not installed or that run
    on the CPU take nothing.
    """
    shares: dict[str, list[GpuShare]] = {mode: [] for mode in MODES}
    for service in registry.SERVICES:
        shares[service.mode].extend(service.shares(data))
    return shares


def per_gpu(shares: list[GpuShare]) -> dict[int, list[GpuShare]]:
    """Group one mode's shares by GPU index (ascending)."""
    grouped: dict[int, list[GpuShare]] = {}
    for share in sorted(shares, key=lambda s: (s.gpu, s.service)):
        grouped.setdefault(share.gpu, []).append(share)
    return grouped


def format_gpu(gpu: int, shares: list[GpuShare], card: float) -> str:
    """One line per GPU: ``GPU 0: 23.4 of 24 GiB (vllm 23.4 GiB = 0.94 x 24 GiB + 0.8 GiB ...)``."""
    total = sum(s.gib for s in shares)
    parts = ", ".join(f"{s.service} {s.gib:.1f} GiB = {s.how}" for s in shares)
    return f"GPU {gpu}: {total:.1f} of {card:g} GiB ({parts})"


def budget_report(data: Mapping[str, Any] | Any) -> dict[str, list[str]]:
    """Human-readable budget per mode: ``{"llm": ["GPU 0: ...", "GPU 1: ..."], "media": [...]}``."""
    card = float(data.get("nvidia_gpu_vram_gib"))
    return {
        mode: [format_gpu(gpu, s, card) for gpu, s in per_gpu(shares).items()]
        for mode, shares in mode_shares(data).items()
    }


def budget_problems(data: Mapping[str, Any] | Any) -> list[str]:
    """Problems with the VRAM budget, one string per oversubscribed GPU and per service placed
    (its ``gpu_index_key``) on a GPU the host does not declare.

    Empty when every mode fits. Each message names the mode, the GPU, the total against the card
    and every service's share with its inputs, then the settings that change it, e.g.::

        VRAM budget: media mode oversubscribes GPU 0: 31.0 of 24 GiB (comfyui 23.0 GiB = ...,
        voxcpm 8.0 GiB = voxcpm_vram_gib estimate); lower a share (comfyui_reserve_vram_gib,
        voxcpm_vram_gib) or put services on different GPUs (comfyui_gpu_index, voxcpm_gpu_index)
    """
    card = float(data.get("nvidia_gpu_vram_gib"))
    gpus = int(data.get("nvidia_gpu_count"))
    named = {s.name: s for s in registry.SERVICES}
    problems = []
    for mode, shares in mode_shares(data).items():
        for gpu, on_gpu in per_gpu(shares).items():
            here = [named[name] for name in dict.fromkeys(s.service for s in on_gpu)]
            # a service without a GPU index (vLLM) has its GPUs checked by its own rule
            placed = [s for s in here if s.gpu_index_key]
            if gpus > 0 and gpu >= gpus:
                problems.extend(
                    f"{s.gpu_index_key}: GPU {gpu} does not exist on a host that declares {gpus} "
                    f"GPU(s) (nvidia_gpu_count); use 0..{gpus - 1} (the {mode} mode runs "
                    f"{s.name} there)"
                    for s in placed
                )
            total = sum(s.gib for s in on_gpu)
            # 1e-9: float sums of settings such as 0.94 x 24 + 0.8 must not fail on rounding
            if total > card + 1e-9:
                sizes = ", ".join(k for s in here for k in s.share_keys)
                move = ", ".join(s.gpu_index_key for s in placed)
                hint = f"lower a share ({sizes})"
                if move:
                    hint += f" or put services on different GPUs ({move})"
                problems.append(
                    f"VRAM budget: {mode} mode oversubscribes {format_gpu(gpu, on_gpu, card)}; "
                    f"{hint}"
                )
    return problems
