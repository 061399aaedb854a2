"""rigup-bench's decode roofline (rigup/bench/roofline.py): the bytes a decode step of
Qwen3.6-27B AutoRound INT4 reads, the bandwidth ceiling, the measured fraction, and the line in
the table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.checkpoint import config_json
from rigup.bench import roofline
from rigup.bench.core import Host
from rigup.bench.render import table
from rigup.bench.runs import arm_roofline

REAL = config_json()  # the real 27B's config.json values (lab/checkpoint.py)


def test_the_27b_reads_about_15_4_gb_per_step_and_an_h200_caps_it_near_311_steps():
    """The H200 run's figures: INT4 weights 12.2 GB, scales 0.38, BF16 lm_head 2.54, gated delta net
    state 0.30 (read and written): about 15.4 GB a step, 4.8 TB/s / 15.4 GB = about 311/s."""
    s = roofline.decode_step_bytes(REAL, 0, "fp8_e5m2", 1)
    assert round(s.quantized_weights / 1e9, 2) == 12.16  # 24,326,963,200 weights x 4 bit
    assert s.quantized_weights == 24_326_963_200 / 2
    assert round(s.scales / 1e9, 2) == 0.38
    assert s.lm_head == 248320 * 5120 * 2
    assert 0.30e9 <= s.gdn_state <= 0.31e9  # 48 layers x 48 heads x 128 x 128 x fp32, twice
    assert s.dense_weights == 48 * 2 * 48 * 5120 * 2  # in_proj_a / in_proj_b stay 16 bit
    assert round(s.total / 1e9, 1) == 15.4
    r = roofline.roofline(s, "NVIDIA H200", 110.6, None)
    assert round(r["ceiling_steps_s"]) == 311
    assert round(100 * r["fraction"], 1) == 35.6  # the H200 run's measured 9.04 ms a token


def test_kv_cache_read_grows_with_context_and_dtype():
    """16 full-attention layers x K and V x 4 KV heads x 256: 32,768 bytes a token in fp8."""
    at = {c: roofline.decode_step_bytes(REAL, c, "fp8_e5m2").kv_cache for c in (0, 1024, 262144)}
    assert at == {0: 0, 1024: 32768 * 1024, 262144: 32768 * 262144}
    assert roofline.decode_step_bytes(REAL, 1024, "auto").kv_cache == 2 * 32768 * 1024


def test_tensor_parallel_splits_the_bytes_and_a_3090_pair_has_its_ceiling():
    one = roofline.decode_step_bytes(REAL, 1024, "fp8_e5m2", 1)
    two = roofline.decode_step_bytes(REAL, 1024, "fp8_e5m2", 2)
    assert two.total == pytest.approx(one.total / 2)
    r = roofline.roofline(two, "NVIDIA GeForce RTX 3090", None, None)
    assert r["bandwidth"] == 936e9
    assert round(r["ceiling_steps_s"]) == round(936e9 / (one.total / 2))
    assert 120 < r["ceiling_steps_s"] < 122
    assert r["fraction"] is None


def test_mtp_counts_steps_not_tokens():
    s = roofline.decode_step_bytes(REAL, 1024, "fp8_e5m2", 2)
    r = roofline.roofline(s, "NVIDIA GeForce RTX 3090", 128.2, 3.31)
    assert r["measured_steps_s"] == pytest.approx(128.2 / 3.31)


def test_unknown_gpu_and_missing_keys():
    s = roofline.decode_step_bytes(REAL, 0)
    r = roofline.roofline(s, "NVIDIA A100-SXM4-80GB", 50.0, None)
    assert r["ceiling_steps_s"] is None and r["fraction"] is None
    assert "memory bandwidth unknown" in roofline.line(r)
    broken = json.loads(json.dumps(REAL))
    del broken["text_config"]["linear_num_value_heads"]
    with pytest.raises(roofline.RooflineError, match="linear_num_value_heads"):
        roofline.decode_step_bytes(broken, 0)
    with pytest.raises(roofline.RooflineError, match="unknown kv_cache_dtype 'fp4'"):
        roofline.decode_step_bytes(REAL, 0, "fp4")


def test_a_dense_unquantized_model():
    dense = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
             "vocab_size": 1000}  # fmt: skip
    s = roofline.decode_step_bytes(dense, 10)
    per_layer = (4 * 32 * 128 + 2 * 2 * 32 * 128 + 128 * 4 * 32 + 3 * 256 * 128) * 2
    assert s.dense_weights == 2 * per_layer and s.quantized_weights == 0 and s.gdn_state == 0
    assert s.kv_cache == 2 * 2 * 2 * 32 * 2 * 10


def _rows(value=110.6, acceptance=None):
    return [
        {"id": "prefill-2k", "figure": "prefill", "value": 6000.0},
        {
            "id": "decode-1",
            "figure": "decode",
            "value": value,
            "input_len": 512,
            "output_len": 1024,
            "acceptance": acceptance,
        },  # fmt: skip
    ]


def test_arm_roofline_reads_the_served_config_and_the_gpu_name(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(REAL))
    cfg = {
        "vllm": {"model_dir": str(tmp_path), "kv_cache_dtype": "fp8_e5m2",
                 "tensor_parallel_size": 1},
        "gpus": {"count": 1},
    }  # fmt: skip
    host = Host(runner=lambda argv, env=None, timeout=None: (0, "NVIDIA H200\n"))
    r = arm_roofline(cfg, host, _rows())
    assert r["gpu"] == "NVIDIA H200"
    assert r["bytes_per_step"]["context_tokens"] == 512 + 512
    assert 0.35 < r["fraction"] < 0.36
    assert arm_roofline({**cfg, "gpus": {"count": 0}}, host, _rows()) is None
    assert arm_roofline(cfg, host, _rows(value=None)) is None
    missing = {**cfg, "vllm": {**cfg["vllm"], "model_dir": str(tmp_path / "none")}}
    assert "config.json" in arm_roofline(missing, host, _rows())["error"]


def test_the_table_prints_the_fraction():
    s = roofline.decode_step_bytes(REAL, 1024, "fp8_e5m2")
    arm = {
        "name": "configured", "what": "the service as converged", "rows": [],
        "acceptance": None, "gpus_before": [], "gpus_after": [], "heat": "",
        "roofline": roofline.roofline(s, "NVIDIA H200", 110.6, None),
    }  # fmt: skip
    record = {"started": "t", "vllm": {}, "seed_source": "seed", "arms": [arm]}
    text = table(record)
    assert "ceiling 310 steps/s; measured 110.6 steps/s = 35.7 %" in text


H200_RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-cuda" / "h200-runs"


def _h200_run_roofline(run: str, tmp_path: Path) -> tuple[dict, dict]:
    """A recorded rigup-bench run of the full-size random-weight 27B on one H200 (gpu-serve,
    2026-12-01; recorded before rigup-bench printed the roofline) through arm_roofline, with the
    config.json lab/tiny wrote for that checkpoint: (the record, its roofline)."""
    from lab.tiny.shape import QWEN36_27B
    from lab.tiny.shape import config_json as tiny_config_json
    from lab.tiny.tokenizer import build_tokenizer

    record = json.loads((H200_RUNS / run / "bench.json").read_text(encoding="utf-8"))
    config = tiny_config_json(build_tokenizer(QWEN36_27B.vocab), "hybrid-int4", QWEN36_27B)
    (tmp_path / "config.json").write_text(json.dumps(config))
    cfg = {
        "vllm": {"model_dir": str(tmp_path), "kv_cache_dtype": "fp8_e5m2",
                 "tensor_parallel_size": record["machine"]["gpu_count"]},
        "gpus": {"count": record["machine"]["gpu_count"]},
    }  # fmt: skip
    gpu = record["machine"]["gpu"]
    host = Host(runner=lambda argv, env=None, timeout=None: (0, f"{gpu}\n"))
    return record, arm_roofline(cfg, host, record["arms"][0]["rows"])


def test_the_h200_decode_without_mtp_is_35_percent_of_its_ceiling(tmp_path):
    """Decode 110.0 tok/s at 1 user, no MTP, 256 in / 512 out (--scale 0.5: a mean context of
    512 tokens): 15.46 GB a step / 4.8 TB/s = 311 steps/s; measured 110.0 = 35.4 %."""
    record, r = _h200_run_roofline("full-nomtp", tmp_path)
    assert record["machine"] == {**record["machine"], "gpu": "NVIDIA H200", "mtp": False}
    assert r["bytes_per_step"]["context_tokens"] == 512
    assert round(r["bytes_per_step"]["total"] / 1e9, 2) == 15.46
    assert round(r["ceiling_steps_s"]) == 311
    assert round(r["measured_steps_s"], 1) == 110.0
    assert round(100 * r["fraction"], 1) == 35.4
    record["arms"][0]["roofline"] = r
    assert "ceiling 311 steps/s; measured 110.0 steps/s = 35.4 %" in table(record)


def test_the_h200_decode_with_mtp_and_random_weights_is_a_step_a_token(tmp_path):
    """MTP 3 with random weights accepts nothing (mean acceptance length 1.0): 29.5 tok/s is
    29.5 steps/s, 9.5 % of the ceiling; each step also runs the drafter three times and verifies
    four tokens, which the roofline does not count."""
    record, r = _h200_run_roofline("full-mtp", tmp_path)
    assert record["arms"][0]["rows"][0]["acceptance"]["mean_length"] == 1.0
    assert round(r["measured_steps_s"], 1) == 29.5
    assert round(100 * r["fraction"], 1) == 9.5
