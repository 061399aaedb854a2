"""A bad cluster of rigs is refused by the real pyinfra CLI before any change, every problem of
every rig at once (inventory/rigs.py on @fake hosts: tests/plans/rigs_inventory.py)."""

from __future__ import annotations

import json
import os
import subprocess

from tests.plans.test_plans import PYINFRA, REPO


def dry_run(overrides: dict) -> subprocess.CompletedProcess:
    """`pyinfra tests/plans/rigs_inventory.py deploys/full.py --dry` with host overrides."""
    return subprocess.run(
        [
            str(PYINFRA),
            "tests/plans/rigs_inventory.py",
            "--dry",
            "deploys/full.py",
            "--group-data",
            "inventory/group_data",
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
