"""URLs of services as probed from the host they run on."""

from __future__ import annotations


def local_probe_url(bind: str, port: int | str, path: str) -> str:
    """``http://<address>:<port><path>`` for a service bound to ``bind``, seen from its own host.

    A wildcard bind (``0.0.0.0``, ``::``, empty) is probed on 127.0.0.1; an IPv6 address is
    bracketed. Example: ``local_probe_url("0.0.0.0", 8188, "/system_stats")`` ->
    ``"http://127.0.0.1:8188/system_stats"``.
    """
    probe = "127.0.0.1" if bind in ("0.0.0.0", "::", "") else bind
    if ":" in probe:
        probe = f"[{probe}]"
    return f"http://{probe}:{port}{path}"
