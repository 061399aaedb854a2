"""Signatures of systemd's own messages about a unit in its journal (source ``unit-log``, any
unit): the OOM killer (system RAM), a signal that killed the main process, its memory peak;
:func:`classify_unit_log`, and :func:`ram_fix` (what frees RAM for a unit, also read by the
kernel log's OOM verdict).

systemd writes them with the unit's name first (``vllm.service: Main process exited,
code=killed, status=9/KILL``). Sources: systemd's src/core (service.c "Main process exited,
code=%s, status=%i/%s", "Failed with result '%s'."; unit.c "A process of this unit has been
killed by the OOM killer.", "systemd-oomd killed %u process(es) in this unit.", "Consumed %s CPU
time, %s memory peak"); captured from systemd 259 on the lab machine (Ubuntu 26.04): a
``kill -9`` of a service's main process and a crash by SIGSEGV (tests/fixtures/systemd/lab-*);
the OOM lines in the shape public reports quote them (Comfy-Org/ComfyUI#13217: LTX-2.3 fills
RAM to 99 %).
"""

from __future__ import annotations

from typing import Any

from .core import FAIL, Signature, Verdict, classify_lines

_UNIT = r"(?P<unit>[\w@:.\\-]+\.(?:service|scope))"
#: signals a process raises on itself when its own code fails (a crash, not a kill from outside)
CRASH_SIGNALS = ("SEGV", "BUS", "ILL", "FPE", "ABRT", "TRAP", "SYS")

#: What frees system memory for each rigup service (a kill by the OOM killer is RAM, not VRAM).
RAM_FIXES = {
    "vllm.service": "vLLM's own RAM: on the CPU build lower vllm_cpu_memory_utilization (its KV "
    "cache lives in RAM); on the GPU build its processes and the checkpoint it loads: run it "
    "alone (`sudo rigup-mode llm` stops the media services), add swap or RAM. "
    "vllm_gpu_memory_utilization is VRAM and does not help here",
    "comfyui.service": "ComfyUI keeps models in RAM (its model cache, and the weights that "
    '--novram/--lowvram or dynamic VRAM offload): comfyui_extra_args = ["--cache-none"] (no '
    'model kept between runs) and ["--disable-pinned-memory"] (pinned RAM cannot be swapped '
    "out), both in ComfyUI 0.30.0's comfy/cli_args.py; or a smaller model file (fp8, GGUF); or "
    "add swap or RAM (LTX-2.3 fills 64 GB: Comfy-Org/ComfyUI#13217); then converge",
    "voxcpm.service": "VoxCPM2 needs a few GB of RAM of its own: stop what else uses the rest "
    "(`systemd-cgtop -m` lists the units by memory), add swap or RAM",
}


def ram_fix(unit: str | None) -> str:
    """What frees RAM for ``unit`` (:data:`RAM_FIXES`; a generic answer for any other unit)."""
    if unit in RAM_FIXES:
        return RAM_FIXES[unit]
    who = unit or "the killed process's service"
    return (
        f"lower {who}'s own memory use in its settings, stop what else uses RAM "
        "(`systemd-cgtop -m` lists the units by memory), add swap or RAM, or give the unit a "
        "MemoryMax= in a drop-in so that it alone is limited"
    )


def _peak(f: dict[str, Any]) -> dict[str, str]:
    peak = f.get("peak")
    return {
        "peak_words": f"; its memory peak was {peak[:-1]} {peak[-1]}iB" if peak else "",
        "ram_fix": ram_fix(f.get("unit")),
    }


#: the unit's last "Consumed ..., <size> memory peak" (systemd >= 256) in the text
_PEAK = r"([\d.]+[KMGTPE]) memory peak(?![\s\S]*memory peak)"

_UNIT_LOG: list[Signature] = [
    Signature(
        id="unit-oom/oomd",
        source="unit-log",
        severity=FAIL,
        what="systemd-oomd killed {n} process(es) of {unit} (system memory pressure)",
        why="the machine's RAM and swap were under pressure past systemd-oomd's limit, and "
        "{unit} used the most{peak_words}: system memory (RAM), not the GPU's (VRAM)",
        fix="{ram_fix}",
        pattern=rf"{_UNIT}: systemd-oomd killed (?P<n>\d+) process\(es\) in this unit",
        context={"peak": _PEAK},
        derive=_peak,
        reference="systemd src/core/unit.c; systemd-oomd(8)",
    ),
    Signature(
        id="unit-oom",
        source="unit-log",
        severity=FAIL,
        what="the kernel's OOM killer killed a process of {unit} (system RAM, not VRAM)",
        why="the machine (or the unit's MemoryMax=) ran out of RAM and the kernel killed the "
        "biggest process, which was {unit}'s{peak_words}; a GPU out-of-memory error is a Python "
        "error in the service's journal, never a kill",
        fix="{ram_fix}",
        pattern=rf"{_UNIT}: (?:A process of this unit has been killed by the OOM killer|"
        r"Failed with result 'oom-kill')",
        context={"peak": _PEAK},
        derive=_peak,
        reference="systemd src/core/unit.c ('A process of this unit has been killed by the OOM "
        "killer.'), service.c (\"Failed with result 'oom-kill'\")",
    ),
    Signature(
        id="unit-signal/crash",
        source="unit-log",
        severity=FAIL,
        what="{unit}'s main process crashed (SIG{name}, signal {sig})",
        why="the process raised SIG{name} on itself: a fault in its own (native) code, not a "
        "kill from outside; the lines before it in its journal, and `journalctl -k` at that "
        "time (a CPU trap), name the library",
        fix="read the service's journal before the crash; report it with the program's version "
        "to its authors if nothing there names a setting",
        pattern=rf"{_UNIT}: Main process exited, code=(?:killed|dumped), "
        rf"status=(?P<sig>\d+)/(?P<name>{'|'.join(CRASH_SIGNALS)})\b",
        reference="systemd src/core/service.c ('Main process exited, code=%s, status=%i/%s'); "
        "captured: tests/fixtures/systemd/lab-segv-journal.json",
    ),
    Signature(
        id="unit-signal/killed",
        source="unit-log",
        severity=FAIL,
        what="{unit}'s main process was killed by a signal (SIG{name}, signal {sig})",
        why="something outside the service sent it SIG{name} (`kill -9`, `systemctl kill`, a "
        "supervisor or a watchdog): not a crash of its own, not the GPU and not the OOM killer "
        "(that one says so in its own line)",
        fix="find who sent it (`journalctl -b` around that time, the shell history of whoever "
        "is logged in, a supervisor's log); systemd restarts the service by its Restart= rule",
        pattern=rf"{_UNIT}: Main process exited, code=killed, status=(?P<sig>\d+)/(?P<name>\w+)",
        reference="systemd src/core/service.c; captured: tests/fixtures/systemd/"
        "lab-kill-9-journal.json (kill -9 of a service's main process, systemd 259)",
    ),
]


def classify_unit_log(text: str | None) -> list[Verdict]:
    """systemd's messages about a unit in its journal lines: the OOM killer (with the unit's
    memory peak when systemd printed it), a crash by signal, a kill by signal. The SIGKILL with
    which the OOM killer kills is the OOM verdict's, not a kill of its own."""
    found = classify_lines("unit-log", text)[0]
    if any(v.kind == "unit-oom" for v in found):
        found = [v for v in found if v.id != "unit-signal/killed"]
    merged: dict[str, Verdict] = {}
    for v in found:  # one verdict per kind and unit (its two OOM lines are one event)
        key = f"{v.kind}:{v.what}"
        old = merged.get(key)
        merged[key] = Verdict(**{**v.__dict__, "evidence": old.evidence + v.evidence}) if old else v
    return list(merged.values())
