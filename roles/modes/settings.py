"""Rules for the GPU modes' settings (inventory/group_data/all.py, "GPU modes")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from roles.common.checks import Check, choice, number
from roles.modes.budget import MODES

RULES: dict[str, Check] = {
    "rigup_mode": choice(tuple(MODES)),
    "nvidia_gpu_vram_gib": number(1.0, 1024.0),
    "cuda_context_gib": number(0.0, 16.0),
}

OPTIONAL: tuple[str, ...] = ()


def consistency(values: Mapping[str, Any]) -> list[str]:
    """The budget spans every role: roles/settings.py checks it."""
    return []
