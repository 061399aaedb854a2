#!/usr/bin/env python3
"""Where the time of a converge that changes nothing goes: ``pyinfra <inventory> <deploy> --dry
--json`` on a converged host, run RUNS times, with a breakdown of each run.

    .venv/bin/python benchmarks/rerun.py [inventory/lab.py] [deploys/full.py] [--runs 3]

Each run is a child process that runs pyinfra's own CLI with two measuring wrappers: around
``pyinfra.api.facts._get_fact`` (every fact pyinfra gathers: its class, and the seconds it took,
cache hits included at ~0 s) and around each connector's ``run_shell_command`` (every command
sent to a host: one SSH round trip each, and its seconds). It prints, per run: the wall time,
the controller's CPU seconds (pyinfra itself: what a busy controller stretches), the
operations planned and those that would change, the fact lookups and the round trips with
their total seconds, then the fact classes that took longest over the runs (count, total and
mean seconds). The plan itself is pyinfra's JSON; nothing on the host changes (``--dry``).

Run it against a converged machine that nothing else converges at the time (a dry run takes the
converge lock too). Output: text on stdout; ``--json FILE`` also writes every run's figures.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def child(out_path: str, argv: list[str]) -> int:
    """Run pyinfra's CLI on ``argv`` in this process with the measuring wrappers; write the
    figures to ``out_path`` as JSON. Returns pyinfra's exit status."""
    from pyinfra.api import facts
    from pyinfra.connectors.base import BaseConnector

    fact_times: list[tuple[str, float]] = []
    commands: list[float] = []
    get_fact = facts._get_fact

    def timed_get_fact(state, host, cls, *args, **kwargs):
        started = time.perf_counter()
        try:
            return get_fact(state, host, cls, *args, **kwargs)
        finally:
            fact_times.append((cls.__name__, time.perf_counter() - started))

    facts._get_fact = timed_get_fact
    for connector in {c for c in _subclasses(BaseConnector)}:
        if "run_shell_command" in vars(connector):
            connector.run_shell_command = _timed(connector.run_shell_command, commands)

    from pyinfra_cli.main import main

    sys.argv = ["pyinfra", *argv]
    code = 0
    try:
        main()
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        Path(out_path).write_text(json.dumps({"facts": fact_times, "commands": commands}))
    return code


def _subclasses(cls) -> list[type]:
    import pyinfra.connectors.local  # noqa: F401  (registers the connectors)
    import pyinfra.connectors.ssh  # noqa: F401

    found, todo = [], [cls]
    while todo:
        for sub in todo.pop().__subclasses__():
            found.append(sub)
            todo.append(sub)
    return found


def _timed(method, sink: list[float]):
    def run_shell_command(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            return method(self, *args, **kwargs)
        finally:
            sink.append(time.perf_counter() - started)

    return run_shell_command


def run_once(inventory: str, deploy: str) -> dict:
    """One measured dry run: wall seconds, the plan's figures and the measured facts and
    commands. Raises ``RuntimeError`` with pyinfra's output when it fails."""
    with tempfile.NamedTemporaryFile(suffix=".json") as figures:
        started = time.perf_counter()
        cpu_before = _children_cpu_s()
        proc = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                figures.name,
                inventory,
                deploy,
                "--dry",
                "--json",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        wall = time.perf_counter() - started
        cpu = _children_cpu_s() - cpu_before
        if proc.returncode != 0:
            raise RuntimeError(f"pyinfra exited {proc.returncode}: {proc.stderr[-2000:]}")
        measured = json.loads(Path(figures.name).read_text())
    plan = json.loads(proc.stdout)["plan"]
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "operations": len(plan),
        "changes": [op["name"] for op in plan if op["hosts_with_change"]],
        **measured,
    }


def _children_cpu_s() -> float:
    """CPU seconds (user + system) of this process's waited-for children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def report(runs: list[dict]) -> str:
    """The text breakdown of ``runs`` (what :func:`run_once` returns). ``controller CPU s``:
    the CPU seconds pyinfra itself used (user + system), the part of the wall time that a
    busy controller stretches; ``in round trips s``: the seconds spent waiting on the host."""
    lines = [
        "run  wall s  controller CPU s  operations  changes  fact lookups  round trips  "
        "in round trips s"
    ]
    for i, r in enumerate(runs, 1):
        lines.append(
            f"{i:>3} {r['wall_s']:7.1f} {r.get('cpu_s', 0.0):>17.1f} {r['operations']:>11} "
            f"{len(r['changes']):>8} {len(r['facts']):>13} {len(r['commands']):>12} "
            f"{sum(r['commands']):>17.1f}"
        )
    walls = [r["wall_s"] for r in runs]
    lines.append(f"median wall {statistics.median(walls):.1f} s over {len(runs)} runs")
    cpus = [r.get("cpu_s", 0.0) for r in runs]
    trips = [sum(r["commands"]) for r in runs]
    lines.append(
        f"median controller CPU {statistics.median(cpus):.1f} s, median in round trips "
        f"{statistics.median(trips):.1f} s (their sum: the wall time of an idle controller)"
    )
    per_class: dict[str, list[float]] = defaultdict(list)
    for r in runs:
        for name, seconds in r["facts"]:
            per_class[name].append(seconds)
    lines.append("fact class                         count  total s  mean s   (all runs)")
    ranked = sorted(per_class.items(), key=lambda kv: -sum(kv[1]))
    for name, times in ranked[:20]:
        lines.append(
            f"{name:<34} {len(times):>5} {sum(times):>8.1f} {statistics.mean(times):>7.3f}"
        )
    return "\n".join(lines)


def main() -> int:
    """The benchmark's command line; 0 when every run planned no change."""
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        return child(sys.argv[2], sys.argv[3:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("inventory", nargs="?", default="inventory/lab.py")
    parser.add_argument("deploy", nargs="?", default="deploys/full.py")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write every run's figures here")
    args = parser.parse_args()
    runs = [run_once(args.inventory, args.deploy) for _ in range(args.runs)]
    print(report(runs))
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1))
    return 0 if not any(r["changes"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
