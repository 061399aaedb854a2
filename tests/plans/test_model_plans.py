"""Model acquisition plans on @fake hosts: the Hugging Face token never reaches
pyinfra's output, even fully verbose with diffs, and what a fresh host would run."""

from __future__ import annotations

import os
import subprocess

from tests.plans.test_plans import PYINFRA, REPO, changes, plan

TOKEN = "hf_tOkEnThatMustNeverBePrinted0123"


def test_token_never_appears_in_pyinfra_output():
    """A real (fake-connector) execution with every debug switch: the secret_file upload and the
    fetch command must show the token's file, never its value."""
    proc = subprocess.run(
        [
            str(PYINFRA),
            "-y",
            "-vvv",
            "--debug",
            "--diff",
            "tests/plans/inventory.py",
            "deploys/model.py",
            "--group-data",
            "inventory/group_data",
        ],
        cwd=REPO,
        env={
            **os.environ,
            "RIGUP_PLAN_SCENARIO": "fresh_rig_run",
            "PYINFRA_FAKE_DELAY": "0",
            "HF_TOKEN": TOKEN,
        },
        capture_output=True,
        text=True,
        timeout=180,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "Hugging Face token from $HF_TOKEN (0600)" in out
    assert "/etc/rigup/model/secrets/hf-token" in out
    assert TOKEN not in out
    assert TOKEN[3:12] not in out


def test_fresh_rig_places_the_llm_with_the_tool_venv_first(monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    rc, parsed, err = plan("fresh_rig", "deploys/model.py")
    assert rc == 0, err
    names = changes(parsed)
    order = [
        "Model tool | Directory /etc/rigup/model/secrets",
        "Model tool | Model tool venv (huggingface_hub, hf_xet, modelscope; uv, locked)",
        "Model tool | Script model_fetch.py",
        "LLM checkpoint | Manifest qwen3.6-27b-int4-autoround (JSON for model_fetch.py)",
        "LLM checkpoint | Place model qwen3.6-27b-int4-autoround@mirror-2026-11",
    ]
    assert [n for n in names if n in order] == order
    # no token in the controller's environment: the token file is left alone
    assert "Model tool | Hugging Face token from $HF_TOKEN (0600)" not in names


def test_a_failing_transfer_fails_the_run_with_its_message():
    proc = subprocess.run(
        [str(PYINFRA), "-y", "tests/plans/inventory.py", "deploys/model.py"]
        + ["--group-data", "inventory/group_data"],
        cwd=REPO,
        env={**os.environ, "RIGUP_PLAN_SCENARIO": "fetch_fails", "PYINFRA_FAKE_DELAY": "0"},
        capture_output=True,
        text=True,
        timeout=180,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "config.json: sha256 0000, 1111 expected" in out  # printed as it came, no -v needed
    after = out.split("Starting operation: LLM checkpoint | Place model")[1]
    assert "Error" in after and "Text-only edit" not in after, "the run went on after the failure"


def test_a_component_places_its_manifest_and_links_the_files(monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    rc, parsed, err = plan("fresh_rig", "tests/plans/deploys/model_links.py")
    assert rc == 0, err
    names = changes(parsed)
    prefix = "Component with models | "
    assert prefix + "Place model tiny-comfy@test-1" in names
    assert prefix + "Directory /opt/comfy/models/diffusion_models" in names
    assert prefix + "Link /opt/comfy/models/diffusion_models/flux-tiny.safetensors" in names
    assert prefix + "Link /opt/comfy/models/vae/ae.safetensors" in names
    assert names.index(prefix + "Place model tiny-comfy@test-1") < names.index(
        prefix + "Link /opt/comfy/models/vae/ae.safetensors"
    )
    assert "test-org/tiny-comfy is gated on Hugging Face and $HF_TOKEN is not set" in err
