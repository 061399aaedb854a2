"""A running unit whose unit file, drop-ins, environment files or ExecStart inputs changed since
it started (a converge interrupted between writing them and the restart) is
reported, by rigup-explain and rigup-doctor (rigup.units.read_unit, ``service-stale``).

systemd 259's ``systemctl show --timestamp=unix`` and uutils' ``stat -L -c '%Y %n'`` captured on
the lab machine (tests/fixtures/systemd/stale/): a fresh unit, its environment file changed
after the start, and then a drop-in edited without a daemon-reload."""

from __future__ import annotations

import re

import pytest

from rigup import diagnosis, units
from tests.captures import FIXTURES

STALE = FIXTURES / "systemd" / "stale"


def read(case: str):
    show = (STALE / f"{case}-show.txt").read_text()
    stat = (STALE / f"{case}-stat.txt").read_text()
    code = int(re.search(r"^\[exit (\d+)\]$", stat, re.M).group(1))
    calls = []

    def runner(argv: list[str]) -> tuple[int, str]:
        calls.append(argv)
        if argv[0] == "systemctl":
            return 0, show
        if argv[0] == "stat":
            return code, stat
        return 0, ""  # journalctl: no journal needed here

    state, journal = units.read_unit("demo.service", runner)
    return state, journal, calls


def test_the_files_a_unit_started_with_are_read_from_systemd():
    state, _, calls = read("fresh")
    assert state["inputs"] == [
        "/etc/systemd/system/demo.service",
        "/etc/systemd/system/demo.service.d/10-x.conf",
        "/etc/rigup/demo/demo.env",
        "/etc/rigup/demo/secret.env",  # EnvironmentFile=- : optional, absent, skipped by stat
        "/usr/bin/python3",
        "/etc/rigup/demo/args.json",
    ]
    assert state["started"] == 1796287714 and state["need_reload"] is False
    assert ["stat", "-L", "-c", "%Y %n", *state["inputs"]] in calls
    assert state["changed_inputs"] == []  # written in the second it started: not after


def test_a_fresh_unit_is_up_and_nothing_else():
    state, journal, _ = read("fresh")
    assert [v.id for v in units.explain(state, journal)] == ["service/up"]


@pytest.mark.parametrize(
    ("case", "changed", "reload"),
    [
        ("env-changed", "/etc/rigup/demo/demo.env changed", False),
        ("dropin-edited-no-reload",
         "/etc/systemd/system/demo.service.d/10-x.conf, /etc/rigup/demo/demo.env changed", True),
    ],
)  # fmt: skip
def test_a_unit_running_an_older_configuration_is_reported(case, changed, reload):
    state, journal, _ = read(case)
    found = units.explain(state, journal)
    assert [v.id for v in found] == ["service/up", "service-stale"]
    stale = found[1]
    assert stale.severity == diagnosis.WARN
    assert stale.what.startswith(
        f"demo.service runs an older configuration than the one on disk: {changed}"
    )
    assert ("NeedDaemonReload=yes" in stale.what) is reload
    assert "2026-12-03 08:48:34 UTC" in stale.why and "interrupted" in stale.why
    assert "converge" in stale.fix and "rigup-start --restart demo.service" in stale.fix


def test_a_stopped_unit_is_never_stale():
    state, _, _ = read("env-changed")
    stopped = {**state, "active": "inactive", "sub": "dead"}
    assert "service-stale" not in [v.id for v in diagnosis.classify_unit(stopped)]


def test_the_converges_fact_reads_the_same_from_systemd_and_stat():
    """roles.common.facts.UnitStartedBefore's command run on the lab machine (systemd 259, uutils
    stat) for demo.service after its env file and a drop-in changed; a missing optional file
    prints nothing; a unit that does not run is None (it starts with what is on disk)."""
    from roles.common.facts import UnitStartedBefore

    fact = UnitStartedBefore()
    out = (STALE / "fact-unit-started-before.txt").read_text().splitlines()
    assert fact.process(out) == {"need_reload": True, "changed": ["/etc/rigup/demo/demo.env"]}
    assert fact.process(["ActiveState=inactive", "SubState=dead"]) is None
    assert fact.process([]) is None
    cmd = fact.command("vllm.service", ("/etc/rigup/vllm/vllm.env", "/a b"))
    assert "--timestamp=unix" in cmd and "-- vllm.service" in cmd and "'/a b'" in cmd


def test_what_a_service_writes_is_not_an_input(settings):
    """comfyui.service as rigup renders it: its argv names its base directory, which is also its
    ReadWritePaths= and WorkingDirectory= (ComfyUI writes outputs, its database and temp files
    there, so the directory's time moves on every job): not an input whose change means the
    service runs an older configuration (the lab's doctor said so of a healthy ComfyUI). Its
    program and checkout still are."""
    from roles.comfyui.flags import exec_start
    from roles.comfyui.paths import ComfyuiPaths

    d = ComfyuiPaths.from_data(settings)
    argv = exec_start(settings)
    assert d.base in argv.split()
    props = {
        "FragmentPath": "/etc/systemd/system/comfyui.service",
        "EnvironmentFiles": "/etc/rigup/comfyui/comfyui.env (ignore_errors=no)",
        "ExecStart": f"{{ path={d.python} ; argv[]={argv} ; ignore_errors=no ; "
        "start_time=[@1796287714] ; stop_time=[n/a] ; pid=181 ; code=(null) ; status=0/0 }",
        "ReadWritePaths": f"{d.base} /var/tmp/rigup",
        "WorkingDirectory": d.base,
    }
    inputs = units.unit_inputs(props)
    assert d.base not in inputs and not [p for p in inputs if p.startswith(d.base + "/")]
    assert inputs[:2] == ["/etc/systemd/system/comfyui.service", "/etc/rigup/comfyui/comfyui.env"]
    assert d.python in inputs and f"{d.src}/main.py" in inputs
    # without what it writes (an older systemd's answer), the argv's paths all count
    bare = {k: v for k, v in props.items() if k not in ("ReadWritePaths", "WorkingDirectory")}
    assert d.base in units.unit_inputs(bare)
