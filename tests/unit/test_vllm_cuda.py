"""vLLM's CUDA engine failing at start-up as it really looks (tests/fixtures/vllm-cuda: captured
on an H200, and constructed from vLLM's and FlashInfer's own messages, README.md there)."""

from __future__ import annotations

import pytest

from roles.common import diagnosis
from tests.captures import FIXTURES


def log(name: str) -> str:
    return (FIXTURES / "vllm-cuda" / name).read_text(errors="replace")


def test_the_captured_gdn_prefill_crash_names_the_head_dims_and_the_fix():
    verdicts = diagnosis.classify_vllm_log(log("fail-gdn-prefill-k32-v64.log"))
    v = verdicts[0]
    assert v.id == "vllm-gdn-prefill/head-dims" and v.severity == diagnosis.FAIL
    assert "key head dim 32 and value head dim 64" in v.what
    assert "linear_key_head_dim equal to linear_value_head_dim" in v.fix
    assert "fused_post_conv_prep" in v.why
    # the generic compile error and the generic engine failure are explained by it
    assert [x.id for x in verdicts if x.severity == diagnosis.FAIL] == [v.id]


@pytest.mark.parametrize(("k", "v"), [("128", "256"), ("64", "32")])
def test_any_pair_of_differing_blocks_is_read(k, v):
    line = (
        '(EngineCore pid=9) ERROR [core.py:1165] AssertionError("Mismatched type for mask_2d '
        f"between then block (<['16', '{k}'], int1>) and else block (<['16', '{v}'], int1>)\")"
    )
    (found,) = diagnosis.classify_vllm_log(line)
    assert f"key head dim {k} and value head dim {v}" in found.what


def test_another_triton_compile_error_is_named_with_its_kernel():
    text = "\n".join(
        [
            '(EngineCore pid=9) ERROR [core.py:1165]   File "/opt/venv/lib/python3.12/site-packages/'
            'vllm/model_executor/layers/fla/ops/chunk.py", line 40, in chunk_fwd',
            "(EngineCore pid=9) ERROR [core.py:1165] triton.compiler.errors.CompilationError: at 12:8:",
            "(EngineCore pid=9) ERROR [core.py:1165] EngineCore failed to start.",
        ]
    )
    (v,) = diagnosis.classify_vllm_log(text)
    assert v.id == "vllm-triton-compile" and "(model_executor/layers/fla/ops/chunk.py)" in v.what


def test_flashinfer_without_cuda_home_names_the_toolkit():
    v = diagnosis.classify_vllm_log(log("constructed-flashinfer-no-nvcc.log"))[0]
    assert v.id == "vllm-flashinfer-jit/no-cuda-home"
    assert "/usr/local/cuda does not exist" in v.why and "fp8_e5m2" in v.why
    assert "cuda_toolkit_version" in v.fix and "TRITON_ATTN" in v.fix


@pytest.mark.parametrize(
    "line",
    [
        "/bin/sh: 1: /opt/rigup/cuda/bin/nvcc: not found",
        "FAILED: decode.cuda.o /bin/sh: /opt/rigup/cuda/bin/nvcc: No such file or directory",
    ],
)
def test_flashinfer_with_a_cuda_home_without_nvcc(line):
    (v,) = diagnosis.classify_vllm_log(line)
    assert v.id == "vllm-flashinfer-jit/no-nvcc" and "/opt/rigup/cuda/bin/nvcc is missing" in v.what


@pytest.mark.parametrize("name", ["serve-tiny-int4-eager.log", "serve-tiny-int4-cudagraphs.log"])
def test_the_captured_healthy_cuda_starts_have_only_notes(name):
    verdicts = diagnosis.classify_vllm_log(log(name))
    assert verdicts and all(v.severity == diagnosis.OK for v in verdicts), [
        str(v) for v in verdicts
    ]
