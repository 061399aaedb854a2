"""Signatures of the kernel log (journalctl -k, dmesg): Xid events, module loading, CPU traps,
the OOM killer; and :func:`classify_kernel_log`."""

from __future__ import annotations

import re
from collections.abc import Mapping

from .core import FAIL, WARN, Signature, Verdict, classify_lines
from .gpu_reset import GSP_REPEATS, RESET_FIX, gpu_field
from .gpu_reset import XID as _XID
from .nvidia_smi import _BUS, LOST_GPU_FIX
from .unit_log import ram_fix

#: the kernel's summary line of an OOM kill names the victim's cgroup: a systemd unit
_OOM_TASK = re.compile(r"oom-kill:.*?task_memcg=(?P<memcg>[^,\s]*),task=[^,]*,pid=(?P<pid>\d+)")
_UNIT_IN_CGROUP = re.compile(r"([\w@:.\\-]+\.(?:service|scope))$")


def oom_units(text: str | None) -> dict[str, str]:
    """``{pid: unit}`` of the OOM kills in kernel log ``text``, from each kill's
    ``oom-kill:...task_memcg=/system.slice/comfyui.service,task=python3,pid=2345`` line."""
    out = {}
    for m in _OOM_TASK.finditer(text or ""):
        unit = _UNIT_IN_CGROUP.search(m["memcg"].rstrip("/"))
        if unit:
            out[m["pid"]] = unit.group(1)
    return out


def _oom_fields(f: dict) -> dict:
    unit = (f.get("oom_units") or {}).get(f.get("pid"))
    kib = f.get("anon_kib")
    memcg = f.get("scope") == "Memory cgroup out of memory"
    return {
        "unit": unit,
        "unit_words": f" of {unit}" if unit else "",
        "rss_words": f" holding {int(kib) / 1048576:.1f} GiB of RAM" if kib else "",
        "scope_words": "the unit's cgroup reached its memory limit (MemoryMax=)"
        if memcg
        else "the machine ran out of RAM and swap and the kernel killed the biggest process",
        "ram_fix": ram_fix(unit),
    }


MTP_GDN_CRASH = (
    "on this stack (vLLM 0.22.1 serving Qwen3.6 with MTP speculative decoding) suspect first the "
    "known crash of MTP in the gated-delta-net layers: an accepted-token count used as an index "
    "without bounds (vLLM's fla/ops/fused_sigmoid_gating.py; the fix is vllm#50021, not in "
    "0.22.1): vLLM's journal then shows 'CUDA error: unspecified launch failure' or 'an illegal "
    "memory access was encountered' in a worker, and the kernel Xid 13 or 31"
)

#: What to do about the MTP x gated-delta-net crash, cheapest first (club-3090 docs/UPSTREAM.md).
MTP_GDN_CRASH_FIX = (
    "add --no-async-scheduling to vllm_extra_args (keeps MTP; one owner's A/B: no crash at ~0 % "
    "single-stream cost), or serve without MTP (vllm_speculative_config = None), then converge; "
    "keep vllm_enable_prefix_caching = False (its align mode makes the crash likelier)"
)

_KERNEL_LOG: list[Signature] = [
    Signature(
        id="xid-79",
        source="kernel-log",
        severity=FAIL,
        what="{gpu} fell off the bus (Xid 79)",
        why="the GPU stopped answering on PCIe: riser, power delivery or seating",
        fix=LOST_GPU_FIX,
        pattern=rf"{_XID}79\b|NVRM: GPU (?:at )?(?:PCI:)?(?P<bus2>{_BUS}):? GPU has fallen off the bus",
        derive=gpu_field,
        reference="NVIDIA Xid catalogue: 79 GPU has fallen off the bus",
    ),
    Signature(
        id="xid-74",
        source="kernel-log",
        severity=FAIL,
        what="NVLink error on {gpu} (Xid 74)",
        why="a link of the NVLink bridge reported a fatal error",
        fix="power off, reseat the NVLink bridge on both cards (and clean the contacts), boot; "
        "`nvidia-smi nvlink -e` shows the error counters per link",
        pattern=rf"{_XID}74\b",
        derive=gpu_field,
        reference="NVIDIA Xid catalogue: 74 NVLink error",
    ),
    Signature(
        id="xid-48",
        source="kernel-log",
        severity=FAIL,
        what="uncorrectable memory error on {gpu} (Xid 48, double-bit ECC)",
        why="the GPU's memory returned data it could not correct",
        fix="reboot (the driver retires the page); if it repeats the card's memory is failing",
        pattern=rf"{_XID}48\b",
        derive=gpu_field,
        reference="NVIDIA Xid catalogue: 48 double bit ECC error",
    ),
    Signature(
        id="xid-63",
        source="kernel-log",
        severity=WARN,
        what="memory page retirement / row remapping recorded on {gpu} (Xid 63)",
        why="the GPU marked bad memory to be replaced; it takes effect after a GPU reset",
        fix="reboot when convenient; `nvidia-smi -q -d ROW_REMAPPER` shows the remapped rows",
        pattern=rf"{_XID}63\b",
        derive=gpu_field,
        reference="NVIDIA Xid catalogue: 63 ECC page retirement or row remapping recording event",
    ),
    Signature(
        id="xid-64",
        source="kernel-log",
        severity=FAIL,
        what="memory row remapping failed on {gpu} (Xid 64)",
        why="the GPU has no spare memory rows left for a failing row",
        fix="the card needs service or replacement",
        pattern=rf"{_XID}64\b",
        derive=gpu_field,
        reference="NVIDIA Xid catalogue: 64 ECC page retirement or row remapper recording failure",
    ),
    Signature(
        id="xid-13-31",
        source="kernel-log",
        severity=WARN,
        what="a GPU program faulted on {gpu} (Xid {xid})",
        why="Xid 13 (graphics engine exception) and 31 (GPU memory page fault) come from a "
        "program's illegal memory access, rarely from the hardware; " + MTP_GDN_CRASH,
        fix="read `journalctl -u vllm` around that time (rigup-doctor classifies it); "
        + MTP_GDN_CRASH_FIX
        + "; if the Xid also comes with other programs, suspect the card",
        pattern=rf"{_XID}(?P<xid>13|31)\b",
        derive=gpu_field,
        reference="NVIDIA Xid catalogue: 13 graphics engine exception, 31 GPU memory page fault; "
        "vllm#50021",
    ),
    Signature(
        id="xid-119-120",
        source="kernel-log",
        severity=FAIL,
        what="the GPU System Processor of {gpu} stopped answering (Xid {xid})",
        why="the GSP firmware timed out or failed (Xid 119 GSP RPC timeout, 120 GSP error); the "
        "GPU is unusable until it is reset",
        fix=RESET_FIX + "; " + GSP_REPEATS,
        pattern=rf"{_XID}(?P<xid>119|120)\b",
        derive=gpu_field,
        reference="NVIDIA Xid catalogue: 119 GSP RPC timeout, 120 GSP error",
    ),
    Signature(
        id="xid-other",
        source="kernel-log",
        severity=WARN,
        what="Xid {xid} on {gpu}",
        why="the NVIDIA driver reported an error event",
        fix="look Xid {xid} up in NVIDIA's Xid catalogue (docs.nvidia.com/deploy/xid-errors)",
        pattern=rf"{_XID}(?P<xid>\d+)",
        derive=gpu_field,
        reference="NVIDIA Xid catalogue",
    ),
    Signature(
        id="process-trap",
        source="kernel-log",
        severity=FAIL,
        what="{proc} crashed in native code ({trap} in {lib})",
        why="a CPU fault in a compiled library killed it; a process that dies this way leaves no "
        "Python error, so vLLM's journal only says that a worker died{hint}",
        fix="{fix}",
        pattern=r"traps: (?P<proc>\S+?)\[\d+\] trap (?P<trap>[a-z ]+?) ip:\S+ sp:\S+ "
        r"error:\S+ in (?P<lib>[^\[\s]+)",
        derive=lambda f: (
            {
                "hint": ": seen with vLLM 0.22.1's CPU build when tensor parallel 2 split the "
                "INT4 (AutoRound) groups of a checkpoint between the workers (the lab's tiny "
                "model, value head dim 32: a divide error in _C_AVX512.abi3.so)",
                "fix": "serve with vllm_tensor_parallel_size = 1, or a checkpoint whose "
                "quantization groups each stay whole on one tensor-parallel rank",
            }
            if "VLLM::Worker" in (f.get("proc") or "") and "_C" in (f.get("lib") or "")
            else {"hint": "", "fix": "report the line with the program's version to its authors"}
        ),
        reference="Linux arch/x86/kernel/traps.c ('traps: %s[%d] trap %s ip:%lx sp:%lx error:%lx "
        "in ...'); captured on this project's machine: tests/fixtures/vllm-cpu/"
        "dmesg-worker-trap.txt",
    ),
    Signature(
        id="oom-kill",
        source="kernel-log",
        severity=FAIL,
        what="the kernel's OOM killer killed {proc} (pid {pid}{unit_words}){rss_words}",
        why="{scope_words}: system memory (RAM), not the GPU's (VRAM); a GPU out-of-memory "
        "error is a Python error in the service's journal, never a kill, and a process killed "
        "this way leaves no error of its own",
        fix="{ram_fix}",
        pattern=r"(?P<scope>Memory cgroup out of memory|Out of memory): Killed process "
        r"(?P<pid>\d+) \((?P<proc>[^)]+)\)(?: total-vm:\d+kB, anon-rss:(?P<anon_kib>\d+)kB)?",
        derive=_oom_fields,
        reference="Linux mm/oom_kill.c ('Out of memory: Killed process %d (%s) total-vm:%lukB, "
        "anon-rss:%lukB, ...', 'oom-kill:constraint=...,task_memcg=%s,task=%s,pid=%d'; 'Memory "
        "cgroup out of memory' for a cgroup's limit)",
    ),
    Signature(
        id="module-rejected",
        source="kernel-log",
        severity=FAIL,
        what="the kernel refused to load an unsigned module",
        why="Secure Boot is enforced (kernel lockdown) and the module is not signed by a key the "
        "kernel trusts",
        fix="sign the module with an enrolled Machine Owner Key (see the Secure Boot steps), or "
        "use the Ubuntu install path's signed modules",
        pattern=r"Lockdown: .*unsigned module loading is restricted|Loading of unsigned module is rejected|Key was rejected by service",
        reference="kernel_lockdown(7); modprobe: 'Key was rejected by service'",
    ),
    Signature(
        id="driver-library-mismatch",
        source="kernel-log",
        severity=FAIL,
        what="the loaded NVIDIA kernel module and the userspace libraries differ",
        why="NVRM: API mismatch: the client has the version {client}, the kernel module {module}",
        fix="reboot to load the module that matches the libraries; rigup holds the driver "
        "packages so that it does not recur",
        pattern=r"NVRM: API mismatch: the client has the version (?P<client>[\d.]+)",
        context={"module": r"this kernel module has the version ([\d.]+)"},
        reboot_fixes=True,
        reference="NVRM: 'API mismatch: the client has the version X, but this kernel module has "
        "the version Y'",
    ),
]


def classify_kernel_log(text: str | None, gpus: Mapping[str, str] | None = None) -> list[Verdict]:
    """Xid events, GSP timeouts, CPU traps, the OOM killer and module-loading refusals in kernel
    log lines (journalctl -k, dmesg). ``gpus`` (:func:`rigup.diagnosis.gpu_labels` of
    nvidia-smi's rows: ``{pci slot: "GPU 1 (NVIDIA GeForce RTX 3090)"}``) names the GPUs."""
    return classify_lines("kernel-log", text, {"gpus": gpus or {}, "oom_units": oom_units(text)})[0]
