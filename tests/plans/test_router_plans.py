"""Plans of the router deploy on @fake hosts (tests/plans/router_inventory.py): the router rig
installs and starts router.service in front of the replica group; the replicas, with the router
off, plan nothing of it; bad replicas are refused before any change, naming the rig and key."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.plans.test_plans import PYINFRA, REPO


def _plan(variant: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            str(PYINFRA),
            "--dry",
            "tests/plans/router_inventory.py",
            "deploys/router.py",
            "--json",
            "--group-data",
            "inventory/group_data",
        ],
        cwd=REPO,
        env={**os.environ, "RIGUP_ROUTER_PLAN": variant, "PYINFRA_FAKE_DELAY": "0"},
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_router_rig_plans_the_router_replicas_plan_nothing():
    proc = _plan("ok")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)["plan"]
    on = {op["name"]: op for op in plan}
    order = [
        "vLLM router | Service user vllm-router",
        "vLLM router | vLLM router venv (vllm-router 0.1.17; uv, locked)",
        "vLLM router | vLLM router environment file",
        "vLLM router | Unit router.service",
        "vLLM router | router.service enabled at boot and running",
    ]
    names = [op["name"] for op in plan if op["hosts_with_change"]]
    assert [n for n in names if n in order] == order
    assert not any("rigup-llm.target" in n or "rigup-media.target" in n for n in on)
    for name in order:
        assert on[name]["hosts_with_change"] == ["@fake/router"], on[name]
    assert "router_enabled is False; not installed" in proc.stderr


@pytest.mark.parametrize(
    ("variant", "message"),
    [
        ("loopback", "@fake/rig-b: vllm_host: 127.0.0.1 is loopback"),
        ("no_group", "router_replica_group: no inventory group 'nowhere'"),
        ("unaddressed", "@fake/router: router_replica_address: None; a router rig in front"),
    ],
)
def test_bad_replicas_are_refused_before_any_change(variant, message):
    proc = _plan(variant)
    assert proc.returncode != 0
    assert message in proc.stderr + proc.stdout
    assert "Service user vllm-router" not in proc.stdout


def test_each_replica_plans_its_firewall_the_router_rig_none():
    proc = _plan("ok")
    assert proc.returncode == 0, proc.stderr
    on = {op["name"]: op for op in json.loads(proc.stdout)["plan"]}
    replicas = ["@fake/rig-a", "@fake/rig-b"]  # the router rig is no replica: nothing to guard
    prefix = "Replica firewall | "
    for name in (
        "Firewall table inet rigup_replica (vLLM port 8000: the router rigs only)",
        "Unit rigup-replica-firewall.service",
        "rigup-replica-firewall.service enabled and running",
    ):
        assert on[prefix + name]["hosts_with_change"] == replicas, on[prefix + name]
    loaded = on[prefix + "rigup-replica-firewall.service enabled and loaded"]
    assert loaded["hosts_with_conditional_change"] == replicas, loaded
