"""The table of a record: Markdown or plain text."""

from __future__ import annotations

from typing import Any

from . import roofline
from .gpus import gpu_line
from .media import table as media_table


def fmt(value: Any, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        return f"{value:.2f} s"
    return f"{value:,.1f} {unit}"


def row_cells(r: dict) -> tuple[str, str, str, str]:
    seed = fmt(r.get("seed"), r["unit"])
    value = fmt(r.get("value"), r["unit"])
    if r.get("seed_from") is not None:
        seed = f"{fmt(r['seed_from'], r['unit'])} -> {seed}"
    if "value_from" in r:
        value = f"{fmt(r.get('value_from'), r['unit'])} -> {value}"
    how = r["how"]
    if r.get("cold") is not None:
        how += f"; cold: {'yes' if r['cold'] else 'NO'} ({r['cold_proof']})"
    return r["label"], seed, value, how


def table(record: dict, markdown: bool = True) -> str:
    """The run as Markdown tables, one per arm, with the seed's figures beside this run's; a
    media record (``"kind": "media"``) as rigup.bench.media.table."""
    if record.get("kind") == "media":
        return media_table(record)
    engine = record.get("engine", "GPU")
    lines = [
        f"rigup-bench {record['started']}: vLLM {record['vllm'].get('version')}, "
        f"{record['vllm'].get('served_model_name')} on the {engine}"
        + (
            " (CPU engine with a tiny test model: figures show the pipeline works, not speed; "
            "they are not comparable with the seed's)"
            if engine == "CPU"
            else ""
        ),
        f"{record['seed_source']}",
    ]
    if record.get("scale", 1.0) != 1.0:
        lines.append(f"lengths and prompt counts scaled by {record['scale']:g} (--scale)")
    for arm in record["arms"]:
        lines += ["", f"arm {arm['name']}: {arm['what']}", ""]
        lines += ["| row | seed | this run | how |", "| --- | --- | --- | --- |"]
        for r in arm["rows"]:
            lines.append("| " + " | ".join(row_cells(r)) + " |")
        a = arm.get("acceptance")
        if a:
            per = ", ".join(f"{p:.2f}" for p in a["per_position"])
            lines.append(
                f"\nspeculative decoding (from /metrics deltas): acceptance {100 * a['rate']:.1f} % "
                f"(seed {100 * record['seed_acceptance']:.1f} %), mean acceptance length "
                f"{a['mean_length']:.2f}, per position {per}"
            )
        else:
            lines.append("\nspeculative decoding: no drafts (off, or not in this engine)")
        roof = arm.get("roofline")
        if roof:
            lines.append(roof.get("error") or roofline.line(roof))
        lines.append(f"GPUs before: {gpu_line(arm['gpus_before'])}")
        lines.append(f"GPUs after:  {gpu_line(arm['gpus_after'])}")
        if arm.get("heat"):
            lines.append(arm["heat"])
    st = record.get("self_test")
    if st:
        v = st.get("verdict") or {}
        lines += [
            "",
            f"prefix-cache self-test ({st['prompt_len']:,}-token prompt twice, block "
            f"{st['block_size']}): {st['status'].upper()} "
            f"(second: {st['second']['hits']:g} of {st['second']['queries']:g} tokens hit)",
            f"  {v.get('what', '')}: {v.get('why', '')}",
        ]
    if record.get("interrupted"):
        lines.append(f"\ninterrupted by {record['interrupted']}")
    if record.get("error"):
        lines.append(f"\nfailed: {record['error']}")
    if record.get("restored") is not None:
        r = record["restored"]
        lines.append(
            "\nrestored: "
            + (
                "yes, verified (" + "; ".join(r["checks"]) + ")"
                if r["ok"]
                else "NO: " + "; ".join(r["problems"])
            )
        )
    return "\n".join(lines)
