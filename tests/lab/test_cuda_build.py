"""The pinned vLLM's own code on the rig's build: tests/vllm with vLLM 0.22.1 for CUDA, in a
venv uv builds on the controller from files/vllm/requirements.lock through the lab's uv cache.
No lab machine and no GPU: it runs beside the lab machine's scenario (bin/rigup-test)."""

from __future__ import annotations

import os
import subprocess

from lab import scenario
from tests.lab.labtools import LAB_MARKS

pytestmark = LAB_MARKS  # root: the lab's cache directory (RIGUP_LAB_CACHE_DIR) is root's


def test_pinned_vllm_facts_hold_in_the_cuda_build():
    """tests/vllm with the rig's build, vLLM 0.22.1 for CUDA, in a venv uv builds on the
    controller from files/vllm/requirements.lock (hard-linked from the lab's wheel cache): its
    parser takes the rig's full argv and rejects typos, removed flags and bad JSON; its config
    code sees the constructed 27B-shaped checkpoint text-only with --language-model-only and NOT
    with the seed's stripped config; block size 16 is raised. No GPU is needed for these."""
    python = scenario.cuda_vllm_python()
    proc = subprocess.run(
        [str(scenario.BIN / "pytest"), "tests/vllm", "-q", "-p", "no:cacheprovider", "-rs"],
        cwd=scenario.REPO,
        env={**os.environ, "RIGUP_VLLM_PYTHON": python},
        capture_output=True,
        text=True,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-15000:]
    assert "skipped" not in out.splitlines()[-1], out[-3000:]
