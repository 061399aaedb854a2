"""Rules for the GPU modes' settings (inventory/group_data/all.py, "GPU modes")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from roles.common.checks import Check, choice, number
from roles.common.setting import Setting, optional, rules
from roles.modes.budget import MODES

SETTINGS: tuple[Setting, ...] = (
    Setting("rigup_mode", choice(tuple(MODES))),
    Setting("nvidia_gpu_vram_gib", number(1.0, 1024.0)),
    Setting("cuda_context_gib", number(0.0, 16.0)),
)

RULES: dict[str, Check] = rules(SETTINGS)
OPTIONAL: tuple[str, ...] = optional(SETTINGS)


def consistency(values: Mapping[str, Any]) -> list[str]:
    """The budget spans every role: roles/settings.py checks it."""
    return []
