"""roles/vllm/kv_cache_support.json is what the pinned vLLM's own code says: regenerated here by
files/vllm/kv_cache_support.py with a real pinned vLLM (RIGUP_VLLM_PYTHON, or the lab's venv
with RIGUP_VLLM_ON_LAB=1) and compared, so the KV-cache-by-GPU rule cannot drift from the
release (roles/vllm/combinations.py)."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess

import pytest

from tests.vllm.test_pinned_vllm import ON_LAB, REPO, SHARED, VLLM_PYTHON, pinned_version

GENERATOR = REPO / "files" / "vllm" / "kv_cache_support.py"
TABLE = REPO / "roles" / "vllm" / "kv_cache_support.json"

pytestmark = pytest.mark.skipif(
    not VLLM_PYTHON,
    reason="no pinned vLLM to run: set RIGUP_VLLM_PYTHON, or RIGUP_VLLM_ON_LAB=1",
)


def _generate(tmp_path) -> str:
    for src in (GENERATOR, SHARED):
        shutil.copy2(src, tmp_path / src.name)
    command = [VLLM_PYTHON, str(tmp_path / GENERATOR.name)]
    if ON_LAB:
        from lab.config import LabConfig
        from lab.machine import LabMachine

        machine = LabMachine(LabConfig.from_env(), log=lambda _: None)
        machine.ssh(f"mkdir -p {shlex.quote(str(tmp_path))}")
        machine.push(tmp_path, str(tmp_path))
        p = machine.ssh(shlex.join(command), check=False, timeout=900)
    else:
        p = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def test_the_committed_table_is_what_the_pinned_vllm_says(tmp_path):
    generated = json.loads(_generate(tmp_path))
    if generated["build"] != "cuda":
        pytest.skip(
            "this vLLM is the CPU build, which has no CUDA platform code; the table is the CUDA "
            "build's (tests/lab runs tests/vllm with it: RIGUP_VLLM_PYTHON)"
        )
    assert generated["vllm_version"] == pinned_version()
    assert generated == json.loads(TABLE.read_text()), (
        "roles/vllm/kv_cache_support.json is stale: regenerate it with "
        "`<vllm venv>/bin/python files/vllm/kv_cache_support.py > roles/vllm/kv_cache_support.json`"
    )
