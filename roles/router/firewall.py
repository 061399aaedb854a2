"""The replicas' firewall: on each replica rig whose vLLM listens beyond loopback, one nftables
table that lets its vLLM port in from the router rigs only (pure rendering; roles/router's
``replica_firewall`` deploy places and loads it).

vLLM's API key guards ``/v1/*`` but vLLM 0.22.1 leaves ``/health`` and ``/metrics`` open, and a
replica bound to a private address is one stolen key away from serving anyone on that link. The
router is its only client, so the table accepts its vLLM port from loopback and from the router
rigs' addresses (each router rig's ``router_replica_address``: the source of its requests on the
replicas' link) and drops every other packet to that port, on every address, counted.

As roles/cluster/firewall.py: a table of rigup's own, replaced atomically (``table`` + ``delete
table`` + the table in one ``nft -f`` transaction, nft(8)), never ``flush ruleset``; loaded by its
own oneshot unit (roles/cluster/firewall.py ``unit``), ordered before vllm.service.
"""

from __future__ import annotations

import ipaddress

#: the table's name (family inet: IPv4 and IPv6)
TABLE = "rigup_replica"
#: the oneshot unit that loads it
UNIT = "rigup-replica-firewall.service"


def _set(name: str, addr_type: str, addresses: list[str]) -> str:
    elements = f"\n        elements = {{ {', '.join(addresses)} }}" if addresses else ""
    return f"""\
    set {name} {{
        type {addr_type}{elements}
    }}
"""


def ruleset(rig: str, port: int, routers: list[str]) -> str:
    """The nftables file (``nft -f`` syntax, nft(8)) of replica rig ``rig`` whose vLLM listens on
    TCP ``port``, reached by the router rigs at the IP addresses ``routers`` (IPv4 and IPv6 may
    mix; at least one).

    Raises:
        ValueError: no router address, or one that is no IP literal (the deploy's checks refuse
            the run first, naming the rig and the key).
    """
    if not routers:
        raise ValueError("router_replica_address: no router rig to let in")
    parsed = [ipaddress.ip_address(a) for a in routers]
    v4 = sorted({str(a) for a in parsed if a.version == 4})
    v6 = sorted({str(a) for a in parsed if a.version == 6})
    return f"""\
# Managed by rigup (roles/router/firewall.py): {rig}'s vLLM port {port} answers the router rigs
# only. Change the inventory and re-run the deploy; edits here are overwritten. Loaded by
# {UNIT}; `nft list table inet {TABLE}` shows it with its counters.
table inet {TABLE}
delete table inet {TABLE}
table inet {TABLE} {{
    # the router rigs, by their addresses on the replicas' link (router_replica_address)
{_set("routers4", "ipv4_addr", v4)}{_set("routers6", "ipv6_addr", v6)}
    chain input {{
        type filter hook input priority filter; policy accept;
        iif "lo" accept
        tcp dport {port} ip saddr @routers4 accept
        tcp dport {port} ip6 saddr @routers6 accept
        tcp dport {port} counter drop
    }}
}}
"""
