"""rigup-doctor's services section: each GPU mode's units, their state and their journal."""

from __future__ import annotations

from typing import Any

from rigup import diagnosis, units

from .core import Runner, Section, run


def arm_in_place(cfg: dict) -> tuple[str, str] | None:
    """``(arm name, drop-in path)`` when a rigup-bench arm's drop-in is in place (a killed run)."""
    dropin = cfg["bench"]["dropin"]
    try:
        with open(dropin, encoding="utf-8") as f:
            first = f.readline()
    except OSError:
        return None
    name = first.split("arm", 1)[-1].strip().split(":")[0].strip() if "arm" in first else "?"
    return name or "?", dropin


def block_size(journal: list[str]) -> int | None:
    """The attention block size vLLM set for the hybrid model, from its journal."""
    sig = diagnosis.by_id("vllm-block-size", "vllm-log")
    for line in reversed(journal):
        m = sig.regex.search(line) if sig.regex else None
        if m:
            return int(m.group("block"))
    return None


def check_services(cfg: dict, runner: Runner = run, holders: str = "") -> Section:
    """Each service of each GPU mode: its state (crash loop, failed, down in its mode) and its
    journal classified by its own signatures (vLLM, ComfyUI, VoxCPM2), with the kernel log of
    the same time span."""
    section = Section("services")
    facts: dict[str, Any] = {}
    for mode, spec in cfg["modes"].items():
        code, out = runner(["systemctl", "is-active", spec["target"]])
        mode_active = out.strip() == "active"
        facts[mode] = {"target": spec["target"], "active": mode_active}
        for unit in spec["services"]:
            extra: dict[str, Any] = {"mode": mode, "mode_active": mode_active}
            if unit == cfg["vllm"]["unit"] and (arm := arm_in_place(cfg)):
                extra["arm"], extra["dropin"] = arm
            state, journal = units.read_unit(unit, runner, **extra)
            fields = {"holders": holders} if holders else {}
            window = state.get("window")
            kernel = units.read_kernel(runner, window) if state.get("active") != "inactive" else []
            section.verdicts += units.explain(state, journal, kernel, **fields)
            facts[unit] = {
                k: state.get(k) for k in ("active", "sub", "result", "restarts", "enabled")
            }
            if unit == cfg["vllm"]["unit"]:
                facts[unit]["block_size"] = block_size(journal)
    section.facts = facts
    return section
