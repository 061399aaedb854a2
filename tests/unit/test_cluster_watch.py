"""The supervisor of a rig of a cluster (files/cluster/cluster_watch.py): its decision on the
cases the pair was seen in (the CPU build's pair in two network namespaces: a killed follower leaves the
leader answering /health while completions hang; a killed leader leaves the follower idle), its
bound on the time to a restart, and its two probes on live sockets."""

from __future__ import annotations

import json
import os
import socket
import time

import pytest

from roles.cluster.watch import detection_bound_s
from tests.cluster_watch_runs import (
    FIXTURE_DIR,
    RUNS,
    Completions,
    comparable,
    completions_server,
    load_watch,
)
from tests.conftest import load_group_data

watch = load_watch()

SHIPPED = load_group_data()
THRESHOLD = SHIPPED["cluster_watch_failures"]
GRACE = SHIPPED["vllm_start_timeout_s"]


# role, ActiveState, seconds active, probe answer, failures before -> action, failures after
CASES = [
    # the follower was killed: the leader is active, /health 200, its completion times out
    ("leader", "active", 900, False, 0, "fail", 1),
    ("leader", "active", 915, False, 1, "fail", 2),
    ("leader", "active", 930, False, 2, "restart", 0),
    # the leader was killed: the follower's unit is active, its session to the leader is gone
    ("follower", "active", 2400, False, 0, "fail", 1),
    ("follower", "active", 2430, False, 2, "restart", 0),
    # a follower just (re)started waits for the leader's store while the leader loads
    ("follower", "active", 30, False, 0, "wait", 0),
    ("follower", "active", 30, False, 2, "wait", 0),
    # the leader restarting (wait-ready until /health): systemd's start timeout bounds it
    ("leader", "activating", 0, None, 2, "wait", 0),
    # the media mode, or stopped by its owner: not the supervisor's business
    ("leader", "inactive", 0, None, 1, "idle", 0),
    ("follower", "failed", 0, None, 0, "idle", 0),
    # serving again: the count starts over
    ("leader", "active", 60, True, 2, "ok", 0),
    ("follower", "active", 60, True, 1, "ok", 0),
]


@pytest.mark.parametrize(("role", "state", "since", "healthy", "before", "action", "after"), CASES)
def test_the_decision_on_recorded_cases(role, state, since, healthy, before, action, after):
    decision = watch.decide(role, state, since, healthy, before, THRESHOLD, GRACE, "probe")
    assert (decision.action, decision.failures) == (action, after), decision.reason


def test_a_follower_that_lost_its_session_gets_no_grace():
    """The leader died and came back with a new store: the follower, still in its grace since
    its own start, had a session and lost it, so it fails and restarts to join the new store."""
    waited = watch.decide("follower", "active", 30, False, 0, THRESHOLD, GRACE, "probe")
    assert waited.action == "wait"
    lost = [watch.decide("follower", "active", 30, False, 0, THRESHOLD, GRACE, "probe", True)]
    while lost[-1].action == "fail":
        lost.append(
            watch.decide(
                "follower", "active", 30, False, lost[-1].failures, THRESHOLD, GRACE, "p", True
            )
        )
    assert [d.action for d in lost] == ["fail"] * (THRESHOLD - 1) + ["restart"]


def test_the_session_is_remembered_for_one_start_only():
    assert watch.session_since({"session_start": 1000}, 1001.4)
    assert not watch.session_since({"session_start": 1000}, 1100)  # restarted since
    assert not watch.session_since({}, 1000)


def test_a_lone_failure_never_restarts():
    assert watch.decide("leader", "active", 100, False, 0, 1, GRACE, "p").action == "restart"
    assert watch.decide("leader", "active", 100, False, 0, 2, GRACE, "p").action == "fail"


def _first_restart(
    interval_s: int, failures: int, probe_s: float, died_at: float, healthy_s: float
) -> float:
    """Run the timer's checks on a clock: a check starts ``interval_s`` after the last one ended
    (OnUnitInactiveSec=); a probe started while the peer lives passes after ``healthy_s``, one
    started after its death fails after ``probe_s``. The time of the restart after the peer
    died at ``died_at``."""
    clock, count = 0.0, 0
    while True:
        start = clock
        dead = start >= died_at
        end = start + (probe_s if dead else healthy_s)
        d = watch.decide("leader", "active", end, not dead, count, failures, 0, "p")
        if d.action == "restart":
            return end - died_at
        count, clock = d.failures, end + interval_s


@pytest.mark.parametrize("died_at", [0.0, 0.01, 7.3, 14.99, 15.06, 44.0])
@pytest.mark.parametrize("healthy_s", [0.05, 29.9])
def test_a_dead_peer_is_acted_on_within_the_stated_bound(died_at, healthy_s):
    interval = SHIPPED["cluster_watch_interval_s"]
    probe = SHIPPED["cluster_probe_timeout_s"]
    bound = detection_bound_s(interval, THRESHOLD, probe)
    took = _first_restart(interval, THRESHOLD, probe, died_at, healthy_s)
    assert took <= bound, (took, bound)
    assert bound == 165  # what inventory/group_data/all.py and docs/many-rigs.md state


def test_the_bound_is_tight():
    """The worst case reaches it: the peer dies right after a slow healthy probe began."""
    took = _first_restart(15, THRESHOLD, 30, 0.001, 29.999)
    assert detection_bound_s(15, THRESHOLD, 30) - took < 0.01


# ---- the follower's probe: its session to the leader's master port, read from /proc ---------
def test_the_session_probe_sees_an_established_connection_and_its_end():
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    peer, _ = server.accept()
    try:
        assert watch.session_alive("127.0.0.1", port)
        assert not watch.session_alive("127.0.0.1", port + 1 if port < 65535 else port - 1)
    finally:
        client.close()
        peer.close()
        server.close()
    time.sleep(0.05)
    assert not watch.session_alive("127.0.0.1", port)


def test_proc_net_tcp_addresses_decode():
    # lines as /proc/net/tcp and tcp6 write them (an x86-64 host: 32-bit words little-endian)
    v4 = "   0: 0100007F:A3C2 0100007F:7339 01 00000000:00000000 00:00000000 00000000  0 0 1 1"
    v6 = (
        "   0: 0000000000000000FFFF00000200A8C0:A3C2 0000000000000000FFFF0000014D0A0A:7339 01 "
        "00000000:00000000 00:00000000 00000000  0 0 1 1"
    )
    assert watch.established_to(["header", v4], "127.0.0.1", 29497)
    assert watch.established_to(["header", v6], "10.10.77.1", 29497)
    assert not watch.established_to(["header", v4.replace(" 01 ", " 06 ")], "127.0.0.1", 29497)


# ---- the leader's probe: a 1-token completion within the timeout, never /health --------------
@pytest.fixture
def server():
    with completions_server() as url:
        yield url


def test_a_completion_within_the_timeout_is_healthy(server):
    assert watch.completion_answers(server, "qwen3.6-27b", "sekrit", 5)
    path, body, auth = Completions.seen[0]
    assert (path, body["max_tokens"], body["model"], auth) == (
        "/v1/completions", 1, "qwen3.6-27b", "Bearer sekrit",
    )  # fmt: skip


def test_a_hung_completion_is_not_healthy_though_health_answers(server):
    Completions.delay = 30.0  # far longer than the probe's timeout: the probe must not wait it out
    started = time.monotonic()
    assert not watch.completion_answers(server, "m", None, 0.5)
    assert time.monotonic() - started < Completions.delay


def test_a_refused_completion_is_not_healthy(server):
    Completions.status = 401
    assert not watch.completion_answers(server, "m", None, 5)
    assert not watch.completion_answers("http://127.0.0.1:9/v1/completions", "m", None, 2)


def test_the_key_is_read_from_the_services_env_file(tmp_path):
    path = tmp_path / "api-key.env"
    path.write_text("# comment\nVLLM_API_KEY=abc123\n")
    assert watch.api_key(str(path)) == "abc123"
    assert watch.api_key(str(tmp_path / "absent")) is None


# ---- the leader's readiness (vllm.service's ExecStartPost= on a cluster's leader) ------------
def test_ready_once_a_completion_answers(server, monkeypatch):
    monkeypatch.setenv("VLLM_API_KEY", "k")
    assert watch.wait_ready(server, "m", 5, os.getpid(), pause_s=0.01) == 0
    assert Completions.seen[0][2] == "Bearer k"


def test_not_ready_and_failing_once_the_server_is_gone():
    # port 9 (discard) answers no completion; pid 2**22 + 1 is above the kernel's pid_max limit
    started = time.monotonic()
    assert watch.wait_ready("http://127.0.0.1:9/v1/completions", "m", 1, 2**22 + 1, 0.01) == 1
    assert time.monotonic() - started < 10


# ---- the state it writes (rigup-doctor's cluster section reads it) ---------------------------
@pytest.mark.parametrize("name", sorted(RUNS))
def test_the_state_files_are_what_the_supervisor_writes(name, tmp_path):
    """tests/fixtures/cluster/ holds what the supervisor's own check wrote in each case
    (tests/cluster_watch_runs.py); a change of what it writes shows here, and the fixtures are
    written anew with ``python -m tests.cluster_watch_runs``."""
    written = comparable(RUNS[name](watch, tmp_path))
    assert written == json.loads((FIXTURE_DIR / f"{name}.json").read_text())


def test_the_restart_names_the_probe_that_failed(tmp_path):
    """The line kept as ``why`` names what failed: the leader's completion, or the follower's
    session to its leader by name and address, never the unit alone."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    leader = RUNS["leader-lost-its-follower"](watch, tmp_path / "a")
    follower = RUNS["follower-lost-its-leader"](watch, tmp_path / "b")
    assert leader["why"].startswith("1-token completion from http://127.0.0.1:")
    assert "within 1 s: failed 2 checks in a row: restarting vllm.service" in leader["why"]
    assert follower["why"].startswith("session to the leader rig-a.local (127.0.0.1:")
    assert (leader["restarts"], follower["restarts"]) == (1, 1)
