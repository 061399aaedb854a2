"""vLLM's journal: native CUDA failures followed to the code path and the setting behind it,
with the kernel log's GPU events beside them; and out-of-memory errors told apart by WHEN they
happened (start-up, CUDA graph capture, serving). The quoted line of vllm#42609, the captured
H200 start-ups (tests/fixtures/vllm-cuda) and constructed inputs of the same kinds."""

from __future__ import annotations

import json

import pytest

from rigup import diagnosis, units
from tests.captures import FIXTURES

#: The start-up lines of a run with the rig's flags (captured: serve-tiny-int4-cudagraphs.log).
STARTUP = [
    "(EngineCore pid=2657) INFO [cuda.py:378] Using FLASHINFER attention backend out of "
    "potential backends: ['FLASHINFER', 'TRITON_ATTN'].",
    "(EngineCore pid=2657) INFO [auto_gptq.py:353] Using MarlinLinearKernel for AutoGPTQLinearMethod",
    "(EngineCore pid=2657) INFO [gpu_model_runner.py:5061] Loading drafter model...",
    "(EngineCore pid=2657) INFO [gpu_model_runner.py:6456] Graph capturing finished in 1 secs, "
    "took 0.06 GiB",
]


def log(name: str) -> str:
    return (FIXTURES / name).read_text()


def first(text: str) -> diagnosis.Verdict:
    return diagnosis.classify_vllm_log(text)[0]


def frame(path: str) -> str:
    return f'(Worker_TP0 pid=101) ERROR [multiproc_executor.py:870]   File "{path}", line 88, in f'


def test_the_custom_all_reduce_failure_of_vllm_42609_names_its_setting():
    v = first(
        "\n".join(
            [
                *STARTUP,
                "(Worker_TP1 pid=197) Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:455 "
                "'invalid argument'",
                "(EngineCore pid=196) ERROR [multiproc_executor.py:283] Worker proc VllmWorker-1 "
                "died unexpectedly, shutting down executor.",
            ]
        )
    )
    # the specific signature (its known cause on 0.22.1) comes before the generic native one
    assert v.id == "vllm-custom-allreduce/expandable-segments" and v.severity == diagnosis.FAIL
    assert "'invalid argument'" in v.what and "custom_all_reduce.cuh" in v.what
    assert "custom all-reduce" in v.why and "NVLink" in v.why
    assert "expandable_segments:True" in v.fix and "--disable-custom-all-reduce" in v.fix


@pytest.mark.parametrize(
    ("path", "error", "named", "fix"),
    [
        ("/opt/venv/lib/python3.12/site-packages/flashinfer/decode.py",
         "an illegal memory access was encountered", "FlashInfer", "TRITON_ATTN"),
        ("/opt/venv/lib/python3.12/site-packages/vllm/model_executor/layers/quantization/utils/"
         "marlin_utils.py", "misaligned address", "Marlin", "VLLM_DISABLED_KERNELS"),
        ("/opt/venv/lib/python3.12/site-packages/vllm/compilation/cuda_graph.py",
         "an illegal instruction was encountered", "CUDA graphs", "--enforce-eager"),
        ("/opt/venv/lib/python3.12/site-packages/vllm/model_executor/layers/fla/ops/"
         "fused_sigmoid_gating.py", "unspecified launch failure", "gated-delta-net",
         "--no-async-scheduling"),
    ],
)  # fmt: skip
def test_a_cuda_error_is_followed_to_the_code_path_of_its_traceback(path, error, named, fix):
    text = "\n".join(
        [
            "(Worker_TP0 pid=101) ERROR [multiproc_executor.py:870] Traceback (most recent call last):",
            frame("/opt/venv/lib/python3.12/site-packages/vllm/v1/worker/gpu_model_runner.py"),
            frame(path),
            f"(Worker_TP0 pid=101) ERROR [multiproc_executor.py:870] RuntimeError: CUDA error: {error}",
        ]
    )
    v = first(text)
    assert v.id == "vllm-cuda-crash" and error in v.what
    assert named in v.why and fix in v.fix
    assert "Xid" in v.fix  # the GPU itself is the other suspect


def test_a_cuda_error_without_a_path_keeps_the_mtp_gdn_suspect_only_for_its_errors():
    assert (
        "vllm#50021"
        in first("RuntimeError: CUDA error: an illegal memory access was encountered").why
    )
    v = first("RuntimeError: CUDA error: misaligned address")
    assert "vllm#50021" not in v.why and v.why == "no native code path is named in the log"


def test_a_native_failure_brings_the_gpu_events_of_the_kernel_log():
    state = units.unit_state(
        {"Id": "vllm.service", "LoadState": "loaded", "ActiveState": "failed", "SubState": "failed"}
    )
    journal = ["(Worker_TP1 pid=197) RuntimeError: CUDA error: unspecified launch failure"]
    kernel = (FIXTURES / "field/klog-gsp-reset.txt").read_text().splitlines()[1:]
    found = [v.id for v in units.explain(state, journal, kernel)]
    assert found[:2] == ["service/failed", "vllm-cuda-crash"]
    assert {"gpu-reset/gsp-timeout", "gpu-reset/required", "xid-119-120"} <= set(found)
    # without a native failure the GPU events stay in the driver section, not the service's
    calm = units.explain(state, ["ValueError: boom"], kernel)
    assert not [v for v in calm if v.id.startswith(("xid-", "gpu-reset/"))]


# --- when it ran out of memory --------------------------------------------------------------------


def test_an_oom_while_serving_names_the_knobs_of_one_requests_memory():
    v = first(log("vllm-logs/field-request-oom-88k.log"))
    assert v.id == "vllm-oom/request" and "while serving requests" in v.what
    assert "1.31 GiB on GPU 1" in v.what
    for knob in ("vllm_max_num_batched_tokens", "vllm_long_prefill_token_threshold",
                 "vllm_max_model_len"):  # fmt: skip
        assert knob in v.fix
    assert "nvidia-smi" not in v.fix and "other processes" not in v.fix


def test_an_oom_at_graph_capture_is_named_with_enforce_eager():
    v = first(log("vllm-cuda/constructed-oom-graph-capture.log"))
    assert v.id == "vllm-oom/graph-capture" and "64.00 MiB on GPU 0" in v.what
    assert "--enforce-eager" in v.fix


def test_an_oom_at_start_stays_a_start_up_oom():
    assert first(log("vllm-logs/field-cuda-oom.log")).id == "vllm-oom/cuda"


def test_a_new_run_starts_the_phases_over():
    lines = [
        "INFO: Application startup complete.",
        "(APIServer pid=1) INFO [api_server.py:1890] vLLM API server version 0.22.1",
        "(EngineCore pid=9) INFO [default_loader.py:397] Loading weights took 21.40 seconds",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
    ]
    assert diagnosis.phase_at(lines, 3) == "loading"
    assert diagnosis.phase_at(lines, 1) == "serving"
    assert first("\n".join(lines)).id == "vllm-oom/cuda"


@pytest.mark.parametrize(
    "served",
    [
        '(APIServer pid=1) INFO:     127.0.0.1:40112 - "POST /v1/completions HTTP/1.1" 200 OK',
        "(APIServer pid=1) INFO [loggers.py:259] Engine 000: Avg prompt throughput: 12.0 tokens/s",
    ],
)
def test_a_request_logged_before_the_oom_makes_it_a_serving_oom(served):
    text = f"{served}\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB."
    assert first(text).id == "vllm-oom/request"


def test_the_kernel_log_is_read_around_the_runs_that_explain_the_unit():
    """An Xid of this boot hours before the run is not this run's cause: the kernel log is read
    from KERNEL_SLACK_S before the explained runs' first journal entry to as long after the
    last (journalctl prints __REALTIME_TIMESTAMP in microseconds with any --output-fields)."""

    def entry(inv: str, seconds: float, message: str) -> str:
        return json.dumps(
            {
                "MESSAGE": message,
                "_SYSTEMD_INVOCATION_ID": inv,
                "__REALTIME_TIMESTAMP": str(int(seconds * 1_000_000)),
            }
        )

    journal = "\n".join(
        [
            entry("old", 100.0, "vLLM API server version 0.22.1"),
            entry("a", 1000.0, "vLLM API server version 0.22.1"),
            entry("a", 1005.5, "RuntimeError: CUDA error: unspecified launch failure"),
            entry("b", 2000.0, "vLLM API server version 0.22.1"),
            entry("b", 2010.25, "RuntimeError: CUDA error: unspecified launch failure"),
        ]
    )

    def runner(show: str):
        def answer(argv: list[str]) -> tuple[int, str]:
            if argv[:2] == ["systemctl", "show"]:
                return 0, show
            if argv[:2] == ["journalctl", "-u"]:
                return 0, journal
            return 0, ""

        return answer

    failed = "Id=vllm.service\nLoadState=loaded\nActiveState=failed\nSubState=failed\n"
    state, lines = units.read_unit("vllm.service", runner(failed))
    assert state["window"] == (1000.0, 2010.25) and len(lines) == 4
    assert units.kernel_argv(window=state["window"])[-2:] == ["--since=@940", "--until=@2071"]
    running = (
        "Id=vllm.service\nLoadState=loaded\nActiveState=active\nSubState=running\n"
        "NRestarts=0\nInvocationID=b\n"
    )
    state, lines = units.read_unit("vllm.service", runner(running))
    assert state["window"] == (2000.0, 2010.25) and len(lines) == 2
    # no timestamps (a journal read some other way): the whole boot, as before
    assert "--since" not in " ".join(units.kernel_argv())
