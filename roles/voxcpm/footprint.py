"""voxcpm.service's footprint: what the shared layers (modes, VRAM budget, settings checks,
doctor, testinfra) know of VoxCPM2 (roles.common.footprint; listed in roles/services.py)."""

from __future__ import annotations

from typing import Any

from roles.common.footprint import (
    START_FLOOR_GIB,
    START_FLOOR_SOURCE,
    DiskNeeds,
    ServiceFootprint,
    setting_or,
)
from roles.common.setting import ServiceKeys
from roles.voxcpm import settings
from roles.voxcpm.paths import UNIT, VoxcpmPaths


def vram(data: Any) -> list[tuple[int, float, str]]:
    """VoxCPM2 on GPU ``voxcpm_gpu_index``: ``voxcpm_vram_gib``, the estimate of all it takes,
    CUDA context included (shipped 8.0: voxcpm 2.0.3's README "VRAM ~8 GB" for VoxCPM2 on an
    RTX 4090, 7.45 GiB, plus ~0.5 GiB CUDA context, rounded up; inventory/group_data/all.py);
    none when the setting is not given."""
    gib = data.get("voxcpm_vram_gib")
    if gib is None:
        return []
    gpu = int(setting_or(data, "voxcpm_gpu_index", 0))
    return [(gpu, float(gib), "voxcpm_vram_gib estimate")]


FOOTPRINT = ServiceFootprint(
    name="voxcpm",
    component="VoxCPM2",
    unit=UNIT,
    mode="media",
    keys=ServiceKeys(
        user="voxcpm_user",
        host="voxcpm_host",
        port="voxcpm_port",
        start_timeout_s="voxcpm_start_timeout_s",
    ),
    ready_path="/ready",
    vram=vram,
    settings=settings,
    paths=VoxcpmPaths,
    disk=DiskNeeds(
        start_gib=START_FLOOR_GIB,
        start_source=f"{START_FLOOR_SOURCE}; VoxCPM2's start (torch.compile's Inductor and "
        "Triton caches under its home) is not measured yet",
        venv_gib=5.3,
        venv_source="the voxcpm venv, 5.7 GB in the lab (docs/voxcpm.md)",
    ),
    install_key="voxcpm_install",
    gpu_index_key="voxcpm_gpu_index",
    share_keys=("voxcpm_vram_gib",),
    manifest_keys=("voxcpm_model_manifest",),
)
