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
