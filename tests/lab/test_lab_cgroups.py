"""Two lab machines at once never see each other's units: each boots in a cgroup2 directory of its
own (lab/cgroup.py), so same-named units live in different cgroups and a stop in one machine
cannot reach the other's processes.

The two machines are bare (no converge): ``<RIGUP_TEST_LAB_NAME>-a`` and ``-b``, on the test
lab's SSH port + 20 and + 21, of the suite ``RIGUP_LAB_SUITE`` names. Destroyed at the end.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from lab import cgroup
from lab.config import LabConfig
from lab.machine import LabMachine
from tests.lab.labtools import LAB_ENV, LAB_MARKS

pytestmark = LAB_MARKS

PROBE = "rigup-cgroup-probe.service"


@pytest.fixture(scope="module")
def pair():
    base_port = int(LAB_ENV["RIGUP_LAB_SSH_PORT"])
    machines = []
    for offset, suffix in ((20, "a"), (21, "b")):
        name = f"{LAB_ENV['RIGUP_LAB_NAME']}-{suffix}"
        env = {
            **os.environ,
            "RIGUP_LAB_NAME": name,
            "RIGUP_LAB_SSH_PORT": str(base_port + offset),
            "RIGUP_LAB_STATE_DIR": "",
        }
        machines.append(LabMachine(LabConfig.from_env(env)))
    try:
        for machine in machines:
            machine.destroy()
            machine.up()
        yield machines
    finally:
        for machine in machines:
            machine.destroy()


def _probe_pid(machine: LabMachine) -> int:
    return int(machine.ssh(f"systemctl show -p MainPID --value {PROBE}").stdout.strip() or 0)


def test_each_machine_runs_in_its_own_cgroup(pair):
    mount = cgroup.require_cgroup2()
    groups = [cgroup.machine_cgroup(m.cfg, mount) for m in pair]
    for machine, group in zip(pair, groups, strict=True):
        pid = machine.nspawn_pid()
        assert pid is not None
        # nspawn itself sits in <group>/supervisor, the container's init in <group>/payload
        assert pid in cgroup.members(group), f"nspawn {pid} is not in {group}"
        assert cgroup.members(group / "payload"), f"no container processes in {group}/payload"
    assert not set(cgroup.members(groups[0])) & set(cgroup.members(groups[1]))


def test_neither_machine_sees_the_others_units(pair):
    a, b = pair
    for machine in pair:
        machine.ssh(
            f"systemctl stop {PROBE} 2>/dev/null; systemctl reset-failed {PROBE}", check=False
        )
    # the same unit name in both machines, as vllm.service is on two rigs in the many-rigs lab;
    # each machine has its own PID namespace (both sleeps may well get the same PID), so each
    # runs a sleep of its own length to tell them apart
    lengths = {a.cfg.name: 600, b.cfg.name: 601}
    for machine in pair:
        machine.ssh(
            f"systemd-run --unit={PROBE} --property=Type=exec sleep {lengths[machine.cfg.name]}"
        )
    pid_a, pid_b = _probe_pid(a), _probe_pid(b)
    assert pid_a and pid_b
    for machine, own, other in ((a, pid_a, b), (b, pid_b, a)):
        tree = machine.ssh("systemd-cgls --no-pager --full").stdout
        # a process line of systemd-cgls: "└─141 /usr/bin/sleep 600"
        assert re.search(rf"─{own} \S*sleep {lengths[machine.cfg.name]}\b", tree), tree
        assert not re.search(rf"─\d+ \S*sleep {lengths[other.cfg.name]}\b", tree), (
            f"{machine.cfg.name} sees the other's"
        )
        assert PROBE in tree
        # the unit's cgroup holds only its own machine's process
        procs = machine.ssh(
            f"cat /sys/fs/cgroup$(systemctl show -p ControlGroup --value {PROBE})/cgroup.procs"
        ).stdout.split()
        assert len(procs) == 1
        units = machine.ssh("systemctl list-units --all --no-legend --plain").stdout
        peer = b if machine is a else a
        assert peer.cfg.name not in units
    # stopping the unit in one machine leaves the other's running
    a.ssh(f"systemctl stop {PROBE}")
    assert _probe_pid(a) == 0
    assert _probe_pid(b) == pid_b
    assert b.ssh(f"systemctl is-active {PROBE}", check=False).stdout.strip() == "active"
    b.ssh(f"systemctl stop {PROBE}")


def test_sshd_listens_on_the_labs_loopback_port_alone(pair):
    for machine in pair:
        listening = machine.ssh("ss -Hltnp").stdout.splitlines()
        mine = [line for line in listening if "sshd" in line or '"systemd"' in line]
        addresses = {line.split()[3] for line in mine}
        assert addresses == {f"127.0.0.1:{machine.cfg.ssh_port}"}, mine


def test_stop_removes_the_machines_cgroup(pair):
    a = pair[0]
    group = cgroup.machine_cgroup(a.cfg, cgroup.require_cgroup2())
    a.stop()
    assert not Path(group).exists()
    a.up()
    assert cgroup.members(group)
