"""Helpers shared by the lab scenario's test modules: the markers every lab test carries, the
pyinfra CLI and testinfra against the lab, unit states, and rigup-doctor's JSON."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Iterator

import pytest

from lab import scenario
from lab.step import StepResult

#: every lab test: the ``lab`` marker, and root (systemd-nspawn boots the machine)
LAB_MARKS = [
    pytest.mark.lab,
    pytest.mark.skipif(os.geteuid() != 0, reason="the lab machine needs root (systemd-nspawn)"),
]

#: The lab modules by the machines they run on: bin/rigup-test's two pytest-xdist workers take a
#: group each as one unit (tests/conftest.py), its modules in file order on that worker's own
#: machine (:func:`lab_env`). "lab-machine" and "lab-machine-2" are the session's converged lab
#: machine (the ``lab`` fixture) on each worker, each group starting from a fresh converge and
#: leaving nothing the other needs; in one process (``-n 0``) one machine runs both. The other
#: groups make machines of their own. A lab module that makes no machine is in MACHINELESS.
MACHINE_GROUPS = {
    "tests/lab/test_scenario.py": "lab-machine",
    "tests/lab/test_scenario_modes.py": "lab-machine",
    "tests/lab/test_scenario_doctor.py": "lab-machine",
    "tests/lab/test_scenario_media.py": "lab-machine",
    "tests/lab/test_scenario_models.py": "lab-machine-2",
    "tests/lab/test_scenario_truth.py": "lab-machine-2",
    "tests/lab/test_many_rigs.py": "lab-pair",
    "tests/lab/test_lab_cgroups.py": "lab-cgroups",
    "tests/lab/test_nvidia_branches.py": "lab-nvidia-branches",
}
MACHINELESS = {"tests/lab/test_cuda_build.py"}
#: the groups of the session's lab machine: handed out first, one per worker
SESSION_MACHINE_GROUPS = ("lab-machine", "lab-machine-2")


def machine_group(nodeid: str) -> str | None:
    """The machine group of a test id (``tests/lab/test_scenario.py::test_x[p]``), None for a
    test that needs no lab machine of its own."""
    return MACHINE_GROUPS.get(nodeid.split("::", 1)[0])


@contextlib.contextmanager
def environ(values: dict[str, str]) -> Iterator[None]:
    """``os.environ`` with ``values`` set while the block runs (the subprocesses it starts,
    pyinfra and testinfra, then reach the same lab machine), each key restored on exit."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def lab_env(env=os.environ) -> dict[str, str]:
    """The test lab machine of this process: ``RIGUP_TEST_LAB_NAME`` (``rigup-lab-test``) on
    ``RIGUP_TEST_LAB_SSH_PORT`` (2223); pytest-xdist's worker N > 0 (``PYTEST_XDIST_WORKER``
    ``gwN``) gets ``<name>-N`` on port + 40 + N, so two workers' machines never share a name, a
    state directory or a port (every lab port follows the SSH port: lab/hub_lab.py
    ``hub_port``). The state directory follows the name, never a user's ``RIGUP_LAB_STATE_DIR``.
    A machine of its own, so the suite never touches the lab a user keeps from bin/rigup-lab;
    the two variables let two checkouts run the suite side by side.
    """
    name = env.get("RIGUP_TEST_LAB_NAME", "rigup-lab-test")
    port = int(env.get("RIGUP_TEST_LAB_SSH_PORT", "2223"))
    worker = env.get("PYTEST_XDIST_WORKER", "")
    n = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    if n:
        name, port = f"{name}-{n}", port + 40 + n
    return {"RIGUP_LAB_NAME": name, "RIGUP_LAB_SSH_PORT": str(port), "RIGUP_LAB_STATE_DIR": ""}


LAB_ENV = lab_env()


def pyinfra(*args: str, check: bool = False) -> subprocess.CompletedProcess:
    """The pyinfra CLI against the lab machine (its output captured)."""
    return subprocess.run(
        [str(scenario.BIN / "pyinfra"), *args],
        cwd=scenario.REPO,
        capture_output=True,
        text=True,
        check=check,
    )


def infra(*args: str) -> StepResult:
    """testinfra (tests/infra, or the files and ``-k`` in ``args``) against the lab."""
    return scenario.verify(extra=list(args))


def active(lab, unit: str) -> str:
    """``systemctl is-active`` of ``unit`` on the lab: "active", "inactive", "failed", ..."""
    return lab.ssh(f"systemctl is-active {unit}", check=False).stdout.strip()


def main_pid(lab, unit: str) -> int:
    """The unit's MainPID (0 when it has none)."""
    return int(lab.ssh(f"systemctl show -p MainPID --value {unit}").stdout.strip() or 0)


def wait_up(lab, unit: str, seconds: int, poll_s: int = 5) -> str:
    """Wait until ``unit`` is active/running (or ``seconds`` pass), asking every ``poll_s``
    seconds; its last state ("active/running", "activating/start-post", ...)."""
    return lab.ssh(
        f"for i in $(seq {max(1, seconds // poll_s)}); do s=$(systemctl show -p ActiveState "
        f'-p SubState --value {unit} | paste -sd/ -); [ "$s" = active/running ] && break; '
        f"sleep {poll_s}; done; "
        f"systemctl show -p ActiveState -p SubState --value {unit} | paste -sd/ -",
        check=False,
    ).stdout.strip()


def doctor(lab, only: str = "") -> tuple[int, dict, float]:
    """``rigup-doctor --json`` on the lab (``only``: its sections): (exit, its JSON, seconds)."""
    started = time.monotonic()
    p = lab.ssh(f"rigup-doctor --json {'--only ' + only if only else ''}", check=False, timeout=300)
    return p.returncode, json.loads(p.stdout), time.monotonic() - started


def verdict_ids(result: dict, section: str | None = None) -> list[str]:
    """The verdict ids of rigup-doctor's JSON, of one section or all."""
    return [
        v["id"] for s in result["sections"] if section in (None, s["name"]) for v in s["verdicts"]
    ]


def problems(result: dict) -> list[str]:
    """rigup-doctor's verdicts that are not ok, as "severity: what: why" lines."""
    return [
        f"{v['severity']}: {v['what']}: {v['why']}"
        for s in result["sections"]
        for v in s["verdicts"]
        if v["severity"] != "ok"
    ]
