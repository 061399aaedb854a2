"""Signatures of vLLM's journal for failures in native GPU code (CUDA errors of vLLM's C++/CUDA
kernels and of PyTorch), and :func:`follow_code_paths`: which native code path the error came
from (the traceback's frames, the ``Cuda error <file>:<line>`` of vLLM's CUDACHECK) and which of
the run's settings enabled that path, so the fix names a setting to change, cheapest first.

The code paths, the start-up lines that show each was in use, and the setting behind it
(:data:`CODE_PATHS`) are read from vLLM 0.22.1: ``csrc/custom_all_reduce.cuh`` (its CUDACHECK
prints "Failed: Cuda error %s:%d '%s'"), ``platforms/cuda.py:378`` ("Using %s attention backend
out of potential backends"), ``model_executor/layers/quantization/auto_gptq.py:353`` ("Using
%s for AutoGPTQLinearMethod"), ``model_executor/kernels/linear/__init__.py:415``
(VLLM_DISABLED_KERNELS), ``v1/worker/gpu_model_runner.py:6456`` ("Graph capturing finished"),
``model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py:228``; captured start-ups:
tests/fixtures/vllm-cuda/serve-tiny-int4-*.log.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .core import FAIL, Signature, Verdict, by_id, verdict
from .kernel_log import MTP_GDN_CRASH, MTP_GDN_CRASH_FIX


@dataclass(frozen=True)
class CodePath:
    """A native code path: ``frame`` finds it in a traceback frame or a CUDA error's file,
    ``used`` in the start-up lines of the run; ``what`` it is and the setting behind it; ``fix``
    turns it off or around."""

    name: str
    frame: str
    used: str
    what: str
    fix: str


CODE_PATHS: tuple[CodePath, ...] = (
    CodePath(
        "custom all-reduce",
        r"custom_all_reduce|CustomAllreduce|custom_ar",
        r"CustomAllreduce|custom allreduce",
        "vLLM's custom all-reduce (the tensor-parallel workers write into each other's GPU "
        "memory over NVLink/P2P; rigup leaves it on when rigup-nvlink verified the bridge, "
        "nvlink_required)",
        'vllm_extra_args = ["--disable-custom-all-reduce"] (NCCL does the all-reduce; decode '
        "barely changes)",
    ),
    CodePath(
        "FlashInfer attention",
        r"flashinfer",
        r"Using FLASHINFER attention backend",
        "FlashInfer attention (vLLM 0.22.1 picks it for vllm_kv_cache_dtype fp8_e5m2: "
        "FlashAttention refuses that dtype)",
        'vllm_extra_args = ["--attention-backend", "TRITON_ATTN"] (it also runs fp8_e5m2), or '
        'vllm_kv_cache_dtype = "auto" (BF16 KV cache: half the context)',
    ),
    CodePath(
        "Marlin INT4 kernels",
        r"marlin",
        r"Using MarlinLinearKernel",
        "the Marlin kernels of the checkpoint's 4-bit (AutoRound/GPTQ) weights",
        'vllm_env = {"VLLM_DISABLED_KERNELS": "MarlinLinearKernel"} (vLLM takes a slower 4-bit '
        "kernel) to confirm, and report the log to vLLM",
    ),
    CodePath(
        "gated-delta-net kernels",
        r"fla/ops|fused_sigmoid_gating|gdn_linear_attn|fused_recurrent|chunk_gated_delta",
        r"Using Triton/FLA GDN prefill kernel",
        "the gated-delta-net (linear attention) kernels of Qwen3.6",
        MTP_GDN_CRASH_FIX,
    ),
    CodePath(
        "MTP speculative decoding",
        r"spec_decode|eagle\.py|propose",
        r"Loading drafter model|SpecDecoding metrics",
        "MTP speculative decoding (vllm_speculative_config)",
        "vllm_speculative_config = None to confirm (decode gets slower)",
    ),
    CodePath(
        "CUDA graphs",
        r"cuda_graph\.py|cudagraph|CUDAGraph|graph\.replay",
        r"Graph capturing finished|Capturing CUDA graphs",
        "CUDA graphs (vLLM replays captured kernels; off with --enforce-eager)",
        'vllm_extra_args = ["--enforce-eager"] (slower decode) to confirm',
    ),
)

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line \d+')
#: How far before a CUDA error its traceback's frames are looked for (lines).
_TRACEBACK_LINES = 80
#: The CUDA errors of the MTP x gated-delta-net crash (vllm#50021): suspected when no other path
#: is named.
_ASYNC = re.compile(r"illegal memory access|unspecified launch failure")


def surfaced_in(lines: list[str], index: int) -> list[CodePath]:
    """The code paths of the traceback frames (and CUDA error files) in the lines before
    ``lines[index]`` and the line itself."""
    window = lines[max(0, index - _TRACEBACK_LINES) : index + 1]
    files = [m.group("file") for line in window if (m := _FRAME.search(line))]
    files += [m.group("file") for line in window if (m := _CUDA_CHECK.search(line))]
    return [p for p in CODE_PATHS if any(re.search(p.frame, f, re.I) for f in files)]


def used_in(lines: list[str]) -> list[CodePath]:
    """The code paths the run's start-up lines show in use."""
    return [p for p in CODE_PATHS if any(re.search(p.used, line) for line in lines)]


def _explain(error: str, surfaced: list[CodePath], used: list[CodePath]) -> dict[str, str]:
    others = [p for p in used if p not in surfaced]
    why = []
    if surfaced:
        why.append("it surfaced in " + "; ".join(p.what for p in surfaced))
    if others:
        why.append(
            "this run also used "
            + ", ".join(p.name for p in others)
            + " (a CUDA error is reported asynchronously: the kernel at fault may be another)"
        )
    gdn = next(p for p in CODE_PATHS if p.name == "gated-delta-net kernels")
    mtp_gdn = _ASYNC.search(error) and (gdn in surfaced or not surfaced)
    if mtp_gdn:
        why.append(MTP_GDN_CRASH)
    fixes = [p.fix for p in surfaced] + ([MTP_GDN_CRASH_FIX] if mtp_gdn else [])
    fix = " or ".join(dict.fromkeys(fixes))
    if others:
        fix += ("; if it persists, " if fix else "") + (
            "turn the other paths off one at a time to find the culprit: "
            + "; ".join(f"{p.name}: {p.fix}" for p in others)
        )
    fix += (
        "; converge after each change. rigup-doctor lists this boot's Xid events of the GPUs "
        "(a GPU that needs a reset makes every kernel fail)"
    )
    return {
        "why_paths": "; ".join(why) or "no native code path is named in the log",
        "fix_paths": fix.removeprefix("; converge after each change. "),
    }


_CUDA_CHECK = re.compile(r"Cuda error (?P<file>[^\s:']+):(?P<line>\d+) '(?P<msg>[^']*)'")

_VLLM_NATIVE: list[Signature] = [
    Signature(
        id="vllm-custom-allreduce/expandable-segments",
        source="vllm-log",
        severity=FAIL,
        what="vLLM's custom all-reduce failed on the GPU ('{error}' in custom_all_reduce.cuh) "
        "and the workers died",
        why="the known cause on vLLM 0.22.1: PyTorch's expandable segments (expandable_segments:True in PYTORCH_CUDA_ALLOC_CONF "
        "or PYTORCH_ALLOC_CONF, set through vllm_env) map the memory of the CUDA-graph buffers "
        "in a way vLLM 0.22.1's custom all-reduce cannot open across GPUs; custom all-reduce "
        "runs over a verified NVLink bridge (rigup-nvlink) with CUDA graphs on",
        fix="remove expandable_segments:True from vllm_env; or keep it and add "
        "'--disable-custom-all-reduce' (NCCL's all-reduce over NVLink) or '--enforce-eager' to "
        "vllm_extra_args; then converge",
        pattern=r"Cuda error \S*custom_all_reduce\.cuh:\d+ '(?P<error>[^']+)'",
        reference="vllm#42609 (2x3090 NV4, vLLM 0.22, Qwen3.6-27B AutoRound INT4, TP=2, MTP 3, "
        "fp8_e5m2; the fixes are not in 0.22.1); vLLM 0.22.1 csrc/custom_all_reduce.cuh CUDACHECK; "
        "tests/fixtures/vllm-logs/field-custom-allreduce-expandable-segments.log",
    ),
    Signature(
        id="vllm-native/cuda-check",
        source="vllm-log",
        severity=FAIL,
        what="a vLLM worker failed in native code: CUDA error '{msg}' at {file}:{line}",
        why="{why_paths}",
        fix="{fix_paths}",
        pattern=_CUDA_CHECK.pattern,
        reference="vLLM 0.22.1 csrc/custom_all_reduce.cuh CUDACHECK ('Failed: Cuda error %s:%d "
        "'%s''); vllm#42609 (2x3090 NV4, TP=2)",
    ),
    Signature(
        id="vllm-cuda-crash",
        source="vllm-log",
        severity=FAIL,
        what="a vLLM worker crashed on the GPU ('CUDA error: {error}')",
        why="{why_paths}",
        fix="{fix_paths}",
        pattern=r"CUDA error: (?P<error>[a-z][\w ,-]*\w)",
        reference="PyTorch c10/cuda/CUDAException.h (CUDA error: <cudaGetErrorString>); "
        "vllm#50021, vllm#53726; 2x3090 field log "
        "tests/fixtures/vllm-logs/worker-died-during-spec-decode.log",
    ),
]

NATIVE = tuple(s.id for s in _VLLM_NATIVE)


def follow_code_paths(verdicts: list[Verdict], lines: list[str]) -> list[Verdict]:
    """Each native CUDA failure filled with the code paths it surfaced in and the run used
    (``lines``: the journal's cleaned lines, the run's start-up included)."""
    used = used_in(lines)
    out = []
    for v in verdicts:
        if v.id in NATIVE and v.evidence and v.evidence[0] in lines:
            sig = by_id(v.id, "vllm-log")
            m = sig.regex.search(v.evidence[0]) if sig.regex else None
            groups = m.groupdict() if m else {}
            surfaced = surfaced_in(lines, lines.index(v.evidence[0]))
            error = groups.get("error") or groups.get("msg") or ""
            v = verdict(sig, {**groups, **_explain(error, surfaced, used)}, v.evidence)
        out.append(v)
    return out
