"""vLLM's CUDA engine failing at start-up as it really looks (tests/fixtures/vllm-cuda: captured
on an H200, and constructed from vLLM's and FlashInfer's own messages, README.md there)."""

from __future__ import annotations

import pytest

from rigup import diagnosis, metrics
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


# --- /metrics of the CUDA engine ------------------------------------------------------------------


def metrics_window(text: str) -> dict:
    return metrics.window(None, metrics.parse(text), "the engine's whole run")


def test_the_captured_mtp_acceptance_is_read():
    w = metrics_window(log("metrics-excerpt-cudagraphs.txt"))
    verdicts = diagnosis.classify_metrics({**w, "spec": {"method": "mtp"}})
    (v,) = [v for v in verdicts if v.kind == "spec-decode"]
    assert v.id == "spec-decode/ok" and "MTP acceptance 100.0 %" in v.what


def test_prefix_cache_queries_prove_prompts_in_an_excerpt_without_prompt_tokens():
    text = "\n".join(
        line.replace("} 0.0", "} 4096.0") if "prefix_cache_queries_total" in line else line
        for line in log("metrics-excerpt-cudagraphs.txt").splitlines()
        if "prompt_tokens_total" not in line
    )
    w = metrics_window(text)
    assert w["prompt_tokens"] is None and w["queries"] == 4096.0
    (v,) = [v for v in diagnosis.classify_metrics({**w, "block": 1600}) if v.kind == "prefix-cache"]
    assert v.id == "prefix-cache/no-hits" and "4,096 prompt tokens looked up" in v.what


def test_zero_acceptance_names_a_missing_or_broken_mtp_head():
    text = "\n".join(
        line.rsplit(" ", 1)[0] + " 0.0"
        if line.startswith("vllm:spec_decode_num_accepted_tokens") and "_created" not in line
        else line
        for line in log("metrics-excerpt-cudagraphs.txt").splitlines()
    )
    w = metrics_window(text)
    verdicts = diagnosis.classify_metrics({**w, "spec": {"method": "mtp"}})
    (v,) = [v for v in verdicts if v.kind == "spec-decode"]
    assert v.id == "spec-decode/none" and v.severity == diagnosis.WARN
    assert "accepted none of 5 drafts" in v.what
    assert "MTP head" in v.why and "z-lab/paroquant#42" in v.why and "sampling" in v.why
    assert "mtp.*" in v.fix and "vllm_speculative_config = None" in v.fix


def zero_acceptance_window() -> dict:
    text = "\n".join(
        line.rsplit(" ", 1)[0] + " 0.0"
        if line.startswith("vllm:spec_decode_num_accepted_tokens") and "_created" not in line
        else line
        for line in log("metrics-excerpt-cudagraphs.txt").splitlines()
    )
    return metrics_window(text)


@pytest.mark.parametrize(("all_reduce", "state"), [(True, "on"), (None, "on unless the unit")])
def test_zero_acceptance_with_tensor_parallel_names_custom_all_reduce_and_the_ab(all_reduce, state):
    """noonghunna/club-3090#922: 0 % with custom all-reduce, 100 % without, on 2x3090."""
    from rigup.doctor import metrics_state

    cfg = {"vllm": {"speculative_config": {"method": "mtp"}, "prefix_caching": False,
                    "tensor_parallel_size": 2}}  # fmt: skip
    verdicts = diagnosis.classify_metrics(
        metrics_state(cfg, zero_acceptance_window(), 1600, all_reduce)
    )
    (v,) = [v for v in verdicts if v.kind == "spec-decode"]
    assert v.id == "spec-decode/none"
    assert (
        "MTP head" in v.why and f"tensor parallel 2 and vLLM's custom all-reduce {state}" in v.why
    )
    assert "club-3090#922" in v.why
    assert v.fix.startswith(
        "first the A/B that decides between the two: `sudo rigup-bench --arms nvlink-off"
    )
    assert '["--disable-custom-all-reduce"]' in v.fix and "mtp.*" in v.fix
    # one GPU, or the all-reduce already off: the MTP head alone
    for tp, car in ((1, False), (2, False)):
        cfg["vllm"]["tensor_parallel_size"] = tp
        found = diagnosis.classify_metrics(metrics_state(cfg, zero_acceptance_window(), 1600, car))
        (v,) = [v for v in found if v.kind == "spec-decode"]
        assert "all-reduce" not in v.why + v.fix


def test_the_doctor_reads_the_custom_all_reduce_from_the_running_command_line():
    from rigup.doctor import custom_all_reduce

    cfg = {"vllm": {"unit": "vllm.service", "tensor_parallel_size": 2}}
    argv = "/opt/rigup/vllm/venv/bin/python -m vllm.entrypoints.cli.main serve /m --tensor-parallel-size 2"

    def runner(answer_ps: str):
        def run(cmd: list[str]) -> tuple[int, str]:
            return (0, "4242\n") if cmd[0] == "systemctl" else (0, answer_ps)

        return run

    assert custom_all_reduce(cfg, runner(argv)) is True
    assert custom_all_reduce(cfg, runner(argv + " --disable-custom-all-reduce")) is False
    assert custom_all_reduce(cfg, runner("")) is None
    assert (
        custom_all_reduce({"vllm": {"unit": "x", "tensor_parallel_size": 1}}, runner(argv)) is False
    )


def test_prefix_cache_queried_with_0_hits_is_named_in_each_case():
    """Queried and 0 hits: on (blocks too short), on with the block size unknown (no '?'), and
    queried though rigup's unit has it off (the running vLLM is not the configured one)."""
    w = {"since": "the last 5 s", "queries": 12000, "hits": 0, "prompt_tokens": 12000}
    (on,) = [v for v in diagnosis.classify_metrics({**w, "prefix_caching": True, "block": 1600})
             if v.kind == "prefix-cache"]  # fmt: skip
    assert on.id == "prefix-cache/no-hits" and "queried, with 0 hits" in on.why
    assert "at least two blocks (3200 tokens)" in on.why
    (unknown,) = [v for v in diagnosis.classify_metrics({**w, "prefix_caching": True})
                  if v.kind == "prefix-cache"]  # fmt: skip
    assert "?" not in unknown.why + unknown.fix and "Setting attention block size" in unknown.why
    (off,) = [v for v in diagnosis.classify_metrics({**w, "prefix_caching": False, "block": 1600})
              if v.kind == "prefix-cache"]  # fmt: skip
    assert off.id == "prefix-cache/unexpected" and off.severity == diagnosis.WARN
    assert "12,000 prompt tokens" in off.what and "(0 hits)" in off.what
    assert "systemctl cat vllm.service" in off.fix
