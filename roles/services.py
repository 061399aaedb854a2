"""rigup's GPU services: one line per service, each its role's footprint
(roles.common.footprint.ServiceFootprint, declared in ``roles/<role>/footprint.py``).

The GPU modes, the VRAM budget, the port, GPU-index and manifest checks, the doctor's config
and testinfra loop over :data:`SERVICES`. Adding a service: its role folder (with its
``footprint.py``), its line here, its deploy in deploys/ and deploys/full.py, and its settings'
defaults in inventory/group_data/all.py.
"""

from __future__ import annotations

from typing import Any

from roles.comfyui import footprint as comfyui
from roles.common.footprint import ServiceFootprint, registry_problems
from roles.vllm import footprint as vllm
from roles.voxcpm import footprint as voxcpm

#: Every GPU service, in the order of deploys/full.py.
SERVICES: tuple[ServiceFootprint, ...] = (
    vllm.FOOTPRINT,
    voxcpm.FOOTPRINT,
    comfyui.FOOTPRINT,
)

_PROBLEMS = registry_problems(SERVICES)
if _PROBLEMS:
    raise ValueError("roles/services.py: " + "; ".join(_PROBLEMS))


def by_unit(unit: str) -> ServiceFootprint:
    """The footprint of the service whose unit is ``unit`` (``"vllm.service"``); raises
    ``KeyError`` for a unit that is no GPU service of rigup."""
    for service in SERVICES:
        if service.unit == unit:
            return service
    raise KeyError(
        f"{unit} is not one of rigup's GPU services ({', '.join(s.unit for s in SERVICES)})"
    )


def host_manifests(data: Any, services: tuple[ServiceFootprint, ...] = SERVICES) -> list[str]:
    """The model manifests the settings ``data`` place on a host: those of every installed
    service (the LLM's, VoxCPM2's, ComfyUI's), each once, in order."""
    refs = [ref for s in services for _, many in s.manifests(data) for ref in many]
    return list(dict.fromkeys(refs))
