"""NVLink at boot: ``rigup-nvlink.service`` verifies the links and P2P and writes vLLM's
interconnect environment. Installed everywhere, started where GPU services may run; re-run on any
change."""

from __future__ import annotations

from typing import Any

from pyinfra.api import deploy
from pyinfra.operations import systemd
from pyinfra.operations.util import any_changed

from roles.common.placed import template_placed
from roles.nvidia.paths import FILES, NVLINK_UNIT, NvidiaPaths
from roles.nvidia.tools import NvidiaTools
from roles.nvidia.units import boot_unit, held_back, json_config


def nvlink_config(settings: Any) -> dict:
    """What rigup-nvlink reads: ``{"gpu_count": 2, "expected_links": 4 (per GPU),
    "required": True}``."""
    return {
        "gpu_count": settings.get("nvidia_gpu_count"),
        "expected_links": settings.get("nvlink_expected_links"),
        "required": settings.get("nvlink_required"),
    }


@deploy("NVLink")
def nvlink(settings, tools: NvidiaTools, usable: bool) -> None:
    """``rigup-nvlink.service``: at boot, before vLLM, verify the links and P2P and write the
    interconnect environment vLLM reads (P2P over NVLink, or P2P and custom all-reduce off).
    With ``nvlink_required`` an unverified bridge keeps vLLM down. Started only where
    ``usable``."""
    np = NvidiaPaths.from_data(settings)
    config = json_config("NVLink expectations", np.nvlink_config, nvlink_config(settings))
    unit = template_placed(
        name=f"Unit {NVLINK_UNIT}",
        src=str(FILES / "rigup-nvlink.service.j2"),
        dest=f"/etc/systemd/system/{NVLINK_UNIT}",
        mode="644",
        script=f"{np.bin}/rigup-nvlink",
        config=np.nvlink_config,
        env_out=np.interconnect_env,
    )
    systemd.daemon_reload(name="systemd daemon-reload", _if=unit.did_change)
    if usable:
        boot_unit(
            NVLINK_UNIT,
            "enabled and verified",
            f"Verify again (restart {NVLINK_UNIT})",
            any_changed(config, unit, *tools.changed("rigup-nvlink")),
        )
    else:
        held_back(NVLINK_UNIT, settings.nvidia_gpu_count)
