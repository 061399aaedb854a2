"""Many rigs, proven in the lab (docs/many-rigs.md): two lab machines, each in a network
namespace of its own on a bridge the lab makes (lab/pair.py), converged as one group in one run
(inventory/lab_rigs.py), serve the tiny checkpoint with pipeline parallel 2 across them on
vLLM's CPU build; the supervisor brings the pair back after either engine is killed; the
firewall lets the master port in from the peer only.

Its own pair of machines (``RIGUP_TEST_PAIR``, ``RIGUP_TEST_PAIR_SSH_PORT``,
``RIGUP_TEST_PAIR_STATE_DIR``), independent of the single lab's; the figures (seconds to ready,
to recover, tokens/s) are printed (``pytest -s``).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import time

import pytest

from lab import hub_lab, scenario
from lab.pair import LabPair
from lab.pair_serving import completion_ok, decode_rate, run_api_checks, wait_serving
from tests.lab.labtools import LAB_MARKS, active, doctor, main_pid

pytestmark = LAB_MARKS

PAIR_ENV = {
    "RIGUP_LAB_PAIR": os.environ.get("RIGUP_TEST_PAIR", "rigs"),
    "RIGUP_LAB_SSH_PORT": os.environ.get("RIGUP_TEST_PAIR_SSH_PORT", "2301"),
    "RIGUP_LAB_STATE_DIR": os.environ.get("RIGUP_TEST_PAIR_STATE_DIR", ""),
}
INVENTORY = "inventory/lab_rigs.py"
#: what the pair needs, in one run: no NVIDIA layer, VoxCPM2 or ComfyUI (inventory/lab_rigs.py);
#: the LLM with vLLM and rigup-doctor in one deploy, which places the checkpoint once
#: (tests/lab/deploys/pair_llm.py says why not deploys/vllm.py beside deploys/doctor.py)
DEPLOYS = (
    "deploys/base.py",
    "tests/lab/deploys/pair_llm.py",
    "deploys/cluster.py",
    "deploys/modes.py",
)
#: the supervisor acts within 15 + 2 × (5 + 15) = 55 s (inventory/lab_rigs.py), then the pair
#: loads again (measured about 2 min on the lab's 2 shared cores): the stated bound for recovery
RECOVERY_S = 420
#: seconds from the converge's start to a first answer the pair may take (measured: below)
READY_S = 900
MASTER_PORT = 29501  # inventory/group_data/all.py vllm_master_port


def _env() -> dict[str, str]:
    return {**os.environ, **{k: v for k, v in PAIR_ENV.items() if v}}


def pyinfra(*args: str) -> subprocess.CompletedProcess:
    """The pyinfra CLI against the pair (output captured)."""
    return subprocess.run(
        [str(scenario.BIN / "pyinfra"), *args],
        cwd=scenario.REPO,
        env=_env(),
        capture_output=True,
        text=True,
    )


@pytest.fixture(scope="module")
def pair():
    lab_pair = LabPair(_env())
    lab_pair.destroy()  # a leftover of an interrupted run: machines, relay, namespaces
    try:
        seconds = lab_pair.up()
        print(f"\npair up in {seconds:.1f} s")
        yield lab_pair
    finally:
        lab_pair.destroy()


@pytest.fixture(scope="module")
def converged(pair):
    """Seeded (the checkpoint into the hub in the leader) and converged in one pyinfra run;
    returns the run, its seconds, and the seconds from its start to the pair's first answer."""
    seeded = scenario.seed_mirror(pair.leader)
    hub = hub_lab.seed(pair.leader)
    print(f"\nseed {seeded.seconds:.1f} s, hub {hub.seconds:.1f} s: {hub.detail['endpoint']}")
    started = time.monotonic()
    run = pyinfra("-y", INVENTORY, *DEPLOYS)
    seconds = time.monotonic() - started
    print(run.stdout[-4000:], run.stderr[-4000:])
    assert run.returncode == 0, "the pair's converge failed; its output is above"
    waited = wait_serving(pair.leader, READY_S - seconds)
    assert waited is not None, f"the pair did not answer within {READY_S} s of the converge"
    ready = seconds + waited
    print(f"\nconverge of both rigs {seconds:.1f} s; first answer {ready:.1f} s after its start")
    return {"run": run, "seconds": seconds, "ready": ready}


def test_one_run_converges_both_rigs(pair, converged):
    out = converged["run"].stdout + converged["run"].stderr  # pyinfra's progress: stderr
    for machine in pair.machines:
        assert f"[{machine.cfg.name}] Success" in out
    assert converged["ready"] < READY_S


def test_second_run_plans_no_change(converged):
    run = pyinfra(INVENTORY, *DEPLOYS, "--dry", "--json")
    assert run.returncode == 0, run.stderr[-3000:]
    changed, _conditional = scenario.plan_changes(json.loads(run.stdout))
    # as the single lab's (lab/scenario.py idempotence): an operation run only if another
    # changed (``_if=``) cannot fire when none changes
    assert changed == [], f"the second run would change: {changed}"


def test_leader_and_follower_run_the_two_stages(pair, converged):
    leader, follower = pair.leader, pair.follower
    argv = {
        m.cfg.name: m.ssh(
            "cat /etc/rigup/vllm/argv* 2>/dev/null; systemctl cat vllm.service"
        ).stdout
        for m in pair.machines
    }
    assert "--headless" in argv[follower.cfg.name]
    assert "--headless" not in argv[leader.cfg.name]
    for text in argv.values():
        assert "--pipeline-parallel-size" in text and "--nnodes" in text
    # the follower's session to the leader's store, on the private link
    tcp = follower.ssh(f"ss -Htn state established dst {leader.cfg.address}:{MASTER_PORT}").stdout
    assert tcp.strip(), "the follower holds no session to the leader's master port"


def test_pipeline_parallel_2_answers_chat_tools_and_reasoning(pair, converged):
    """The checks tests/infra runs against one rig (roles/vllm/api_checks.py), against the
    leader's API of the pair: a completion, chat with the reasoning apart (vLLM 0.22.1's
    ``reasoning`` field), a tool call through the qwen3_coder parser, streaming, /metrics."""
    argv = pair.leader.ssh("systemctl cat vllm.service").stdout
    assert "--tool-call-parser qwen3_coder" in argv and "--reasoning-parser qwen3" in argv
    names = ["completion", "chat_reasoning_apart", "tool_call", "stream", "metrics"]
    results = run_api_checks(pair.leader, names)
    print(f"\nthe pair's API: {json.dumps(results)[:1500]}")
    assert [r["check"] for r in results if not r["ok"]] == [], results
    assert "reasoning" in results[1]["seen"]


def _connects(pair, where: str, address: str, port: int) -> bool:
    """A TCP connection to ``address:port`` from ``where``: a rig's name, or "link" (the
    controller's end of the bridge, an address that is no peer)."""
    probe = (
        "import socket,sys\n"
        "try:\n"
        f"    socket.create_connection(({address!r}, {port}), timeout=3).close()\n"
        "except OSError as e:\n"
        "    print(e); sys.exit(1)\n"
    )
    if where == "link":
        argv = ["ip", "netns", "exec", pair.net.link_netns, "python3", "-c", probe]
        return subprocess.run(argv, capture_output=True).returncode == 0
    machine = next(m for m in pair.machines if m.cfg.name == where)
    return machine.ssh(shlex.join(["python3", "-c", probe]), check=False).returncode == 0


def _dropped(pair) -> int:
    """Packets the leader's firewall dropped on its private address (nft's counter)."""
    table = pair.leader.ssh("nft list table inet rigup_cluster").stdout
    found = re.search(rf"ip daddr {pair.leader.cfg.address} counter packets (\d+)", table)
    assert found, table
    return int(found.group(1))


def test_firewall_lets_the_master_port_in_from_the_peer_only(pair, converged):
    leader = pair.leader.cfg
    assert _connects(pair, pair.follower.cfg.name, leader.address, MASTER_PORT)
    before = _dropped(pair)
    # from the controller's end of the bridge: an address on the link that is no peer
    assert not _connects(pair, "link", leader.address, MASTER_PORT)
    assert _dropped(pair) > before  # refused by the rig's table, not by a closed port
    # SSH on the private address stays open to the controller (the converge comes that way)
    assert _connects(pair, "link", leader.address, leader.ssh_port)


def _watch_state(machine) -> dict:
    text = machine.ssh("cat /var/lib/rigup/cluster/watch-state.json", check=False).stdout
    return json.loads(text) if text.strip() else {}


def _kill_and_recover(pair, victim) -> tuple[float, dict]:
    """SIGKILL every process of the victim's engine at once (vllm.service's API server or
    headless launcher and its stage's worker: a crashed engine); the seconds until the pair
    answers again, with no converge, and the supervisors' states before and after.

    (SIGKILL of the launcher alone is no dead engine: its worker logs "Parent process exited"
    and keeps serving the stage until systemd's stop timeout kills it.)"""
    before = {m.cfg.name: _watch_state(m).get("restarts", 0) for m in pair.machines}
    assert completion_ok(pair.leader), "the pair does not serve before the kill"
    assert main_pid(victim, "vllm.service"), f"vllm.service runs no process on {victim.cfg.name}"
    victim.ssh("systemctl kill --signal=SIGKILL vllm.service")
    killed = time.monotonic()
    broken = None  # the first probe that got no answer: the kill took effect
    while time.monotonic() - killed < RECOVERY_S:
        if not completion_ok(pair.leader, timeout_s=10):
            broken = broken or time.monotonic() - killed
        elif broken is not None:
            break
        time.sleep(2)
    seconds = time.monotonic() - killed
    assert broken is not None, "the pair kept answering: the kill did not take effect"
    assert completion_ok(pair.leader), f"the pair did not serve again within {RECOVERY_S} s"
    after = {m.cfg.name: _watch_state(m) for m in pair.machines}
    print(
        f"\n{victim.cfg.name}'s engine killed: no answer after {broken:.1f} s, the pair served "
        f"again after {seconds:.1f} s; supervisor restarts {before} -> "
        f"{ {n: s.get('restarts', 0) for n, s in after.items()} }"
    )
    return seconds, {"before": before, "after": after}


def _doctor_names_the_lost_peer(pair, survivor, victim, state: dict, probe: str) -> None:
    """``rigup-doctor --only cluster`` on the rig whose supervisor restarted it (``state``: its
    supervisor's state after the restart; ``probe``: how its ``why`` begins) names the rig that
    died, by inventory name and private address, and why: the supervisor's line and what that
    probe failing means. Seconds: it reads two units and a file."""
    code, result, seconds = doctor(survivor, "cluster")
    (section,) = result["sections"]
    (verdict,) = section["verdicts"]
    watch = section["facts"]["watch"]
    print(f"\nrigup-doctor on {survivor.cfg.name} ({seconds:.1f} s): {verdict['what']}")
    print(f"  why: {verdict['why']}")
    role = "leader" if victim is pair.leader else "follower"
    named = f"lost its peer the {role} {victim.cfg.name} ({victim.cfg.address})"
    assert (code, verdict["id"]) == (1, "cluster/peer-lost"), verdict
    assert named in verdict["what"], verdict
    assert watch["restarts"] >= state["restarts"], (watch, state)
    assert watch["why"].startswith(probe), watch
    assert verdict["why"].startswith(f"{watch['why']}: "), verdict
    assert f"on {victim.cfg.name}" in verdict["fix"], verdict


def test_follower_killed_the_pair_serves_again(pair, converged):
    seconds, states = _kill_and_recover(pair, pair.follower)
    assert seconds < RECOVERY_S
    for m in pair.machines:
        assert active(m, "vllm.service") == "active"
    # the leader's completions hung: its supervisor restarted it, and its doctor says why
    leader = pair.leader.cfg.name
    state = states["after"][leader]
    assert state.get("restarts", 0) > states["before"][leader], state
    _doctor_names_the_lost_peer(pair, pair.leader, pair.follower, state, "1-token completion from ")


def test_leader_killed_the_pair_serves_again(pair, converged):
    seconds, states = _kill_and_recover(pair, pair.leader)
    assert seconds < RECOVERY_S
    # the follower lost its leader: its supervisor restarted it, naming the rig and why
    follower = pair.follower.cfg.name
    state = states["after"][follower]
    assert state.get("restarts", 0) > states["before"][follower], state
    assert state.get("why"), state
    journal = pair.follower.ssh(
        "journalctl -u rigup-cluster-watch.service --no-pager -o cat -n 200"
    ).stdout
    assert f"{follower} (follower):" in journal, journal[-2000:]
    probe = f"session to the leader {pair.leader.cfg.name} ({pair.leader.cfg.address}:"
    _doctor_names_the_lost_peer(pair, pair.follower, pair.leader, state, probe)


def test_limit_reconverges_one_rig_only(pair, converged):
    leader, follower = pair.leader, pair.follower
    engine = main_pid(leader, "vllm.service")
    for m in pair.machines:
        m.ssh("rm /etc/rigup/cluster/watch.json")
    run = pyinfra("-y", INVENTORY, "deploys/cluster.py", "--limit", follower.cfg.name)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert f"[{leader.cfg.name}]" not in run.stdout + run.stderr
    assert f"[{follower.cfg.name}] Success" in run.stdout + run.stderr
    assert follower.ssh("test -f /etc/rigup/cluster/watch.json", check=False).returncode == 0
    assert leader.ssh("test -f /etc/rigup/cluster/watch.json", check=False).returncode != 0
    assert main_pid(leader, "vllm.service") == engine
    run = pyinfra("-y", INVENTORY, "deploys/cluster.py", "--limit", leader.cfg.name)
    assert run.returncode == 0, run.stdout[-3000:]


def test_decode_rate_of_the_pair(pair, converged):
    """Tokens per second of one greedy completion across the two stages. On the lab's CPU this
    proves the cross-rig path carries every token, not speed (docs/many-rigs.md)."""
    rate = decode_rate(pair.leader, tokens=64)
    print(f"\npair (pipeline parallel 2, 1 core each): {rate}")
    assert rate["tokens"] == 64
