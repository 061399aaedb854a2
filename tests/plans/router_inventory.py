"""A pyinfra inventory for the router's plans (tests/plans/test_router_plans.py): the @fake host
``router`` with the router enabled, and the group ``replicas`` of two @fake rigs serving vLLM
beyond loopback; each answers like the fresh_rig scenario (tests/plans/scenarios.py).
RIGUP_ROUTER_PLAN picks a variant: ``ok``, ``loopback`` (rig-b's vLLM bound to 127.0.0.1),
``no_group`` (router_replica_group names no group), ``unaddressed`` (the router rig has no
``router_replica_address``: the replicas' firewall cannot let it in)."""

import os

from tests.plans.scenarios import SCENARIOS

_variant = os.environ.get("RIGUP_ROUTER_PLAN", "ok")
_responses, _overrides = SCENARIOS["fresh_rig"]()
_fake = {"fake_delay": 0, "fake_delay_jitter": 0, "fake_responses": _responses, **_overrides}

routers = [
    (
        "@fake/router",
        {
            **_fake,
            "router_enabled": True,
            "router_replica_group": "nowhere" if _variant == "no_group" else "replicas",
            # the source of its requests on the replicas' link (their firewall lets it in)
            "router_replica_address": None if _variant == "unaddressed" else "10.10.0.9",
        },
    )
]
replicas = [
    ("@fake/rig-a", {**_fake, "vllm_host": "0.0.0.0", "router_replica_address": "10.10.0.1"}),
    (
        "@fake/rig-b",
        {
            **_fake,
            "vllm_host": "127.0.0.1" if _variant == "loopback" else "0.0.0.0",
            "router_replica_address": "10.10.0.2",
        },
    ),
]
