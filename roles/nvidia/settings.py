"""Rules for the NVIDIA layer's settings (inventory/group_data/all.py, "Hardware" and "NVIDIA")."""

from __future__ import annotations

import re
from collections.abc import Mapping
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
from roles.common.setting import Setting, optional, rules

CUDA_LOCK = Path(__file__).resolve().parents[2] / "files" / "nvidia" / "cuda-toolkit.lock"

#: Install paths of the NVIDIA driver (inventory/group_data/all.py explains each).
INSTALL_PATHS = ("ubuntu", "nvidia-repo")


def driver_branch(value: Any) -> str | None:
    """A driver branch number, 580 or newer (vLLM 0.22.1's CUDA 13 wheels)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 100 <= value <= 9999:
        return f"must be a driver branch number such as 580, got {value!r}"
    if value < 580:
        return (
            f"{value} is too old: vLLM 0.22.1's CUDA 13 wheels need an R580 or newer driver "
            "(CUDA 13.0 minimum driver 580)"
        )
    return None


SETTINGS: tuple[Setting, ...] = (
    Setting("nvidia_gpu_count", integer(0, 16)),
    Setting("nvidia_install_path", choice(INSTALL_PATHS)),
    Setting("nvidia_driver_branch", driver_branch),
    Setting("nvidia_cuda_repo_url", https_url),
    Setting(
        "nvidia_cuda_keyring_deb",
        matches(
            re.compile(r"^cuda-keyring_[\w.+~-]+_all\.deb$"),
            "a cuda-keyring_<version>_all.deb file name",
        ),
    ),
    Setting("nvidia_cuda_keyring_sha256", sha256_or_empty),
    Setting(
        "cuda_toolkit_version", version_check(CUDA_LOCK, "cuda-toolkit", "cuda_toolkit_version")
    ),
    Setting("nvidia_persistence_mode", boolean),
    Setting("nvidia_power_limit_w", integer(50, 1000), optional=True),
    Setting("nvlink_required", boolean),
    Setting("nvlink_expected_links", integer(1, 18)),
    Setting("nvlink_link_gbps", number(0.0, 1000.0, lo_open=True)),
    Setting("nvidia_reboot_allowed", boolean),
    Setting("nvidia_reboot_timeout_s", integer(60, 7200)),
    Setting(
        "nvidia_gpu_compute_capability",
        matches(
            re.compile(r"^\d{1,2}\.\d$"), 'a compute capability such as "8.6" (RTX 3090), a string'
        ),
    ),
)

RULES: dict[str, Check] = rules(SETTINGS)
OPTIONAL: tuple[str, ...] = optional(SETTINGS)


def consistency(values: Mapping[str, Any]) -> list[str]:
    """The NVIDIA repository path needs its keyring pinned."""
    if values["nvidia_install_path"] == "nvidia-repo" and not values["nvidia_cuda_keyring_sha256"]:
        return [
            "nvidia_cuda_keyring_sha256: the nvidia-repo install path needs the sha256 of "
            f"{values['nvidia_cuda_keyring_deb']} pinned (download it once from "
            f"{values['nvidia_cuda_repo_url']}/ on a trusted network, run sha256sum, set it here)"
        ]
    return []
