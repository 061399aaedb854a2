"""The NVIDIA driver branches and variants rigup installs from Ubuntu's archive, their package
names, and which installed packages belong to another driver than the one wanted (a branch or
variant switch removes them). Pure.

Ubuntu 26.04 (resolute) restricted, amd64 (Packages of resolute, resolute-updates and
resolute-security, read 2026-12-03): ``nvidia-driver-<b>{,-open,-server,-server-open}`` and
``linux-modules-nvidia-<b>{,-open,-server,-server-open}-generic`` exist for 580, 590 and 595;
580.178.04 and 595.99.02 in resolute-updates. The userspace packages of one branch are shared by
its open and closed kernel modules (``libnvidia-compute-595``, ``nvidia-utils-595``); the
``-server`` variants have their own (``libnvidia-compute-580-server``).

The package names are read by :func:`rigup.diagnosis.driver_branches.driver_package_of` (the
doctor reads the host's driver with it too).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rigup.diagnosis.driver_branches import DriverPackage, driver_package_of

#: The driver branches rigup supports, each tested in the lab (tests/lab/test_nvidia_branches.py)
#: with the reason it is offered. Another branch is refused by the settings check.
SUPPORTED_BRANCHES: dict[int, str] = {
    580: (
        "the default: CUDA 13.0's minimum driver (vLLM 0.22.1's wheels), NVIDIA's long-term "
        "support branch, supported to 2028 (NVIDIA driver lifecycle)"
    ),
    595: (
        "the branch NVIDIA's Ubuntu 26.04 driver containers start at (NVIDIA/aicr#2192), what many "
        "3090 owners run"
    ),
}

#: Where SUPPORTED_BRANCHES comes from, for the settings check's message.
SUPPORTED_SOURCE = "roles/nvidia/branches.py SUPPORTED_BRANCHES, each converged in the lab"

#: The driver variants of one branch in Ubuntu's archive -> the suffix of their package names
#: (``nvidia-driver-<branch><suffix>``, ``linux-modules-nvidia-<branch><suffix>-<flavour>``).
#: "open": NVIDIA's open kernel modules (the default; Turing and newer). "closed": the
#: proprietary modules. "server" / "server-open": the same from NVIDIA's datacenter packaging;
#: nvidia-driver-580-server is the fix NVIDIA/open-gpu-kernel-modules#1211 names for a kernel
#: panic at load with nvidia-open 580.159.03 on Ubuntu 26.04's 7.0.0-22 kernel with NVLink.
VARIANTS: dict[str, str] = {
    "open": "-open",
    "closed": "",
    "server": "-server",
    "server-open": "-server-open",
}

#: Package name prefixes of the driver that rigup holds (the exact-version dependencies of
#: nvidia-driver-<b>[-variant]).
HOLD_PREFIXES = ("nvidia-", "libnvidia-", "linux-modules-nvidia-", "xserver-xorg-video-nvidia-")


def variant_suffix(variant: str) -> str:
    """The package suffix of ``variant`` (:data:`VARIANTS`); ``KeyError`` for another."""
    return VARIANTS[variant]


def driver_metapackage(branch: int, variant: str) -> str:
    """``nvidia-driver-<branch><suffix>``: 580, "open" -> ``nvidia-driver-580-open``; 580,
    "server" -> ``nvidia-driver-580-server``."""
    return f"nvidia-driver-{branch}{variant_suffix(variant)}"


def modules_metapackage(branch: int, variant: str, flavour: str) -> str:
    """``linux-modules-nvidia-<branch><suffix>-<flavour>``: Canonical's signed prebuilt modules
    following the kernel meta-package of ``flavour`` (``generic``, ``generic-hwe-26.04``)."""
    return f"linux-modules-nvidia-{branch}{variant_suffix(variant)}-{flavour}"


def wanted_identity(branch: int, variant: str) -> DriverPackage:
    """The :class:`DriverPackage` of the modules of ``branch``/``variant``."""
    return DriverPackage(branch, variant.startswith("server"), variant.endswith("open"))


def belongs(pkg: DriverPackage, branch: int, variant: str) -> bool:
    """Whether a package of ``pkg`` is part of the driver ``branch``/``variant``: same branch and
    packaging, and for a per-variant package the same modules (open or closed)."""
    want = wanted_identity(branch, variant)
    if (pkg.branch, pkg.server) != (want.branch, want.server):
        return False
    return pkg.open is None or pkg.open == want.open


def other_driver_packages(installed: Iterable[str], branch: int, variant: str) -> list[str]:
    """The installed packages (names) of another driver than ``branch``/``variant``, sorted: a
    branch or variant switch removes them in the transaction that installs the wanted one.
    Packages of no branch (nvidia-prime, nvidia-settings, egl-wayland) are kept."""
    out = []
    for name in installed:
        pkg = driver_package_of(name)
        if pkg is not None and not belongs(pkg, branch, variant):
            out.append(name)
    return sorted(out)


def installed_drivers(installed: Iterable[str]) -> list[str]:
    """The driver meta-packages among ``installed`` (``nvidia-driver-580-open``), sorted."""
    return sorted(
        n for n in installed if n.startswith("nvidia-driver-") and driver_package_of(n) is not None
    )


def switch_warnings(data: Any, packages: dict) -> list[str]:
    """On the Ubuntu path, the driver this run switches from (another ``nvidia_driver_branch``
    or ``nvidia_driver_variant`` installed): what apt removes in the transaction that installs
    the wanted one, and that the new driver loads at the next boot."""
    if data.get("nvidia_install_path") != "ubuntu":
        return []
    branch, variant = data.get("nvidia_driver_branch"), data.get("nvidia_driver_variant") or "open"
    others = other_driver_packages(packages.get("installed", {}), branch, variant)
    if not others:
        return []
    was = ", ".join(installed_drivers(others)) or ", ".join(others[:3])
    return [
        f"switching the driver from {was} to {driver_metapackage(branch, variant)} "
        f"(nvidia_driver_branch {branch}, nvidia_driver_variant {variant!r}): apt removes "
        f"{len(others)} package(s) of the other driver ({', '.join(others)}) in the transaction "
        "that installs it; the new driver loads at the next boot"
    ]
