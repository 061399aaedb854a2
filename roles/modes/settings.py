"""Rules for the GPU modes' settings (inventory/group_data/all.py, "GPU modes")."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from roles.common.checks import Check, choice, number
from roles.common.setting import Setting, TypedSettings, declared, optional, rules, setting
from roles.modes.budget import MODES


@dataclass(frozen=True)
class ModesSettings(TypedSettings):
    """The GPU modes' settings, each declared once: name, the type code reads, check. Defaults,
    meaning and sources: inventory/group_data/all.py ("GPU modes and VRAM budget").
    ``ModesSettings.of(host.data)`` reads them into typed attributes."""

    rigup_mode: str = setting(choice(tuple(MODES)))
    nvidia_gpu_vram_gib: float = setting(number(1.0, 1024.0))
    cuda_context_gib: float = setting(number(0.0, 16.0))


SETTINGS: tuple[Setting, ...] = declared(ModesSettings)

RULES: dict[str, Check] = rules(SETTINGS)
OPTIONAL: tuple[str, ...] = optional(SETTINGS)


def consistency(values: Mapping[str, Any]) -> list[str]:
    """The budget spans every role: roles/settings.py checks it."""
    return []
