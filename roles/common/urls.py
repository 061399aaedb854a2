"""Addresses and URLs of services: whether a bind address is loopback, and the URL a service
is probed on from the host it runs on. Pure, standard library only."""

from __future__ import annotations

import ipaddress


def is_loopback(address: str) -> bool:
    """True for an address only this host reaches (127.0.0.0/8, ::1, localhost)."""
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:  # a host name: may resolve anywhere
        return False


def local_probe_url(bind: str, port: int | str, path: str) -> str:
    """``http://<address>:<port><path>`` for a service bound to ``bind``, seen from its own host.

    A wildcard bind (``0.0.0.0``, ``::``, empty) is probed on 127.0.0.1; an IPv6 address is
    bracketed. Example: ``local_probe_url("0.0.0.0", 8188, "/system_stats")`` ->
    ``"http://127.0.0.1:8188/system_stats"``.
    """
    return f"http://{local_probe_address(bind)}:{port}{path}"


def local_probe_address(bind: str) -> str:
    """The address a service bound to ``bind`` is reached at from its own host: 127.0.0.1 for a
    wildcard bind, else ``bind`` (an IPv6 address bracketed, as URLs and ``ssh -L`` write it)."""
    probe = "127.0.0.1" if bind in ("0.0.0.0", "::", "") else bind
    return f"[{probe}]" if ":" in probe else probe


#: Bind addresses that take a port on every address of the host.
WILDCARDS = ("0.0.0.0", "::", "*", "")


def binds_overlap(bind: str, address: str) -> bool:
    """True when a server binding ``bind`` cannot listen on a port that a socket on ``address``
    holds: either is a wildcard, both are the same address, or ``bind`` is a host name (it may
    resolve to any address). ``localhost`` is 127.0.0.1 and ::1."""
    bind, address = bind.strip("[]"), address.strip("[]")
    if bind in WILDCARDS or address in WILDCARDS:
        return True
    candidates = ("127.0.0.1", "::1") if bind == "localhost" else (bind,)
    try:
        held = ipaddress.ip_address(address)
        return any(ipaddress.ip_address(c) == held for c in candidates)
    except ValueError:  # a host name
        return True


def port_holders(sockets: list[dict], bind: str, port: int, unit: str) -> list[str]:
    """Who holds ``port`` where a server of ``unit`` binding ``bind`` would listen, other than
    ``unit`` itself: ``["sshd (pid 512, ssh.service) on 127.0.0.1:2222"]``. ``sockets`` is the
    ListeningSockets fact (roles/common/facts.py)."""
    holders = []
    for sock in sockets:
        if sock["port"] != port or not binds_overlap(bind, sock["address"]):
            continue
        procs = sock["processes"]
        if any(p["unit"] == unit for p in procs):
            continue
        where = f"[{sock['address']}]" if ":" in sock["address"] else sock["address"]
        who = ", ".join(
            f"{p['name']} (pid {p['pid']}{', ' + p['unit'] if p['unit'] else ''})" for p in procs
        )
        holders.append(
            f"{who or 'a process this host does not show (another container or namespace sharing its network)'}"
            f" on {where}:{port}"
        )
    return sorted(set(holders))
