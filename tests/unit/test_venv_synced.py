"""roles/common/facts.py VenvSynced: the fingerprint a sync records, run by a real shell on a
venv's real layout (dist-info directories, pyvenv.cfg, a uv that prints its version)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from roles.common.facts import SYNCED_STAMP, VenvSynced
from roles.common.operations import record_command


@pytest.fixture
def venv(tmp_path: Path) -> dict[str, Path]:
    root = tmp_path / "venv"
    site = root / "lib" / "python3.14" / "site-packages"
    (site / "numpy-2.3.4.dist-info").mkdir(parents=True)
    (site / "numpy-2.3.4.dist-info" / "WHEEL").write_text("Tag: cp314-cp314-manylinux_2_28\n")
    (site / "numpy").mkdir()
    (root / "pyvenv.cfg").write_text("home = /usr/bin\nversion_info = 3.14.0\n")
    lock = tmp_path / "requirements.lock"
    lock.write_text("numpy==2.3.4 --hash=sha256:00\n")
    uv = tmp_path / "uv"
    uv.write_text("#!/bin/sh\necho 'uv 0.13.9 (x86_64-unknown-linux-gnu)'\n")
    uv.chmod(0o755)
    return {"root": root, "site": site, "lock": lock, "uv": uv}


def _synced(v: dict[str, Path]) -> bool:
    command = VenvSynced().command(str(v["root"]), str(v["lock"]), str(v["uv"]))
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True)
    return VenvSynced().process(out.stdout.splitlines())


def _record(v: dict[str, Path]) -> None:
    """What uv_venv_synced yields after a sync: the fingerprint into the stamp."""
    command = record_command(str(v["root"]), str(v["lock"]), str(v["uv"]))
    subprocess.run(["sh", "-c", command], check=True)
    assert (v["root"] / SYNCED_STAMP).read_text().strip()


def test_unrecorded_venv_is_not_synced(venv):
    assert _synced(venv) is False


def test_recorded_venv_is_synced_until_what_uv_reads_changes(venv):
    _record(venv)
    assert _synced(venv) is True
    (venv["site"] / "numpy" / "core.py").write_text("# not read by uv: no difference\n")
    assert _synced(venv) is True


@pytest.mark.parametrize(
    "change",
    [
        lambda v: v["lock"].write_text("numpy==2.3.5 --hash=sha256:01\n"),
        lambda v: (v["site"] / "six-1.17.0.dist-info").mkdir(),
        lambda v: (v["site"] / "numpy-2.3.4.dist-info" / "WHEEL").write_text("Tag: py3-none-any\n"),
        lambda v: (v["site"] / "numpy-2.3.4.dist-info" / "direct_url.json").write_text("{}"),
        lambda v: (v["root"] / "pyvenv.cfg").write_text("home = /opt/python\n"),
        lambda v: v["uv"].write_text("#!/bin/sh\necho 'uv 0.14.0'\n"),
    ],
    ids=["lock", "a-distribution-added", "wheel-tags", "direct-url", "interpreter", "uv-version"],
)
def test_a_change_uv_would_see_makes_uv_look_again(venv, change):
    _record(venv)
    change(venv)
    assert _synced(venv) is False


def test_a_venv_without_stamp_or_lock_is_not_synced(venv):
    venv["lock"].unlink()
    assert _synced(venv) is False
    assert VenvSynced().process(["stamp ", "now e3b0"]) is False


def test_a_venv_recorded_before_bytecode_was_compiled_is_synced_again(venv, monkeypatch):
    """A record written by a sync of another form (before rigup compiled bytecode: the same
    pipeline without its first line) does not count: the venv gets its compile and record."""
    import roles.common.facts as facts

    monkeypatch.setattr(facts, "SYNC_FORM", "plain")
    _record(venv)
    monkeypatch.undo()
    assert _synced(venv) is False
    _record(venv)
    assert _synced(venv) is True
