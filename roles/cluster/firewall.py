"""The cluster's firewall on each rig: one nftables table, rendered here (pure) and loaded by
its own oneshot unit.

vLLM's docs warn that the traffic between nodes is unencrypted and can be used to run code
(torch.distributed's store, vLLM's message queues, gloo and NCCL sockets all trust any peer).
Those sockets listen on the rig's private address (``VLLM_HOST_IP``) on ports they pick at start,
and the master port (torch's store) on every address (torch binds the wildcard address:
files/vllm/sitecustomize.py). So the table lets into the private address only the peer rigs
(and SSH, and the leader's API when it is not bound to loopback), and lets the master port in
from the peers only, on any address.

Why a table and a unit of rigup's own, not Ubuntu's nftables.service: that service loads
/etc/nftables.conf, whose shipped first line is ``flush ruleset`` (it would wipe the tables of
Docker, libvirt or ufw). ``table inet rigup_cluster`` + ``delete table`` + the table again is
nftables' atomic replace of one table (nft(8), "delete table" in one transaction): a bad file
changes nothing, and no other table is touched.
"""

from __future__ import annotations

import ipaddress

from roles.cluster.member import ClusterMember

#: the table's name (family inet: IPv4 and IPv6)
TABLE = "rigup_cluster"


def _family(address: str) -> str:
    """``ip`` or ``ip6``: the nftables payload expression of ``address``'s family."""
    return "ip6" if ipaddress.ip_address(address).version == 6 else "ip"


def ruleset(member: ClusterMember, ssh_port: int, api_port: int | None) -> str:
    """The nftables file of ``member``'s rig (``nft -f`` syntax, nft(8)).

    ``ssh_port``: the rig's SSH port, open on the private address (a controller may converge
    over that link). ``api_port``: the leader's API port when it listens beyond loopback (None
    otherwise, and on followers). Raises ValueError for an address that is no IP literal (the
    settings' checks refuse it first)."""
    fam = _family(member.address)
    addr_type = "ipv6_addr" if fam == "ip6" else "ipv4_addr"
    peers = ", ".join(member.peer_addresses)
    open_ports = [ssh_port] + ([api_port] if api_port else [])
    ports = ", ".join(str(p) for p in sorted(set(open_ports)))
    other = "ipv4" if fam == "ip6" else "ipv6"
    # IPv6 neighbour discovery to the address itself (RFC 4861): the link keeps working
    nd = (
        f"\n        {fam} daddr {member.address} icmpv6 type "
        "{ nd-neighbor-solicit, nd-neighbor-advert } accept"
        if fam == "ip6"
        else ""
    )
    return f"""\
# Managed by rigup (roles/cluster/firewall.py): the firewall of cluster {member.cluster!r} on
# {member.name} (rank {member.rank}). Change the inventory and re-run the deploy; edits here are
# overwritten. Loaded by rigup-cluster-firewall.service; `nft list table inet {TABLE}` shows it.
table inet {TABLE}
delete table inet {TABLE}
table inet {TABLE} {{
    # the other rigs of the cluster, by their private addresses
    set peers {{
        type {addr_type}
        elements = {{ {peers} }}
    }}

    chain input {{
        type filter hook input priority filter; policy accept;
        iif "lo" accept
        ct state established,related accept
        # this rig's private address: the engine's sockets (torch's store on the master port
        # {member.master_port}, vLLM's message queues, gloo, NCCL) answer the peer rigs only
        {fam} daddr {member.address} {fam} saddr @peers accept
        {fam} daddr {member.address} tcp dport {{ {ports} }} accept{nd}
        {fam} daddr {member.address} counter drop
        # the master port on any other address of this rig (torch binds it to all): peers only
        tcp dport {member.master_port} {fam} saddr != @peers counter drop
        meta nfproto {other} tcp dport {member.master_port} counter drop
    }}
}}
"""


def unit(
    nft_file: str,
    table: str = TABLE,
    what: str = "the cluster's firewall",
    allowed: str = "peer rigs only",
    role: str = "roles/cluster",
) -> str:
    """A oneshot unit that loads ``nft_file`` (nftables ``table inet <table>``) before the
    network comes up (ordered like Debian's own nftables.service: DefaultDependencies=no,
    Before=network-pre.target) and before vllm.service; stopping it deletes the table. The
    defaults: rigup-cluster-firewall.service; ``what``, ``allowed`` and ``role`` (the role that
    manages it) only word its description and header (roles/router/firewall.py's table too)."""
    return f"""\
# Managed by rigup ({role}). Change the inventory and re-run the deploy; edits here are
# overwritten.
[Unit]
Description=rigup: {what} (nftables table inet {table}: {allowed})
Documentation=man:nft(8)
Wants=network-pre.target
Before=network-pre.target shutdown.target vllm.service
Conflicts=shutdown.target
DefaultDependencies=no

[Service]
Type=oneshot
RemainAfterExit=yes
StandardInput=null
ProtectSystem=full
ProtectHome=true
ExecStart=/usr/sbin/nft -f {nft_file}
ExecReload=/usr/sbin/nft -f {nft_file}
ExecStop=/usr/sbin/nft delete table inet {table}

[Install]
WantedBy=sysinit.target
"""
