"""Figures of one run directory (comfygpu/run.py): what ComfyUI logged, what the GPU held.

Pure functions over text so tests can feed captured files. Units: MiB for nvidia-smi's
figures (it prints MiB), bytes for torch's and the driver's, seconds for times.

Sources, each figure keeping its source's name:

- ``comfyui.log`` (:func:`log_facts`): ComfyUI 0.30.0's own lines: ``Total VRAM <n> MB``,
  ``Set vram state to: <STATE>``, ``DynamicVRAM support detected and enabled``,
  ``Requested to load <Model>``, ``loaded completely; ...``, ``loaded partially; ...``,
  ``Model <Model> prepared for dynamic VRAM loading. <n>MB Staged.``, the tqdm bar of each
  sampling (``<i>/<n> [<elapsed><<left>, <x>s/it]``), ``Prompt executed in <s> seconds`` and
  the error blocks (``!!! Exception during processing !!!``, tracebacks, CUDA OOM);
- ``smi-gpu.csv`` / ``smi-apps.csv``: nvidia-smi's samples (device used MiB; per-process used
  MiB);
- ``torch-samples.jsonl``: torch's allocator in ComfyUI's process (``max_memory_reserved``)
  and the driver's free bytes;
- ``ballast.json``: what the ballast held;
- ``history-*.json``: rigup's client's result per workflow (status, /ws step times).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

TQDM = re.compile(
    r"(?P<i>\d+)/(?P<n>\d+) \[(?P<elapsed>[\d:]+)<(?P<left>[\d:?]+),\s*(?P<rate>[\d.]+|\?)(?P<unit>s/it|it/s)\]"
)
LINES = {
    "total_vram": re.compile(r"Total VRAM (\d+) MB, total RAM (\d+) MB"),
    "vram_state": re.compile(r"Set vram state to: (\w+)"),
    "device": re.compile(r"^Device: (.+)$"),
    "requested": re.compile(r"Requested to load (\w+)"),
    "loaded": re.compile(r"(loaded (?:completely|partially);.*)$"),
    "unloaded": re.compile(r"(Unloaded partially:.*)$"),
    "dynamic": re.compile(r"Model (\w+) prepared for dynamic VRAM loading\. (\d+)MB Staged\."),
    "executed": re.compile(r"Prompt executed in ([\d.]+) seconds"),
    "executed_hms": re.compile(r"Prompt executed in (\d+):(\d+):(\d+)$"),
}
ERROR_MARKS = (
    "!!! Exception during processing !!!",
    "Traceback (most recent call last)",
    "OutOfMemoryError",
    "CUDA out of memory",
    "out of memory",
    "Error",
)


def _seconds(clock: str) -> float:
    parts = [float(p) for p in clock.split(":")]
    total = 0.0
    for p in parts:
        total = total * 60 + p
    return total


def progress_bars(text: str) -> list[dict]:
    """The last state of each tqdm bar in ``text`` (bars redraw with ``\\r``): steps done and
    total, elapsed seconds, seconds per step (tqdm's rate, inverted when it prints it/s)."""
    bars: list[dict] = []
    for chunk in re.split(r"[\r\n]", text):
        m = TQDM.search(chunk)
        if not m:
            continue
        i, n = int(m["i"]), int(m["n"])
        rate = None if m["rate"] == "?" else float(m["rate"])
        s_per_it = None if rate in (None, 0.0) else (rate if m["unit"] == "s/it" else 1.0 / rate)
        bar = {"done": i, "steps": n, "elapsed_s": _seconds(m["elapsed"]), "s_per_step": s_per_it}
        last = bars[-1] if bars else None
        redraw = last and last.get("closed") and i == n and last["elapsed_s"] == bar["elapsed_s"]
        if last and last["steps"] == n and (redraw or last["done"] <= i and not last.get("closed")):
            bars[-1] = bar
        else:
            bars.append(bar)
        if i == n:
            bars[-1]["closed"] = True
    for b in bars:
        b.pop("closed", None)
        if b["done"] and b["elapsed_s"]:
            b["mean_s_per_step"] = round(b["elapsed_s"] / b["done"], 3)
    return bars


def error_blocks(text: str, context: int = 40) -> list[str]:
    """Each ``!!! Exception during processing !!!`` block and each traceback outside one, up
    to ``context`` lines, as ComfyUI printed it."""
    lines = text.splitlines()
    blocks, i = [], 0
    while i < len(lines):
        if "!!! Exception during processing !!!" in lines[i] or lines[i].startswith("Traceback ("):
            j = i + 1
            while j < len(lines) and j - i < context:
                if lines[j].startswith(("Prompt executed", "Memory summary", "got prompt")):
                    break
                j += 1
            blocks.append("\n".join(lines[i:j]))
            i = j
        else:
            i += 1
    return blocks


def log_facts(text: str) -> dict:
    """ComfyUI's own lines about memory and time in ``text`` (its log)."""
    facts: dict = {
        "requested": [],
        "loaded": [],
        "unloaded": [],
        "dynamic_vram": [],
        "executed_s": [],
    }
    for line in re.split(r"[\r\n]", text):
        if m := LINES["total_vram"].search(line):
            facts["total_vram_mb"], facts["total_ram_mb"] = int(m[1]), int(m[2])
        elif m := LINES["vram_state"].search(line):
            facts["vram_state"] = m[1]
        elif m := LINES["device"].search(line):
            facts["device"] = m[1]
        elif m := LINES["requested"].search(line):
            facts["requested"].append(m[1])
        elif m := LINES["loaded"].search(line):
            facts["loaded"].append(m[1])
        elif m := LINES["unloaded"].search(line):
            facts["unloaded"].append(m[1])
        elif m := LINES["dynamic"].search(line):
            facts["dynamic_vram"].append({"model": m[1], "staged_mb": int(m[2])})
        elif m := LINES["executed"].search(line):
            facts["executed_s"].append(float(m[1]))
        elif m := LINES["executed_hms"].search(line):
            facts["executed_s"].append(int(m[1]) * 3600 + int(m[2]) * 60 + int(m[3]))
        if "DynamicVRAM support detected and enabled" in line:
            facts["dynamic_vram_enabled"] = True
        if "DynamicVRAM support disabled" in line:
            facts["dynamic_vram_enabled"] = False
    facts["progress"] = progress_bars(text)
    facts["errors"] = error_blocks(text)
    facts["oom"] = any(
        s in text for s in ("OutOfMemoryError", "CUDA out of memory", "out of memory")
    )
    return facts


def smi_peak(csv_text: str) -> dict:
    """Peak and count of ``timestamp, memory.used, memory.total, utilization.gpu`` samples."""
    used, total, util = [], None, []
    for row in csv_text.splitlines():
        cols = [c.strip() for c in row.split(",")]
        if len(cols) >= 4 and cols[1].isdigit():
            used.append(int(cols[1]))
            total = int(cols[2])
            if cols[3].isdigit():
                util.append(int(cols[3]))
    if not used:
        return {}
    return {"samples": len(used), "used_max_mib": max(used), "used_min_mib": min(used),
            "total_mib": total, "util_max_pct": max(util) if util else None}  # fmt: skip


def apps_peak(csv_text: str, pid: int) -> int | None:
    """Largest per-process ``used_memory`` (MiB) nvidia-smi sampled for ``pid``."""
    best = None
    for row in csv_text.splitlines():
        cols = [c.strip() for c in row.split(",")]
        if len(cols) >= 3 and cols[1] == str(pid) and cols[2].isdigit():
            best = max(best or 0, int(cols[2]))
    return best


def torch_peak(jsonl: str) -> dict:
    """Max of torch's ``max_memory_reserved`` and the driver's least free bytes in the samples."""
    rows = [json.loads(r) for r in jsonl.splitlines() if r.strip()]
    rows = [r for r in rows if "error" not in r]
    if not rows:
        return {}
    return {
        "samples": len(rows),
        "max_memory_reserved": max(r["max_reserved"] for r in rows),
        "max_memory_allocated": max(r["max_allocated"] for r in rows),
        "driver_free_min": min(r["free"] for r in rows),
        "driver_total": rows[-1]["total"],
    }


def workflow_times(result: dict) -> dict:
    """Status, seconds and error of one workflow result (rigup/media/comfyui.py's Result as a
    dict): ``total_s`` from the post to ComfyUI's terminal /ws message, ``s_per_step`` per
    sampling node (mean interval between /ws progress messages), the error ComfyUI reported,
    the output files."""
    out = {"status": result.get("status"), "error": result.get("error")}
    timings = result.get("timings") or {}
    out["total_s"] = timings.get("total_s")
    out["sampling"] = timings.get("nodes") or {}
    out["outputs"] = [
        f"{o.get('subfolder', '')}/{o.get('filename')}" for o in result.get("outputs") or []
    ]
    return out


def summarize(run_dir: Path) -> dict:
    """Everything :mod:`comfygpu.run` left in ``run_dir``, reduced to figures."""

    def read(name: str) -> str:
        p = run_dir / name
        return p.read_text(errors="replace") if p.exists() else ""

    record = json.loads(read("record.json") or "{}")
    out: dict = {
        "argv": record.get("argv"),
        "overrides": record.get("overrides"),
        "ready_s": record.get("ready_s"),
    }
    if ballast := read("ballast.json"):
        out["ballast"] = json.loads(ballast)
    out["comfyui"] = log_facts(read("comfyui.log"))
    out["smi"] = smi_peak(read("smi-gpu.csv"))
    before = record.get("smi_used_before_comfyui_mib")
    if out["smi"] and before is not None:
        out["smi"]["used_before_comfyui_mib"] = before
        out["smi"]["comfyui_peak_mib"] = out["smi"]["used_max_mib"] - before
    if record.get("comfyui_pid"):
        out["smi"]["comfyui_process_peak_mib"] = apps_peak(
            read("smi-apps.csv"), record["comfyui_pid"]
        )
    out["torch"] = torch_peak(read("torch-samples.jsonl"))
    stats = record.get("system_stats") or {}
    out["system_stats_devices"] = stats.get("devices")
    out["workflows"] = {
        name: workflow_times(h) for name, h in (record.get("workflows") or {}).items()
    }
    out["outputs"] = record.get("outputs")
    out["comfyui_exit"] = record.get("comfyui_exit")
    return out
