"""comfyui.service's footprint: what the shared layers (modes, VRAM budget, settings checks,
doctor, testinfra) know of ComfyUI (roles.common.footprint; listed in roles/services.py)."""

from __future__ import annotations

from typing import Any

from roles.comfyui import settings
from roles.comfyui.paths import UNIT, ComfyuiPaths
from roles.common.footprint import (
    START_FLOOR_GIB,
    START_FLOOR_SOURCE,
    DiskNeeds,
    ServiceFootprint,
    setting_or,
)
from roles.common.setting import ServiceKeys


def vram(data: Any) -> list[tuple[int, float, str]]:
    """ComfyUI on GPU ``comfyui_gpu_index``: ``nvidia_gpu_vram_gib - comfyui_reserve_vram_gib``.
    ComfyUI loads and offloads models to use every byte it sees free except ``--reserve-vram``
    (comfy/model_management.py of the pinned release), so it is budgeted as taking the card
    minus that reserve; another service on the same GPU must fit inside the reserve. On the CPU
    (``comfyui_cpu``) it takes none."""
    if setting_or(data, "comfyui_cpu", False):
        return []
    card = float(data.get("nvidia_gpu_vram_gib"))
    reserve = float(data.get("comfyui_reserve_vram_gib"))
    how = f"{card:g} GiB card - {reserve:g} GiB comfyui_reserve_vram_gib"
    gpu = int(data.get("comfyui_gpu_index"))
    return [(gpu, max(card - reserve, 0.0), how)]


FOOTPRINT = ServiceFootprint(
    name="comfyui",
    component="ComfyUI",
    unit=UNIT,
    mode="media",
    keys=ServiceKeys(
        user="comfyui_user",
        host="comfyui_host",
        port="comfyui_port",
        start_timeout_s="comfyui_start_timeout_s",
    ),
    ready_path="/system_stats",
    vram=vram,
    settings=settings,
    paths=ComfyuiPaths,
    disk=DiskNeeds(
        start_gib=START_FLOOR_GIB,
        start_source=f"{START_FLOOR_SOURCE}; ComfyUI's own start is not measured yet (its "
        "jobs' outputs go under its base directory, a ReadWritePaths= of its unit)",
        venv_gib=5.6,
        venv_source="ComfyUI's venv, 5.98 GB in the lab (docs/comfyui.md)",
    ),
    install_key="comfyui_install",
    gpu_index_key="comfyui_gpu_index",
    share_keys=("comfyui_reserve_vram_gib",),
    manifest_keys=("comfyui_models",),
    api_key=False,
    open_api_key="comfyui_allow_network_without_auth",
    rules=(settings.comfyui_base_dir_apart,),
)
