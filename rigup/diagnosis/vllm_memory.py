"""Signatures of vLLM's journal about memory: the engine's start-up budget (free memory, KV
cache, profiling), CUDA out of memory and WHEN it ran out (loading, profiling, CUDA graph
capture, or while serving requests), read from the start-up messages before it
(:func:`phase_at`, :func:`refine_by_phase`)."""

from __future__ import annotations

import re
from typing import Any

from .core import FAIL, Signature, Verdict, by_id, verdict

_GIB = r"(?P<{}>[\d.]+)"


def _memory_where(f: dict[str, Any]) -> dict[str, str]:
    """The engine's memory words: a GPU's, or (the CPU engine) a NUMA node's."""
    cpu = f.get("kind") == "CPU"
    device = f.get("device") or "?"
    where = f"NUMA node {device}'s memory" if cpu else f"GPU memory on {device}"
    holders = f.get("holders") or (
        "the CPU engine reserves that fraction of the machine's memory"
        if cpu
        else "another process holds it: `nvidia-smi` lists it (another mode's service, a "
        "desktop session, a second vLLM)"
    )
    fix = (
        "lower vllm_cpu_memory_utilization (the CPU build's --gpu-memory-utilization: the "
        "fraction of the machine's memory vLLM reserves) or stop what uses the memory, then "
        "converge"
        if cpu
        else "stop what holds the GPU memory (`sudo rigup-mode llm` stops the media mode's "
        "services), or lower vllm_gpu_memory_utilization within the VRAM budget, then start "
        "vLLM again (`sudo rigup-mode llm`)"
    )
    return {"where": where, "holders": holders, "memory_fix": fix}


def _estimate(f: dict[str, Any]) -> dict[str, str]:
    est = f.get("estimated")
    return {
        "estimate": f"; it could serve {est} tokens" if est else "",
        "max_fix": f"{est} or less" if est else "what fits",
    }


#: torch.OutOfMemoryError's message (PyTorch c10/cuda/CUDACachingAllocator.cpp) and its GPU.
_OOM = r"OutOfMemoryError: CUDA out of memory\. Tried to allocate (?P<size>[\d.]+ [KMG]iB)"
_OOM_GPU = r"GPU (\d+) has a total capacity"


def _oom_gpu(f: dict[str, Any]) -> dict[str, str]:
    return {"gpu": f" on GPU {f['gpu_index']}" if f.get("gpu_index") else ""}


_VLLM_MEMORY: list[Signature] = [
    Signature(
        id="vllm-kv-cache-too-small",
        source="vllm-log",
        severity=FAIL,
        what="the KV cache cannot hold one request of vllm_max_model_len ({max_len} tokens)",
        why="vLLM needs {needed} GiB of KV cache for it and has {available} GiB left after the "
        "weights{estimate}",
        fix="lower vllm_max_model_len to {max_fix}, or give vLLM more memory "
        "(vllm_gpu_memory_utilization within the mode's VRAM budget), then converge",
        pattern=r"To serve at least one request with the model's max seq len \((?P<max_len>\d+)\), "
        r"\(?(?P<needed>[\d.]+) GiB KV cache is needed, which is larger than the available KV "
        r"cache memory \((?P<available>[\d.]+) GiB\)",
        context={"estimated": r"the estimated maximum model length is (\d+)"},
        derive=_estimate,
        reference="vLLM 0.22.1 v1/core/kv_cache_utils.py:709-728 (ValueError at engine start); "
        "2x3090 field log tests/fixtures/vllm-logs/kv-cache-too-small.log",
    ),
    Signature(
        id="vllm-no-kv-memory",
        source="vllm-log",
        severity=FAIL,
        what="no memory is left for the KV cache after the weights",
        why="'No available memory for the cache blocks': vllm_gpu_memory_utilization leaves "
        "nothing once the weights and activations are in",
        fix="raise vllm_gpu_memory_utilization (within the mode's VRAM budget) or serve a smaller "
        "checkpoint, then converge",
        pattern=r"No available memory for the cache blocks",
        reference="vLLM 0.22.1 v1/core/kv_cache_utils.py:697-705",
    ),
    Signature(
        id="vllm-memory-below-request",
        source="vllm-log",
        severity=FAIL,
        what="the engine refused to start: {free} of {total} GiB free in {where}, "
        "{requested} GiB requested (--gpu-memory-utilization {util})",
        why="vLLM reserves that fraction of the whole memory at start-up and that much is not "
        "free: {holders}",
        fix="{memory_fix}",
        pattern=r"(?:Free|Available) memory on (?:device|node) (?P<device>\S+) \("
        + _GIB.format("free")
        + "/"
        + _GIB.format("total")
        + r" GiB\) on startup is less than desired (?P<kind>GPU|CPU) "
        r"memory utilization \("
        + _GIB.format("util")
        + ", "
        + _GIB.format("requested")
        + r" GiB\)",
        derive=_memory_where,
        reference="vLLM 0.22.1 v1/worker/utils.py:403-421 (GPU), v1/worker/cpu_worker.py (CPU "
        "engine, captured: tests/fixtures/vllm-cpu/fail-a-gpu-memory-utilization-0.92.log)",
    ),
    Signature(
        id="vllm-memory-profiling",
        source="vllm-log",
        severity=FAIL,
        what="GPU memory changed while vLLM measured it at start-up",
        why="free memory went from {initial} to {current} GiB during profiling: another process "
        "took or released GPU memory meanwhile",
        fix="start vLLM alone on its GPUs: switch modes with `sudo rigup-mode llm` (it stops the "
        "media services first) rather than starting services by hand",
        pattern=r"Error in memory profiling\. Initial free memory (?P<initial>[\d.]+) GiB, "
        r"current free memory (?P<current>[\d.]+) GiB",
        reference="vLLM 0.22.1 v1/worker/gpu_worker.py:437-445",
    ),
    Signature(
        id="vllm-oom/weights",
        source="vllm-log",
        severity=FAIL,
        what="the weights do not fit in GPU memory",
        why="'Failed to load model - not enough GPU memory' while loading the checkpoint",
        fix="check that nothing else holds GPU memory (`nvidia-smi`), that the checkpoint is the "
        "INT4 one (model_llm_manifest) and that vllm_tensor_parallel_size spreads it over both "
        "GPUs",
        pattern=r"Failed to load model - not enough GPU memory",
        reference="vLLM 0.22.1 v1/worker/gpu_model_runner.py:5121-5131",
    ),
    Signature(
        id="vllm-oom/sampler",
        source="vllm-log",
        severity=FAIL,
        what="CUDA ran out of memory warming up the sampler for {n} requests",
        why="the sampler's workspace for vllm_max_num_seqs requests does not fit next to the "
        "KV cache",
        fix="lower vllm_max_num_seqs or vllm_gpu_memory_utilization, then converge",
        pattern=r"CUDA out of memory occurred when warming up sampler with (?P<n>\d+) dummy",
        reference="vLLM 0.22.1 v1/worker/gpu_model_runner.py:5974-5981",
    ),
    Signature(
        id="vllm-oom/cuda",
        source="vllm-log",
        severity=FAIL,
        what="CUDA out of memory (tried to allocate {size}{gpu})",
        why="vLLM's share of the card (vllm_gpu_memory_utilization) plus the CUDA context and "
        "whatever else runs on the card is more than the card has",
        fix="lower vllm_gpu_memory_utilization or vllm_max_num_batched_tokens, and check "
        "`nvidia-smi` for other processes on the GPUs",
        pattern=_OOM,
        context={"gpu_index": _OOM_GPU},
        derive=_oom_gpu,
        reference="PyTorch c10/cuda/CUDACachingAllocator.cpp (torch.OutOfMemoryError)",
    ),
    Signature(
        id="vllm-oom/graph-capture",
        source="vllm-log",
        severity=FAIL,
        what="CUDA ran out of memory while capturing CUDA graphs (tried to allocate {size}{gpu})",
        why="the engine had loaded the weights and sized the KV cache, and the memory left for "
        "its CUDA graphs was too small: vLLM 0.22.1 estimates the graphs' memory while profiling "
        "('Estimated CUDA graph memory') and sizes the KV pool around it, so capture needs more "
        "than estimated (more capture sizes with a larger vllm_max_num_seqs, MTP's drafter "
        "graphs) or another process took memory since the profile",
        fix='vllm_extra_args = ["--enforce-eager"] (no CUDA graphs: slower decode), or lower '
        "vllm_gpu_memory_utilization a little (room beside the KV pool) or vllm_max_num_seqs "
        "(fewer graphs), then converge",
        pattern=_OOM,
        context={"gpu_index": _OOM_GPU},
        derive=_oom_gpu,
        reference="vLLM 0.22.1 v1/worker/gpu_model_runner.py:6279 ('Profiling CUDA graph "
        "memory'), :6365, :6456 ('Graph capturing finished'), :6518 ('Capturing CUDA graphs'), "
        "v1/worker/gpu_worker.py:610 (capture_model after the KV cache is allocated)",
    ),
    Signature(
        id="vllm-oom/request",
        source="vllm-log",
        severity=FAIL,
        what="CUDA ran out of memory while serving requests (tried to allocate {size}{gpu}); "
        "the engine had started",
        why="the KV pool was sized at start-up, and one request's working memory came on top: "
        "a step prefills up to vllm_max_num_batched_tokens tokens, a long prompt is split into "
        "chunks of vllm_long_prefill_token_threshold, and a prompt can be as long as "
        "vllm_max_model_len; a long prompt's step needed more than was left (club-3090#487: an "
        "88K-token prompt on 2x3090 at 262144 context)",
        fix="bound one request's memory: lower vllm_max_num_batched_tokens (e.g. 8192) and "
        "vllm_long_prefill_token_threshold, or vllm_max_model_len to the longest prompt your "
        "clients send; or leave more room beside the KV pool (a lower "
        "vllm_gpu_memory_utilization); then converge",
        pattern=_OOM,
        context={"gpu_index": _OOM_GPU},
        derive=_oom_gpu,
        reference="club-3090#487; vLLM 0.22.1 config/scheduler.py (max_num_batched_tokens, "
        "long_prefill_token_threshold); the serving markers of :data:`PHASES`",
    ),
]

#: The engine's phases and the journal line that starts each, in start-up order; the last one
#: before a line is the phase that line belongs to ("start" before any of them). A new run
#: (vLLM's banner) starts over.
PHASES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("start", re.compile(r"vLLM API server version|non-default args:")),
    ("loading", re.compile(r"Starting to load model|Loading weights took|Model loading took")),
    ("profiling", re.compile(r"Profiling CUDA graph memory|Available KV cache memory")),
    ("graph-capture", re.compile(r"Capturing CUDA graphs")),
    ("started", re.compile(r"Graph capturing finished|Graph capturing skipped")),
    (
        "serving",
        re.compile(
            r"Application startup complete|\"(?:POST|GET) /v1/\S* HTTP/[\d.]+\" \d{3}|"
            r"Avg prompt throughput: [\d.]+ tokens/s|Added request |Received request "
        ),
    ),
)

#: The out-of-memory signature to use in each phase (the others keep vllm-oom/cuda).
_OOM_BY_PHASE = {"graph-capture": "vllm-oom/graph-capture", "serving": "vllm-oom/request"}


def phase_at(lines: list[str], index: int) -> str:
    """The engine's phase at ``lines[index]`` (see :data:`PHASES`): "start", "loading",
    "profiling", "graph-capture", "started" or "serving"."""
    for line in reversed(lines[:index]):
        for name, marker in reversed(PHASES):
            if marker.search(line):
                return name
    return "start"


def refine_by_phase(verdicts: list[Verdict], lines: list[str]) -> list[Verdict]:
    """Each "CUDA out of memory" verdict replaced by the one of the phase it happened in
    (graph capture, serving requests); ``lines`` are the journal's cleaned lines."""
    out = []
    for v in verdicts:
        if v.id == "vllm-oom/cuda" and v.evidence and v.evidence[0] in lines:
            phase = phase_at(lines, lines.index(v.evidence[0]))
            if phase in _OOM_BY_PHASE:
                sig = by_id(_OOM_BY_PHASE[phase], "vllm-log")
                m = sig.regex.search(v.evidence[0]) if sig.regex else None
                gpu = re.search(_OOM_GPU, "\n".join(lines))
                fields = {**(m.groupdict() if m else {}), "gpu_index": gpu and gpu.group(1)}
                v = verdict(sig, fields, v.evidence)
        out.append(v)
    return out
