"""Signatures of vLLM's journal for failures of the CUDA engine's own kernels at start-up, as
they really look: a Triton kernel that cannot compile for the checkpoint's shapes (the fused
gated-delta-net prefill with key and value head dims that differ, captured on an H200), and
FlashInfer's JIT without the CUDA compiler. The start facts (attention backend, block size, KV
pool, graph mode) are read elsewhere (engine_start); the OOM at CUDA graph capture is in
vllm_memory (it is told apart by when it happened).

Sources: tests/fixtures/vllm-cuda/fail-gdn-prefill-k32-v64.log (captured, vLLM 0.22.1 on an H200
with ``--gdn-prefill-backend triton``); vLLM 0.22.1
model_executor/layers/fla/ops/fused_gdn_prefill_post_conv.py:209-210 (BK = next_power_of_2(K),
BV = next_power_of_2(V): one ``mask_2d`` for both branches needs BK = BV); FlashInfer
0.6.11.post2 jit/cpp_ext.py:48-65 (get_cuda_path: "Could not find nvcc and default
cuda_home=... doesn't exist"), :268 and :377 (nvcc at $cuda_home/bin/nvcc, "Ninja build
failed."); vLLM 0.22.1 utils/flashinfer.py:54-62.
"""

from __future__ import annotations

from .core import FAIL, Signature, Verdict

#: The fix of a toolkit that is missing or not where CUDA_HOME points.
_TOOLKIT_FIX = (
    "converge: rigup installs the pinned CUDA toolkit (cuda_toolkit_version, nvcc included) "
    "and points vllm.service's CUDA_HOME and PATH at it (a unit edited by hand is restored); "
    'or let vLLM take another attention backend: vllm_extra_args = ["--attention-backend", '
    '"TRITON_ATTN"], then converge'
)

_VLLM_CUDA: list[Signature] = [
    Signature(
        id="vllm-gdn-prefill/head-dims",
        source="vllm-log",
        severity=FAIL,
        what="vLLM's fused gated-delta-net prefill kernel cannot compile for this checkpoint "
        "(linear-attention key head dim {k} and value head dim {v}, each rounded up to a power "
        "of two, differ)",
        why="vLLM 0.22.1's Triton kernel fused_post_conv_prep (fla/ops/"
        "fused_gdn_prefill_post_conv.py) handles key and value heads in one program with one "
        "mask whose width is the head dim rounded up to a power of two, so it compiles only when "
        "the two are equal (Qwen3.6-27B: 128 and 128); the engine fails while profiling, before "
        "it serves",
        fix="serve a checkpoint whose config.json has linear_key_head_dim equal to "
        "linear_value_head_dim (model_llm_manifest), then converge; a 3090 (compute capability "
        "8.6) has only this Triton kernel, while on compute capability 9.0 vLLM's default "
        "(no --gdn-prefill-backend in vllm_extra_args) takes FlashInfer's GDN prefill instead",
        pattern=r"Mismatched type for mask_2d between then block \(<\['\d+', '(?P<k>\d+)'\], "
        r"int1>\) and else block \(<\['\d+', '(?P<v>\d+)'\], int1>\)",
        reference="captured: tests/fixtures/vllm-cuda/fail-gdn-prefill-k32-v64.log; vLLM 0.22.1 "
        "fused_gdn_prefill_post_conv.py:72-113, :209-210; qwen_gdn_linear_attn.py:150-177 "
        "(the FlashInfer GDN prefill only on SM90 and SM10x)",
    ),
    Signature(
        id="vllm-triton-compile",
        source="vllm-log",
        severity=FAIL,
        what="Triton could not compile one of vLLM's kernels{kernel_words}",
        why="a Triton kernel is compiled for the shapes of the checkpoint and the GPU at its "
        "first call (at start-up, while profiling): this one does not compile for them; the "
        "lines after 'CompilationError' name the kernel's source line and Triton's reason",
        fix="compare the checkpoint's config.json with the model the kernel was written for "
        "(rigup's checkpoint preflight reads it at converge); search the error's last line in "
        "vLLM's issues; the lines after it: `journalctl -u vllm -n 300`",
        pattern=r"triton\.compiler\.errors\.CompilationError: at (?P<at>\d+:\d+)",
        # the last frame of vLLM's model code before the error (no later one follows it)
        context={
            "kernel": r'vllm/(model_executor/[\w/]+\.py)", line \d+'
            r'(?![\s\S]*vllm/model_executor/[\w/]+\.py")'
        },
        derive=lambda f: {"kernel_words": f" ({f['kernel']})" if f.get("kernel") else ""},
        reference="Triton 3.6.0 triton/compiler/errors.py (CompilationError 'at <line>:<col>')",
    ),
    Signature(
        id="vllm-flashinfer-jit/no-cuda-home",
        source="vllm-log",
        severity=FAIL,
        what="FlashInfer cannot compile its kernels: no CUDA compiler (nvcc) on this host",
        why="FlashInfer compiles its attention kernels at their first use (JIT) with nvcc; "
        "neither CUDA_HOME nor PATH names one and {cuda_home} does not exist; vLLM 0.22.1 "
        "takes FlashInfer attention for vllm_kv_cache_dtype fp8_e5m2",
        fix=_TOOLKIT_FIX,
        pattern=r"Could not find nvcc and default cuda_home=['\"]?(?P<cuda_home>[^'\"\s]+)['\"]? "
        r"doesn't exist",
        reference="FlashInfer 0.6.11.post2 jit/cpp_ext.py:48-65 (get_cuda_path)",
    ),
    Signature(
        id="vllm-flashinfer-jit/no-nvcc",
        source="vllm-log",
        severity=FAIL,
        what="FlashInfer cannot compile its kernels: {nvcc} is missing",
        why="FlashInfer compiles its attention kernels at their first use (JIT) with "
        "$CUDA_HOME/bin/nvcc, and CUDA_HOME names a directory without it (a runtime-only CUDA, "
        "or a toolkit removed since); vLLM 0.22.1 takes FlashInfer attention for "
        "vllm_kv_cache_dtype fp8_e5m2",
        fix=_TOOLKIT_FIX,
        pattern=r"(?:/bin/sh: \d+: )?(?P<nvcc>/\S*/bin/nvcc): (?:not found|No such file or directory)",
        reference="FlashInfer 0.6.11.post2 jit/cpp_ext.py:268 ($cuda_home/bin/nvcc in its "
        "build.ninja), :377 ('Ninja build failed.'); dash's 'not found'",
    ),
]

#: Verdicts that only say where a failure surfaced; a more specific failure explains them.
_GENERIC = ("vllm-triton-compile",)
#: Verdicts that say a process died, not why (they never make a generic verdict redundant).
_DEATHS = ("vllm-engine-failed", "vllm-worker-died")


def drop_covered(verdicts: list[Verdict]) -> list[Verdict]:
    """The verdicts without the generic ones (:data:`_GENERIC`) when a more specific failure
    was recognised (the FP8 E4M3 refusal and the GDN head dims are Triton compile errors too)."""
    specific = any(v.severity == FAIL and v.id not in _GENERIC + _DEATHS for v in verdicts)
    return [v for v in verdicts if not (specific and v.id in _GENERIC)]
