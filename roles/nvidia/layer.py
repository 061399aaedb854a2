"""What the NVIDIA layer hands to the deploys after it (vLLM, VoxCPM2, ComfyUI, the modes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyinfra import host
from pyinfra.facts.server import Which

from roles.nvidia.paths import NvidiaPaths, cuda_env


def driver_usable(gpus: int, has_driver: bool, planned: bool = False) -> bool:
    """May GPU services be enabled on a host? Only when it declares GPUs and has the NVIDIA
    driver (``nvidia-smi``) or gets it in this run (``planned``). Pure."""
    return gpus > 0 and (has_driver or planned)


def hold_back_reason(gpus: int, usable: bool) -> str | None:
    """Why a GPU service is installed but not started on this host; None when it may run."""
    if usable:
        return None
    if gpus == 0:
        return "this host declares no NVIDIA GPUs (nvidia_gpu_count = 0)"
    return f"it declares {gpus} GPU(s) but has no NVIDIA driver (no nvidia-smi on PATH)"


@dataclass(frozen=True)
class NvidiaLayer:
    """The NVIDIA layer of one host, as :func:`roles.nvidia.nvidia` planned it.

    ``driver_usable``: GPU services may be enabled (GPUs declared, driver present or installed by
    this run); ``driver_planned``: this run installs the driver; ``interconnect_env``: the
    EnvironmentFile rigup-nvlink writes for vLLM; ``cuda_env``: CUDA_HOME and PATH of the pinned
    toolkit; ``compute_capability``: the GPUs' (nvidia_gpu_compute_capability, checked against
    nvidia-smi where the driver answers).
    """

    gpus: int
    driver_usable: bool
    driver_planned: bool
    interconnect_env: str
    cuda_env: dict[str, str] = field(default_factory=dict, hash=False)
    compute_capability: str = ""

    @property
    def hold_back_reason(self) -> str | None:
        """Why GPU services stay installed but stopped here; None when they may run."""
        return hold_back_reason(self.gpus, self.driver_usable)

    @classmethod
    def of(cls, data: Any, *, has_driver: bool, planned: bool = False) -> NvidiaLayer:
        gpus = data.get("nvidia_gpu_count") or 0
        return cls(
            gpus=gpus,
            driver_usable=driver_usable(gpus, has_driver, planned),
            driver_planned=planned,
            interconnect_env=NvidiaPaths.from_data(data).interconnect_env,
            cuda_env=cuda_env(data),
            compute_capability=str(data.get("nvidia_gpu_compute_capability") or ""),
        )


def observed_layer(data: Any) -> NvidiaLayer:
    """The layer as the host is now, for a deploy run without :func:`roles.nvidia.nvidia`
    (``deploys/vllm.py`` alone): the driver counts when ``nvidia-smi`` is on PATH. Reads a fact,
    so call it inside a deploy."""
    return NvidiaLayer.of(data, has_driver=bool(host.get_fact(Which, command="nvidia-smi")))


def gpu_blocker(data: Any, has_driver: bool) -> str | None:
    """Why a GPU service cannot run on a host, or None when it can: the one answer every GPU
    service role and testinfra use. Pure.

    It can when the host declares GPUs (``nvidia_gpu_count`` > 0) and ``has_driver`` (the NVIDIA
    driver is there, or this run installs it).
    """
    gpus = data.get("nvidia_gpu_count")
    return hold_back_reason(gpus, driver_usable(gpus, has_driver))


def gpu_hold_back_reason(data: Any, nvidia: NvidiaLayer | None = None) -> str | None:
    """:func:`gpu_blocker` for the current host: from ``nvidia``, what roles.nvidia.nvidia
    returned in this run (the driver there or planned), or, in a partial run without it, from
    the host as it is (``nvidia-smi`` on PATH: reads a fact, so call it inside a deploy)."""
    return (nvidia or observed_layer(data)).hold_back_reason
