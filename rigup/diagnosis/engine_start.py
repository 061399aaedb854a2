"""What vLLM's engine log says about one start: times, memory, the KV pool, the attention block
size, the CUDA-graph mode and the attention backend, as one typed record.

Standard library only (the diagnosis library runs on hosts and on the GPU serving check's
machine). Read from vLLM 0.22.1's own messages; each pattern names the file that logs it
(paths under vllm/). Tested on real logs of the CUDA build (tests/fixtures/vllm-cuda, an H200)
and of the CPU build (tests/fixtures/vllm-cpu). A figure the log does not state is None.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

#: vLLM's log prefix: "INFO 12-01 18:47:02 [file.py:123] message" (month-day, no year)
_STAMP = re.compile(r"\b(?:INFO|WARNING|ERROR|DEBUG) (\d\d-\d\d \d\d:\d\d:\d\d) \[")
# v1/core/kv_cache_utils.py
_KV_TOKENS = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
_NEEDED = re.compile(
    r"max seq len \((\d+)\), \(?([\d.]+) GiB KV cache is needed, which is larger than the "
    r"available KV cache memory \(([\d.]+) GiB\)\.(?: Based on the available memory, the "
    r"estimated maximum model length is (\d+)\.)?"
)
# v1/worker/gpu_worker.py
_AVAILABLE_KV = re.compile(r"Available KV cache memory: ([\d.]+) GiB")
# platforms/interface.py (hybrid models: the attention page must hold a mamba/GDN state page)
_BLOCK = re.compile(r"Setting attention block size to (\d+) tokens")
# v1/worker/gpu_model_runner.py
_LOAD = re.compile(r"Model loading took ([\d.]+) GiB memory and ([\d.]+) seconds")
_GRAPHS = re.compile(r"Graph capturing finished in (\d+) secs, took ([\d.-]+) GiB")
# compilation/monitor.py: one line per compiled model (the backbone, then the MTP drafter)
_COMPILE = re.compile(r"torch\.compile took ([\d.]+) s in total")
# v1/engine/core.py
_INIT = re.compile(
    r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s"
    r"(?: \(compilation: ([\d.]+) s\))?"
)
# platforms/cuda.py, and the CPU build's selector
_BACKEND = re.compile(r"Using (\w+) attention backend|KV cache layout for (\w+) backend")
# config.py's dump at engine start, then the fallbacks vLLM logs (config/compilation.py)
_GRAPH_MODE = re.compile(r"'cudagraph_mode': <CUDAGraphMode\.(\w+):")
_GRAPH_FALLBACK = re.compile(r"setting cudagraph_mode=(\w+)")
_EAGER = re.compile(r"Enforce eager set|Cudagraph is disabled under eager mode")
# entrypoints/openai/api_server.py
_SERVING = re.compile(r"Starting vLLM (?:API )?server on (\S+)")


@dataclass(frozen=True)
class EngineStart:
    """One engine start as its log tells it. Units: seconds, GiB (vLLM's: 2**30 bytes), tokens.

    ``startup_s``: first log line to "Starting vLLM server" (None until it serves);
    ``kv_pool_tokens``: the KV pool (the last figure logged: with tensor parallelism each rank
    logs the same); ``max_concurrency``: requests of ``concurrency_tokens`` the pool holds;
    ``block_size``: the attention block size vLLM raised it to (None when it kept the asked one);
    ``graph_mode``: the CUDA-graph mode in force (``NONE`` eager, ``PIECEWISE``,
    ``FULL_AND_PIECEWISE``...); ``compile_s``: torch.compile over every compiled model;
    ``kv_needed_gib``/``kv_available_gib``/``estimated_max_model_len``: from vLLM's refusal of a
    ``max_model_len`` the KV memory cannot hold (``refused_max_model_len``)."""

    serving_url: str | None = None
    startup_s: float | None = None
    init_engine_s: float | None = None
    compile_s: float | None = None
    load_gib: float | None = None
    load_s: float | None = None
    available_kv_gib: float | None = None
    kv_pool_tokens: int | None = None
    concurrency_tokens: int | None = None
    max_concurrency: float | None = None
    block_size: int | None = None
    graph_mode: str | None = None
    cuda_graph_gib: float | None = None
    cuda_graph_s: int | None = None
    attention_backend: str | None = None
    refused_max_model_len: int | None = None
    kv_needed_gib: float | None = None
    kv_available_gib: float | None = None
    estimated_max_model_len: int | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def _last(pattern: re.Pattern, text: str) -> re.Match | None:
    found = None
    for found in pattern.finditer(text):  # noqa: B007  (the last one is wanted)
        pass
    return found


def _int(s: str) -> int:
    return int(s.replace(",", ""))


#: days before each month (vLLM's stamps have no year; a start across February 29 is off by a day)
_DAYS_BEFORE = (0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334)


def _stamp_seconds(stamp: str) -> int:
    """Seconds since the year's start of a "MM-DD HH:MM:SS" stamp."""
    month, day, hour, minute, second = (int(x) for x in re.split(r"[- :]", stamp))
    return (((_DAYS_BEFORE[month - 1] + day - 1) * 24 + hour) * 60 + minute) * 60 + second


def _seconds(first: str, last: str) -> float:
    """Seconds between two "MM-DD HH:MM:SS" stamps (a start across new year is not)."""
    return float(_stamp_seconds(last) - _stamp_seconds(first))


def engine_start_facts(log_text: str) -> EngineStart:
    """The :class:`EngineStart` of the last engine start in ``log_text`` (vLLM's stdout and
    stderr as one text; ``startup_s`` counts from the text's first log line, so give it the log
    of one start). Never raises on unknown text: a figure not found is None."""
    marks = [m.start() for m in re.finditer(r"Initializing a V1 LLM engine", log_text)]
    text = log_text[marks[-1] :] if marks else log_text
    first = _STAMP.search(log_text)
    f: dict = {}
    if m := _last(_SERVING, text):
        f["serving_url"] = m.group(1)
        here = _STAMP.findall(text[: m.end() + 200])
        if first and here:
            f["startup_s"] = _seconds(first.group(1), here[-1])
    if m := _last(_INIT, text):
        f["init_engine_s"] = float(m.group(1))
    compiles = [float(x) for x in _COMPILE.findall(text)]
    if compiles:
        f["compile_s"] = round(sum(compiles), 2)
    if m := _last(_LOAD, text):
        f["load_gib"], f["load_s"] = float(m.group(1)), round(float(m.group(2)), 2)
    if m := _last(_AVAILABLE_KV, text):
        f["available_kv_gib"] = float(m.group(1))
    if m := _last(_KV_TOKENS, text):
        f["kv_pool_tokens"] = _int(m.group(1))
    if m := _last(_CONCURRENCY, text):
        f["concurrency_tokens"], f["max_concurrency"] = _int(m.group(1)), float(m.group(2))
    if m := _last(_BLOCK, text):
        f["block_size"] = int(m.group(1))
    if m := _last(_GRAPHS, text):
        f["cuda_graph_s"], f["cuda_graph_gib"] = int(m.group(1)), float(m.group(2))
    if _EAGER.search(text):
        f["graph_mode"] = "NONE"
    elif m := _last(_GRAPH_FALLBACK, text):
        f["graph_mode"] = m.group(1)
    elif m := _last(_GRAPH_MODE, text):
        f["graph_mode"] = m.group(1)
    if m := _last(_BACKEND, text):
        f["attention_backend"] = m.group(1) or m.group(2)
    if m := _last(_NEEDED, text):
        f["refused_max_model_len"] = int(m.group(1))
        f["kv_needed_gib"], f["kv_available_gib"] = float(m.group(2)), float(m.group(3))
        if m.group(4):
            f["estimated_max_model_len"] = int(m.group(4))
    return EngineStart(**f)
