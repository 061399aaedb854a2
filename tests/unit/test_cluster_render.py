"""One model across rigs: what each rank renders through the same code as a rig alone (the
``vllm serve`` argv of roles/vllm/flags.py, the environment, the one unit template), its
firewall (checked by nft itself where it is installed) and its supervisor's units."""

from __future__ import annotations

import shlex
import shutil
import subprocess

import jinja2
import pytest

from roles.cluster.firewall import TABLE, ruleset
from roles.cluster.group import member_of
from roles.cluster.unit import FIREWALL_UNIT
from roles.cluster.watch import watch_config, watch_units
from roles.common.service import JINJA
from roles.common.urls import is_loopback
from roles.vllm import service_spec
from roles.vllm.flags import managed_args, serve_args, service_env
from tests.conftest import REPO
from tests.unit.test_cluster_group import example_rigs

MODEL = "/srv/rigup/models/qwen3.6-27b-int4-autoround/abc"
LEADER, FOLLOWER = "rig-a.local", "rig-b.local"


@pytest.fixture
def rigs():
    return example_rigs()


def _member(rigs, name):
    return member_of(name, rigs)


def test_each_rank_runs_the_same_line_plus_its_place(rigs):
    alone = managed_args(rigs[LEADER], MODEL)
    lead = managed_args(rigs[LEADER], MODEL, _member(rigs, LEADER))
    follow = managed_args(rigs[FOLLOWER], MODEL, _member(rigs, FOLLOWER))
    common = ["--pipeline-parallel-size", "2", "--nnodes", "2"]
    master = ["--master-addr", "10.77.0.1", "--master-port", "29501"]
    assert lead == [*alone, *common, "--node-rank", "0", *master]
    assert follow == [*alone, *common, "--node-rank", "1", *master, "--headless"]
    # vllm_extra_args still come last, after the multi-node flags
    rigs[FOLLOWER]["vllm_extra_args"] = ["--enforce-eager"]
    assert serve_args(rigs[FOLLOWER], MODEL, _member(rigs, FOLLOWER))[-2:] == [
        "--headless",
        "--enforce-eager",
    ]


def test_the_leader_address_follows_the_leader_entry(rigs):
    rigs[LEADER]["cluster_private_address"] = "10.99.0.7"
    args = managed_args(rigs[FOLLOWER], MODEL, _member(rigs, FOLLOWER))
    assert args[args.index("--master-addr") + 1] == "10.99.0.7"


def test_each_rank_talks_on_its_private_link(rigs):
    for name, address in ((LEADER, "10.77.0.1"), (FOLLOWER, "10.77.0.2")):
        env = service_env(rigs[name], "/var/lib/rigup/vllm", member=_member(rigs, name))
        assert env["VLLM_HOST_IP"] == address
        assert env["GLOO_SOCKET_IFNAME"] == env["NCCL_SOCKET_IFNAME"] == "enp5s0"
        assert env["VLLM_LOOPBACK_IP"] == "127.0.0.1"  # the ranks inside one rig
    alone = service_env(rigs[LEADER], "/var/lib/rigup/vllm")
    assert alone["VLLM_HOST_IP"] == "127.0.0.1" and alone["NCCL_SOCKET_IFNAME"] == "lo"


def _unit(spec) -> str:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, **JINJA)
    template = env.from_string((REPO / "files" / "common" / "service.unit.j2").read_text())
    return template.render(
        s=spec,
        target="rigup-llm.target",
        after_extra="".join(f" {u}" for u in spec.requires),
        pid_key="",
        writable=[spec.home],
        wait_ready="/opt/rigup/bin/wait-ready",
        loopback_only=is_loopback(spec.bind),
    )


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_one_unit_template_for_every_rank(rigs, device):
    for name in rigs:
        rigs[name]["vllm_device"] = device
    lead = _unit(service_spec(rigs[LEADER], MODEL, [0, 1], _member(rigs, LEADER)))
    follow = _unit(service_spec(rigs[FOLLOWER], MODEL, [0, 1], _member(rigs, FOLLOWER)))
    alone = _unit(service_spec(rigs[LEADER], MODEL, [0, 1]))
    assert (
        "ExecStartPost=/usr/bin/python3 /opt/rigup/bin/rigup-cluster-watch --ready "
        "http://127.0.0.1:8000/v1/completions qwen3.6-27b 30 $MAINPID\n"
    ) in lead
    assert "ExecStartPost=/opt/rigup/bin/wait-ready http://127.0.0.1:8000/health" in alone
    assert "wait-ready" not in lead
    assert "ExecStartPost=" not in follow and "rigup-cluster-watch.timer checks" in follow
    assert "IPAddressAllow=localhost 10.77.0.2\n" in lead
    assert "IPAddressAllow=localhost 10.77.0.1\n" in follow
    assert "IPAddressAllow=localhost\n" in alone
    for text in (lead, follow):
        requires = [line for line in text.splitlines() if line.startswith("Requires=")]
        assert any(FIREWALL_UNIT in line for line in requires), requires
        assert "After=rigup-llm.target network-online.target" in text
        assert "TimeoutStopSec=60" in text  # above the 20-30 s a broken pair took to stop
    assert FIREWALL_UNIT not in alone
    exec_line = next(line for line in follow.splitlines() if line.startswith("ExecStart="))
    assert "--headless" in shlex.split(exec_line.removeprefix("ExecStart="))


def test_no_firewall_no_requirement(rigs):
    for data in rigs.values():
        data["cluster_firewall"] = False
    text = _unit(service_spec(rigs[LEADER], MODEL, [0, 1], _member(rigs, LEADER)))
    assert FIREWALL_UNIT not in text


# ---- the firewall ---------------------------------------------------------------------------
def test_the_ruleset_lets_only_peers_in(rigs):
    lead = ruleset(_member(rigs, LEADER), 22, None)
    assert "elements = { 10.77.0.2 }" in lead
    assert "ip daddr 10.77.0.1 ip saddr @peers accept" in lead
    assert "ip daddr 10.77.0.1 tcp dport { 22 } accept" in lead
    assert "ip daddr 10.77.0.1 counter drop" in lead
    assert "tcp dport 29501 ip saddr != @peers counter drop" in lead
    assert "meta nfproto ipv6 tcp dport 29501 counter drop" in lead
    # its own table only, replaced atomically; never the whole ruleset
    assert "flush ruleset" not in lead
    lines = lead.splitlines()
    assert lines.count(f"table inet {TABLE}") == lines.count(f"delete table inet {TABLE}") == 1
    assert f"table inet {TABLE} {{" in lines
    assert "icmpv6" not in lead  # IPv4: ARP is no IP traffic, nothing to let through
    follow = ruleset(_member(rigs, FOLLOWER), 2222, None)
    assert "elements = { 10.77.0.1 }" in follow and "tcp dport { 2222 } accept" in follow


def test_an_ipv6_link_uses_ip6(rigs):
    rigs[LEADER]["cluster_private_address"] = "fd00:77::1"
    rigs[FOLLOWER]["cluster_private_address"] = "fd00:77::2"
    text = ruleset(_member(rigs, LEADER), 22, 8000)
    assert "type ipv6_addr" in text and "ip6 daddr fd00:77::1 ip6 saddr @peers accept" in text
    assert "tcp dport { 22, 8000 } accept" in text
    assert "meta nfproto ipv4 tcp dport 29501 counter drop" in text
    assert "icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert } accept" in text


NFT = shutil.which("nft") or (shutil.which("nft", path="/usr/sbin:/sbin"))


@pytest.mark.skipif(NFT is None, reason="nft is not installed here (apt-get install nftables)")
@pytest.mark.parametrize("v6", [False, True])
def test_nft_itself_accepts_each_ruleset(rigs, tmp_path, v6):
    if v6:
        rigs[LEADER]["cluster_private_address"] = "fd00:77::1"
        rigs[FOLLOWER]["cluster_private_address"] = "fd00:77::2"
    for name in rigs:
        path = tmp_path / f"{name}.nft"
        path.write_text(ruleset(_member(rigs, name), 22, 8000))
        proc = subprocess.run([NFT, "-c", "-f", str(path)], capture_output=True, text=True)
        if proc.returncode and "Operation not permitted" in proc.stderr:
            pytest.skip("nft -c needs CAP_NET_ADMIN here")
        assert proc.returncode == 0, proc.stderr
    # and refuses a broken one: the check can fail
    path.write_text(path.read_text().replace("@peers accept", "@nopeers accept"))
    assert subprocess.run([NFT, "-c", "-f", str(path)], capture_output=True).returncode != 0


# ---- the supervisor's configuration ----------------------------------------------------------
def test_the_leader_probes_a_completion_a_follower_its_session(rigs):
    lead = watch_config(rigs[LEADER], _member(rigs, LEADER), "/var/lib/rigup/cluster/s.json")
    follow = watch_config(rigs[FOLLOWER], _member(rigs, FOLLOWER), "/var/lib/rigup/cluster/s.json")
    assert lead["role"] == "leader" and lead["completion_url"].endswith(":8000/v1/completions")
    assert (follow["role"], follow["leader_address"], follow["master_port"]) == (
        "follower",
        "10.77.0.1",
        29501,
    )
    assert follow["grace_s"] == rigs[FOLLOWER]["vllm_start_timeout_s"]
    # the key is read on the host from vllm.service's root-only file, never copied
    assert lead["api_key_file"] == "/etc/rigup/vllm/secrets/api-key.env"


def test_the_timer_runs_the_check_every_interval():
    units = watch_units(
        "/opt/rigup/bin/rigup-cluster-watch",
        "/etc/rigup/cluster/watch.json",
        "/var/lib/rigup/cluster",
        15,
    )
    timer, service = units["rigup-cluster-watch.timer"], units["rigup-cluster-watch.service"]
    assert "OnUnitInactiveSec=15" in timer and "WantedBy=timers.target" in timer
    assert "Type=oneshot" in service
    assert (
        "ExecStart=/usr/bin/python3 /opt/rigup/bin/rigup-cluster-watch /etc/rigup/cluster/watch.json"
        in service
    )
