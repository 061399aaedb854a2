"""Loaded by ComfyUI's Python (this folder first on PYTHONPATH) in the 24 GiB runs.

- ``COMFYUI_GPU_TOTAL_BYTES``: ``torch.cuda.mem_get_info`` reports ``min(total, this)`` as
  total; free stays the driver's figure (the ballast of comfygpu/cap.py makes it 24 GiB).
  Patched when ``torch.cuda`` is first imported, so nothing (torch included) is imported
  earlier than ComfyUI's main.py imports it (its cuda_malloc.py sets PYTORCH_CUDA_ALLOC_CONF
  before that import).
- ``COMFYUI_GPU_SAMPLES``: a daemon thread appends one JSON line every 0.5 s once CUDA is
  initialised in this process: time, torch's allocated/reserved/max reserved bytes and the
  driver's free/total bytes (unpatched).
"""

import importlib.abc
import importlib.machinery
import json
import os
import sys
import threading
import time

_TOTAL = int(os.environ.get("COMFYUI_GPU_TOTAL_BYTES", "0") or 0)
_SAMPLES = os.environ.get("COMFYUI_GPU_SAMPLES", "")


def _patch(cuda):
    real = cuda.mem_get_info

    def mem_get_info(device=None):
        free, total = real(device)
        return free, min(total, _TOTAL)

    mem_get_info.__wrapped__ = real
    cuda.mem_get_info = mem_get_info
    if _SAMPLES:
        threading.Thread(target=_sample, args=(cuda, real), daemon=True).start()


def _sample(cuda, real):
    with open(_SAMPLES, "a", buffering=1) as out:
        while True:
            time.sleep(0.5)
            try:
                if not cuda.is_initialized():
                    continue
                free, total = real(0)
                out.write(
                    json.dumps(
                        {
                            "t": round(time.time(), 2),
                            "allocated": cuda.memory_allocated(0),
                            "reserved": cuda.memory_reserved(0),
                            "max_reserved": cuda.max_memory_reserved(0),
                            "max_allocated": cuda.max_memory_allocated(0),
                            "free": free,
                            "total": total,
                        }
                    )
                    + "\n"
                )
            except Exception as exc:  # a sample must never stop ComfyUI
                out.write(json.dumps({"t": round(time.time(), 2), "error": repr(exc)}) + "\n")
                time.sleep(5)


class _Loader(importlib.abc.Loader):
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        _patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "torch.cuda":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


if _TOTAL > 0:
    sys.meta_path.insert(0, _Finder())
