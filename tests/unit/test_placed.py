"""roles/common/path_states.py: the batched path-state fact on captured output, and the command it
sends run by a real shell on real files."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from roles.common.path_states import PathStates, TreeStates

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def fixture(rel: str) -> str:
    """Absolute path of ``tests/fixtures/<rel>`` (for the operation cases' ``call``)."""
    return str(FIXTURES / rel)


def _lines(name: str) -> list[str]:
    return (FIXTURES / "placed" / name).read_text().splitlines()


def test_path_states_on_the_lab_output():
    """Captured from the converged lab (tests/fixtures/placed/path-states.txt): a script, a
    directory, an env file of another group, a device, absent paths."""
    states = PathStates().process(_lines("path-states.txt"))
    assert states["/opt/rigup/bin/wait-ready"] == {
        "type": "file",
        "mode": "755",
        "user": "root",
        "group": "root",
        "size": 2187,
        "sha256": "46ba17f5de326aea9cf498e8b7547f0a3e61c960120e096d1d2fc229fdb854a3",
    }
    assert states["/opt/rigup/bin"] == {
        "type": "directory",
        "mode": "755",
        "user": "root",
        "group": "root",
    }
    assert states["/etc/rigup/vllm/vllm.env"]["group"] == "vllm"
    assert states["/etc/rigup/vllm/vllm.env"]["mode"] == "640"
    assert states["/dev/null"] == {"type": "other"}
    assert states["/var/lib/rigup/checks/absent.ok"] is None
    assert len(states) == 7


def test_tree_states_on_the_lab_output():
    """Captured from the lab: rigup's /opt/rigup/lib (a package and a module), every file with
    its sha256 from the second section."""
    states = TreeStates().process(_lines("tree-states.txt"))
    assert states["/opt/rigup/lib"]["type"] == "directory"
    assert states["/opt/rigup/lib/rigup_diagnosis"]["type"] == "directory"
    files = {p: s for p, s in states.items() if s and s["type"] == "file"}
    assert len(files) == 18 and all(len(s["sha256"]) == 64 for s in files.values())
    assert files["/opt/rigup/lib/rigup_units.py"]["size"] == 12789


def _shell(command: str) -> list[str]:
    proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True)
    return proc.stdout.splitlines()


def test_path_states_command_on_real_files(tmp_path):
    """The command run by a real shell on real files: content hash, mode with the sticky bit,
    a link reported as itself (never followed), a name with spaces, absent paths."""
    script = tmp_path / "a script"
    script.write_bytes(b"#!/bin/sh\n")
    script.chmod(0o750)
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)
    (tmp_path / "link").symlink_to(script)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    paths = [str(p) for p in (script, sticky, tmp_path / "link", tmp_path / "dangling")]
    paths.append(str(tmp_path / "absent"))
    states = PathStates().process(_shell(PathStates().command(tuple(paths))))
    assert states[str(script)]["sha256"] == hashlib.sha256(b"#!/bin/sh\n").hexdigest()
    assert states[str(script)]["mode"] == "750" and states[str(script)]["size"] == 10
    assert states[str(sticky)]["mode"] == "1777"
    assert states[str(tmp_path / "link")] == {"type": "link", "target": str(script)}
    assert states[str(tmp_path / "dangling")]["type"] == "link"
    assert states[str(tmp_path / "absent")] is None
    assert set(states) == set(paths)


def test_tree_states_command_on_a_real_tree(tmp_path):
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "a.py").write_text("A = 1\n")
    (tmp_path / "pkg" / "sub" / "b.py").write_text("B = 2\n")
    (tmp_path / "pkg" / "old.py").symlink_to("a.py")
    root = str(tmp_path / "pkg")
    states = TreeStates().process(_shell(TreeStates().command(root)))
    assert set(states) == {
        root,
        f"{root}/a.py",
        f"{root}/sub",
        f"{root}/sub/b.py",
        f"{root}/old.py",
    }
    assert states[f"{root}/sub/b.py"]["sha256"] == hashlib.sha256(b"B = 2\n").hexdigest()
    assert states[f"{root}/old.py"] == {"type": "link", "target": "a.py"}
    assert _shell(TreeStates().command(str(tmp_path / "absent"))) == []


@pytest.mark.parametrize("bad", ["relative/path", "/with\ttab", "/with\nnewline"])
def test_path_states_refuses_paths_it_could_not_report(bad):
    with pytest.raises(ValueError, match="not an absolute path"):
        PathStates().command(("/ok", bad))


def _fake(facts: dict, executing: bool = False):
    from tests.unit.test_operations import FakeHost, FakeState

    state = FakeState(executing=executing)
    return FakeHost(facts, state), state


D = {"type": "directory", "mode": "755", "user": "root", "group": "root"}


def test_planning_reads_a_role_s_paths_once():
    """survey() then one operation per path: one PathStates round trip for all of them, none
    per operation (pyinfra's files.directory reads a Directory fact for each)."""
    from pyinfra.context import ctx_host, ctx_state

    from roles.common.placed import directory_placed, survey

    paths = ("/opt/rigup/bin", "/opt/rigup/lib")
    host, state = _fake({"PathStates": {f"paths={paths!r}": {p: D for p in paths}}})
    with ctx_state.use(state), ctx_host.use(host):
        survey(paths)
        for path in paths:
            assert list(directory_placed._inner(path=path, mode="755")) == []
    assert host.read == {("PathStates", f"paths={paths!r}")}


def test_a_path_under_a_surveyed_tree_that_it_does_not_list_is_absent():
    from pyinfra.context import ctx_host, ctx_state

    from roles.common.placed import file_absent, path_state, survey_tree

    host, state = _fake({"TreeStates": {"path=/opt/rigup/lib": {"/opt/rigup/lib": D}}})
    with ctx_state.use(state), ctx_host.use(host):
        survey_tree("/opt/rigup/lib")
        assert path_state("/opt/rigup/lib") == D
        assert path_state("/opt/rigup/lib/rigup_units.py") is None
        assert list(file_absent._inner(path="/opt/rigup/lib/rigup_diagnosis.py")) == []
    assert host.read == {("TreeStates", "path=/opt/rigup/lib")}


def test_running_operations_read_their_own_path_again():
    """When operations run, an earlier one may have changed the path: no survey is used."""
    from pyinfra.context import ctx_host, ctx_state

    from roles.common.placed import path_state, survey

    key = "paths=('/opt/rigup/bin',)"
    host, state = _fake({"PathStates": {key: {"/opt/rigup/bin": None}}}, executing=True)
    with ctx_state.use(state), ctx_host.use(host):
        survey(["/opt/rigup/bin"])  # nothing while running
        assert path_state("/opt/rigup/bin") is None
    assert host.read == {("PathStates", key)}


@pytest.mark.parametrize("mode", ["644", 644])
def test_a_mode_is_octal_digits_as_pyinfra_reads_it(mode):
    from roles.common.placed import _mode_matches

    assert _mode_matches({"mode": "644"}, mode)
    assert not _mode_matches({"mode": "664"}, mode)
    assert _mode_matches({"mode": "1777"}, "1777")
