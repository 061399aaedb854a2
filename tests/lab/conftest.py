"""The lab machine the scenario's modules share: created once per test session (a fresh
converge takes minutes), destroyed when the last test that uses it is done (the lab pair and the
cgroup pair that may follow on the same worker need the disk and memory: a converged machine
holds about 4 GiB of its own and serves vLLM); ``media`` puts it back in the media mode."""

from __future__ import annotations

import pytest

from lab import comfyui_lab, hub_lab, scenario, voxcpm_lab
from lab.config import LabConfig
from lab.machine import LabMachine
from tests.lab.labtools import (
    LAB_ENV,
    SESSION_MACHINE_GROUPS,
    active,
    environ,
    machine_group,
)

#: the session's machine, once the ``lab`` fixture made it
_SESSION_MACHINE: list[LabMachine] = []


@pytest.fixture(scope="session")
def lab():
    with environ(LAB_ENV):  # subprocesses (pyinfra, pytest tests/infra) see the same machine
        machine = LabMachine(LabConfig.from_env())
        machine.destroy()  # a leftover from an interrupted run must not leak state into this one
        _SESSION_MACHINE.append(machine)
        try:
            machine.up()
            yield machine
        finally:
            machine.destroy()


@pytest.fixture(scope="session")
def converged(lab):
    comfyui_lab.seed(lab)  # ComfyUI 0.30.0's mirror from the pinned sdist (lab/comfyui_source.py)
    seeded = scenario.seed_mirror(lab)
    voxcpm_lab.seed(lab)  # VoxCPM2's CPython build and model stand-in
    hub = hub_lab.seed(lab)  # the seeded models become the lab hub's repositories
    print(f"\nlab hub seeded in {hub.seconds:.1f} s: {hub.detail}")
    result = scenario.converge()
    assert result.ok, f"converge failed (exit {result.rc}); its output is above"
    print(f"\nseed {seeded.seconds:.1f} s, fresh converge {result.seconds:.1f} s")
    return lab


@pytest.fixture
def media(converged):
    """The converged lab in the media mode (voxcpm.service up), whatever earlier tests left."""
    converged.ssh("rigup-mode media")
    assert active(converged, "voxcpm.service") == "active"
    return converged


def _uses_session_machine(item) -> bool:
    return item is not None and machine_group(item.nodeid) in SESSION_MACHINE_GROUPS


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """After the last test on this worker that uses the session's machine (its groups run
    first: tests/conftest.py), destroy it rather than keep it to the session's end."""
    if _SESSION_MACHINE and _uses_session_machine(item) and not _uses_session_machine(nextitem):
        _SESSION_MACHINE.pop().destroy()
