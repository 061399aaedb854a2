"""Persistence mode and the power limit at boot: nvidia-persistenced with rigup's drop-in, and
``rigup-gpu-power.service`` applying ``nvidia_power_limit_w`` to each GPU by UUID (read back,
verified). Installed everywhere, started where GPU services may run; re-run on any change."""

from __future__ import annotations

from typing import Any

from pyinfra.api import deploy
from pyinfra.operations import systemd
from pyinfra.operations.util import any_changed

from roles.common.placed import template_placed
from roles.nvidia.paths import FILES, PERSISTENCED, POWER_UNIT, NvidiaPaths
from roles.nvidia.tools import NvidiaTools
from roles.nvidia.units import boot_unit, held_back, json_config


def power_config(settings: Any) -> dict:
    """What rigup-gpu-power reads: ``{"gpu_count": 2, "power_limit_w": 290 | None (card
    default), "persistence_mode": True}``."""
    return {
        "gpu_count": settings.get("nvidia_gpu_count"),
        "power_limit_w": settings.get("nvidia_power_limit_w"),
        "persistence_mode": settings.get("nvidia_persistence_mode"),
    }


@deploy("GPU power and persistence")
def gpu_power(settings, tools: NvidiaTools, usable: bool) -> None:
    """Persistence mode at boot (nvidia-persistenced drop-in) and ``rigup-gpu-power.service``,
    a oneshot after it that applies ``nvidia_power_limit_w`` to each GPU by UUID, reads it back
    and fails on any difference. Started only where ``usable`` (GPUs and driver)."""
    np = NvidiaPaths.from_data(settings)
    config = json_config("Power limit configuration", np.power_config, power_config(settings))
    dropin = template_placed(
        name="nvidia-persistenced with persistence mode (drop-in)",
        src=str(FILES / "persistenced-rigup.conf.j2"),
        dest="/etc/systemd/system/nvidia-persistenced.service.d/rigup-persistence.conf",
        mode="644",
        persistence=settings.nvidia_persistence_mode,
    )
    unit = template_placed(
        name=f"Unit {POWER_UNIT}",
        src=str(FILES / "rigup-gpu-power.service.j2"),
        dest=f"/etc/systemd/system/{POWER_UNIT}",
        mode="644",
        script=f"{np.bin}/rigup-gpu-power",
        config=np.power_config,
    )
    systemd.daemon_reload(name="systemd daemon-reload", _if=any_changed(dropin, unit))
    if usable:
        boot_unit(
            PERSISTENCED,
            "enabled and running",
            f"Restart {PERSISTENCED} (persistence setting changed)",
            dropin.did_change,
        )
        boot_unit(
            POWER_UNIT,
            "enabled and applied",
            f"Re-apply the power limit (restart {POWER_UNIT})",
            any_changed(config, unit, dropin, *tools.changed("rigup-gpu-power")),
        )
    else:
        held_back(POWER_UNIT, settings.nvidia_gpu_count)
