"""The driver installed for the next boot (nvidia_driver_next_boot): the flavour of the installed
kernel meta-package whatever kernel runs, and the preflight of a host whose running kernel is not
the one the modules are for (the Ubuntu lab: a container runs its host's kernel). Inputs are the
facts' own parsers on captured output (tests/fixtures/field, tests/fixtures/lab)."""

from __future__ import annotations

import pytest

from rigup.nvidia import parse_driver_state
from roles.nvidia.facts import KernelPackages
from roles.nvidia.kernel import installed_flavour, kernel_flavour
from roles.nvidia.preflight import (
    NEXT_BOOT_NOTE,
    REBOOT_NOTE,
    driver_packages,
    driver_preflight,
    reboot_reasons,
    reboot_refusal,
    target_flavour,
)
from tests.captures import block

LAB = {
    "nvidia_gpu_count": 0,
    "nvidia_driver_branch": 580,
    "nvidia_install_path": "ubuntu",
    "nvidia_driver_next_boot": True,
}
EMPTY = {"installed": {}, "nvidia_repo_sources": [], "held": []}


def kernel(fixture: str) -> dict:
    return KernelPackages().process(block(fixture).lines)


def state(fixture: str) -> dict:
    return parse_driver_state(block(fixture).lines)


def test_installed_flavour_ignores_the_running_kernel():
    """The lab's kernel packages: linux-generic installed, the controller's kernel running."""
    facts = kernel("lab/resolute-kernel-packages.txt")
    assert kernel_flavour(facts["kernel"], facts["packages"]) is None  # what a rig would say
    found = installed_flavour(facts["packages"])
    assert found.name == "generic"
    assert found.metapackages == ("linux-generic", "linux-image-generic", "linux-headers-generic")
    assert target_flavour(LAB, facts["kernel"], facts["packages"]) == found
    assert target_flavour({**LAB, "nvidia_driver_next_boot": False}, facts["kernel"],
                          facts["packages"]) is None  # fmt: skip
    assert driver_packages(LAB, found) == [
        "nvidia-driver-580-open",
        "linux-modules-nvidia-580-open-generic",
    ]


@pytest.mark.parametrize(
    "fixture,flavour",
    [("field/kernel-desktop-hwe.txt", "generic-hwe-26.04"), ("field/kernel-oem.txt", "oem-26.04")],
)
def test_installed_flavour_chooses_as_the_running_kernel_would(fixture, flavour):
    facts = kernel(fixture)
    assert installed_flavour(facts["packages"]).name == flavour
    assert kernel_flavour(facts["kernel"], facts["packages"]).name == flavour


def test_no_image_metapackage_no_flavour():
    assert installed_flavour({"linux-base": "", "linux-image-7.0.0-44-generic": "kmod"}) is None
    problems, _ = driver_preflight(
        LAB, [], state("lab/resolute-driver-state-fresh.txt"), EMPTY, None, None,
        {"kernel": "", "packages": {}},
    )  # fmt: skip
    assert len(problems) == 1 and "nvidia_driver_next_boot installs" in problems[0], problems


def test_fresh_lab_passes_and_a_rig_with_its_kernel_is_refused():
    fresh = state("lab/resolute-driver-state-fresh.txt")
    facts = kernel("lab/resolute-kernel-packages.txt")
    assert driver_preflight(LAB, [], fresh, EMPTY, None, None, facts) == ([], [])
    problems, _ = driver_preflight(
        {**LAB, "nvidia_driver_next_boot": False}, [], fresh, EMPTY, None, None, facts
    )
    assert "is not an Ubuntu kernel" in problems[0], problems


def test_converged_lab_reports_the_reboot_and_is_not_refused():
    """After the driver's install: modules on disk for the installed kernel, not for the running
    one. The next boot loads them; rigup neither reboots nor refuses."""
    installed = state("lab/resolute-driver-state-installed.txt")
    facts = kernel("lab/resolute-kernel-packages-installed.txt")
    packages = {
        "installed": {p: "" for p in installed["packages"]},
        "nvidia_repo_sources": [],
        "held": [],
    }
    problems, warnings = driver_preflight(LAB, [], installed, packages, None, None, facts)
    assert problems == [], problems
    reasons = reboot_reasons(warnings)
    assert len(reasons) == 1 and reasons[0].endswith(NEXT_BOOT_NOTE), warnings
    assert (
        f"no NVIDIA module is installed for the running kernel {installed['kernel']}"
        in (reasons[0])
    )
    assert reboot_refusal(reasons, is_local=False, allowed=False, next_boot=True) is None
    assert reboot_refusal(reasons, is_local=False, allowed=False) is not None
    # the same host converged as a rig would be: refused (the module is for another kernel)
    problems, _ = driver_preflight(
        {**LAB, "nvidia_driver_next_boot": False, "nvidia_gpu_count": 0},
        [], installed, packages, None, None, facts,
    )  # fmt: skip
    assert any("no NVIDIA module is installed for the running kernel" in p for p in problems), (
        problems
    )


def test_reboot_reasons_are_the_warnings_a_reboot_fixes():
    assert reboot_reasons(["a " + REBOOT_NOTE, "b " + NEXT_BOOT_NOTE, "note: c"]) == [
        "a " + REBOOT_NOTE,
        "b " + NEXT_BOOT_NOTE,
    ]
