"""nvidia: driver + CUDA toolkit, persistence mode and power limit at boot, NVLink verification.

Settings: the ``nvidia_*``, ``nvlink_*`` and ``cuda_toolkit_version`` keys of
inventory/group_data/all.py (rules in settings.py). Where things live:

- settings.py    the rules of the layer's keys
- paths.py       where the layer puts things on the host (NvidiaPaths), its units, cuda_env
- facts.py       what the host says (PCI, driver state, packages, nvidia-smi, kernel, units)
- rigup/nvidia/  reading nvidia-smi and friends (the host package, on the host in ``<nvidia>/lib``)
- rigup/diagnosis/  what each fault means (one table), in the same package
- kernel.py      the running kernel's flavour -> Canonical's prebuilt module package
- preflight.py   everything that refuses a host, before any change
- cuda_headers.py  CUDA 13.0's crt/math_functions.h against glibc >= 2.42 (rsqrt noexcept)
- operations.py  the layer's own operations (driver held, CUDA_HOME linked, math header edited)
- tools.py       rigup's scripts on the host (boot units, rigup-nvidia-diagnose)
- driver.py, toolkit.py, power.py, nvlink.py   one deploy each
- layer.py       NvidiaLayer: what later deploys (vLLM, VoxCPM2, ComfyUI) receive
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.facts.server import Which

from roles.nvidia.driver import nvidia_driver
from roles.nvidia.layer import NvidiaLayer, driver_usable, observed_layer
from roles.nvidia.nvlink import nvlink, nvlink_config
from roles.nvidia.paths import NVLINK_UNIT, PERSISTENCED, POWER_UNIT, NvidiaPaths, cuda_env
from roles.nvidia.power import gpu_power, power_config
from roles.nvidia.toolkit import cuda_toolkit
from roles.nvidia.tools import install_tools

__all__ = [
    "NVLINK_UNIT",
    "PERSISTENCED",
    "POWER_UNIT",
    "NvidiaLayer",
    "NvidiaPaths",
    "cuda_env",
    "driver_usable",
    "nvidia",
    "nvlink_config",
    "observed_layer",
    "power_config",
]


@deploy("NVIDIA layer")
def nvidia(settings) -> NvidiaLayer:
    """The whole NVIDIA layer, in order, for a host whose ``settings`` were checked
    (roles.settings.host_settings); returns what the deploys after it need."""
    tools = install_tools(NvidiaPaths.from_data(settings))  # scripts and the package rigup
    planned = nvidia_driver(settings, tools)  # refuses before any change; installs, holds, reboots
    cuda_toolkit(settings)  # CUDA 13.0 from NVIDIA's wheels, locked; needs no GPU
    has_driver = bool(host.get_fact(Which, command="nvidia-smi"))
    layer = NvidiaLayer.of(settings, has_driver=has_driver, planned=planned)
    gpu_power(settings, tools, layer.driver_usable)  # persistence mode + power limit at every boot
    nvlink(settings, tools, layer.driver_usable)  # NVLink verified at boot; vLLM's NCCL env
    return layer
