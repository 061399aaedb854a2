"""The test lab machines of pytest-xdist's workers (tests/lab/labtools.py ``lab_env``) and the
order the scheduler gets the tests in (tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

from lab.comfyui_lab import lab_comfyui_port
from lab.config import LabConfig
from lab.hub_lab import hub_port
from lab.offline import cut_port
from lab.serving import lab_vllm_port
from lab.voxcpm_lab import lab_voxcpm_port
from tests.lab.labtools import lab_env


def _ports(env: dict[str, str]) -> set[int]:
    cfg = LabConfig.from_env(env)
    return {
        cfg.ssh_port,
        hub_port(cfg),
        cut_port(cfg),
        lab_vllm_port(cfg),
        lab_comfyui_port(cfg),
        lab_voxcpm_port(cfg),  # inventory/lab.py: voxcpm_port
    }


def test_one_process_keeps_the_suite_machine():
    assert lab_env({}) == {
        "RIGUP_LAB_NAME": "rigup-lab-test",
        "RIGUP_LAB_SSH_PORT": "2223",
        "RIGUP_LAB_STATE_DIR": "",
    }
    assert lab_env({"PYTEST_XDIST_WORKER": "gw0"}) == lab_env({})


def test_workers_get_machines_sharing_no_name_state_or_port():
    envs = [lab_env({"PYTEST_XDIST_WORKER": f"gw{n}"}) for n in range(2)]
    envs.append(lab_env({}) | {"RIGUP_LAB_NAME": "rigup-lab", "RIGUP_LAB_SSH_PORT": "2222"})
    cfgs = [LabConfig.from_env(e) for e in envs]  # the last: bin/rigup-lab's default machine
    assert len({c.name for c in cfgs}) == len({c.state_dir for c in cfgs}) == 3
    ports = [_ports(e) for e in envs]
    for i, mine in enumerate(ports):
        for theirs in ports[i + 1 :]:
            assert not mine & theirs, (mine, theirs)


def test_a_users_state_dir_never_holds_the_test_machine():
    env = lab_env({"RIGUP_LAB_STATE_DIR": "/srv/my-lab", "PYTEST_XDIST_WORKER": "gw1"})
    assert env["RIGUP_LAB_NAME"] == "rigup-lab-test-1" and env["RIGUP_LAB_STATE_DIR"] == ""
    assert "my-lab" not in str(LabConfig.from_env(env).state_dir)


def test_every_lab_module_declares_its_machine():
    """A new lab module is in MACHINE_GROUPS (or MACHINELESS): otherwise pytest-xdist would
    spread its tests over both workers, each booting a machine for it."""
    from tests.lab.labtools import MACHINE_GROUPS, MACHINELESS, SESSION_MACHINE_GROUPS

    repo = Path(__file__).resolve().parents[2]
    modules = {p.relative_to(repo).as_posix() for p in (repo / "tests" / "lab").glob("test_*.py")}
    assert modules == set(MACHINE_GROUPS) | MACHINELESS
    assert not set(MACHINE_GROUPS) & MACHINELESS
    assert set(SESSION_MACHINE_GROUPS) <= set(MACHINE_GROUPS.values())
    for module, group in MACHINE_GROUPS.items():
        text = (repo / module).read_text()
        uses_session_machine = any(  # tests/lab/conftest.py's fixtures, not a module's own
            f"({name}" in text and f"def {name.rstrip(')')}(" not in text
            for name in ("converged", "media", "lab)")
        )
        assert uses_session_machine == (group in SESSION_MACHINE_GROUPS), module


def test_machine_group_of_a_test_id():
    from tests.lab.labtools import machine_group

    assert machine_group("tests/lab/test_scenario.py::test_x[a::b]") == "lab-machine"
    assert machine_group("tests/lab/test_scenario_truth.py::test_y") == "lab-machine-2"
    assert machine_group("tests/unit/test_facts.py::test_z") is None
