"""Where the doctor role puts things on a host (deploys and tests share it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from roles.common.paths import Layout, ToolPaths

#: rigup's files for the doctor on the controller (the commands)
FILES = Path(__file__).resolve().parents[2] / "files" / "doctor"
COMMANDS = ("rigup-doctor", "rigup-bench", "rigup-report", "rigup-free")
#: rigup-bench's temporary drop-in for an A/B arm: under /run, so a reboot removes it too
ARM_DROPIN_DIR = "/run/systemd/system/vllm.service.d"
ARM_DROPIN = f"{ARM_DROPIN_DIR}/50-rigup-bench-arm.conf"


@dataclass(frozen=True)
class DoctorPaths(ToolPaths):
    """The doctor's tree ``<prefix>/doctor/{bin,lib}``, its configuration ``<etc>/doctor``
    (``doctor.json``, the arms' drop-ins in ``arms/``) and the benchmark results
    ``<state>/bench`` (one JSON per run)."""

    COMPONENT: ClassVar[str] = "doctor"

    config: str
    arms: str
    results: str

    @classmethod
    def extra(cls, base: dict[str, str], data: Any) -> dict[str, str]:
        return {
            "config": f"{base['etc']}/doctor.json",
            "arms": f"{base['etc']}/arms",
            "results": f"{Layout.from_data(data).state}/bench",
        }
