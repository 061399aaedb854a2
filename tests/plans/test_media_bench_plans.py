"""rigup-bench's media rows in the plan: the ComfyUI role places rigup's shipped workflows and
doctor.json tells rigup-bench ComfyUI's URL and their directory, only where comfyui_install is
on (@fake hosts of tests/plans/scenarios.py)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.plans.test_plans import PYINFRA, REPO, changes, plan

SHIPPED = sorted(p.name for p in (REPO / "files" / "comfyui" / "workflows").glob("*.json"))
WORKFLOWS = "/etc/rigup/comfyui/workflows"


def planned_doctor_json(scenario: str, tmp_path: Path) -> dict:
    """The doctor.json the doctor deploy plans on ``scenario`` (tests/plans/deploys/
    doctor_json.py writes the upload's content)."""
    out = tmp_path / "doctor.json"
    proc = subprocess.run(
        [
            str(PYINFRA),
            "tests/plans/inventory.py",
            "tests/plans/deploys/doctor_json.py",
            "--dry",
            "--group-data",
            "inventory/group_data",
        ],
        cwd=REPO,
        env={
            **os.environ,
            "RIGUP_PLAN_SCENARIO": scenario,
            "PYINFRA_FAKE_DELAY": "0",
            "RIGUP_PLAN_OUT": str(out),
        },
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text())


def test_the_shipped_workflows_are_placed_before_doctor_json(fresh_rig):
    assert SHIPPED == ["flux2-dev-t2i.json", "ltx-2.3-t2v.json"]
    names = changes(fresh_rig)
    placed = [
        f"ComfyUI | Directory {WORKFLOWS}",
        *(f"ComfyUI | Workflow {name}" for name in SHIPPED),
    ]
    assert [n for n in names if n in placed] == placed
    doctor_json = next(n for n in names if n.startswith("Doctor | doctor.json"))
    assert names.index(placed[-1]) < names.index(doctor_json)


def test_a_rig_without_comfyui_gets_no_workflows():
    rc, parsed, err = plan("comfyui_not_installed")
    assert rc == 0, err
    assert not [n for n in changes(parsed) if "Workflow" in n or WORKFLOWS in n]


@pytest.mark.parametrize(
    ("scenario", "media"),
    [
        (
            "fresh_rig",
            {
                "unit": "comfyui.service",
                "mode": "media",
                "target": "rigup-media.target",
                "url": "http://127.0.0.1:8188",
                "workflows": WORKFLOWS,
            },
        ),
        ("comfyui_not_installed", None),
    ],
)
def test_doctor_json_carries_the_media_fields_where_comfyui_is_installed(scenario, media, tmp_path):
    config = planned_doctor_json(scenario, tmp_path)
    assert config.get("media") == media
    assert config["bench"]["rows"]  # the LLM rows stay
