"""router.service's footprint (roles.common.footprint): a service that uses no GPU
(``mode=NO_GPU``: no GPU mode, no VRAM, no NVIDIA device in its unit), so it is not listed in
roles/services.py, whose services all run in a GPU mode; its unit comes from the same template."""

from __future__ import annotations

from typing import Any

from roles.common.footprint import (
    NO_GPU,
    START_FLOOR_GIB,
    START_FLOOR_SOURCE,
    DiskNeeds,
    ServiceFootprint,
)
from roles.common.setting import ServiceKeys
from roles.router import settings
from roles.router.paths import UNIT, RouterPaths


def vram(data: Any) -> list[tuple[int, float, str]]:
    """None: the router forwards HTTP and runs on the CPU."""
    return []


FOOTPRINT = ServiceFootprint(
    name="router",
    component="vLLM router",
    unit=UNIT,
    mode=NO_GPU,
    keys=ServiceKeys(
        user="router_user",
        host="router_host",
        port="router_port",
        start_timeout_s="router_start_timeout_s",
    ),
    # vllm-router's own liveness route (vllm_router_rs: /liveness, /readiness, /health)
    ready_path="/health",
    vram=vram,
    settings=settings,
    paths=RouterPaths,
    disk=DiskNeeds(
        start_gib=START_FLOOR_GIB,
        start_source=f"{START_FLOOR_SOURCE}; the router writes no cache of its own",
        venv_gib=0.2,
        venv_source="files/router/requirements.lock installed with pip: 130 MiB (du, "
        "2026-12-03, on the controller)",
    ),
    install_key="router_enabled",
    # it holds no key: the client's bearer token passes through to the replicas' vLLM
    api_key=False,
    open_api_key="router_enabled",
)
