"""The GPUs before and after a run: readings, heat soak, one line each."""

from __future__ import annotations

from rigup import doctor

from .core import GPU_FIELDS, HEAT_SOAK_C, Host


def read_gpus(cfg: dict, host: Host) -> list[dict]:
    """Temperature, SM clock, power draw and limit, slowdown reasons of each GPU ([] without)."""
    if not cfg["gpus"]["count"]:
        return []
    code, out = host.runner(
        ["nvidia-smi", f"--query-gpu={','.join(GPU_FIELDS)}", "--format=csv,noheader,nounits"]
    )
    if code != 0:
        return [{"error": out.strip()[-300:]}]
    rows = doctor.parse_telemetry(out, GPU_FIELDS)
    return [{"index": i, **row} for i, row in sorted(rows.items())]


def heat_note(before: list[dict], after: list[dict]) -> str:
    """ "heat-soaked ..." when a card got HEAT_SOAK_C warmer or slowed down for heat, else ""."""
    notes = []
    was = {g.get("index"): g for g in before}
    for g in after:
        t0, t1 = (was.get(g.get("index")) or {}).get("temperature_c"), g.get("temperature_c")
        thermal = {"hw_thermal_slowdown", "sw_thermal_slowdown"} & set(g.get("reasons") or [])
        if (t0 is not None and t1 is not None and t1 - t0 >= HEAT_SOAK_C) or thermal:
            notes.append(
                f"GPU {g.get('index')} {t0 if t0 is not None else '?'} -> {t1} C"
                + (" (thermal slowdown)" if thermal else "")
            )
    if not notes:
        return ""
    return (
        "heat-soaked: " + ", ".join(notes) + ": later rows ran on a hotter card and a 3090 "
        "clocks down when hot; let it cool and run again for comparable figures"
    )


def gpu_line(gpus: list[dict]) -> str:
    if not gpus:
        return "no GPU (CPU engine)"
    parts = []
    for g in gpus:
        if "error" in g:
            return f"nvidia-smi: {g['error']}"
        parts.append(
            f"GPU {g['index']} {g.get('temperature_c', '?'):g} C, {g.get('clocks_sm_mhz') or 0:g} MHz, "
            f"{g.get('power_draw_w') or 0:g} W of {g.get('power_limit_w') or 0:g} W"
        )
    return "; ".join(parts)
