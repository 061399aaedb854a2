"""The replica rigs behind the router, derived from the inventory: each rig of the group
``router_replica_group`` serves the model with its own vLLM (``vllm_host``, ``vllm_port``), and
the router reaches it at ``http://<address>:<vllm_port>``, ``address`` being the rig's
``router_replica_address`` when set, else its inventory name (what pyinfra connects to)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

from roles.common.checks import host_address

#: Addresses a vLLM bound there cannot be reached from another rig on.
LOOPBACK = ("127.0.0.1", "::1", "localhost")


def replica_urls(
    rigs: Iterable[tuple[str, Mapping[str, Any] | Any]],
) -> tuple[list[str], list[str]]:
    """``([url, ...], [problem, ...])`` for the replica rigs ``rigs``: ``(inventory name,
    settings)`` pairs (``host.data`` or a mapping), in inventory order.

    Each url is ``http://<address>:<vllm_port>`` (an IPv6 address in brackets). A problem names
    the rig and the key: a vLLM bound to loopback (``vllm_host``), which no router on another
    rig reaches; a bad ``router_replica_address``; a rig without ``vllm_port``; two rigs at the
    same address and port; no rig at all. Raises nothing: the caller refuses the run with every
    problem at once.
    """
    urls: list[str] = []
    problems: list[str] = []
    seen: dict[str, str] = {}
    for name, data in rigs:
        address = data.get("router_replica_address") or name
        port = data.get("vllm_port")
        bind = data.get("vllm_host")
        if data.get("router_replica_address") is not None and host_address(address):
            problems.append(f"{name}: router_replica_address: {host_address(address)}")
            continue
        if not isinstance(port, int) or isinstance(port, bool):
            problems.append(f"{name}: vllm_port: a replica rig needs its vLLM port, got {port!r}")
            continue
        if bind in LOOPBACK:
            problems.append(
                f"{name}: vllm_host: {bind} is loopback, the router cannot reach it; bind vLLM "
                "to the address the router uses (vllm_api_key then required)"
            )
            continue
        host = f"[{address}]" if ":" in address else address
        url = f"http://{host}:{port}"
        if url in seen:
            problems.append(f"{name}: router_replica_address: {url} is {seen[url]}'s too")
            continue
        seen[url] = name
        urls.append(url)
    if not urls and not problems:
        problems.append("router_replica_group: the group has no rig")
    return urls, problems


def router_addresses(
    replica: str, routers: Iterable[tuple[str, Mapping[str, Any] | Any]]
) -> tuple[list[str], list[str]]:
    """``([address, ...], [problem, ...])``: the addresses replica rig ``replica``'s firewall
    (roles/router/firewall.py) lets its vLLM port in from, one per router rig of ``routers``
    (``(inventory name, settings)`` of the rigs with ``router_enabled`` whose
    ``router_replica_group`` holds ``replica``).

    A router rig's address is its ``router_replica_address``, its IP address on the replicas'
    link (the source of its requests; on a router rig that is a replica too, also where the
    router reaches its own vLLM). A problem names the router rig and the key: an address that is
    unset or no IP literal (nftables matches addresses, not names). Raises nothing: the caller
    refuses the run with every problem at once.
    """
    addresses: list[str] = []
    problems: list[str] = []
    for name, data in routers:
        address = data.get("router_replica_address")
        try:
            ipaddress.ip_address(address if isinstance(address, str) else "")
        except ValueError:
            problems.append(
                f"{name}: router_replica_address: {address!r}; a router rig in front of a "
                f"replica with router_replica_firewall ({replica}) needs its IP address on the "
                "replicas' link (the source of its requests), e.g. '10.10.0.1'"
            )
            continue
        addresses.append(address)
    return addresses, problems
