"""Where the NVIDIA layer puts things on the host, and the units it manages."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from roles.common.paths import Layout, ToolPaths

#: rigup's files for this layer on the controller (scripts, unit templates, locks)
FILES = Path(__file__).resolve().parents[2] / "files" / "nvidia"

POWER_UNIT = "rigup-gpu-power.service"
NVLINK_UNIT = "rigup-nvlink.service"
PERSISTENCED = "nvidia-persistenced.service"
#: the units the layer enables and starts on a host with GPUs and driver
BOOT_UNITS = (PERSISTENCED, POWER_UNIT, NVLINK_UNIT)


@dataclass(frozen=True)
class NvidiaPaths(ToolPaths):
    """Paths of the NVIDIA layer on the host: :class:`ToolPaths` of ``nvidia``, the boot units'
    configuration, the CUDA toolkit's venv and home (``<prefix>/cuda-<major.minor>``) and the
    layer's cache (``<state>/nvidia``)."""

    COMPONENT: ClassVar[str] = "nvidia"

    power_config: str
    nvlink_config: str
    interconnect_env: str
    cuda_root: str
    cuda_venv: str
    cuda_lock: str
    cuda_home: str
    cache: str

    @classmethod
    def extra(cls, base: dict[str, str], data: Any) -> dict[str, str]:
        p = Layout.from_data(data)
        major_minor = ".".join(str(data.get("cuda_toolkit_version")).split(".")[:2])
        cuda_root = f"{p.prefix}/cuda-{major_minor}"
        return {
            "power_config": f"{base['etc']}/gpu-power.json",
            "nvlink_config": f"{base['etc']}/nvlink.json",
            "interconnect_env": "/run/rigup-nvlink/interconnect.env",
            "cuda_root": cuda_root,
            "cuda_venv": f"{cuda_root}/venv",
            "cuda_lock": f"{cuda_root}/requirements.lock",
            "cuda_home": f"{cuda_root}/home",
            "cache": f"{p.state}/nvidia",
        }


def cuda_env(data: Any) -> dict[str, str]:
    """Environment that puts the pinned CUDA toolkit on PATH for a service user:
    ``{"CUDA_HOME": "/opt/rigup/cuda-13.0/home", "PATH": "<home>/bin:/usr/local/sbin:..."}``."""
    home = NvidiaPaths.from_data(data).cuda_home
    return {
        "CUDA_HOME": home,
        "PATH": f"{home}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    }
