"""How many workers the suite's lab has disk for (lab/diskplan.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from lab import __main__ as cli  # noqa: E402
from lab import diskplan  # noqa: E402
from lab.config import LabError  # noqa: E402


def test_the_need_shrinks_with_what_is_cached_down_to_the_floor():
    cold2 = diskplan.need_gib(2, 0.0)
    assert cold2 == diskplan.COLD_PEAK_GIB[2] + diskplan.MARGIN_GIB
    assert diskplan.need_gib(2, 10.0) == cold2 - 10.0
    assert diskplan.need_gib(2, 1000.0) == diskplan.WARM_FLOOR_GIB[2] + diskplan.MARGIN_GIB
    assert diskplan.need_gib(1, 0.0) < cold2  # one machine at a time needs less


def test_two_workers_when_they_fit():
    disk = diskplan.plan(free_gib=diskplan.need_gib(2, 0.0), cached_gib=0.0)
    assert disk.workers == 2 and "2 workers" in disk.why


def test_one_worker_with_its_reason_when_two_do_not_fit():
    free = diskplan.need_gib(2, 0.0) - 1
    assert free >= diskplan.need_gib(1, 0.0)
    disk = diskplan.plan(free_gib=free, cached_gib=0.0)
    assert disk.workers == 1
    assert "one after the other" in disk.why and f"{diskplan.need_gib(2, 0.0):.0f} GiB" in disk.why


def test_refused_naming_the_need_when_one_does_not_fit():
    need = diskplan.need_gib(1, 0.0)
    with pytest.raises(LabError) as err:
        diskplan.plan(free_gib=need - 0.5, cached_gib=0.0)
    assert f"about {need:.0f} GiB free" in str(err.value)
    assert "-m 'not lab'" in str(err.value)


def test_tree_gib_counts_a_hard_linked_file_once(tmp_path: Path):
    blob = tmp_path / "a"
    blob.write_bytes(os.urandom(1 << 20))
    os.link(blob, tmp_path / "b")
    assert 1 / 1024 <= diskplan.tree_gib(tmp_path) < 1.5 / 1024
    assert diskplan.tree_gib(tmp_path / "absent") == 0


def test_cli_prints_the_worker_count(tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setenv("RIGUP_LAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(diskplan, "COLD_PEAK_GIB", {2: 0.0, 1: 0.0})
    monkeypatch.setattr(diskplan, "WARM_FLOOR_GIB", {2: 0.0, 1: 0.0})
    monkeypatch.setattr(diskplan, "MARGIN_GIB", 0.0)
    assert cli.main(["suite-workers"]) == 0
    out = capsys.readouterr()
    assert out.out.strip() == "2" and "2 workers" in out.err
