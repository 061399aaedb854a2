"""URLs of services as probed from the host they run on."""

from __future__ import annotations


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
