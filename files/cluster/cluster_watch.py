#!/usr/bin/env python3
"""rigup-cluster-watch: the supervisor of one rig of a cluster (roles/cluster), run by
rigup-cluster-watch.timer every ``interval_s``.

Why: vLLM 0.22.1's multi-node pair does not notice a dead peer. With its follower killed the
leader keeps answering /health 200 while every completion hangs; with its leader killed the
follower idles with no log line. Neither exits, so systemd's Restart= never fires (measured
on the CPU build: two network namespaces joined by a veth pair). So each rig checks what serving needs:

- the leader asks for a 1-token completion within ``probe_timeout_s`` (never /health alone);
- a follower checks its session to the leader: an established TCP connection to the leader's
  master port (torch.distributed's store, which every rank keeps open while the engine lives:
  vllm/distributed/parallel_state.py ``init_distributed_environment``).

After ``failures`` failed checks in a row it restarts its own vllm.service (``--no-block``): a
dead follower makes the leader's completions hang, so the leader restarts, which ends the old
sessions, so a hung follower restarts too, and the pair meets again at the leader's new store.
A dead peer is acted on within ``probe_timeout_s + failures × (interval_s + probe_timeout_s)``
seconds (roles/cluster/watch.py ``detection_bound_s``).

Standard library only. ``decide`` is pure (the unit tests run it on recorded cases); the probes
read the live system. Configuration: a JSON file (roles/cluster writes it), path as argv[1].
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

#: systemd ActiveState values in which the engine runs or starts (systemd.unit(5))
RUNNING = ("active", "reloading")
STARTING = ("activating",)
#: /proc/net/tcp's st value of an established connection (include/net/tcp_states.h TCP_ESTABLISHED)
ESTABLISHED = "01"
#: two start times of vllm.service closer than this are the same start (``time.time() - since``
#: varies by the check's own duration between checks, never by the seconds a restart takes)
SAME_START_S = 3


@dataclass(frozen=True)
class Decision:
    """What one check decided: ``action`` is ``ok``, ``wait``, ``idle``, ``fail`` (counted) or
    ``restart``; ``failures`` the count of failed checks in a row after this one; ``reason`` the
    journal line."""

    action: str
    failures: int
    reason: str


def decide(
    role: str,
    active_state: str,
    active_for_s: float,
    healthy: bool | None,
    failures: int,
    threshold: int,
    grace_s: float,
    what: str,
    had_session: bool = False,
) -> Decision:
    """The supervisor's decision for one check.

    ``role``: ``leader`` or ``follower``; ``active_state``: vllm.service's ActiveState;
    ``active_for_s``: seconds since it became active; ``healthy``: the probe's answer (None when
    not probed); ``failures``: failed checks in a row before this one; ``threshold``: failures
    that restart; ``grace_s``: how long a follower, active as soon as it runs, may wait for the
    leader (the leader's start timeout); ``what``: the probe's words for the journal;
    ``had_session``: a follower held its session to the leader since vllm.service last became
    active. The grace covers only the wait for a first session: a follower that lost the one it
    had (its leader died and came back with a new store it never joins) is failing, not waiting
    (measured in the lab pair: a follower given the grace idled 13 minutes beside a restarted
    leader that waited for it).
    """
    if active_state in STARTING:
        return Decision(
            "wait", 0, f"vllm.service is {active_state}: systemd's start timeout bounds it"
        )
    if active_state not in RUNNING:
        return Decision(
            "idle", 0, f"vllm.service is {active_state}: not serving (another GPU mode, or stopped)"
        )
    if healthy:
        return Decision("ok", 0, f"{what}: ok")
    if role == "follower" and active_for_s < grace_s and not had_session:
        return Decision(
            "wait",
            0,
            f"{what}: not yet, {active_for_s:.0f} s after start (the leader may be loading; grace {grace_s:.0f} s)",
        )
    count = failures + 1
    if count >= threshold:
        return Decision(
            "restart", 0, f"{what}: failed {count} checks in a row: restarting vllm.service"
        )
    return Decision("fail", count, f"{what}: failed ({count} of {threshold} before a restart)")


def _tcp_tables() -> list[Path]:
    return [Path("/proc/net/tcp"), Path("/proc/net/tcp6")]


def _proc_address(text: str) -> tuple[str, int]:
    """``0100007F:1F90`` (/proc/net/tcp, host byte order per 32-bit word) -> ``("127.0.0.1", 8080)``."""
    hexaddr, hexport = text.split(":")
    raw = bytes.fromhex(hexaddr)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    address = ipaddress.ip_address(words)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    return str(address), int(hexport, 16)


def established_to(lines: list[str], host: str, port: int) -> bool:
    """True when a line of /proc/net/tcp or tcp6 (``lines``, header included) is an established
    connection to ``host``:``port``."""
    want = str(ipaddress.ip_address(host))
    for line in lines[1:]:
        fields = line.split()
        if len(fields) < 4 or fields[3] != ESTABLISHED:
            continue
        if _proc_address(fields[2]) == (want, port):
            return True
    return False


def session_alive(host: str, port: int) -> bool:
    """The follower's probe: an established TCP connection of this host to the leader's master
    port (the network namespace's tables: every process of this rig)."""
    return any(
        established_to(t.read_text().splitlines(), host, port) for t in _tcp_tables() if t.exists()
    )


def api_key(path: str) -> str | None:
    """VLLM_API_KEY from the service's root-only environment file, None without one."""
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition("=")
        if name.strip() == "VLLM_API_KEY":
            return value.strip().strip('"')
    return None


def completion_answers(url: str, model: str, key: str | None, timeout_s: float) -> bool:
    """The leader's probe: a 1-token completion from ``url`` (``.../v1/completions``) within
    ``timeout_s`` seconds, with at least one choice in the answer."""
    body = json.dumps({"model": model, "prompt": "1", "max_tokens": 1, "temperature": 0})
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(url, data=body.encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            return answer.status == 200 and bool(json.load(answer).get("choices"))
    except (OSError, ValueError):  # URLError and timeouts are OSErrors
        return False


def unit_state(unit: str) -> tuple[str, float]:
    """``(ActiveState, seconds since it entered the active state)`` from ``systemctl show``."""
    out = subprocess.run(
        ["systemctl", "show", unit, "-p", "ActiveState", "-p", "ActiveEnterTimestampMonotonic"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    entered_us = int(props.get("ActiveEnterTimestampMonotonic") or 0)
    since = time.clock_gettime(time.CLOCK_MONOTONIC) - entered_us / 1e6 if entered_us else 0.0
    return props.get("ActiveState", "unknown"), since


def _unit_procs() -> Path | None:
    """cgroup.procs of this process's control group (the unit's, as ExecStartPost=): cgroup v2,
    or the unified or systemd hierarchy of a hybrid layout; as files/common/wait-ready reads it
    (ProtectProc=invisible can hide the server's /proc entry from us)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    cgroup = next((line[3:] for line in lines if line.startswith("0::")), "")
    for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd"):
        path = Path(f"{root}{cgroup}/cgroup.procs")
        if cgroup and path.exists():
            return path
    return None


def running(pid: int, procs: Path | None) -> bool:
    """Whether ``pid`` is still one of the unit's processes (``procs``: its cgroup.procs)."""
    if procs is not None:
        try:
            return str(pid) in procs.read_text().split()
        except OSError:
            return False
    return Path(f"/proc/{pid}").exists()


def wait_ready(url: str, model: str, timeout_s: float, pid: int, pause_s: float = 2.0) -> int:
    """vllm.service's ExecStartPost= on a cluster's leader: wait until a 1-token completion
    answers (each try within ``timeout_s``), never /health alone (it answers while a pair with a
    dead follower hangs every completion). The key comes from the unit's environment
    (VLLM_API_KEY, its EnvironmentFile=). Returns 0 when ready; 1 once the server ``pid`` is
    gone three checks running (as wait-ready). systemd's TimeoutStartSec= bounds the wait."""
    key = os.environ.get("VLLM_API_KEY") or None
    procs = _unit_procs()
    missing = 0
    while not completion_answers(url, model, key, timeout_s):
        missing = 0 if running(pid, procs) else missing + 1
        if missing >= 3:
            print(
                f"rigup-cluster-watch: the server (pid {pid}) exited before {url} answered",
                file=sys.stderr,
            )
            return 1
        time.sleep(pause_s)
    print(f"ready: {url} answered a 1-token completion", flush=True)
    return 0


def session_since(state: dict, started_at: float) -> bool:
    """Whether the state file records a session to the leader seen during the start of
    vllm.service that began at ``started_at`` (seconds since the epoch): ``session_start`` is
    that start's time, written when the follower's probe passed."""
    seen = state.get("session_start")
    return seen is not None and abs(float(seen) - started_at) <= SAME_START_S


def restart_unit(unit: str) -> None:
    """Restart ``unit`` without waiting for it (a broken leader takes 20-30 s to stop)."""
    subprocess.run(["systemctl", "restart", "--no-block", unit], check=False)


def check(cfg: dict, read_unit=unit_state, restart=restart_unit, now=time.time) -> Decision:
    """One check as ``cfg`` (the configuration file's JSON) says: probe, decide, restart
    vllm.service on ``restart``, and write the state file (``cfg["state_file"]``, JSON): the
    failed checks in a row (``failures``), the last decision's line and its time (``last``,
    ``checked``), and after a restart their count, its time and the line that caused it
    (``restarts``, ``restarted``, ``why``); a follower also ``session_start`` (the start of
    vllm.service during which it held a session to its leader). Times are seconds since the
    epoch. ``read_unit``: :func:`unit_state`; ``restart``: :func:`restart_unit`; ``now``:
    :func:`time.time` (the unit tests pass the systemd side)."""
    state_file = Path(cfg["state_file"])
    try:
        state = json.loads(state_file.read_text())
    except (OSError, ValueError):
        state = {}
    active, since = read_unit(cfg["unit"])
    healthy = None
    what = cfg["unit"]
    if active in RUNNING:
        if cfg["role"] == "leader":
            what = (
                f"1-token completion from {cfg['completion_url']} within {cfg['probe_timeout_s']} s"
            )
            healthy = completion_answers(
                cfg["completion_url"],
                cfg["model"],
                api_key(cfg["api_key_file"]),
                cfg["probe_timeout_s"],
            )
        else:
            what = f"session to the leader {cfg['leader']} ({cfg['leader_address']}:{cfg['master_port']})"
            healthy = session_alive(cfg["leader_address"], cfg["master_port"])
    # when this start of vllm.service began (seconds since the epoch, to the check's precision):
    # a session seen since then is remembered, and the follower's grace ends with it
    started_at = round(now() - since)
    had_session = session_since(state, started_at)
    if healthy and cfg["role"] == "follower":
        state["session_start"] = started_at
    decision = decide(
        cfg["role"],
        active,
        since,
        healthy,
        int(state.get("failures", 0)),
        cfg["failures"],
        cfg["grace_s"],
        what,
        had_session,
    )
    print(f"{cfg['rig']} ({cfg['role']}): {decision.reason}", flush=True)
    state.update(failures=decision.failures, last=decision.reason, checked=now())
    if decision.action == "restart":
        restart(cfg["unit"])
        state.update(
            restarts=int(state.get("restarts", 0)) + 1, restarted=now(), why=decision.reason
        )
    state_file.write_text(json.dumps(state) + "\n")
    return decision


def main(argv: list[str]) -> int:
    """``CONFIG``: one check, as the config file says (:func:`check`); exit 0 (the decision is
    in the journal). ``--ready URL MODEL TIMEOUT_S PID``: :func:`wait_ready`."""
    if argv[1:2] == ["--ready"]:
        url, model, timeout_s, pid = argv[2:6]
        return wait_ready(url, model, float(timeout_s), int(pid))
    check(json.loads(Path(argv[1]).read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
