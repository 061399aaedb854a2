"""What testinfra's shared checks decide, on real files and the mode facts: which files every
user can write (tests/infra/test_hardening.py) and why a serving check skips in a mode."""

from __future__ import annotations

import os
import subprocess

import pytest

from roles.modes import ModeTargets
from roles.modes.budget import MODES
from roles.services import SERVICES
from tests.infra.checks import (
    active_mode_of,
    mode_skip_reason,
    writable_by_every_user_command,
)


def _found(roots: list[str]) -> list[str]:
    out = subprocess.run(
        ["sh", "-c", writable_by_every_user_command(roots)], capture_output=True, text=True
    )
    return [line.split(" ", 2)[2] for line in out.stdout.splitlines()]


def _file(path, mode: int) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")
    os.chmod(path, mode)
    return str(path)


def test_a_file_every_user_can_reach_and_write_is_found(tmp_path):
    root = tmp_path / "opt-rigup"
    loose = _file(root / "venv" / "lib" / "loose.txt", 0o666)
    _file(root / "venv" / "ok.txt", 0o644)
    os.symlink("/nowhere", root / "venv" / "python")  # a symlink's 0777 is no permission
    for d in (root, root / "venv", root / "venv" / "lib"):
        os.chmod(d, 0o755)
    assert _found([str(root)]) == [loose]


def test_uvs_build_locks_in_a_root_only_directory_are_out_of_reach(tmp_path):
    """The cold uv cache's case: uv makes ``uv-setuptools-<hash>.lock`` 0666 in TMPDIR when it
    builds a source distribution; in rigup's 0700 temp directory no other user reaches it."""
    tmp = tmp_path / "var-tmp-rigup"
    _file(tmp / "uv-setuptools-8d473142b21f534b.lock", 0o666)
    os.chmod(tmp, 0o700)
    assert _found([str(tmp)]) == []
    os.chmod(tmp, 0o755)  # the same file where others can enter: found
    assert _found([str(tmp)]) == [str(tmp / "uv-setuptools-8d473142b21f534b.lock")]


def test_a_directory_others_can_enter_below_one_they_cannot_is_out_of_reach(tmp_path):
    root = tmp_path / "state"
    _file(root / "home" / "tmp" / "x.lock", 0o666)
    os.chmod(root / "home" / "tmp", 0o755)
    os.chmod(root / "home", 0o750)  # a service home: its user and group only
    os.chmod(root, 0o755)
    assert _found([str(root)]) == []


def test_a_world_writable_directory_others_can_enter_is_found(tmp_path):
    root = tmp_path / "etc"
    (root / "drop").mkdir(parents=True)
    os.chmod(root / "drop", 0o1777)
    os.chmod(root, 0o755)
    assert _found([str(root)]) == [str(root / "drop")]


def test_roots_that_do_not_exist_find_nothing(tmp_path):
    assert _found([str(tmp_path / "absent")]) == []


@pytest.mark.parametrize("unit,mode", [(s.unit, s.mode) for s in SERVICES])
def test_a_serving_check_runs_in_its_units_mode_and_skips_in_the_other(unit, mode):
    assert mode_skip_reason(unit, mode) is None
    for other in [m for m in MODES if m != mode] + [None]:
        reason = mode_skip_reason(unit, other)
        assert reason and f"{unit} serves in the {mode} mode" in reason
        assert f"`sudo rigup-mode {mode}` runs this check" in reason
    assert "this host is in no mode" in mode_skip_reason(unit, None)


def test_the_active_mode_is_read_with_the_deploys_fact():
    """tests/infra/conftest.py's ``active_mode``: ModeTargets' output (its shape captured from
    the lab in the LLM mode), then the one mode whose target is up."""
    output = [
        "@target rigup-llm.target active",
        "@wants rigup-llm.target vllm.service active/running",
        "@target rigup-media.target inactive",
        "@wants rigup-media.target voxcpm.service inactive/dead",
    ]
    assert active_mode_of(ModeTargets().process(output)) == "llm"
    switching = [line.replace("inactive", "activating") for line in output[2:]]
    assert active_mode_of(ModeTargets().process(output[:2] + switching)) is None
    assert active_mode_of(ModeTargets().process(["@target rigup-llm.target inactive"])) is None
    assert active_mode_of({}) is None
