"""benchmarks/rerun.py: a measured dry run through pyinfra's own CLI, and its breakdown."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("rerun", REPO / "benchmarks" / "rerun.py")
rerun = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rerun)


def test_a_dry_run_on_local_is_measured(monkeypatch, tmp_path):
    monkeypatch.setenv("RIGUP_TEST_STARTED", str(tmp_path / "never"))  # --dry: never created
    run = rerun.run_once("@local", "tests/unit/deploys/interruptible.py")
    assert run["operations"] == 1 and run["changes"] == ["Wait to be interrupted"]
    assert run["wall_s"] > 0 and isinstance(run["commands"], list)
    assert 0 < run["cpu_s"] < run["wall_s"] * 2  # pyinfra's own CPU time, measured
    assert not (tmp_path / "never").exists()


def test_the_breakdown_ranks_fact_classes_by_their_total_time():
    runs = [
        {
            "wall_s": 10.0,
            "cpu_s": 4.0,
            "operations": 5,
            "changes": [],
            "facts": [["Sha256File", 0.5], ["UvSyncPending", 2.0], ["Sha256File", 0.5]],
            "commands": [0.5, 2.0, 0.5],
        },
        {
            "wall_s": 8.0,
            "cpu_s": 2.0,
            "operations": 5,
            "changes": [],
            "facts": [["UvSyncPending", 1.0]],
            "commands": [1.0],
        },
    ]
    text = rerun.report(runs)
    assert "median wall 9.0 s over 2 runs" in text
    assert "median controller CPU 3.0 s, median in round trips 2.0 s" in text
    ranked = [line.split()[0] for line in text.splitlines() if line.startswith(("Uv", "Sha"))]
    assert ranked == ["UvSyncPending", "Sha256File"]
    assert "UvSyncPending                          2      3.0   1.500" in text
