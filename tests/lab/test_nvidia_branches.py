"""The NVIDIA layer alone (deploys/nvidia.py) switches the driver for real, on a bare Ubuntu 26.04
lab machine of its own (the base layer converged first: its uv makes the CUDA toolkit's venv): first branch 595 (open modules), then the closed modules of the server
packaging on 580 (nvidia-driver-580-server, the fix NVIDIA/open-gpu-kernel-modules#1211 names).
Each converge is checked with testinfra (dpkg state, holds, the other driver's packages gone) and
followed by a second run that plans 0 changes. The machine has no GPU: the driver is installed
for the kernel of its linux-generic (nvidia_driver_next_boot) and never loaded, and the 595
nvidia-smi's answer there is read by rigup's own fact (driver not loaded).

The machine: ``<RIGUP_TEST_LAB_NAME>-nv`` on the test lab's SSH port + 22, destroyed at the end.
"""

from __future__ import annotations

import os
import shlex
import time

import pytest
import testinfra

from lab import scenario
from lab.config import LabConfig
from lab.machine import LabMachine
from rigup import diagnosis
from rigup.nvidia import DRIVER_STATE_COMMAND, parse_driver_state
from roles.nvidia.branches import HOLD_PREFIXES, driver_package_of
from roles.nvidia.facts import NvidiaGpus
from tests.lab.labtools import LAB_ENV, LAB_MARKS, environ

pytestmark = LAB_MARKS

#: The two switches: pyinfra --data for each, and the driver and modules packages it installs.
STEPS = (
    (
        ("nvidia_driver_branch=595",),
        "nvidia-driver-595-open",
        "linux-modules-nvidia-595-open-generic",
    ),
    (
        ("nvidia_driver_branch=580", "nvidia_driver_variant=server"),
        "nvidia-driver-580-server",
        "linux-modules-nvidia-580-server-generic",
    ),
)


@pytest.fixture(scope="module")
def bare():
    env = {
        **os.environ,
        "RIGUP_LAB_NAME": f"{LAB_ENV['RIGUP_LAB_NAME']}-nv",
        "RIGUP_LAB_SSH_PORT": str(int(LAB_ENV["RIGUP_LAB_SSH_PORT"]) + 22),
        "RIGUP_LAB_STATE_DIR": "",
    }
    machine = LabMachine(LabConfig.from_env(env))
    # inventory/lab.py reads them
    with environ({k: env[k] for k in ("RIGUP_LAB_NAME", "RIGUP_LAB_SSH_PORT")}):
        machine.destroy()
        try:
            started = time.monotonic()
            machine.up()
            print(f"\nbare lab machine up in {time.monotonic() - started:.1f} s")
            # the NVIDIA layer's CUDA toolkit venv is made with the base layer's uv
            base = scenario.converge("inventory/lab.py", "deploys/base.py")
            assert base.ok, f"base converge failed (exit {base.rc})"
            print(f"base layer converged in {base.seconds:.1f} s")
            yield machine
        finally:
            machine.destroy()


def _host(machine: LabMachine):
    cfg = machine.cfg
    options = f"-o BatchMode=yes -o UserKnownHostsFile={cfg.known_hosts}"
    return testinfra.get_host(
        f"ssh://root@127.0.0.1:{cfg.ssh_port}",
        ssh_identity_file=str(cfg.ssh_key),
        ssh_extra_args=options,
    )


def _driver_packages(host) -> dict[str, str]:
    """Installed packages of any driver branch (name -> dpkg's status abbreviation)."""
    out = host.check_output(
        "dpkg-query -W -f='${db:Status-Abbrev} ${Package}\\n' 'nvidia-*' 'libnvidia-*' "
        "'linux-modules-nvidia-*' 'xserver-xorg-video-nvidia-*' 2>/dev/null || true"
    )
    found = {}
    for line in out.splitlines():
        status, _, name = line.strip().partition(" ")
        if status in ("ii", "hi") and driver_package_of(name.strip()):
            found[name.strip()] = status
    return found


def _data(args: tuple[str, ...]) -> list[str]:
    return [a for d in args for a in ("--data", d)]


def test_driver_switches_to_595_then_to_the_closed_server_modules(bare):
    host = _host(bare)
    for data, driver, modules in STEPS:
        branch = int(driver.split("-")[2])
        result = scenario.converge("inventory/lab.py", "deploys/nvidia.py", *_data(data))
        assert result.ok, f"converge with {data} failed (exit {result.rc}); its output is above"
        print(f"\nconverge of the NVIDIA layer with {' '.join(data)}: {result.seconds:.1f} s")

        assert host.package(driver).is_installed
        assert host.package(modules).is_installed
        installed = _driver_packages(host)
        # only the wanted driver's packages: the other branch's or variant's were removed
        wrong = [
            n
            for n in installed
            if driver_package_of(n).branch != branch
            or driver_package_of(n).server != ("server" in driver)
            or driver_package_of(n).open is (not driver.endswith("-open"))
        ]
        assert wrong == [], f"packages of another driver left: {wrong}"
        held = set(host.check_output("apt-mark showhold").split())
        assert set(installed) <= held, f"not held: {sorted(set(installed) - held)}"
        blacklist = host.file("/etc/apt/apt.conf.d/51rigup-nvidia").content_string
        assert all(f'"{prefix}";' in blacklist for prefix in HOLD_PREFIXES), blacklist

        again = scenario.idempotence("inventory/lab.py", "deploys/nvidia.py", *_data(data))
        assert again.ok, f"a second run plans changes: {again.detail}"
        print(f"second run (--dry --json) {again.seconds:.1f} s, 0 changes")

        # the branch's own nvidia-smi, on a machine whose kernel has no NVIDIA module loaded
        smi = host.run(f"{shlex.quote('/usr/bin/nvidia-smi')} --version; echo @rc $?")
        print(f"nvidia-smi --version of {driver}:\n{smi.stdout}{smi.stderr}")
        fact = NvidiaGpus()
        answer = host.run(fact.command())
        state = fact.process(answer.stdout.splitlines())
        print(f"NvidiaGpus's command on {driver}:\n{answer.stdout}")
        assert state is not None and state["gpus"] == [], state
        kinds = {v.kind for v in state["verdicts"]}
        assert "driver-not-loaded" in kinds, (kinds, answer.stdout)
        assert all(v.severity == diagnosis.FAIL for v in state["verdicts"]), state["verdicts"]

        # the driver state rigup reads (modinfo of the installed modules, packages) names it
        raw = host.run(f"sh -c {shlex.quote(DRIVER_STATE_COMMAND)}").stdout
        print(f"DRIVER_STATE_COMMAND on {driver}:\n{raw}")
        driver_state = parse_driver_state(raw.splitlines())
        versions = set(driver_state["module_kernels"].values())
        assert versions and all(v.startswith(f"{branch}.") for v in versions), driver_state
        assert diagnosis.installed_driver(driver_state["packages"]) == driver_package_of(driver)
