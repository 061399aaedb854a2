"""files/model/checkpoint_preflight.py with the pinned vLLM's own model registry (the prefixes
come from vLLM's hf_to_vllm_mapper, not from rigup's table), on the constructed checkpoint and
its broken variants. Runs where tests/vllm/test_pinned_vllm.py runs (RIGUP_VLLM_PYTHON, or
RIGUP_VLLM_ON_LAB=1 on the converged lab machine)."""

from __future__ import annotations

import json
import shlex
import shutil
from subprocess import run

import pytest

from tests.unit.test_checkpoint_preflight import QUANT, SCRIPT, build_variants, cp
from tests.vllm.test_pinned_vllm import ON_LAB, VLLM_PYTHON, pinned_version, pytestmark  # noqa: F401


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, tuple[int, dict]]:
    tmp = tmp_path_factory.mktemp("preflight-vllm")
    variants = build_variants(tmp)
    shutil.copy2(SCRIPT, tmp / SCRIPT.name)
    shutil.copy2(QUANT, tmp / QUANT.name)  # the module the script imports, installed beside it
    cases = {
        "good": (variants["good"], "language_model_only"),
        "lm_head_quantized": (variants["lm_head_quantized"], "language_model_only"),
        "causal_lm_names": (variants["causal_lm_names"], "language_model_only"),
        "strip": (variants["good"], "strip_vision_config"),
    }
    # one python start for all cases: vLLM's import dominates (~7 s)
    lines = "; ".join(
        f"{shlex.join([VLLM_PYTHON, str(tmp / SCRIPT.name), str(model), '--method', method])} 2>/dev/null; echo rc=$?"
        for model, method in cases.values()
    )
    if ON_LAB:
        from lab.config import LabConfig
        from lab.machine import LabMachine

        machine = LabMachine(LabConfig.from_env(), log=lambda _: None)
        machine.ssh(f"mkdir -p {shlex.quote(str(tmp))}")
        machine.push(tmp, str(tmp))
        out = machine.ssh(lines, check=False, timeout=600).stdout
    else:
        out = run(["bash", "-c", lines], capture_output=True, text=True, timeout=600).stdout
    rows = [line for line in out.splitlines() if line.strip()]
    parsed = {}
    for name, (result, rc) in zip(cases, zip(rows[0::2], rows[1::2], strict=True), strict=True):
        parsed[name] = (int(rc.removeprefix("rc=")), json.loads(result))
    return parsed


def test_prefixes_come_from_the_pinned_vllm(results):
    rc, result = results["good"]
    assert rc == 0, result
    assert result["vllm_version"] == pinned_version()
    assert result["prefixes_from"].endswith("Qwen3_5ForConditionalGeneration.hf_to_vllm_mapper")
    assert set(result["accepted_prefixes"]) == {
        "model.visual.",
        "lm_head.",
        "model.language_model.",
    }
    # the fused layers come from the class's packed_modules_mapping; the --no-vllm table agrees
    assert result["fused_modules_from"].endswith(
        "Qwen3_5ForConditionalGeneration.packed_modules_mapping"
    )
    fusing = {k: v for k, v in result["fused_modules"].items() if len(v) > 1}
    table = cp.BUILTIN_FUSED["Qwen3_5ForConditionalGeneration"]
    assert fusing == {k: v for k, v in table.items() if len(v) > 1}


@pytest.mark.parametrize(
    "case,fragment",
    [
        ("lm_head_quantized", "lm_head is quantized"),
        ("causal_lm_names", "do not match Qwen3_5ForConditionalGeneration"),
        ("strip", "with text-only method strip_vision_config"),
    ],
)
def test_each_broken_checkpoint_has_its_message(results, case, fragment):
    rc, result = results[case]
    assert rc == 1 and len(result["problems"]) == 1, result
    assert fragment in result["problems"][0]
