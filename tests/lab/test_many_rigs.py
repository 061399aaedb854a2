"""Many rigs, proven in the lab (docs/many-rigs.md): two lab machines, each in a network
namespace of its own on a bridge the lab makes (lab/pair.py), converged as one group in one run
(inventory/lab_rigs.py), serve the tiny checkpoint with pipeline parallel 2 across them on
vLLM's CPU build; the supervisor brings the pair back after either engine is killed; the
firewall lets the master port in from the peer only. Then the same two machines as two replica
rigs behind vLLM's router (inventory/lab_replicas.py): the router answers with the key, from a
rig and from the controller, keeps answering while one replica is stopped, and one rig's decode
rate is printed beside the pair's.

Its own pair of machines (``RIGUP_TEST_PAIR``, ``RIGUP_TEST_PAIR_SSH_PORT``,
``RIGUP_TEST_PAIR_STATE_DIR``), independent of the single lab's; the figures (seconds to ready,
to recover, tokens/s) are printed (``pytest -s``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import runpy
import secrets
import shlex
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from lab import hub_lab, scenario
from lab.pair import LabPair
from lab.pair_serving import (
    Target,
    answers,
    api,
    completion_ok,
    decode_rate,
    link_client,
    run_api_checks,
    wait_serving,
)
from lab.router_failover import route_outcome
from roles.router.flags import replica_drop_bound_s
from tests.lab.labtools import LAB_MARKS, active, doctor, main_pid, wait_up

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
#: tokens of the timed greedy completion, the pair's and one rig's
DECODE_TOKENS = 64
#: the figures one test measures and a later one prints beside its own (the decode rates)
FIGURES: dict[str, dict] = {}


def _env() -> dict[str, str]:
    return {**os.environ, **{k: v for k, v in PAIR_ENV.items() if v}}


def pyinfra(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The pyinfra CLI against the pair (output captured), with ``env`` added to its
    environment."""
    return subprocess.run(
        [str(scenario.BIN / "pyinfra"), *args],
        cwd=scenario.REPO,
        env={**_env(), **(env or {})},
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
    ``reasoning`` field), a tool call through the qwen3_coder parser (thinking on and off, streamed and not), streaming, /metrics."""
    argv = pair.leader.ssh("systemctl cat vllm.service").stdout
    assert "--tool-call-parser qwen3_coder" in argv and "--reasoning-parser qwen3" in argv
    names = ["completion", "chat_reasoning_apart", "tool_call_every_way", "stream", "metrics"]
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
    settled, units = _units_settle(pair, max(60, RECOVERY_S - seconds))
    after = {m.cfg.name: _watch_state(m) for m in pair.machines}
    print(
        f"\n{victim.cfg.name}'s engine killed: no answer after {broken:.1f} s, the pair served "
        f"again after {seconds:.1f} s, both vllm.service active/running {settled:.1f} s later; "
        f"supervisor restarts {before} -> { {n: s.get('restarts', 0) for n, s in after.items()} }"
    )
    assert set(units.values()) == {"active/running"}, f"after {settled:.1f} s: {units}"
    return seconds, {"before": before, "after": after}


def _units_settle(pair, seconds: float) -> tuple[float, dict[str, str]]:
    """Wait (each rig at most ``seconds``) until every rig's vllm.service is active/running:
    the pair answers a completion before the units' ``ExecStartPost=`` readiness checks end (the
    leader's rigup-cluster-watch --ready tries a 1-token completion, then sleeps 2 s). Returns
    the seconds waited and each rig's last ``ActiveState/SubState``."""
    started = time.monotonic()
    units = {m.cfg.name: wait_up(m, "vllm.service", int(seconds), poll_s=1) for m in pair.machines}
    return time.monotonic() - started, units


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
    seconds, states = _kill_and_recover(pair, pair.follower)  # both units active/running
    assert seconds < RECOVERY_S
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
    rate = decode_rate(pair.leader, tokens=DECODE_TOKENS)
    print(f"\npair (pipeline parallel 2, 1 core each): {rate}")
    assert rate["tokens"] == DECODE_TOKENS
    FIGURES["pair"] = rate


# ---- the same two machines as two replica rigs behind vLLM's router ---------------------------
# inventory/lab_replicas.py: each rig serves the tiny checkpoint alone (its own single-node CPU
# engine, on the core it had in the pair), vllm-router on rig a in front of both (round robin).

REPLICAS_INVENTORY = "inventory/lab_replicas.py"
#: the pair's deploys and the router's (each replica's firewall, the router on rig a), in
#: deploys/full.py's order: the router after the mode has started the replicas' vLLM; the
#: cluster's deploy removes the pair's firewall and supervisor from rigs that now serve alone
REPLICAS_DEPLOYS = (
    "deploys/base.py",
    "deploys/vllm.py",
    "deploys/cluster.py",
    "deploys/modes.py",
    "deploys/router.py",
)
ROUTER_PORT = 8080  # inventory/group_data/all.py router_port
VLLM_PORT = 8000  # lab/pair_inventory.py VLLM_PORT
#: a stopped replica is out of the router's rotation within 2 failed checks 3 s apart, the last
#: waiting 2 s (inventory/lab_replicas.py): 8 s
BOUND_S = replica_drop_bound_s(
    runpy.run_path(str(scenario.REPO / REPLICAS_INVENTORY))["lab_replicas"][1]
)
#: the bound with room for the 2 shared cores
DROP_S = BOUND_S + 12
#: seconds of requests through the router once the dead replica is out (the stop's end plus
#: DROP_S): every route must answer 200 there. The clients ask from 8 s before the stop until
#: then, however long the stop takes (vLLM's stop took 2-32 s on the shared cores), and at most
#: LOAD_MAX_S (the stop's own timeout, 120 s, with the rest)
SETTLED_S = 17
LOAD_MAX_S = 8 + 120 + DROP_S + SETTLED_S
ONE_TOKEN = {"prompt": "1", "max_tokens": 1}
#: seconds between two requests of one route's client (a few per second each: the cores are
#: shared)
PAUSE_S = 0.2
#: the routes a client uses, each with the body it posts (None: a GET)
ROUTES = {
    "/v1/models": None,
    "/v1/completions": ONE_TOKEN,
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "1"}], "max_tokens": 1},
}


@pytest.fixture(scope="module")
def replicas(pair, converged):
    """After the pair's tests: the replicas' inventory converged in one pyinfra run (both rigs,
    the API key made here and handed through the environment); returns the key, the router's
    :class:`Target` and the run's seconds once the router answers."""
    key = secrets.token_urlsafe(32)
    started = time.monotonic()
    run = pyinfra("-y", REPLICAS_INVENTORY, *REPLICAS_DEPLOYS, env={"VLLM_API_KEY": key})
    seconds = time.monotonic() - started
    print(run.stdout[-4000:], run.stderr[-4000:])
    assert key not in run.stdout + run.stderr
    if run.returncode != 0:  # the engine's root cause is above what pyinfra's tail shows
        for machine in pair.machines:
            errors = machine.ssh(
                "journalctl -u vllm.service -o cat -n 2000 | grep -E 'Error|error|Killed' | tail -40",
                check=False,
            ).stdout
            print(f"\n{machine.cfg.name}'s vllm.service errors:\n{errors}")
    assert run.returncode == 0, "the replicas' converge failed; its output is above"
    router = Target(f"http://{pair.leader.cfg.address}:{ROUTER_PORT}")
    waited = 0.0
    while not completion_ok(pair.leader, target=router):
        waited = time.monotonic() - started - seconds
        assert waited < READY_S, f"the router did not answer within {READY_S} s"
        time.sleep(2)
    print(
        f"\nreplicas' converge of both rigs {seconds:.1f} s; router answered {waited:.1f} s later"
    )
    return {"key": key, "router": router, "seconds": seconds}


def _served(machine) -> float:
    """Requests the rig's own vLLM finished (``vllm:request_success_total`` of its /metrics,
    which vLLM serves without the key), asked in the rig."""
    probe = (
        "import urllib.request\n"
        f"url = 'http://{machine.cfg.address}:{VLLM_PORT}/metrics'\n"
        "text = urllib.request.urlopen(url, timeout=10).read().decode()\n"
        "print(sum(float(l.rsplit(' ', 1)[1]) for l in text.splitlines()\n"
        "          if l.startswith('vllm:request_success_total')))\n"
    )
    return float(machine.ssh(shlex.join(["python3", "-c", probe])).stdout.strip())


def test_replicas_converge_in_one_run(pair, replicas):
    leader, follower = pair.leader, pair.follower
    for machine in pair.machines:
        unit = machine.ssh("systemctl cat vllm.service").stdout
        assert "--nnodes" not in unit and "--headless" not in unit
        assert f"--host {machine.cfg.address}" in unit
        # the pair's supervisor and firewall are gone; the replica's firewall is loaded
        assert active(machine, "rigup-cluster-watch.timer") != "active"
        assert machine.ssh("nft list table inet rigup_cluster", check=False).returncode != 0
        assert active(machine, "rigup-replica-firewall.service") == "active"
    assert active(leader, "router.service") == "active"
    assert active(follower, "router.service") != "active"
    # the router's upstreams, derived from the inventory: both rigs on the link
    argv = leader.ssh("systemctl cat router.service").stdout
    for machine in pair.machines:
        assert f"http://{machine.cfg.address}:{VLLM_PORT}" in argv


def test_router_answers_chat_with_the_key_from_a_rig_and_the_controller(pair, replicas):
    router, chat = (
        replicas["router"],
        {
            "messages": [{"role": "user", "content": "Say hi."}],
            "max_tokens": 8,
        },
    )
    before = {m.cfg.name: _served(m) for m in pair.machines}
    # from rig a, with the key from rig a's own key file
    for _ in range(4):  # round robin: two each
        got = api(pair.leader, "/v1/chat/completions", chat, 120, router)
        assert got["status"] == 200 and got["body"]["choices"], got
    # without the key: the replica's 401, through the router
    keyless = dataclasses.replace(router, key_file=None)
    assert api(pair.leader, "/v1/chat/completions", chat, 120, keyless)["status"] == 401
    # from the controller's end of the bridge, the key in the client's environment
    got = answers(
        link_client(
            pair.net.link_netns, keyless, "/v1/chat/completions", chat, 120, replicas["key"]
        ),
        180,
    )[-1]
    assert got["status"] == 200 and got["body"]["choices"], got
    after = {m.cfg.name: _served(m) for m in pair.machines}
    print(f"\nrequests each rig's vLLM served: {before} -> {after}")
    assert all(after[n] >= before[n] + 2 for n in after), (before, after)


def _dropped_on_vllm_port(machine) -> int:
    """Packets the rig's replica firewall dropped on its vLLM port (nft's counter)."""
    table = machine.ssh("nft list table inet rigup_replica").stdout
    found = re.search(rf"tcp dport {VLLM_PORT} counter packets (\d+)", table)
    assert found, table
    return int(found.group(1))


def test_replica_firewall_lets_the_router_rig_in_only(pair, replicas):
    leader, follower = pair.leader.cfg, pair.follower.cfg
    assert _connects(pair, leader.name, follower.address, VLLM_PORT)  # the router's rig
    before = _dropped_on_vllm_port(pair.follower)
    assert not _connects(pair, "link", follower.address, VLLM_PORT)  # no router
    assert _dropped_on_vllm_port(pair.follower) > before
    # rig b routes to no one: rig a's vLLM refuses it
    assert not _connects(pair, follower.name, leader.address, VLLM_PORT)


def test_decode_rate_of_one_rig(pair, replicas):
    """Tokens per second of the same greedy completion as the pair's
    (:func:`test_decode_rate_of_the_pair`) from rig a's own engine alone, on the core its stage
    had in the pair. A benchmark line, not a timed assert: on the lab's shared CPU the ratio says
    what the hop between the stages costs there, not what a GPU rig's would (docs/many-rigs.md)."""
    one = decode_rate(
        pair.leader,
        tokens=DECODE_TOKENS,
        target=Target(f"http://{pair.leader.cfg.address}:{VLLM_PORT}"),
    )
    assert one["tokens"] == DECODE_TOKENS
    two = FIGURES.get("pair")
    ratio = f"{two['tokens_per_s'] / one['tokens_per_s']:.2f}" if two else "n/a (pair not run)"
    print(
        f"\nBENCHMARK decode {DECODE_TOKENS} greedy tokens, 1 core per engine: pair "
        f"{two['tokens_per_s'] if two else 'n/a'} tok/s, one rig {one['tokens_per_s']} tok/s, "
        f"pair/one rig {ratio}"
    )


def _route_loads(pair, replicas, for_s: float) -> dict[str, subprocess.Popen]:
    """One client per route a client uses (:data:`ROUTES`), each asking the router again and
    again for ``for_s`` seconds from the controller's end of the bridge."""
    router = dataclasses.replace(replicas["router"], key_file=None)
    return {
        path: link_client(
            pair.net.link_netns, router, path, body, 30, replicas["key"], for_s, PAUSE_S
        )
        for path, body in ROUTES.items()
    }


@pytest.mark.parametrize("down", ["b", "a"])
def test_replica_down_every_route_answers(pair, replicas, down):
    """One replica's vllm.service stopped (rig b's, then rig a's, which also runs the router)
    under back-to-back requests on every route a client uses: what each route answered, how
    long the router sent to the dead replica, and once it is out (the stop's end plus the
    router's drop bound, roles/router/flags.py replica_drop_bound_s, plus room for the shared
    cores) every route answers 200 from the replica left, /v1/models naming the served model.
    Started again, the replica serves through the router again (seconds printed)."""
    victim = pair.follower if down == "b" else pair.leader
    # each client's answers read as they come: a client whose pipe is full stops asking
    pool = ThreadPoolExecutor(len(ROUTES))
    clients = _route_loads(pair, replicas, LOAD_MAX_S)
    loads = {
        path: pool.submit(answers, client, LOAD_MAX_S + 60) for path, client in clients.items()
    }
    time.sleep(8)  # requests through both replicas first
    stopped = time.time()
    try:
        victim.ssh("systemctl stop vllm.service", timeout=120)
        stop_s = time.time() - stopped
        # the clients ask until SETTLED_S after the dead replica is out, then stop (each line
        # they printed is flushed: SIGTERM loses none)
        time.sleep(max(0.0, stopped + stop_s + DROP_S + SETTLED_S - time.time()))
        for client in clients.values():
            client.terminate()
        _every_route_answers(loads, down, stopped, stop_s)
    finally:  # the other case needs this replica up
        for client in clients.values():
            if client.poll() is None:
                client.kill()
        pool.shutdown()
        started = time.monotonic()
        victim.ssh("systemctl start vllm.service", timeout=960)
        loaded = time.monotonic() - started
    # started again: the router takes it back (round robin reaches it)
    served = _served(victim)
    while _served(victim) <= served:
        assert time.monotonic() - started < RECOVERY_S, f"the router never sent to rig {down} again"
        assert completion_ok(pair.leader, target=replicas["router"])
    print(
        f"\nrig {down} started ({loaded:.1f} s to active) and served through the router after "
        f"{time.monotonic() - started:.1f} s"
    )


def _every_route_answers(loads: dict, down: str, stopped: float, stop_s: float) -> None:
    """The assertions of :func:`test_replica_down_every_route_answers` on the routes' answers
    (``loads``: each route's answers to come; ``stopped``: Unix time the stop began, which took
    ``stop_s``)."""
    settled_at = stopped + stop_s + DROP_S
    outcomes = {}
    for path, load in loads.items():
        results = load.result()
        outcomes[path] = route_outcome(results, stopped, settled_at)
        outcomes[path]["models"] = sorted(
            {
                m["id"]
                for r in results
                if r["status"] == 200 and path == "/v1/models"
                for m in r["body"]["data"]
            }
        )
        _capture(f"replica-{down}-down{path.replace('/', '-')}.json", results, stopped, stop_s)
    print(
        f"\nrig {down}'s vllm.service stopped ({stop_s:.1f} s; drop bound {BOUND_S} s): "
        f"{json.dumps(outcomes, indent=1)[:6000]}"
    )
    for path, seen in outcomes.items():
        assert seen["before"] and seen["before_ok"], (path, seen)
        assert seen["settled"] >= 5, f"{path}: too few requests after the drop: {seen}"
        assert seen["settled_ok"], (path, seen)
    assert outcomes["/v1/models"]["models"], outcomes["/v1/models"]


def _capture(name: str, results: list[dict], stopped: float, stop_s: float) -> None:
    """With ``RIGUP_TEST_CAPTURE_DIR`` set: the route's answers and the stop's time, as JSON,
    for tests/fixtures/router (the unit tests of lab/router_failover.py read them)."""
    where = os.environ.get("RIGUP_TEST_CAPTURE_DIR")
    if where:
        os.makedirs(where, exist_ok=True)
        record = {"stopped": stopped, "stop_s": stop_s, "bound_s": BOUND_S, "results": results}
        with open(os.path.join(where, name), "w") as f:
            json.dump(record, f, indent=1)
