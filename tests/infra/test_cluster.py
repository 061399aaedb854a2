"""A rig of a cluster (roles/cluster, docs/many-rigs.md): its vllm.service runs its rank's line
and talks on its private link, its firewall table lets only the peer rigs in, its supervisor
timer runs. Skipped on a rig that serves alone.

    pytest tests/infra --inventory inventory/rigs.py
"""

from __future__ import annotations

import pytest

from roles.cluster.firewall import TABLE
from roles.cluster.member import ClusterMember
from roles.cluster.unit import FIREWALL_UNIT
from roles.cluster.watch import WATCH
from tests.infra.checks import env_file_values


@pytest.fixture(scope="session")
def member(rig, cluster_member) -> ClusterMember:
    """:func:`cluster_member`, the tests skipped on a rig that serves alone."""
    if cluster_member is None:
        pytest.skip(f"{rig.name} serves alone (vllm_nnodes = 1)")
    return cluster_member


def test_vllm_runs_its_ranks_line(host, member):
    exec_start = host.run("systemctl show vllm.service -p ExecStart").stdout
    for flag, value in (
        ("--nnodes", member.nnodes),
        ("--node-rank", member.rank),
        ("--master-addr", member.master_addr),
        ("--master-port", member.master_port),
    ):
        assert f"{flag} {value} " in exec_start, (flag, exec_start)
    assert ("--headless" in exec_start) is not member.is_leader, exec_start


def test_vllm_talks_on_the_private_link(host, data, vllm_paths, member):
    env = env_file_values(host, vllm_paths.env_file, data.get("vllm_user"), "deploys/vllm.py")
    assert env["VLLM_HOST_IP"] == member.address
    assert env["GLOO_SOCKET_IFNAME"] == env["NCCL_SOCKET_IFNAME"] == member.ifname
    link = host.interface(member.ifname)
    assert link.exists, f"{member.ifname} (cluster_private_ifname) is no interface here"
    assert member.address in link.addresses, f"{member.address} is not on {member.ifname}"


def test_the_firewall_lets_only_the_peers_in(host, member):
    if not member.firewall:
        pytest.skip("cluster_firewall = False")
    assert host.service(FIREWALL_UNIT).is_enabled
    table = host.run(f"nft list table inet {TABLE}")
    assert table.rc == 0, f"table inet {TABLE} is not loaded: {table.stderr}"
    for peer in member.peer_addresses:
        assert peer in table.stdout, f"peer {peer} is not in the table"
    assert f"tcp dport {member.master_port}" in table.stdout


def test_the_supervisor_runs(host, member):
    timer = host.service(f"{WATCH}.timer")
    assert timer.is_enabled and timer.is_running, f"{WATCH}.timer is not running"
