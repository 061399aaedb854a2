"""rigup-doctor's cluster section: what doctor.json tells it of a rig's place in its cluster
(roles/doctor/config.py, roles/cluster/watch.py ``doctor_view``), and its verdicts on the state
files the supervisor wrote (tests/fixtures/cluster/, written by files/cluster/cluster_watch.py's
own check: tests/cluster_watch_runs.py)."""

from __future__ import annotations

import json
import os

import pytest

from rigup import diagnosis, doctor
from rigup.diagnosis.cluster import MEANING
from roles.cluster.group import member_of
from roles.doctor.config import doctor_config
from tests.cluster_watch_runs import FIXTURE_DIR, INTERVAL_S, T0
from tests.unit.test_cluster_group import example_rigs

MODEL = "/srv/rigup/models/qwen3.6-27b-int4-autoround/mirror-2026-11"
LEADER, FOLLOWER = "rig-a.local", "rig-b.local"
TIMER_UP = {"unit": "rigup-cluster-watch.timer", "load": "loaded", "active": "active"}
SERVICE_OK = {"unit": "rigup-cluster-watch.service", "load": "loaded", "result": "success"}
BOOT = T0 - 86400  # booted a day before the runs


def _config(name: str) -> dict:
    rigs = example_rigs()
    return doctor_config(rigs[name], MODEL, member=member_of(name, rigs))


@pytest.fixture(scope="module")
def configs() -> dict[str, dict]:
    return {name: _config(name) for name in (LEADER, FOLLOWER)}


def _fixture(name: str) -> dict:
    return json.loads((FIXTURE_DIR / f"{name}.json").read_text())


def _verdict(cfg: dict, watch: dict | None, now: float | None = None, **given) -> diagnosis.Verdict:
    units = {"timer": TIMER_UP, "service": SERVICE_OK}
    units.update({k: v for k, v in given.items() if k in units})
    state = doctor.cluster_state(
        cfg["cluster"],
        units["timer"],
        units["service"],
        watch,
        now if now is not None else float(watch["checked"]) + INTERVAL_S,
        given.get("boot", BOOT),
        given.get("unreadable", ""),
    )
    (verdict,) = diagnosis.classify_cluster(state)
    return verdict


# --- doctor.json ----------------------------------------------------------------------------


def test_each_rig_of_a_cluster_is_told_its_place(configs):
    lead, follow = configs[LEADER]["cluster"], configs[FOLLOWER]["cluster"]
    assert (lead["rig"], lead["rank"], lead["role"]) == (LEADER, 0, "leader")
    assert (follow["rig"], follow["rank"], follow["role"]) == (FOLLOWER, 1, "follower")
    assert lead["name"] == follow["name"] == "pair"
    assert lead["peers"] == [{"name": FOLLOWER, "address": "10.77.0.2", "role": "follower"}]
    assert follow["peers"] == [{"name": LEADER, "address": "10.77.0.1", "role": "leader"}]
    assert lead["watch"] == {
        "timer": "rigup-cluster-watch.timer",
        "service": "rigup-cluster-watch.service",
        "state_file": "/var/lib/rigup/cluster/watch-state.json",
        "interval_s": 15,
        "failures": 3,
        "probe_timeout_s": 30,
        "detection_bound_s": 165,  # docs/many-rigs.md states it
    }
    # what vllm.service runs with on each: the multi-node flags too
    args = configs[FOLLOWER]["vllm"]["serve_args"]
    assert args[args.index("--node-rank") + 1] == "1" and "--headless" in args


def test_a_rig_alone_has_no_cluster_and_no_section(settings):
    cfg = doctor_config(settings, MODEL)
    assert "cluster" not in cfg

    def runner(argv):
        raise AssertionError(f"nothing to read on a rig alone, ran {argv}")

    assert doctor.doctor(cfg, runner, only=("cluster",), window_s=0) == []
    assert doctor.check_cluster(cfg, runner).verdicts == []


# --- the verdicts on what the supervisor wrote ------------------------------------------------


def test_the_leader_names_the_follower_it_lost_and_why(configs):
    watch = _fixture("leader-lost-its-follower")
    v = _verdict(configs[LEADER], watch)
    assert (v.id, v.severity) == ("cluster/peer-lost", diagnosis.WARN)
    assert "lost its peer the follower rig-b.local (10.77.0.2)" in v.what
    assert "restarted vllm.service at 2026-12-02 07:00:18 UTC" in v.what
    assert "(2 min ago; 1 restart(s) in all)" in v.what
    assert v.why == f"{watch['why']}: {MEANING['leader']}"
    assert "1-token completion" in v.why and "failed 2 checks in a row" in v.why
    assert "`journalctl -u vllm.service -b` on rig-b.local" in v.fix


def test_the_follower_names_the_leader_it_lost_and_why(configs):
    watch = _fixture("follower-lost-its-leader")
    v = _verdict(configs[FOLLOWER], watch)
    assert v.id == "cluster/peer-lost"
    assert "rig-b.local (follower) lost its peer the leader rig-a.local (10.77.0.1)" in v.what
    assert v.why.startswith("session to the leader rig-a.local (")
    assert "torch.distributed's store" in v.why
    assert "on rig-a.local" in v.fix


def test_a_restart_before_this_boot_is_history(configs):
    watch = _fixture("leader-lost-its-follower")
    v = _verdict(configs[LEADER], watch, boot=float(watch["restarted"]) + 60)
    assert (v.id, v.severity) == ("cluster/ok", diagnosis.OK)
    assert v.what.startswith("rig-a.local (leader, rank 0) of the cluster pair with the follower")
    assert v.what.endswith(f"last check 5 s ago: {watch['last']}")


def test_a_peer_failing_now_is_counted_toward_the_restart(configs):
    v = _verdict(configs[LEADER], _fixture("leader-failing"))
    assert (v.id, v.severity) == ("cluster/peer-failing", diagnosis.WARN)
    assert "the follower rig-b.local (10.77.0.2) is not answering: 1 of 3" in v.what
    assert "within 165 s" in v.fix


def test_a_serving_pair_is_ok(configs):
    v = _verdict(configs[LEADER], _fixture("serving"))
    assert v.id == "cluster/ok"
    assert "supervised by rigup-cluster-watch.timer" in v.what
    assert "restarts vllm.service within 165 s" in v.why


def test_a_check_older_than_the_bound_is_stale(configs):
    watch = _fixture("serving")
    v = _verdict(configs[LEADER], watch, now=float(watch["checked"]) + 600)
    assert (v.id, v.severity, v.what.split(" ago")[0]) == (
        "cluster/watch-stale", diagnosis.WARN, "the supervisor's last check was 10 min",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("timer", "words"),
    [
        ({**TIMER_UP, "active": "inactive"}, "rigup-cluster-watch.timer is inactive"),
        ({**TIMER_UP, "load": "not-found", "active": "inactive"}, "timer is not-found"),
        ({}, "rigup-cluster-watch.timer is unknown"),
    ],
)
def test_no_supervisor_is_a_failure_whatever_its_state_said(configs, timer, words):
    v = _verdict(configs[FOLLOWER], _fixture("serving"), timer=timer)
    assert (v.id, v.severity) == ("cluster/watch-missing", diagnosis.FAIL)
    assert words in v.what and "rig-b.local's part of the cluster pair" in v.what
    assert "the leader rig-a.local (10.77.0.1)" in v.why


def test_a_failed_check_is_a_failure(configs):
    service = {**SERVICE_OK, "result": "exit-code"}
    v = _verdict(configs[LEADER], _fixture("serving"), service=service)
    assert (v.id, v.what) == (
        "cluster/watch-failed",
        "the supervisor's last check failed (rigup-cluster-watch.service: exit-code)",
    )


def test_no_state_yet_and_no_right_to_read_it(configs):
    assert _verdict(configs[LEADER], None, now=T0).id == "cluster/no-check"
    path = configs[LEADER]["cluster"]["watch"]["state_file"]
    v = _verdict(configs[LEADER], None, now=T0, unreadable=path)
    assert (v.id, v.severity) == ("cluster/not-root", diagnosis.OK)
    assert path in v.what and "sudo rigup-doctor" in v.what


# --- the readers ------------------------------------------------------------------------------


def _show(*blocks: dict[str, str]) -> str:
    """``systemctl show -p... -- UNIT...`` as systemd prints it: a block per unit."""
    return "\n\n".join("\n".join(f"{k}={v}" for k, v in b.items()) for b in blocks) + "\n"


def test_the_section_reads_the_units_and_the_state_file(configs, tmp_path):
    watch = _fixture("follower-lost-its-leader")
    state_file = tmp_path / "watch-state.json"
    state_file.write_text(json.dumps(watch) + "\n")
    cfg = json.loads(json.dumps(configs[FOLLOWER]))
    cfg["cluster"]["watch"]["state_file"] = str(state_file)
    seen = []

    def runner(argv):
        seen.append(argv)
        timer = {"Id": "rigup-cluster-watch.timer", "LoadState": "loaded"}
        timer |= {"ActiveState": "active", "SubState": "waiting", "Result": "success"}
        service = {"Id": "rigup-cluster-watch.service", "LoadState": "loaded"}
        service |= {"ActiveState": "inactive", "SubState": "dead", "Result": "success"}
        return 0, _show(timer, service)

    # the rig booted an hour before the supervisor restarted its engine: this boot's restart
    booted = float(watch["restarted"]) - 3600
    section = doctor.check_cluster(cfg, runner, now=float(watch["checked"]) + 5, boot=booted)
    assert seen[0][:2] == ["systemctl", "show"]
    assert seen[0][-2:] == ["rigup-cluster-watch.timer", "rigup-cluster-watch.service"]
    assert doctor.report([section])["sections"][0] | {"verdicts": None} == {
        "name": "cluster",
        "status": "warn",
        "verdicts": None,
        "facts": {
            "rig": FOLLOWER,
            "role": "follower",
            "rank": 1,
            "cluster": "pair",
            "peers": [{"name": LEADER, "address": "10.77.0.1", "role": "leader"}],
            "timer": {"unit": "rigup-cluster-watch.timer", "active": "active"},
            "state_file": str(state_file),
            "watch": watch,
            "detection_bound_s": 165,
        },
    }
    assert [v.id for v in section.verdicts] == ["cluster/peer-lost"]
    assert "== cluster: WARN" in doctor.render([section])
    # the same state file read after a reboot: the restart was the last boot's
    rebooted = doctor.check_cluster(
        cfg, runner, now=float(watch["checked"]) + 5, boot=booted + 7200
    )
    assert doctor.report([rebooted])["sections"][0]["status"] == "ok"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_a_state_file_root_keeps_is_unreadable_not_absent(tmp_path):
    path = tmp_path / "watch-state.json"
    path.write_text("{}")
    path.chmod(0)
    assert doctor.read_watch_state(str(path)) == (None, str(path))


def test_a_missing_or_torn_state_file_is_no_state(tmp_path):
    assert doctor.read_watch_state(str(tmp_path / "absent")) == (None, "")
    (tmp_path / "torn").write_text('{"failures": ')
    assert doctor.read_watch_state(str(tmp_path / "torn")) == (None, "")


def test_this_boot_from_proc_stat(tmp_path):
    (tmp_path / "stat").write_text("cpu  1 2 3\nbtime 1796100000\nprocesses 9\n")
    assert doctor.boot_time(str(tmp_path / "stat")) == 1796100000.0
    (tmp_path / "stat").write_text("cpu  1 2 3\nprocesses 9\n")
    with pytest.raises(ValueError, match="no btime"):
        doctor.boot_time(str(tmp_path / "stat"))
