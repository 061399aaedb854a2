"""Plans of the NVIDIA driver installed for the next boot (nvidia_driver_next_boot: the Ubuntu lab,
a container that runs its host's kernel) on @fake hosts: the rig's own operations install and
hold Ubuntu's packages for the installed kernel meta-package's flavour, with no GPU declared; the
reboot is decided and reported, never taken nor refused."""

from __future__ import annotations

import pytest

from tests.plans.test_plans import _nvidia_ops, plan

DRIVER_OP = "NVIDIA driver | Driver nvidia-driver-580-open + linux-modules-nvidia-580-open-generic"
REPORT_OP = "NVIDIA driver | Reboot needed to load the driver (not taken: nvidia_driver_next_boot)"


def test_fresh_lab_installs_the_rig_operations_and_reports_the_reboot():
    rc, parsed, err = plan("lab_next_boot_fresh", "deploys/nvidia.py")
    assert rc == 0, err
    ops = _nvidia_ops(parsed)
    assert ops[DRIVER_OP] == "change"
    assert ops["NVIDIA driver | Blacklist nouveau"] == "change"
    assert ops["NVIDIA driver | Keep the driver and kernel out of unattended upgrades"] == "change"
    assert "NVIDIA driver | Hold the driver packages (apt-mark hold)" in ops
    assert ops["NVIDIA driver | Regenerate the initramfs (nouveau blacklist changed)"] == (
        "conditional"
    )
    assert ops[REPORT_OP] == "conditional"
    # the reboot is never taken, the run never stopped for it, the driver never verified loaded
    assert not any(
        name.startswith(("NVIDIA driver | Reboot to", "NVIDIA driver | Stop"))
        or "Driver loaded and consistent" in name
        for name in ops
    ), sorted(ops)
    # no GPUs declared: the boot units are installed and held back
    assert (
        "GPU power and persistence | rigup-gpu-power.service installed, not started "
        "(no GPUs or no driver)" in ops
    )
    # dracut's update-initramfs is there (Ubuntu 26.04): no other generator is installed
    assert "NVIDIA driver | NVIDIA prerequisites (pciutils, mokutil, kmod)" in ops


def test_without_next_boot_the_same_lab_installs_nothing():
    rc, parsed, err = plan("fresh_no_gpu", "deploys/nvidia.py")
    assert rc == 0, err
    assert not any(name.startswith("NVIDIA driver | Driver") for name in _nvidia_ops(parsed))


def test_converged_lab_plans_nothing_and_shows_the_reboot_decision():
    rc, parsed, err = plan("lab_next_boot_converged", "deploys/nvidia.py")
    assert rc == 0, err
    ops = _nvidia_ops(parsed)
    assert ops[DRIVER_OP] == "none"
    assert ops["NVIDIA driver | Hold the driver packages (apt-mark hold)"] == "none"
    assert not any("Reboot" in name or "Stop" in name for name in ops), sorted(ops)
    assert "a reboot is needed" in err and "not taken: nvidia_driver_next_boot" in err, err
    assert "no NVIDIA module is installed for the running kernel 6.18.44-fc-v1045" in err, err
    assert "(it exists for 7.0.0-44-generic)" in err, err


def _switch_plan(scenario: str) -> dict[str, str]:
    rc, parsed, err = plan(scenario, "deploys/nvidia.py")
    assert rc == 0, err
    assert "switching the driver from nvidia-driver-580-open to" in err, err
    return _nvidia_ops(parsed)


@pytest.mark.parametrize(
    "scenario,switch,install",
    [
        (
            "lab_next_boot_to_595",
            "Driver branch 595, variant open (another driver's packages removed)",
            "Driver nvidia-driver-595-open + linux-modules-nvidia-595-open-generic",
        ),
        (
            "lab_next_boot_to_server",
            "Driver branch 580, variant server (another driver's packages removed)",
            "Driver nvidia-driver-580-server + linux-modules-nvidia-580-server-generic",
        ),
    ],
)
def test_a_branch_or_variant_change_switches_the_driver_and_reports_the_reboot(
    scenario, switch, install
):
    ops = _switch_plan(scenario)
    assert ops[f"NVIDIA driver | {switch}"] == "change"
    assert ops[f"NVIDIA driver | {install}"] == "change"
    assert ops[REPORT_OP] == "conditional"
    assert not any(n.startswith(("NVIDIA driver | Reboot to", "NVIDIA driver | Stop")) for n in ops)


def test_converged_lab_plans_no_switch():
    rc, parsed, err = plan("lab_next_boot_converged", "deploys/nvidia.py")
    assert rc == 0, err
    ops = _nvidia_ops(parsed)
    assert (
        ops["NVIDIA driver | Driver branch 580, variant open (another driver's packages removed)"]
        == "none"
    )
    assert "switching the driver" not in err


def test_a_rig_switching_under_its_running_driver_reboots_and_verifies_it():
    rc, parsed, err = plan("converged_rig_to_closed", "deploys/nvidia.py")
    assert rc == 0, err
    ops = _nvidia_ops(parsed)
    switch = "Driver branch 580, variant server (another driver's packages removed)"
    assert ops[f"NVIDIA driver | {switch}"] == "change"
    assert ops["NVIDIA driver | Reboot to load the NVIDIA driver"] == "conditional"
    assert ops["NVIDIA driver | Driver loaded and consistent (rigup-nvidia-diagnose)"] == (
        "conditional"
    )
