"""roles/nvidia/branches.py: which installed packages belong to which driver, on the package names
of Ubuntu 26.04's archive (resolute restricted, 2026-12: 580.178.04 and 595.99.02)."""

from __future__ import annotations

import pytest

from roles.nvidia.branches import (
    DriverPackage,
    driver_metapackage,
    driver_package_of,
    modules_metapackage,
    other_driver_packages,
)
from roles.nvidia.kernel import KernelFlavour

#: What nvidia-driver-580-open --no-install-recommends installs with its prebuilt modules (the
#: lab's dpkg, names only), with two packages of no branch a desktop has beside them.
INSTALLED_580_OPEN = [
    "libnvidia-cfg1-580",
    "libnvidia-common-580",
    "libnvidia-compute-580",
    "libnvidia-decode-580",
    "libnvidia-egl-wayland1",
    "libnvidia-gl-580",
    "linux-modules-nvidia-580-open-7.0.0-44-generic",
    "linux-modules-nvidia-580-open-generic",
    "nvidia-compute-utils-580",
    "nvidia-driver-580-open",
    "nvidia-firmware-580-580.178.04",
    "nvidia-kernel-common-580",
    "nvidia-kernel-source-580-open",
    "nvidia-prime",
    "nvidia-utils-580",
    "xserver-xorg-video-nvidia-580",
]


@pytest.mark.parametrize(
    "name,found",
    [
        ("nvidia-driver-580-open", DriverPackage(580, False, True)),
        ("nvidia-driver-580", DriverPackage(580, False, False)),
        ("nvidia-driver-580-server", DriverPackage(580, True, False)),
        ("nvidia-driver-595-server-open", DriverPackage(595, True, True)),
        ("linux-modules-nvidia-595-open-7.0.0-44-generic", DriverPackage(595, False, True)),
        ("linux-modules-nvidia-580-server-generic", DriverPackage(580, True, False)),
        ("libnvidia-compute-595", DriverPackage(595, False, None)),
        ("libnvidia-compute-580-server", DriverPackage(580, True, None)),
        ("nvidia-firmware-595-595.99.02", DriverPackage(595, False, None)),
        ("xserver-xorg-video-nvidia-580", DriverPackage(580, False, None)),
        ("nvidia-prime", None),
        ("libnvidia-egl-wayland1", None),
        ("nvidia-open", None),
        ("cuda-keyring", None),
    ],
)
def test_package_names_say_their_driver(name, found):
    assert driver_package_of(name) == found


@pytest.mark.parametrize(
    "branch,variant,driver,modules",
    [
        (580, "open", "nvidia-driver-580-open", "linux-modules-nvidia-580-open-generic"),
        (580, "closed", "nvidia-driver-580", "linux-modules-nvidia-580-generic"),
        (580, "server", "nvidia-driver-580-server", "linux-modules-nvidia-580-server-generic"),
        (595, "open", "nvidia-driver-595-open", "linux-modules-nvidia-595-open-generic"),
        (595, "server-open", "nvidia-driver-595-server-open",
         "linux-modules-nvidia-595-server-open-generic"),
    ],
)  # fmt: skip
def test_package_names_are_those_of_the_archive(branch, variant, driver, modules):
    assert driver_metapackage(branch, variant) == driver
    assert modules_metapackage(branch, variant, "generic") == modules
    assert KernelFlavour("generic", ()).modules_package(branch, variant) == modules


def test_the_installed_driver_is_not_another():
    assert other_driver_packages(INSTALLED_580_OPEN, 580, "open") == []


def test_closed_modules_of_the_same_branch_remove_only_the_open_modules():
    assert other_driver_packages(INSTALLED_580_OPEN, 580, "closed") == [
        "linux-modules-nvidia-580-open-7.0.0-44-generic",
        "linux-modules-nvidia-580-open-generic",
        "nvidia-driver-580-open",
        "nvidia-kernel-source-580-open",
    ]


@pytest.mark.parametrize("branch,variant", [(595, "open"), (580, "server"), (595, "closed")])
def test_another_branch_or_packaging_removes_every_package_of_the_branch(branch, variant):
    others = other_driver_packages(INSTALLED_580_OPEN, branch, variant)
    assert others == sorted(
        n for n in INSTALLED_580_OPEN if n not in ("nvidia-prime", "libnvidia-egl-wayland1")
    )
