"""roles/vllm/kv_budget.py: vLLM 0.22.1's KV-cache arithmetic for Qwen3.6, checked against what
the engine itself printed on an H200 (2026-12-01; tests/fixtures/vllm-cuda), and the settings
check that uses it (does 262144 tokens fit two 24 GiB cards?)."""

from __future__ import annotations

import dataclasses

import pytest

from lab.tiny.shape import TINY
from rigup.diagnosis.engine_start import engine_start_facts
from roles.settings import validate
from roles.vllm.kv_budget import GIB, KNOWN_MODELS, kv_fit_problems, layout
from tests.conftest import REPO, load_group_data

CUDA = REPO / "tests" / "fixtures" / "vllm-cuda"

#: The tiny shape of the H200 runs of 2026-12-01 (GDN key = value head dim 64, 4 value heads);
#: the shipped TINY has 32 and 8 since (lab/tiny/shape.py says why)
H200_TINY = dataclasses.replace(TINY, lin_v_heads=4, lin_k_dim=64, lin_v_dim=64)


def test_block_sizes_are_the_ones_vllm_raised_to():
    """ "Setting attention block size to 1568 tokens" (no MTP) and 1600 (MTP 3) for the 27B at a
    3090's budget on the H200 (2026-12-01)."""
    assert layout(speculative_tokens=0).block_size == 1568
    assert layout(speculative_tokens=3).block_size == 1600
    # docs/serving.md: 784 with the BF16 KV cache (vLLM code, platforms/interface.py)
    assert layout(kv_cache_dtype="auto").block_size == 784


def test_tiny_block_sizes_match_the_h200_logs():
    """The tiny checkpoints' logs: 160 for key head dim 32, 288 for 64 (MTP 3, fp8_e5m2)."""
    k32 = dataclasses.replace(H200_TINY, lin_k_dim=32)
    k64_one_head = dataclasses.replace(H200_TINY, lin_k_heads=1, num_layers=4)
    for shape, log in ((k32, "fail-gdn-prefill-k32-v64.log"),
                       (k64_one_head, "serve-tiny-int4-cudagraphs.log")):  # fmt: skip
        facts = engine_start_facts((CUDA / log).read_text(encoding="utf-8"))
        assert layout(shape, speculative_tokens=3).block_size == facts.block_size
    assert layout(H200_TINY, speculative_tokens=3).block_size == 288


def test_pool_tokens_match_the_h200_logs_within_the_logs_rounding():
    """ "Available KV cache memory: 27.3 GiB" -> "GPU KV cache size: 35,407,070 tokens" at 4096
    (the log rounds the GiB to 0.01, which moves the figure by up to ~0.02 %)."""
    shape = dataclasses.replace(H200_TINY, lin_k_heads=1, num_layers=4)  # the tiny of those runs
    kv = layout(shape, speculative_tokens=3)
    for log in ("serve-tiny-int4-cudagraphs.log", "serve-tiny-int4-eager.log"):
        f = engine_start_facts((CUDA / log).read_text(encoding="utf-8"))
        got = kv.pool_tokens(f.available_kv_gib * GIB, f.concurrency_tokens)
        assert got == pytest.approx(f.kv_pool_tokens, rel=3e-4)


def test_262144_tokens_on_one_card_is_vllms_refusal():
    """vLLM on the H200, one GPU, MTP 3: "(9.13 GiB KV cache is needed, which is larger than the
    available KV cache memory (2.57 GiB). ... the estimated maximum model length is 59200"."""
    kv = layout(speculative_tokens=3)
    assert round(kv.needed_bytes(262144) / GIB, 2) == 9.13
    assert kv.estimated_max_model_len(2.57 * GIB) == 59200


H200_RUNS = CUDA / "h200-runs"


def run_facts(run: str, log: str = "engine.log"):
    return engine_start_facts((H200_RUNS / run / log).read_text(encoding="utf-8"))


def test_the_refused_262144_start_and_the_fitted_one_are_the_arithmetic():
    """The full-size random-weight 27B with MTP 3 at a 24 GiB budget (2026-12-01): vLLM refused
    262144 ("9.13 GiB ... needed ... available 2.46 GiB ... estimated maximum model length is
    56000") and served 56000 in a pool of exactly 56,000 tokens of blocks of 1600."""
    kv = layout(speculative_tokens=3)
    refused = run_facts("full-mtp", "engine-refused-262144.log")
    assert round(kv.needed_bytes(refused.refused_max_model_len) / GIB, 2) == refused.kv_needed_gib
    got = kv.estimated_max_model_len(refused.kv_available_gib * GIB)
    assert got == refused.estimated_max_model_len == 56000
    served = run_facts("full-mtp")
    assert kv.block_size == served.block_size
    pool = kv.pool_tokens(served.available_kv_gib * GIB, served.concurrency_tokens)
    assert pool == served.kv_pool_tokens == 56000


def test_the_pool_without_mtp_is_the_arithmetic():
    """MTP off at 56000: "Available KV cache memory: 3.33 GiB", "GPU KV cache size: 99,076
    tokens", blocks of 1568 (no MTP drafter layer, one state block per mamba group)."""
    kv, f = layout(speculative_tokens=0), run_facts("full-nomtp")
    assert kv.block_size == f.block_size == 1568
    assert kv.pool_tokens(f.available_kv_gib * GIB, f.concurrency_tokens) == f.kv_pool_tokens
    assert f.kv_pool_tokens == 99_076


def test_the_tiny_pool_of_the_h200_runs_is_the_arithmetic():
    """lab/tiny as it ran on the H200 (8 layers, key = value head dim 64) at a 24 GiB budget."""
    kv = layout(H200_TINY, speculative_tokens=3)
    for run in ("tiny-eager", "tiny-graphs"):
        f = run_facts(run)
        assert kv.block_size == f.block_size == 288
        got = kv.pool_tokens(f.available_kv_gib * GIB, f.concurrency_tokens)
        assert got == pytest.approx(f.kv_pool_tokens, rel=3e-4)


def test_the_shipped_tiny_pool_on_the_h200_is_the_arithmetic():
    """The shipped lab/tiny (8 layers, GDN key = value head dim 32, 8 value heads) as it served
    on the H200 on 2026-12-02 with MTP 3 at a 24 GiB budget: vLLM raised the block to 160 and
    pooled 24,538,654 (eager) and 24,619,369 (CUDA graphs) tokens."""
    kv = layout(TINY, speculative_tokens=3)
    for run in ("tiny32-eager", "tiny32-graphs"):
        log = CUDA / "h200-runs-2026-12-02" / run / "engine.log"
        f = engine_start_facts(log.read_text(encoding="utf-8"))
        assert kv.block_size == f.block_size == 160
        got = kv.pool_tokens(f.available_kv_gib * GIB, f.concurrency_tokens)
        assert got == pytest.approx(f.kv_pool_tokens, rel=3e-4)


def h200_run_settings(**changes) -> dict:
    """The settings of the measured runs: one H200 (143,771 MiB) at --gpu-memory-utilization
    0.1709, tensor parallel 1."""
    return {
        **load_group_data(),
        "vllm_tensor_parallel_size": 1,
        "nvidia_gpu_vram_gib": 143771 / 1024,
        "vllm_gpu_memory_utilization": 0.1709,
        **changes,
    }


def test_the_settings_check_predicts_the_measured_fit_with_and_without_mtp():
    """The measured footprint (weights 17.62 GiB with the MTP head, 16.83 without; the rest of
    the budget) makes the settings check's longest context the one vLLM estimated and served:
    56000 with MTP 3; without MTP the 3.33 GiB left holds 103,488 (66 blocks of 1568)."""
    mtp = KNOWN_MODELS["qwen3.6-27b-int4-autoround"].with_mtp
    assert mtp.weights_gib == run_facts("full-mtp").load_gib
    assert round(mtp.other_gib, 2) == 3.91
    assert kv_fit_problems(h200_run_settings(vllm_max_model_len=56000)) == []
    (p,) = kv_fit_problems(h200_run_settings(vllm_max_model_len=56000 + 1600))
    assert "leaves 2.46 GiB" in p and "about 56,000 tokens fit" in p
    no_mtp = h200_run_settings(vllm_speculative_config=None, vllm_max_model_len=103_488)
    assert kv_fit_problems(no_mtp) == []
    (p,) = kv_fit_problems({**no_mtp, "vllm_max_model_len": 103_488 + 1568})
    assert "leaves 3.33 GiB" in p and "16.83 GiB over 1 GPU(s)" in p


def test_two_24_gib_cards_hold_262144_tokens():
    """Tensor parallel 2 halves the KV heads and the state: 4.57 GiB a card for 262144 tokens
    with MTP 3, well inside what 24 GiB x 0.94 leaves after half the weights."""
    kv = layout(tensor_parallel_size=2, speculative_tokens=3)
    assert kv.block_size == 1600 and kv.page_bytes == 1600 * 1024
    assert round(kv.needed_bytes(262144) / GIB, 2) == 4.57
    assert validate(load_group_data()) == []


def test_the_settings_check_refuses_262144_on_one_3090_naming_the_figures():
    data = {**load_group_data(), "vllm_tensor_parallel_size": 1}
    problems = validate(data)
    assert len(problems) == 1
    p = problems[0]
    assert p.startswith("vllm_max_model_len: 262144 tokens need 9.13 GiB")
    assert "24 GiB x 0.94 = 22.56 GiB" in p and "17.62 GiB over 1 GPU(s)" in p
    assert "2026-12-01" in p and "about 11,200 tokens fit" in p
    data["vllm_max_model_len"] = 11200
    assert kv_fit_problems(data) == []
    data["vllm_max_model_len"] = 11200 + 1600
    assert kv_fit_problems(data)


def test_the_check_leaves_unknown_models_and_the_cpu_build_alone():
    data = {**load_group_data(), "vllm_tensor_parallel_size": 1}
    assert kv_fit_problems({**data, "vllm_device": "cpu"}) == []
    assert kv_fit_problems({**data, "model_llm_manifest": "another-model"}) == []
    assert set(KNOWN_MODELS) == {load_group_data()["model_llm_manifest"]}


def test_bf16_kv_doubles_the_attention_page():
    fp8, bf16 = layout(kv_cache_dtype="fp8_e5m2"), layout(kv_cache_dtype="auto")
    assert bf16.page_bytes / bf16.block_size == 2 * fp8.page_bytes / fp8.block_size
    with pytest.raises(ValueError, match="kv cache dtype 'nvfp4'"):
        layout(kv_cache_dtype="nvfp4")
    with pytest.raises(ValueError, match="do not split over 3 GPUs"):
        layout(tensor_parallel_size=3)


def test_shape_from_the_real_config_is_the_27b_shape():
    from lab.checkpoint import config_json
    from roles.common.model_shape import QWEN36_27B, Shape

    got = Shape.from_config(config_json())
    assert dataclasses.replace(got, name=QWEN36_27B.name) == QWEN36_27B


@pytest.mark.parametrize(
    ("dtype", "mtp", "asked", "block", "need_gib", "pool_094", "pool_234"),
    [
        ("fp8_e5m2", 3, 16, 1600, 4.57, 564_503, 612_165),
        ("fp8_e5m2", 3, 32, 1600, 4.57, 564_503, 612_165),
        ("auto", 3, 16, 800, 8.82, 292_213, 316_885),
        ("auto", 3, 32, 800, 8.82, 292_213, 316_885),
        ("fp8_e5m2", 0, 16, 1568, 4.09, 659_192, 714_380),
        ("auto", 0, 16, 784, 8.09, 333_496, 361_417),
        ("auto", 0, 32, 800, 8.08, 334_213, 361_140),
    ],
)
def test_tensor_parallel_2_rows_of_docs_serving(
    dtype, mtp, asked, block, need_gib, pool_094, pool_234
):
    """docs/serving.md "Tensor parallel 2 on two 24 GiB cards" (not measured yet: no two-GPU machine was lent): each
    card's budget (24 GiB x 0.94, or the seed's 23.4 GiB) less half the measured weights and the
    rest measured on one H200 leaves the KV pool; the block size asked changes nothing but BF16
    without MTP (784 -> 800)."""
    model = KNOWN_MODELS["qwen3.6-27b-int4-autoround"].footprint(mtp > 0)
    kv = layout(kv_cache_dtype=dtype, tensor_parallel_size=2, speculative_tokens=mtp,
                block_size=asked)  # fmt: skip
    assert kv.block_size == block
    assert round(kv.needed_bytes(262144) / GIB, 2) == need_gib
    for budget, pool in ((24 * 0.94, pool_094), (23.4, pool_234)):
        left = budget - model.weights_gib / 2 - model.other_gib
        assert kv.pool_tokens(left * GIB, 262144) == pool


def test_the_seeds_2x3090_pool_is_within_2_percent_of_the_arithmetic():
    """The seed's log on two 3090s at about 23.4 GiB a card: "GPU KV cache size: 623,873 tokens";
    kv_budget with the one-H200 footprint: 612,165 (TP 2's own rest is not measured)."""
    model = KNOWN_MODELS["qwen3.6-27b-int4-autoround"].with_mtp
    kv = layout(tensor_parallel_size=2, speculative_tokens=3)
    left = 23.4 - model.weights_gib / 2 - model.other_gib
    assert kv.pool_tokens(left * GIB, 262144) == pytest.approx(623_873, rel=0.02)
