"""Plans of the VoxCPM2 deploy on @fake hosts: what a run would do, what it refuses."""

from __future__ import annotations

import pytest

from tests.plans.test_plans import assert_refused_before_any_change, changes, plan

CPYTHON = "VoxCPM2 | CPython 3.12.16 (uv managed Python) for VoxCPM2"
VENV = "VoxCPM2 | VoxCPM2 venv (voxcpm 2.0.3, Python 3.12.16; uv, locked)"


def test_fresh_rig_plans_voxcpm_after_vllm_in_order(fresh_rig):
    names = changes(fresh_rig)
    order = [
        "vLLM | vllm.service enabled in rigup-llm.target (runs in the llm mode)",
        "VoxCPM2 | Place model voxcpm2@unverified-2026-11",
        "VoxCPM2 | Service user voxcpm",
        CPYTHON,
        VENV,
        "VoxCPM2 | VoxCPM2 HTTP server (voxcpm_server.py)",
        "VoxCPM2 | VoxCPM2 environment file",
        "VoxCPM2 | Unit voxcpm.service",
        "VoxCPM2 | voxcpm.service enabled in rigup-media.target (runs in the media mode)",
    ]
    assert [n for n in names if n in order] == order
    # restarted only if it runs (the mode starts it): planned, nothing to restart on a fresh rig
    assert "VoxCPM2 | Restart voxcpm.service if running (its inputs changed)" in [
        op["name"] for op in fresh_rig["plan"]
    ]


def test_voxcpm_deploy_plans_alone_and_firewalled_rig_plans_the_same():
    for scenario in ("fresh_rig", "voxcpm_firewalled"):
        rc, parsed, err = plan(scenario, "deploys/voxcpm.py")
        assert rc == 0, err
        assert CPYTHON in changes(parsed)


def test_host_without_gpus_installs_voxcpm_but_does_not_start_it():
    rc, parsed, err = plan("fresh_no_gpu")
    assert rc == 0, err
    names = [op["name"] for op in parsed["plan"]]
    assert "VoxCPM2 | voxcpm.service installed, not started (no GPUs or no driver)" in names
    assert "VoxCPM2 | voxcpm.service enabled and running" not in names
    assert "VoxCPM2: this host declares no NVIDIA GPUs" in err


@pytest.mark.parametrize(
    "scenario,message",
    [
        (
            "voxcpm_python_out_of_range",
            "voxcpm_python_version: must be an exact CPython 3.11.x-3.12.x release",
        ),
        ("voxcpm_gpu_index_missing", "voxcpm_gpu_index: GPU 2 does not exist"),
        (
            "voxcpm_no_model_copy",
            "model voxcpm2@unverified-2026-11: no copy found under /srv/mirror",
        ),
    ],
)
def test_voxcpm_refused_before_any_change(scenario, message):
    assert_refused_before_any_change(scenario, message)


def test_venv_built_on_another_python_is_rebuilt():
    rc, parsed, err = plan("voxcpm_venv_on_old_python", "deploys/voxcpm.py")
    assert rc == 0, err
    names = changes(parsed)
    remove = "VoxCPM2 | Remove the venv built on Python 3.11.9 (now 3.12.16)"
    assert remove in names
    assert names.index(remove) < names.index(VENV)
