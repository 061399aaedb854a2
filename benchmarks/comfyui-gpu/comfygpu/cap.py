"""A larger GPU made a 24 GiB card for ComfyUI: a ballast process and ComfyUI's view of total.

Two parts, both needed because ComfyUI decides from two readings (comfy/model_management.py of
0.30.0: ``get_total_memory`` and ``get_free_memory`` read ``torch.cuda.mem_get_info``; the
dynamic-VRAM allocator comfy-aimdo reads ``cuMemGetInfo`` itself):

- **free**: :func:`hold` runs in its own process before ComfyUI starts and takes the card's
  memory with plain device allocations (torch's caching allocator, i.e. ``cudaMalloc``; no
  managed memory) until ``cudaMemGetInfo`` reports ``free_gib`` free. The driver then refuses
  ComfyUI anything past that, whichever allocator asks (torch's, cudaMallocAsync's pool,
  comfy-aimdo's cuMemCreate): the cap is physical, not a promise of the process.
- **total**: ComfyUI sizes some things from the total (``EXTRA_RESERVED_VRAM`` on cards over
  15 GiB, the LTX VAE's decode chunking, /system_stats' ``vram_total``), which the ballast does
  not change. ``site_cap/sitecustomize.py`` (on ComfyUI's PYTHONPATH) makes
  ``torch.cuda.mem_get_info`` report ``min(total, COMFYUI_GPU_TOTAL_BYTES)`` as total; free is
  the driver's own figure. comfy-aimdo's own ``cuDeviceTotalMem`` still reads the H200's total
  (it sizes virtual address reservations with it, not physical memory).

Figures: an RTX 3090 has 24576 MiB (nvidia-smi's memory.total on a 3090); the default free is
24 GiB as the issue asks (a headless 3090 leaves a little less to the first process).
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

GIB = 1024**3
MIB = 1024**2
#: nvidia-smi's memory.total on a GeForce RTX 3090 (24576 MiB)
RTX3090_TOTAL_BYTES = 24576 * MIB
DEFAULT_FREE_GIB = 24.0
#: the caching allocator rounds large blocks to 2 MiB
STEP = 2 * MIB


def hold(free_gib: float, status: Path, device: int = 0) -> None:
    """Take device ``device``'s memory until ``free_gib`` GiB are free, write ``status`` (JSON:
    ``total``, ``free_before``, ``held``, ``free_after`` in bytes, ``target_free``), then keep
    it until SIGTERM/SIGINT, when ``free_at_exit`` is added. Raises RuntimeError when less than
    ``free_gib`` is free to begin with."""
    import torch

    torch.cuda.set_device(device)
    free, total = torch.cuda.mem_get_info(device)
    target = int(free_gib * GIB)
    if free < target:
        raise RuntimeError(f"only {free / GIB:.2f} GiB free, less than the {free_gib} GiB asked")
    blocks = []
    held = 0
    for chunk in (GIB, 256 * MIB, 16 * MIB, STEP):
        while True:
            free, _ = torch.cuda.mem_get_info(device)
            if free - target < chunk:
                break
            blocks.append(torch.empty(chunk, dtype=torch.uint8, device=f"cuda:{device}"))
            held += chunk
    free, _ = torch.cuda.mem_get_info(device)
    record = {
        "total": total,
        "target_free": target,
        "held": held,
        "free_after": free,
        "reserved_by_torch": torch.cuda.memory_reserved(device),
        "how": "torch.empty on the caching allocator (cudaMalloc), no managed memory",
    }
    status.write_text(json.dumps(record) + "\n")
    print(json.dumps(record), flush=True)

    def leave(signum, frame):
        record["free_at_exit"] = torch.cuda.mem_get_info(device)[0]
        status.write_text(json.dumps(record) + "\n")
        sys.exit(0)

    signal.signal(signal.SIGTERM, leave)
    signal.signal(signal.SIGINT, leave)
    while True:
        time.sleep(3600)
