"""The replicas' firewall (roles/router/firewall.py): each replica rig's vLLM port answers the
router rigs only, their addresses taken from the inventory (roles/router/replicas.py
``router_addresses``); the table checked by nft itself where it is installed."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from roles.cluster.firewall import unit
from roles.router.firewall import TABLE, UNIT, ruleset
from roles.router.replicas import router_addresses


def test_shipped_default_guards_the_replicas(settings):
    assert settings["router_replica_firewall"] is True


def test_router_addresses_from_the_router_rigs():
    routers = [
        ("gw-a", {"router_replica_address": "10.10.0.1"}),
        ("gw-b", {"router_replica_address": "fd00::9"}),
    ]
    assert router_addresses("rig-b", routers) == (["10.10.0.1", "fd00::9"], [])


@pytest.mark.parametrize("address", [None, "", "gateway.lan", "10.10.0.1/24", 167772161])
def test_a_router_without_an_ip_address_is_named_with_its_key(address):
    routers = [("gw-a", {"router_replica_address": "10.10.0.1"})]
    routers.append(("gw-b", {"router_replica_address": address}))
    addresses, problems = router_addresses("rig-b", routers)
    assert addresses == ["10.10.0.1"]
    assert len(problems) == 1 and problems[0].startswith("gw-b: router_replica_address:"), problems
    assert "rig-b" in problems[0]


def test_the_vllm_port_answers_loopback_and_the_routers_only():
    text = ruleset("rig-b", 8000, ["10.10.0.1", "fd00::9", "10.10.0.1"])
    assert f"table inet {TABLE}" in text and f"delete table inet {TABLE}" in text
    assert "elements = { 10.10.0.1 }" in text and "elements = { fd00::9 }" in text
    rules = [line.strip() for line in text.splitlines()]
    order = [
        'iif "lo" accept',
        "tcp dport 8000 ip saddr @routers4 accept",
        "tcp dport 8000 ip6 saddr @routers6 accept",
        "tcp dport 8000 counter drop",
    ]
    assert [r for r in rules if r in order] == order
    assert "flush ruleset" not in text


def test_no_router_or_a_name_is_refused_by_the_renderer():
    with pytest.raises(ValueError, match="router_replica_address"):
        ruleset("rig-b", 8000, [])
    with pytest.raises(ValueError):
        ruleset("rig-b", 8000, ["gateway.lan"])


def test_its_unit_loads_and_deletes_its_own_table():
    text = unit("/etc/rigup/replica/firewall.nft", table=TABLE, role="roles/router")
    assert "ExecStart=/usr/sbin/nft -f /etc/rigup/replica/firewall.nft" in text
    assert f"ExecStop=/usr/sbin/nft delete table inet {TABLE}" in text
    assert "Before=network-pre.target shutdown.target vllm.service" in text
    assert UNIT == "rigup-replica-firewall.service"


NFT = shutil.which("nft") or shutil.which("nft", path="/usr/sbin:/sbin")


@pytest.mark.skipif(NFT is None, reason="nft is not installed here (apt-get install nftables)")
@pytest.mark.parametrize("routers", [["10.10.0.1"], ["fd00::9"], ["10.10.0.1", "fd00::9"]])
def test_nft_itself_accepts_the_table(tmp_path, routers):
    path = tmp_path / "replica.nft"
    path.write_text(ruleset("rig-b", 8000, routers))
    proc = subprocess.run([NFT, "-c", "-f", str(path)], capture_output=True, text=True)
    if proc.returncode and "Operation not permitted" in proc.stderr:
        pytest.skip("nft -c needs CAP_NET_ADMIN here")
    assert proc.returncode == 0, proc.stderr
    # and refuses a broken one: the check can fail
    path.write_text(path.read_text().replace("@routers4 accept", "@nowhere accept"))
    assert subprocess.run([NFT, "-c", "-f", str(path)], capture_output=True).returncode != 0
