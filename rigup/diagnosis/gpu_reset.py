"""Signatures of the kernel log for a GPU that needs a reset: the GSP firmware's back-to-back
RPC timeouts, Xid 154 (the driver's recovery action for the GPU) and the other Xids whose
resolution in NVIDIA's Xid catalogue is a GPU reset or a reboot; and the GPUs' names by PCI slot
(:func:`gpu_labels`), so a verdict names "GPU 1 (NVIDIA GeForce RTX 3090)" rather than a bus id.

Sources: NVIDIA's Xid catalogue (docs.nvidia.com/deploy/xid-errors, its "Resolution" column),
NVML's ``nvmlGpuRecoveryAction_t`` (nvml.h: 0 NONE, 1 GPU_RESET, 2 NODE_REBOOT, 3 DRAIN_P2P,
4 DRAIN_AND_RESET), the open kernel modules' reports NVIDIA/open-gpu-kernel-modules#446, #1134
(an RTX 3090, kernel 7.0.3) and #1125.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from .core import FAIL, OK, Signature

#: An Xid line: ``NVRM: Xid (PCI:0000:0b:00): 154, ...`` (``NVRM: `` is left out by some tools).
XID = r"(?:NVRM: )?Xid \((?:PCI:)?(?P<bus>[0-9A-Fa-f:.]+)\): "

_SLOT = re.compile(
    r"^(?:(?P<domain>[0-9A-Fa-f]+):)?(?P<bus>[0-9A-Fa-f]{2}):(?P<dev>[0-9A-Fa-f]{2})"
)


def pci_slot(bus_id: str) -> str:
    """A PCI bus id as the kernel log and nvidia-smi write it -> ``dddd:bb:dd`` in lower case:
    ``00000000:0B:00.0`` (nvidia-smi's pci.bus_id), ``0000:0b:00`` (an Xid line) and
    ``0b:00.0`` (lspci) are the same slot. Text that is no bus id is returned unchanged."""
    m = _SLOT.match(bus_id.strip())
    if not m:
        return bus_id
    domain = int(m.group("domain") or "0", 16)
    return f"{domain:04x}:{m.group('bus').lower()}:{m.group('dev').lower()}"


def gpu_labels(gpus: Iterable[Any]) -> dict[str, str]:
    """``{pci slot: "GPU <index> (<name>)"}`` from rigup's GPU query rows (objects or dicts with
    ``index``, ``pci_bus_id`` and ``name``, as rigup.nvidia.query_gpus gives them); rows without
    a bus id are skipped."""
    out = {}
    for gpu in gpus:
        get = gpu.get if isinstance(gpu, Mapping) else lambda k, g=gpu: getattr(g, k, None)
        bus = get("pci_bus_id")
        if bus:
            name = get("name")
            out[pci_slot(str(bus))] = f"GPU {get('index')}" + (f" ({name})" if name else "")
    return out


def gpu_field(f: Mapping[str, Any]) -> dict[str, str]:
    """The ``{gpu}`` of an Xid verdict: its name from ``gpus`` (:func:`gpu_labels`) with the
    slot, or "the GPU at <slot>" without nvidia-smi's output."""
    bus = f.get("bus") or f.get("bus2") or "?"
    slot = pci_slot(str(bus)) if bus != "?" else bus
    label = (f.get("gpus") or {}).get(slot)
    return {"bus": slot, "gpu": f"{label} at {slot}" if label else f"the GPU at {slot}"}


#: The order in which one GPU resets without a reboot on a rig: rigup keeps persistence mode on
#: (nvidia-persistenced at every boot), and its attachment counts as a client, so ``nvidia-smi -r``
#: answers "In use by another client" (exit 255) until the mode is off (NVIDIA/NVSentinel#1690;
#: NVIDIA/gpu-operator#118: stopping nvidia-persistenced lets the reset through).
RESET_ORDER = (
    "stop the services on it (`sudo systemctl stop vllm.service comfyui.service "
    "voxcpm.service`), then the persistence mode rigup keeps on (`sudo systemctl stop "
    "nvidia-persistenced`, or `sudo nvidia-smi -pm 0 -i <index>` where no daemon runs), then "
    "`sudo nvidia-smi -r -i <index>`, then persistence back on (`sudo systemctl start "
    "nvidia-persistenced` or `sudo nvidia-smi -pm 1 -i <index>`) and `sudo rigup-mode <mode>`; a "
    "GPU that drives a display (Xorg, nvidia_drm in use) does not reset this way: reboot"
)

#: How to reset a GeForce card that rigup's services use (no nvidia-smi -r while it is in use).
RESET_FIX = (
    "reboot the machine (`sudo reboot`); to reset one GPU without a reboot: "
    + RESET_ORDER
    + "; if the GPU is still missing or the error returns at once, power the machine off, "
    "unplug it for 30 s (a cold power cycle) and boot"
)

#: What to do when the GSP firmware times out again after the reset.
GSP_REPEATS = (
    "if it repeats under load: install the newest driver of the branch (nvidia_driver_branch, "
    "then converge), check the card's power (power cables, nvidia_power_limit_w) and capture "
    "`sudo nvidia-bug-report.sh` for NVIDIA (open-gpu-kernel-modules#446, #1134, #1125)"
)

#: NVML's recovery actions (nvml.h nvmlGpuRecoveryAction_t) -> what to do.
RECOVERY_ACTIONS = {
    0: "none",
    1: "a GPU reset",
    2: "a reboot of the machine",
    3: "draining peer-to-peer traffic",
    4: "draining peer-to-peer traffic, then a GPU reset",
}


def _action(f: Mapping[str, Any]) -> dict[str, str]:
    try:
        code = int(str(f.get("to") or ""), 16)
    except ValueError:
        code = -1
    return {**gpu_field(f), "needs": RECOVERY_ACTIONS.get(code, f"recovery action {f.get('to')}")}


_XID154 = rf"{XID}154\b.*?recovery action changed from (?P<from>0x[0-9a-fA-F]+)(?: \([^)]*\))? to "

#: Xids whose resolution in NVIDIA's Xid catalogue is a GPU reset or a reboot (besides 79, 119,
#: 120, 154, which have their own signatures): number -> the catalogue's name.
RESET_XIDS = {
    62: "internal micro-controller halt",
    95: "uncontained ECC error",
    140: "unrecovered ECC error",
    143: "GPU initialization failure",
}

_GPU_RESET: list[Signature] = [
    Signature(
        id="gpu-reset/gsp-timeout",
        source="kernel-log",
        severity=FAIL,
        what="the GSP firmware of {gpu} stopped answering: the driver marked the GPU for reset",
        why="'Back to back GSP RPC timeout detected': the GPU System Processor (the firmware that "
        "runs the GPU's resource manager since driver 510; the open kernel modules always use it) "
        "missed several RPC deadlines in a row, and every CUDA program on that GPU fails until "
        "it is reset",
        fix=RESET_FIX + "; " + GSP_REPEATS,
        pattern=r"Back to back GSP RPC timeout detected!? GPU marked for reset",
        context={"bus": r"Xid \((?:PCI:)?([0-9A-Fa-f:.]+)\): (?:119|154)\b"},
        derive=gpu_field,
        reference="NVIDIA/open-gpu-kernel-modules#446, #1134 (RTX 3090, kernel 7.0.3), #1125",
    ),
    Signature(
        id="gpu-reset/required",
        source="kernel-log",
        severity=FAIL,
        what="{gpu} needs {needs} (Xid 154: recovery action {to})",
        why="the driver set the GPU's recovery action (Xid 154, 'GPU recovery action changed') "
        "after a fault it cannot recover from in place; until then CUDA programs on it fail",
        fix=RESET_FIX + "; " + GSP_REPEATS,
        pattern=_XID154 + r"(?P<to>0x0*[124])\b",
        derive=_action,
        reference="NVIDIA Xid catalogue: 154 GPU recovery action changed; nvml.h "
        "nvmlGpuRecoveryAction_t; open-gpu-kernel-modules#1134",
    ),
    Signature(
        id="gpu-reset/drain-p2p",
        source="kernel-log",
        severity=FAIL,
        what="{gpu} needs {needs} (Xid 154: recovery action {to})",
        why="the driver asks that peer-to-peer traffic to and from the GPU stop (NVLink or PCIe "
        "P2P between the tensor-parallel workers) before it can recover",
        fix="stop the services using the GPUs (`sudo systemctl stop vllm`, or `sudo rigup-mode "
        "media`), then reboot if the recovery action does not return to 0x0 (None)",
        pattern=_XID154 + r"(?P<to>0x0*3)\b",
        derive=_action,
        reference="NVIDIA Xid catalogue: 154; nvml.h NVML_GPU_RECOVERY_ACTION_DRAIN_P2P",
    ),
    Signature(
        id="gpu-reset/cleared",
        source="kernel-log",
        severity=OK,
        what="{gpu}'s recovery action was cleared (Xid 154: back to 0x0, none)",
        why="the GPU recovered (a reset or a reboot ran)",
        fix="nothing to do",
        pattern=_XID154 + r"(?P<to>0x0+)\b",
        derive=_action,
        reference="NVIDIA Xid catalogue: 154; nvml.h NVML_GPU_RECOVERY_ACTION_NONE",
    ),
    Signature(
        id="gpu-reset/xid",
        source="kernel-log",
        severity=FAIL,
        what="{gpu} needs a reset: Xid {xid} ({meaning})",
        why="NVIDIA's Xid catalogue resolves Xid {xid} by resetting the GPU (or rebooting); CUDA "
        "programs on it fail until then{repeat}",
        fix=RESET_FIX,
        pattern=rf"{XID}(?P<xid>{'|'.join(str(x) for x in RESET_XIDS)})\b",
        derive=lambda f: {
            **gpu_field(f),
            "meaning": RESET_XIDS.get(int(f.get("xid") or 0), "?"),
            "repeat": "; if it returns after a reset the card itself is failing"
            if str(f.get("xid")) in ("95", "140", "143")
            else "",
        },
        reference="NVIDIA Xid catalogue: 62 internal micro-controller halt, 95 uncontained ECC "
        "error, 140 unrecovered ECC error, 143 GPU initialization failure (resolution: reset GPU)",
    ),
]
