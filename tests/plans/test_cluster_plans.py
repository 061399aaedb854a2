"""A bad cluster of rigs is refused by the real pyinfra CLI before any change, every problem of
every rig at once (inventory/rigs.py on @fake hosts: tests/plans/rigs_inventory.py)."""

from __future__ import annotations

import json
import os
import subprocess

from tests.plans.test_plans import PYINFRA, REPO


def dry_run(
    overrides: dict, deploy: str = "deploys/full.py", *extra: str
) -> subprocess.CompletedProcess:
    """`pyinfra tests/plans/rigs_inventory.py <deploy> --dry` with host overrides."""
    return subprocess.run(
        [
            str(PYINFRA),
            "tests/plans/rigs_inventory.py",
            "--dry",
            deploy,
            "--group-data",
            "inventory/group_data",
            *extra,
        ],
        cwd=REPO,
        env={
            **os.environ,
            "RIGUP_PLAN_RIGS": json.dumps(overrides),
            "PYINFRA_FAKE_DELAY": "0",
        },
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_a_bad_group_inventory_is_refused_before_any_change_naming_rig_and_key():
    proc = dry_run(
        {
            "rig-b.local": {"vllm_node_rank": 0, "cluster_private_ifname": "no such name!"},
            "rig-a.local": {"vllm_max_model_len": 4096},
        }
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "invalid cluster of rigs in the inventory (nothing was changed on any host)" in out
    for want in (
        "@fake/rig-b.local: cluster_private_ifname: must be a network interface name",
        "@fake/rig-a.local: vllm_override_generation_config: max_new_tokens 32768 leaves no room",
        "vllm_node_rank: @fake/rig-a.local and @fake/rig-b.local are all rank 0",
        "@fake/rig-b.local: vllm_max_model_len: 262144, but the leader @fake/rig-a.local has 4096",
    ):
        assert want in out, (want, out)
    assert "Unit vllm.service" not in out


def _changed(proc: subprocess.CompletedProcess) -> dict[str, list[str]]:
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)["plan"]
    return {op["name"]: op["hosts_with_change"] for op in plan}


RIGS = ["@fake/rig-a.local", "@fake/rig-b.local"]


def test_the_pair_plans_its_firewall_and_supervisor_on_every_rig():
    changed = _changed(dry_run({}, "deploys/cluster.py", "--json"))
    for name in (
        "Cluster | nftables (Ubuntu's own)",
        "Cluster | Firewall table inet rigup_cluster (peer rigs only on the private link)",
        "Cluster | Unit rigup-cluster-firewall.service",
        "Cluster | Supervisor rigup-cluster-watch",
        "Cluster | Unit rigup-cluster-watch.timer",
        "Cluster | rigup-cluster-watch.timer running",
    ):
        assert changed[name] == RIGS, (name, changed)


def test_limit_converges_one_rig_and_still_checks_the_whole_cluster():
    changed = _changed(dry_run({}, "deploys/cluster.py", "--json", "--limit", RIGS[1]))
    assert changed["Cluster | Supervisor rigup-cluster-watch"] == [RIGS[1]]
    # the rig left out of the run is still read: its bad value refuses the limited run
    proc = dry_run({"rig-a.local": {"vllm_node_rank": 1}}, "deploys/cluster.py", "--limit", RIGS[1])
    assert proc.returncode != 0
    assert "no rig is the leader (rank 0)" in proc.stdout + proc.stderr


def test_a_firewall_left_off_is_not_installed():
    changed = _changed(
        dry_run(
            {n: {"cluster_firewall": False} for n in ("rig-a.local", "rig-b.local")},
            "deploys/cluster.py",
            "--json",
        )
    )
    assert "Cluster | nftables (Ubuntu's own)" not in changed
    assert changed["Cluster | Supervisor rigup-cluster-watch"] == RIGS


def test_a_rig_alone_plans_nothing_of_a_cluster(fresh_rig):
    cluster_ops = [op for op in fresh_rig["plan"] if op["name"].startswith("Cluster |")]
    assert cluster_ops and not any(op["hosts_with_change"] for op in cluster_ops), cluster_ops
