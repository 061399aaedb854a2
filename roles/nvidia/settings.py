"""Rules for the NVIDIA layer's settings (inventory/group_data/all.py, "Hardware" and "NVIDIA")."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roles.common.checks import (
    Check,
    boolean,
    choice,
    https_url,
    integer,
    matches,
    number,
    sha256_or_empty,
)
from roles.common.locks import version_check
from roles.common.setting import Setting, TypedSettings, declared, optional, rules, setting
from roles.nvidia.branches import SUPPORTED_BRANCHES, SUPPORTED_SOURCE, VARIANTS

CUDA_LOCK = Path(__file__).resolve().parents[2] / "files" / "nvidia" / "cuda-toolkit.lock"

#: Install paths of the NVIDIA driver (inventory/group_data/all.py explains each).
INSTALL_PATHS = ("ubuntu", "nvidia-repo")


def driver_branch(value: Any) -> str | None:
    """One of the supported driver branches (roles/nvidia/branches.py SUPPORTED_BRANCHES: 580,
    the default, and 595), each tested in the lab; older than 580 cannot run vLLM 0.22.1's CUDA
    13 wheels (CUDA 13.0 minimum driver 580)."""
    supported = ", ".join(f"{b} ({why})" for b, why in SUPPORTED_BRANCHES.items())
    if isinstance(value, bool) or not isinstance(value, int) or not 100 <= value <= 9999:
        return f"must be a driver branch number, one of: {supported}; got {value!r}"
    if value < 580:
        return (
            f"{value} is too old: vLLM 0.22.1's CUDA 13 wheels need an R580 or newer driver "
            f"(CUDA 13.0 minimum driver 580); supported: {supported}"
        )
    if value not in SUPPORTED_BRANCHES:
        return (
            f"{value} is not a branch rigup supports: {supported} (source: {SUPPORTED_SOURCE}); "
            f"Ubuntu's archive has others, untested by rigup"
        )
    return None


@dataclass(frozen=True)
class NvidiaSettings(TypedSettings):
    """The NVIDIA layer's settings, each declared once: name, the type code reads, check.
    Defaults, meaning and sources: inventory/group_data/all.py ("Hardware the inventory
    declares", "NVIDIA driver, ..."). ``NvidiaSettings.of(host.data)`` reads them into typed
    attributes."""

    nvidia_gpu_count: int = setting(integer(0, 16))
    nvidia_install_path: str = setting(choice(INSTALL_PATHS))
    nvidia_driver_branch: int = setting(driver_branch)
    nvidia_driver_variant: str = setting(choice(tuple(VARIANTS)))
    nvidia_cuda_repo_url: str = setting(https_url)
    nvidia_cuda_keyring_deb: str = setting(
        matches(
            re.compile(r"^cuda-keyring_[\w.+~-]+_all\.deb$"),
            "a cuda-keyring_<version>_all.deb file name",
        )
    )
    nvidia_cuda_keyring_sha256: str = setting(sha256_or_empty)
    cuda_toolkit_version: str = setting(
        version_check(CUDA_LOCK, "cuda-toolkit", "cuda_toolkit_version")
    )
    nvidia_persistence_mode: bool = setting(boolean)
    nvidia_power_limit_w: int | None = setting(integer(50, 1000), optional=True)
    nvlink_required: bool = setting(boolean)
    nvlink_expected_links: int = setting(integer(1, 18))
    nvlink_link_gbps: float = setting(number(0.0, 1000.0, lo_open=True))
    nvidia_reboot_allowed: bool = setting(boolean)
    nvidia_driver_next_boot: bool = setting(boolean)
    nvidia_reboot_timeout_s: int = setting(integer(60, 7200))
    nvidia_gpu_compute_capability: str = setting(
        matches(
            re.compile(r"^\d{1,2}\.\d$"), 'a compute capability such as "8.6" (RTX 3090), a string'
        )
    )


SETTINGS: tuple[Setting, ...] = declared(NvidiaSettings)

RULES: dict[str, Check] = rules(SETTINGS)
OPTIONAL: tuple[str, ...] = optional(SETTINGS)


def consistency(values: Mapping[str, Any]) -> list[str]:
    """The NVIDIA repository path needs its keyring pinned, and installs only the open
    variant (nvidia-open)."""
    problems = []
    if values["nvidia_install_path"] == "nvidia-repo" and values["nvidia_driver_variant"] != "open":
        problems.append(
            f"nvidia_driver_variant: {values['nvidia_driver_variant']!r} is a package of Ubuntu's "
            "archive (nvidia-driver-<branch>-<variant>); the nvidia-repo install path installs "
            "NVIDIA's nvidia-open only: set nvidia_install_path = 'ubuntu', or the variant 'open'"
        )
    if values["nvidia_install_path"] == "nvidia-repo" and not values["nvidia_cuda_keyring_sha256"]:
        problems.append(
            "nvidia_cuda_keyring_sha256: the nvidia-repo install path needs the sha256 of "
            f"{values['nvidia_cuda_keyring_deb']} pinned (download it once from "
            f"{values['nvidia_cuda_repo_url']}/ on a trusted network, run sha256sum, set it here)"
        )
    return problems
