"""The per-GPU VRAM budget of each GPU mode, as pure functions of the settings.

A mode is a set of services that run together (:data:`MODES`). rigup refuses, before any change
on a host, a configuration in which the services of one mode would need more memory on a GPU
than the card has (:func:`budget_problems`, called from settings validation). Both modes are
checked, whichever is the default, because ``rigup-mode`` can switch to either at any time.

What each service takes on a GPU, in GiB (2**30 bytes), from its settings:

- vLLM, on each of GPUs ``0 .. vllm_tensor_parallel_size - 1``:
  ``vllm_gpu_memory_utilization x nvidia_gpu_vram_gib`` (vLLM's budget: weights, activations,
  KV cache) plus ``cuda_context_gib`` (CUDA context, NCCL and cuBLAS workspaces outside that
  budget; seed: 23.4 GB in use per card at 0.94 x 24 GiB = 22.6 GiB).
- ComfyUI, on GPU ``comfyui_gpu_index``: ``nvidia_gpu_vram_gib - comfyui_reserve_vram_gib``.
  ComfyUI loads and offloads models to use every byte it sees free except ``--reserve-vram``
  (comfy/model_management.py of the pinned release), so it must be budgeted as taking the card
  minus that reserve; nothing runs on CPU (``comfyui_cpu``) counts. Another service on the same
  GPU must fit inside the reserve.
- VoxCPM2, on GPU ``voxcpm_gpu_index``: ``voxcpm_vram_gib`` (the VoxCPM2 role's estimate of
  all it takes, CUDA context included); nothing when ``voxcpm_install`` is False.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: mode name -> systemd target that holds its services
MODES: dict[str, str] = {"llm": "rigup-llm.target", "media": "rigup-media.target"}

#: systemd service -> the mode it belongs to (its unit has PartOf=/WantedBy= that mode's target)
SERVICE_MODES: dict[str, str] = {
    "vllm.service": "llm",
    "comfyui.service": "media",
    "voxcpm.service": "media",
}


def service_mode(unit: str) -> dict[str, str]:
    """``{"mode": "llm", "target": "rigup-llm.target"}`` for a service unit of :data:`SERVICE_MODES`."""
    mode = SERVICE_MODES[unit]
    return {"mode": mode, "target": MODES[mode]}


@dataclass(frozen=True)
class GpuShare:
    """What one service takes on one GPU: ``gib`` GiB, with ``how`` saying how it was computed."""

    service: str
    gpu: int
    gib: float
    how: str


def _get(data: Mapping[str, Any] | Any, key: str, default: Any = None) -> Any:
    value = data.get(key)
    return default if value is None else value


def mode_shares(data: Mapping[str, Any] | Any) -> dict[str, list[GpuShare]]:
    """Every service's share of every GPU it uses, per mode: ``{"llm": [GpuShare...], ...}``.

    ``data`` is the settings mapping (``host.data`` or a dict, already validated for types).
    Services that are not installed (``comfyui_install`` False, no ``voxcpm_vram_gib``) or that
    run on the CPU take nothing.
    """
    card = float(data.get("nvidia_gpu_vram_gib"))
    context = float(data.get("cuda_context_gib"))
    shares: dict[str, list[GpuShare]] = {mode: [] for mode in MODES}

    util = float(data.get("vllm_gpu_memory_utilization"))
    # vLLM's CPU build (vllm_device = "cpu") takes no GPU memory
    gpu_tp = 0 if data.get("vllm_device") == "cpu" else int(data.get("vllm_tensor_parallel_size"))
    for gpu in range(gpu_tp):
        shares["llm"].append(
            GpuShare(
                "vllm",
                gpu,
                util * card + context,
                f"{util} x {card:g} GiB + {context:g} GiB CUDA context",
            )
        )

    if _get(data, "comfyui_install", True) and not _get(data, "comfyui_cpu", False):
        reserve = float(data.get("comfyui_reserve_vram_gib"))
        shares["media"].append(
            GpuShare(
                "comfyui",
                int(data.get("comfyui_gpu_index")),
                max(card - reserve, 0.0),
                f"{card:g} GiB card - {reserve:g} GiB comfyui_reserve_vram_gib",
            )
        )

    voxcpm = data.get("voxcpm_vram_gib")
    if voxcpm is not None and _get(data, "voxcpm_install", True):
        shares["media"].append(
            GpuShare(
                "voxcpm",
                int(_get(data, "voxcpm_gpu_index", 0)),
                float(voxcpm),
                "voxcpm_vram_gib estimate",
            )
        )
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
    """Problems with the VRAM budget, one string per oversubscribed GPU or impossible GPU index.

    Empty when every mode fits. Each message names the mode, the GPU, the total against the card
    and every service's share with its inputs, e.g.::

        VRAM budget: media mode oversubscribes GPU 0: 31.0 of 24 GiB (comfyui 23.0 GiB = ...,
        voxcpm 8.0 GiB = voxcpm_vram_gib estimate); lower ... or move a service to another GPU
    """
    card = float(data.get("nvidia_gpu_vram_gib"))
    gpus = int(data.get("nvidia_gpu_count"))
    problems = []
    for mode, shares in mode_shares(data).items():
        for gpu, on_gpu in per_gpu(shares).items():
            # vLLM's GPUs come from vllm_tensor_parallel_size, checked against the count already
            placed = [s.service for s in on_gpu if s.service != "vllm"]
            if gpus > 0 and gpu >= gpus and placed:
                names = ", ".join(placed)
                problems.append(
                    f"VRAM budget: {mode} mode puts {names} on GPU {gpu}, but this host declares "
                    f"{gpus} GPU(s) (nvidia_gpu_count; GPUs are numbered from 0)"
                )
            total = sum(s.gib for s in on_gpu)
            # 1e-9: float sums of settings such as 0.94 x 24 + 0.8 must not fail on rounding
            if total > card + 1e-9:
                problems.append(
                    f"VRAM budget: {mode} mode oversubscribes {format_gpu(gpu, on_gpu, card)}; "
                    "lower a share (vllm_gpu_memory_utilization, comfyui_reserve_vram_gib is "
                    "what ComfyUI leaves free, voxcpm_vram_gib) or put services on different "
                    "GPUs (comfyui_gpu_index, voxcpm_gpu_index)"
                )
    return problems
