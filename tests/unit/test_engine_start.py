"""rigup/diagnosis/engine_start.py on real engine logs: vLLM 0.22.1's CUDA build on an
H200 (tests/fixtures/vllm-cuda) and its CPU build (tests/fixtures/vllm-cpu)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rigup.diagnosis.engine_start import EngineStart, engine_start_facts

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def facts(rel: str) -> EngineStart:
    return engine_start_facts((FIXTURES / rel).read_text(encoding="utf-8"))


def test_cuda_start_with_cuda_graphs():
    """The tiny INT4 checkpoint with MTP and the fp8_e5m2 KV cache: FlashInfer, PIECEWISE
    graphs (vLLM's fallback with spec decode), block size raised to 288 for the GDN state."""
    f = facts("vllm-cuda/serve-tiny-int4-cudagraphs.log")
    assert f.serving_url == "http://127.0.0.1:8000"
    assert f.startup_s == 150.0
    assert f.init_engine_s == 115.4
    assert f.compile_s == 36.77  # 22.04 s backbone + 14.73 s MTP drafter
    assert (f.load_gib, f.load_s) == (0.03, 1.49)
    assert f.available_kv_gib == 27.3
    assert f.kv_pool_tokens == 35_407_070
    assert (f.concurrency_tokens, f.max_concurrency) == (4096, 8644.3)
    assert f.block_size == 288
    assert f.graph_mode == "PIECEWISE"
    assert (f.cuda_graph_s, f.cuda_graph_gib) == (1, 0.06)
    assert f.attention_backend == "FLASHINFER"
    assert f.estimated_max_model_len is None


def test_cuda_start_eager():
    f = facts("vllm-cuda/serve-tiny-int4-eager.log")
    assert f.graph_mode == "NONE"
    assert f.cuda_graph_gib is None and f.compile_s is None
    assert f.kv_pool_tokens == 35_505_552
    assert f.startup_s == 113.0


def test_a_start_that_fails_has_no_serving_figures():
    f = facts("vllm-cuda/fail-gdn-prefill-k32-v64.log")
    assert f.serving_url is None and f.startup_s is None and f.kv_pool_tokens is None
    assert f.block_size == 160 and f.attention_backend == "FLASHINFER"


def test_cpu_start():
    f = facts("vllm-cpu/startup-best-hybrid.log")
    assert f.attention_backend == "CPU_ATTN"
    assert f.kv_pool_tokens == 745_561
    assert f.block_size == 96
    assert f.graph_mode == "NONE"
    assert f.startup_s == 137.0


@pytest.mark.parametrize(
    ("line", "want"),
    [
        # vLLM 0.22.1's wording (v1/core/kv_cache_utils.py), the issue-23 H200 figures
        (
            "ValueError: To serve at least one request with the model's max seq len (262144), "
            "(9.13 GiB KV cache is needed, which is larger than the available KV cache memory "
            "(2.57 GiB). Based on the available memory, the estimated maximum model length is "
            "59200. Try increasing `gpu_memory_utilization`",
            (262144, 9.13, 2.57, 59200),
        ),
        # an older release's wording, from a field report (tests/fixtures/vllm-logs)
        (
            (FIXTURES / "vllm-logs/kv-cache-too-small.log").read_text(encoding="utf-8"),
            (262144, 4.1, 2.17, 138848),
        ),
        (
            "max seq len (8192), (1.00 GiB KV cache is needed, which is larger than the "
            "available KV cache memory (0.10 GiB). Try increasing",
            (8192, 1.0, 0.1, None),
        ),
    ],
)
def test_refused_max_model_len(line, want):
    f = engine_start_facts(line)
    assert (
        f.refused_max_model_len,
        f.kv_needed_gib,
        f.kv_available_gib,
        f.estimated_max_model_len,
    ) == want


def test_unknown_text_gives_no_figures():
    assert engine_start_facts("nothing here\n") == EngineStart()
    assert set(EngineStart().as_dict().values()) == {None}


def test_startup_across_midnight_and_a_month_end():
    text = (
        "(APIServer pid=1) INFO 01-31 23:59:50 [api_server.py:1] vLLM API server version 0.22.1\n"
        "(APIServer pid=1) INFO 02-01 00:00:10 [api_server.py:596] Starting vLLM server on "
        "http://127.0.0.1:8000\n"
    )
    assert engine_start_facts(text).startup_s == 20.0


RUNS = "vllm-cuda/h200-runs"


@pytest.mark.parametrize(
    ("run", "want"),
    [
        ("tiny-eager", {"startup_s": 151.0, "graph_mode": "NONE", "block_size": 288,
                        "kv_pool_tokens": 20_149_470, "compile_s": None}),
        ("tiny-graphs", {"startup_s": 76.0, "compile_s": 44.74, "graph_mode": "PIECEWISE",
                         "cuda_graph_gib": 0.07, "kv_pool_tokens": 20_215_362}),
        ("full-mtp", {"load_gib": 17.62, "load_s": 4.65, "compile_s": 72.12, "startup_s": 120.0,
                      "available_kv_gib": 2.46, "kv_pool_tokens": 56_000, "block_size": 1600,
                      "graph_mode": "PIECEWISE", "cuda_graph_gib": 0.14,
                      "attention_backend": "FLASHINFER"}),
        ("full-nomtp", {"load_gib": 16.83, "startup_s": 110.0, "compile_s": 60.19,
                        "available_kv_gib": 3.33, "kv_pool_tokens": 99_076, "block_size": 1568,
                        "graph_mode": "FULL_AND_PIECEWISE", "cuda_graph_gib": 0.51,
                        "max_concurrency": 1.77}),
    ],
)  # fmt: skip
def test_the_h200_runs_of_the_gpu_serving_check(run, want):
    """gpu-serve's four runs on one H200 at a 3090's 24 GiB budget (2026-12-01)."""
    got = facts(f"{RUNS}/{run}/engine.log").as_dict()
    assert {k: got[k] for k in want} == want


RUNS_2 = "vllm-cuda/h200-runs-2026-12-02"


@pytest.mark.parametrize(
    ("run", "want"),
    [
        ("tiny32-eager", {"startup_s": 155.0, "graph_mode": "NONE", "block_size": 160,
                          "kv_pool_tokens": 24_538_654, "compile_s": None,
                          "attention_backend": "FLASHINFER"}),
        ("tiny32-graphs", {"startup_s": 78.0, "compile_s": 42.69, "graph_mode": "PIECEWISE",
                           "cuda_graph_gib": 0.07, "block_size": 160,
                           "kv_pool_tokens": 24_619_369}),
        ("full-mtp", {"load_gib": 17.62, "load_s": 5.46, "compile_s": 84.08, "startup_s": 225.0,
                      "available_kv_gib": 2.46, "kv_pool_tokens": 56_000, "block_size": 1600,
                      "graph_mode": "PIECEWISE", "cuda_graph_gib": 0.14}),
        ("full-nomtp", {"load_gib": 16.83, "startup_s": 121.0, "compile_s": 65.72,
                        "available_kv_gib": 3.33, "kv_pool_tokens": 99_076, "block_size": 1568,
                        "graph_mode": "FULL_AND_PIECEWISE", "cuda_graph_gib": 0.51}),
    ],
)  # fmt: skip
def test_the_h200_runs_of_the_shipped_tiny_and_the_full_shape(run, want):
    """gpu-serve on one H200 at a 24 GiB budget (2026-12-02): the shipped lab/tiny (GDN key =
    value head dim 32, 8 value heads) eager and with CUDA graphs, and the full-size shape again
    with a cold compile cache (hence the longer starts than 2026-12-01's)."""
    got = facts(f"{RUNS_2}/{run}/engine.log").as_dict()
    assert {k: got[k] for k in want} == want


def test_the_refused_start_names_need_availability_and_estimate():
    """262144 tokens with MTP 3 on one 24 GiB budget: refused, with vLLM's own figures."""
    f = facts(f"{RUNS}/full-mtp/engine-refused-262144.log")
    assert f.serving_url is None and f.kv_pool_tokens is None
    assert f.refused_max_model_len == 262_144
    assert (f.kv_needed_gib, f.kv_available_gib) == (9.13, 2.46)
    assert f.estimated_max_model_len == 56_000
    assert (f.load_gib, f.block_size) == (17.62, 1600)
