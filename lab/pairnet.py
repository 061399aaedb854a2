"""The network of a lab pair (two lab machines serving one model across them): pure planning of
its namespaces, bridge, links and addresses, and the ``ip`` command lines that make and remove
them. :mod:`lab.pair` runs them.

Three network namespaces, all made by the lab and named after the pair:

- ``<pair>-link``: the bridge ``rigbr0``, the "switch" between the rigs. The controller's end of
  the link is the bridge's own address (:attr:`PairNet.controller`); the lab's relay
  (:mod:`lab.relay`) opens its connections to the rigs' sshd from here, and listens here for the
  package archives the rigs may reach (:attr:`PairNet.relayed`).
- ``<pair>-a``, ``<pair>-b``: one per machine, booted into it by systemd-nspawn
  (``--network-namespace-path``); its interface ``lan0`` is one end of a veth pair whose other
  end is a port of the bridge.

Addresses exist only inside those namespaces (10.77.0.0/24 by default: the rigs at .1 and .2,
the controller at .254, the relayed archives from .250 down); no namespace has a default route
and nothing forwards to the controller's own network, so a rig's traffic can only reach the
other rig, the controller's end, or one of the relayed archives' host:port pairs.

Standard library only (as lab.machine).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re

from lab.config import LabError

#: the interface of each rig on the link (its ``cluster_private_ifname``)
RIG_IFNAME = "lan0"
BRIDGE = "rigbr0"
#: what the rigs may reach through the relay: host names as their apt sources and uv name them,
#: each given a relay address of its own on the link, ports 80 and 443 only
RELAYED_HOSTS = (
    "archive.ubuntu.com",
    "security.ubuntu.com",
    "pypi.org",
    "files.pythonhosted.org",
)
RELAYED_PORTS = (80, 443)
#: /run/netns/<name>: where ``ip netns add`` pins a namespace (ip-netns(8))
NETNS_DIR = "/run/netns"
_PAIR_RE = re.compile(r"^[a-z][a-z0-9-]{0,9}$")


@dataclasses.dataclass(frozen=True)
class Rig:
    """One machine of the pair on the link: its lab name, namespace, address, veth names."""

    name: str
    netns: str
    address: str
    #: the bridge-side end of its veth pair (in the link namespace)
    port: str


@dataclasses.dataclass(frozen=True)
class PairNet:
    """The planned network of one pair. Build it with :func:`plan`."""

    pair: str
    subnet: str
    rigs: tuple[Rig, ...]
    link_netns: str
    controller: str
    #: relayed host name -> its address on the link
    relayed: dict[str, str]

    @property
    def prefixlen(self) -> int:
        return ipaddress.ip_network(self.subnet).prefixlen

    @property
    def namespaces(self) -> tuple[str, ...]:
        """Every namespace of the pair: the link's first, then the rigs'."""
        return (self.link_netns, *(r.netns for r in self.rigs))

    def rig(self, name: str) -> Rig:
        for rig in self.rigs:
            if rig.name == name:
                return rig
        raise KeyError(name)

    def hosts_lines(self) -> str:
        """/etc/hosts lines for a rig: the relayed names at their relay addresses, and every rig
        by its name at its address."""
        lines = [f"{addr}\t{name}\n" for name, addr in self.relayed.items()]
        lines += [f"{r.address}\t{r.name}\n" for r in self.rigs]
        return "".join(lines)


def plan(pair: str, machines: tuple[str, ...], subnet: str = "10.77.0.0/24") -> PairNet:
    """The network of pair ``pair`` for lab machines ``machines`` (in rank order).

    Args:
        pair: 1-10 lowercase letters, digits, dashes, starting with a letter: it prefixes every
            namespace (``<pair>-link``, ``<pair>-a``, ...) and the veth ports (``<pair>-a`` is
            also the port of rig a; interface names are at most 15 bytes, IFNAMSIZ - 1).
        machines: the lab machines' names, 2 to 26 of them.
        subnet: an IPv4 network of at least 8 addresses.

    Raises:
        LabError: a bad pair name, machine count or subnet, naming the value.
    """
    errors = []
    if not _PAIR_RE.match(pair):
        errors.append(
            f"pair name {pair!r}: use 1-10 lowercase letters, digits and dashes, starting with a "
            "letter (it prefixes namespace and interface names, at most 15 bytes)"
        )
    if not 2 <= len(machines) <= 26 or len(set(machines)) != len(machines):
        errors.append(f"machines {list(machines)}: 2 to 26 distinct names")
    try:
        net = ipaddress.ip_network(subnet)
    except ValueError:
        net = None
    if net is None or net.version != 4 or net.num_addresses < 8 + len(RELAYED_HOSTS):
        errors.append(f"subnet {subnet!r}: an IPv4 network such as 10.77.0.0/24")
    elif not net.is_private:
        errors.append(f"subnet {subnet!r}: a private network (RFC 1918), never a routed one")
    if errors:
        raise LabError("the lab pair cannot be planned: " + "; ".join(errors))
    hosts = list(net.hosts())
    letters = "abcdefghijklmnopqrstuvwxyz"
    rigs = tuple(
        Rig(
            name=m, netns=f"{pair}-{letters[i]}", address=str(hosts[i]), port=f"{pair}-{letters[i]}"
        )
        for i, m in enumerate(machines)
    )
    relayed = {name: str(hosts[-2 - i]) for i, name in enumerate(RELAYED_HOSTS)}
    return PairNet(
        pair=pair,
        subnet=str(net),
        rigs=rigs,
        link_netns=f"{pair}-link",
        controller=str(hosts[-1]),
        relayed=relayed,
    )


def up_argvs(net: PairNet) -> list[list[str]]:
    """The ``ip`` command lines that make the pair's network from nothing, in order."""
    link = net.link_netns
    n = net.prefixlen
    argvs = [["ip", "netns", "add", ns] for ns in net.namespaces]
    argvs += [
        ["ip", "-n", link, "link", "set", "lo", "up"],
        ["ip", "-n", link, "link", "add", BRIDGE, "type", "bridge"],
        ["ip", "-n", link, "addr", "add", f"{net.controller}/{n}", "dev", BRIDGE],
    ]
    argvs += [
        ["ip", "-n", link, "addr", "add", f"{addr}/32", "dev", BRIDGE]
        for addr in net.relayed.values()
    ]
    argvs.append(["ip", "-n", link, "link", "set", BRIDGE, "up"])
    for rig in net.rigs:
        argvs += [
            ["ip", "-n", link, "link", "add", rig.port, "type", "veth", "peer", "name", RIG_IFNAME,
             "netns", rig.netns],
            ["ip", "-n", link, "link", "set", rig.port, "master", BRIDGE],
            ["ip", "-n", link, "link", "set", rig.port, "up"],
            ["ip", "-n", rig.netns, "link", "set", "lo", "up"],
            ["ip", "-n", rig.netns, "addr", "add", f"{rig.address}/{n}", "dev", RIG_IFNAME],
            ["ip", "-n", rig.netns, "link", "set", RIG_IFNAME, "up"],
        ]  # fmt: skip
    return argvs


def leftover_namespaces(net: PairNet, existing: list[str]) -> list[str]:
    """The pair's namespaces among ``existing`` (the names in /run/netns): what an interrupted
    run left, to delete before a new one (their veths and bridge go with them)."""
    mine = set(net.namespaces)
    return [ns for ns in existing if ns in mine]


def down_argvs(namespaces: list[str]) -> list[list[str]]:
    """The command lines that delete ``namespaces`` (each takes its interfaces with it: a veth
    dies with either end, the bridge with its namespace)."""
    return [["ip", "netns", "delete", ns] for ns in namespaces]


def relay_routes(net: PairNet, ssh_ports: dict[str, int]) -> list[dict]:
    """The routes of the pair's relay (:mod:`lab.relay`), as dicts for its spec file.

    ``ssh_ports``: each rig's SSH port (by lab machine name): the controller's
    ``127.0.0.1:<port>`` reaches that rig's sshd on ``<address>:<port>``, the same port inside, so
    the rig's firewall (roles/cluster/firewall.py opens ``ssh_port`` on the private address) and
    known_hosts agree with the inventory. Then one route per relayed archive and port.
    """
    routes = [
        {
            "listen_ns": "",
            "listen": ["127.0.0.1", ssh_ports[rig.name]],
            "connect_ns": net.link_netns,
            "connect": [rig.address, ssh_ports[rig.name]],
        }
        for rig in net.rigs
    ]
    routes += [
        {
            "listen_ns": net.link_netns,
            "listen": [addr, port],
            "connect_ns": "",
            "connect": [name, port],
        }
        for name, addr in net.relayed.items()
        for port in RELAYED_PORTS
    ]
    return routes
