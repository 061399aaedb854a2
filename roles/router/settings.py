"""Rules for the router role's settings (inventory/group_data/all.py, "Router")."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roles.common.checks import (
    UNIX_NAME,
    boolean,
    choice,
    host_address,
    integer,
    matches,
    service_port,
)
from roles.common.locks import version_check
from roles.common.setting import Setting, TypedSettings, declared, optional, rules, setting

FILES = Path(__file__).resolve().parents[2] / "files" / "router"
LOCK = FILES / "requirements.lock"

#: The routing policies rigup offers, of those vllm-router 0.1.17 has (``--policy`` choices in
#: vllm_router/router_args.py: random, round_robin, cache_aware, kv_aware, power_of_two,
#: consistent_hash, sticky_least_loaded). cache_aware sends a prompt to the replica whose radix
#: tree of earlier prompts shares the longest prefix with it (vLLM's prefix cache then reuses
#: that replica's KV blocks), and to the least loaded one once the loads drift apart; kv_aware
#: needs KV events from the engines and PD mode, power_of_two needs 2 replicas or more
#: (vllm_router_rs: "Power-of-two policy requires at least 2 workers").
POLICIES = ("cache_aware", "round_robin", "power_of_two", "random")

#: An inventory group name (pyinfra: a Python identifier in inventory/*.py).
GROUP_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


@dataclass(frozen=True)
class RouterSettings(TypedSettings):
    """The router role's settings, each declared once: name, the type code reads, check.
    Defaults, meaning and sources: inventory/group_data/all.py ("Router").
    ``RouterSettings.of(host.data)`` reads them into typed attributes."""

    router_enabled: bool = setting(boolean)
    router_version: str = setting(version_check(LOCK, "vllm-router", "router_version"))
    router_user: str = setting(matches(UNIX_NAME, "a Unix user name (lowercase, max 32 chars)"))
    router_host: str = setting(host_address)
    router_port: int = setting(service_port)
    router_metrics_port: int = setting(service_port)
    router_start_timeout_s: int = setting(integer(5, 3600))
    router_replica_startup_timeout_s: int = setting(integer(1, 3600))
    router_replica_group: str = setting(
        matches(GROUP_NAME, "the name of the inventory group of replica rigs (an identifier)")
    )
    #: on a replica rig: the address the router reaches its vLLM at (None: its inventory name)
    router_replica_address: str | None = setting(host_address, optional=True)
    #: on a replica rig: its vLLM port answers the router rigs only (roles/router/firewall.py)
    router_replica_firewall: bool = setting(boolean)
    router_policy: str = setting(choice(POLICIES))
    router_health_check_interval_s: int = setting(integer(1, 3600))
    router_health_failure_threshold: int = setting(integer(1, 100))
    router_health_check_timeout_s: int = setting(integer(1, 600))


SETTINGS: tuple[Setting, ...] = declared(RouterSettings)

RULES = rules(SETTINGS)
OPTIONAL: tuple[str, ...] = optional(SETTINGS)


def consistency(values: Mapping[str, Any]) -> list[str]:
    """Rules over several keys, when the router is enabled: ``router_health_check_timeout_s``
    below ``router_health_check_interval_s`` (vllm-router checks every interval, each check
    waiting up to the timeout: vllm_router/router_args.py, so a check ends before the next),
    ``router_replica_startup_timeout_s`` below ``router_start_timeout_s`` (vllm-router waits
    that long for every replica's /health before it serves, then serves the healthy ones:
    measured with one replica down, tests/router), ``router_metrics_port`` not ``router_port``,
    and ``router_port`` none of this rig's installed GPU services' ports (roles/services.py)."""
    if not values["router_enabled"]:
        return []
    from roles import services  # the GPU services' footprints (they never import this role)

    problems = []
    timeout = values["router_health_check_timeout_s"]
    interval = values["router_health_check_interval_s"]
    if timeout >= interval:
        problems.append(
            f"router_health_check_timeout_s: {timeout} s is not below "
            f"router_health_check_interval_s ({interval} s); a check must end before the next"
        )
    wait, start = values["router_replica_startup_timeout_s"], values["router_start_timeout_s"]
    if wait >= start:
        problems.append(
            f"router_replica_startup_timeout_s: {wait} s is not below router_start_timeout_s "
            f"({start} s); systemd would stop the router while it waits for a replica"
        )
    port = values["router_port"]
    if values["router_metrics_port"] == port:
        problems.append(
            f"router_metrics_port: {port} is router_port too; the metrics need a port of their own"
        )
    for service in services.SERVICES:
        if service.installed(values) and values.get(service.keys.port) == port:
            problems.append(
                f"router_port: {port} is {service.keys.port} too; give the router its own port"
            )
    return problems
