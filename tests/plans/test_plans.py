"""Plans of the main deploy on @fake hosts: what a run would do, and what it refuses, without a
machine. Runs the real CLI: `pyinfra <inventory> deploys/full.py --dry --json`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PYINFRA = Path(sys.executable).parent / "pyinfra"


def run_pyinfra(scenario: str, *args: str) -> subprocess.CompletedProcess:
    """The pyinfra CLI on the @fake host of ``scenario``, with the shipped settings."""
    return subprocess.run(
        [
            str(PYINFRA),
            *args[:1],
            "tests/plans/inventory.py",
            *args[1:],
            "--group-data",
            "inventory/group_data",
        ],
        cwd=REPO,
        env={**os.environ, "RIGUP_PLAN_SCENARIO": scenario, "PYINFRA_FAKE_DELAY": "0"},
        capture_output=True,
        text=True,
        timeout=180,
    )


def plan(scenario: str, deploy: str = "deploys/full.py") -> tuple[int, dict | None, str]:
    """Run a dry plan for a scenario: (exit code, parsed JSON or None, stderr)."""
    proc = run_pyinfra(scenario, "--dry", deploy, "--json")
    parsed = json.loads(proc.stdout) if proc.returncode == 0 else None
    return proc.returncode, parsed, proc.stderr


def changes(parsed: dict) -> list[str]:
    return [op["name"] for op in parsed["plan"] if op["hosts_with_change"]]


def conditional(parsed: dict) -> list[str]:
    return [op["name"] for op in parsed["plan"] if op["hosts_with_conditional_change"]]


@pytest.fixture(scope="module")
def fresh_rig():
    rc, parsed, err = plan("fresh_rig")
    assert rc == 0, err
    return parsed


def test_fresh_rig_plans_every_component_in_order(fresh_rig):
    names = changes(fresh_rig)
    order = [
        "rigup base | Install the apt baseline",
        "rigup base | Install uv 0.13.9 (found: none)",
        "LLM checkpoint | Place checkpoint qwen3.6-27b-int4-autoround@mirror-2026-11",
        "LLM checkpoint | Text-only edit of config.json (language_model_only)",
        "vLLM | Service user vllm",
        "vLLM | vLLM 0.22.1 venv (uv, locked)",
        "vLLM | Check the serve arguments with vLLM's own parser",
        "vLLM | Check the checkpoint is served text-only (language_model_only) with vLLM's config code",
        "vLLM | Unit vllm.service",
        "vLLM | vllm.service enabled in rigup-llm.target (runs in the llm mode)",
        "ComfyUI | ComfyUI 0.8.0 source at fc0cb10bcbee",
        "ComfyUI | ComfyUI venv (uv, locked)",
        "ComfyUI | Check the main.py arguments with the pinned ComfyUI's own parser",
        "ComfyUI | Unit comfyui.service",
        "ComfyUI | comfyui.service enabled in rigup-media.target (runs in the media mode)",
        "GPU modes | Unit rigup-llm.target",
        "GPU modes | Unit rigup-media.target",
        "GPU modes | Switch command rigup-mode",
        "GPU modes | rigup-llm.target is the boot mode",
        "GPU modes | A mode is running (llm when none is)",
    ]
    assert [n for n in names if n in order] == order


def test_fresh_rig_reloads_only_on_change(fresh_rig):
    assert "vLLM | systemd daemon-reload" in conditional(fresh_rig)
    assert "ComfyUI | systemd daemon-reload" in conditional(fresh_rig)


@pytest.mark.parametrize(
    "scenario,why",
    [("fresh_no_gpu", "declares no NVIDIA GPUs"), ("fresh_rig_no_driver", "has no NVIDIA driver")],
)
def test_host_without_gpus_or_driver_installs_but_does_not_start(scenario, why):
    rc, parsed, err = plan(scenario)
    assert rc == 0, err
    names = changes(parsed) + conditional(parsed)
    assert "vLLM | vllm.service installed, not started (no GPUs or no driver)" in [
        op["name"] for op in parsed["plan"]
    ]
    assert not any("enabled in rigup-llm.target" in n or "Restart" in n for n in names)
    assert why in err and "not started" in err


@pytest.mark.parametrize(
    "scenario,message",
    [
        ("bad_kv_cache_dtype", "vllm_kv_cache_dtype: must be one of"),
        ("too_few_gpus", "vllm_tensor_parallel_size: 2 is more than the 1 GPU(s)"),
        (
            "missing_model_source",
            "model_local_path: /srv/mirror/Qwen3.6-27B-int4-AutoRound does not exist",
        ),
        ("not_a_checkpoint", "has no config.json"),
        ("no_systemd", "systemd is not running as PID 1"),
        ("not_root", "not root: connect as root or add --sudo"),
    ],
)
def test_refused_before_any_change(scenario, message):
    """Bad input stops the run while operations are prepared: no operation is ever executed."""
    proc = run_pyinfra(scenario, "-y", "deploys/full.py")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert message in out, out
    assert "nothing was changed" in out
    assert "Beginning operation run" not in out, "operations ran before the error"


@pytest.mark.parametrize("component", ["base", "model", "vllm", "comfyui", "modes"])
def test_each_component_deploy_plans_alone(component):
    rc, parsed, err = plan("fresh_rig", f"deploys/{component}.py")
    assert rc == 0, err
    assert changes(parsed), f"deploys/{component}.py planned nothing on a fresh host"
