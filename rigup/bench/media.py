"""rigup-bench's media rows (``rigup-bench --media``): rigup.media.bench's ROWS (FLUX.2 [dev]
1024x1024 image time, LTX-2.3 clip time) run through the local comfyui.service, each labelled
with what ran it (ComfyUI's version, device names and memory from GET /system_stats), recorded
like the LLM rows under the results directory (``"kind": "media"``) and printed as a table.

doctor.json's ``media`` key (roles/doctor/config.py; only where comfyui_install is on):
``{"unit", "mode", "target", "url", "workflows"}``. A failed row keeps ComfyUI's error (node,
node type, exception) and no figure.
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
from collections.abc import Callable
from typing import Any

from rigup.media import bench as media_bench
from rigup.media import comfyui, workflows

from .core import Host, Refused


def what(row: str, params: dict) -> str:
    """What a media row ran, from its parameters (the table's "what" column):
    ``"FLUX.2 [dev] image, 1024x1024, 20 steps"``, ``"LTX-2.3 clip, 768x512, 97 frames at 25
    fps (3.9 s), 20 steps"``."""
    size = f"{params.get('width')}x{params.get('height')}"
    if "frames" in params:
        clip = f"{params['frames']} frames at {params['fps']:g} fps"
        clip += f" ({params['frames'] / params['fps']:.1f} s)"
        return f"LTX-2.3 clip, {size}, {clip}, {params.get('steps')} steps"
    if row.startswith("flux2"):
        return f"FLUX.2 [dev] image, {size}, {params.get('steps')} steps"
    return f"{row}, {params}"


def parse_sets(items: list[str]) -> dict[str, dict]:
    """``--set ROW.KEY=VALUE`` (VALUE in JSON) as ``{row: {key: value}}``; Refused naming every
    bad item (a row not in rigup.media.bench.ROWS, a missing key or value, a value not JSON)."""
    out: dict[str, dict] = {}
    bad = []
    for item in items:
        key, _, value = item.partition("=")
        row, _, param = key.rpartition(".")
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = None
        if row not in media_bench.ROWS or not param or parsed is None:
            bad.append(item)
            continue
        out.setdefault(row, {})[param] = parsed
    if bad:
        raise Refused(
            f"--set takes ROW.KEY=VALUE (VALUE in JSON) with ROW in {sorted(media_bench.ROWS)}: "
            f"{bad}. Nothing was started."
        )
    return out


def rows_listing(cfg: dict) -> list[str]:
    """``rigup-bench --list``'s media lines: one per row of rigup.media.bench.ROWS with its
    workflow and parameters, or one line saying the rig has no ComfyUI."""
    media = cfg.get("media")
    if not media:
        return ["media rows: none (comfyui_install is off on this rig)"]
    return [
        f"media row {row}: {what(row, params)} (workflow {media['workflows']}/{name}.json, "
        f"{params}; run with --media in the {media['mode']} mode)"
        for row, (name, params) in media_bench.ROWS.items()
    ]


def refuse_unless_media(cfg: dict, host: Host) -> dict:
    """Refuse (:class:`Refused`, nothing started) unless the rig has ComfyUI, is in its mode and
    ComfyUI answers GET /system_stats; the :func:`rigup.media.bench.label` of that answer."""
    media = cfg.get("media")
    if not media:
        raise Refused(
            "this rig has no ComfyUI (comfyui_install is off): no media rows. Nothing was started."
        )
    _, out = host.runner(["systemctl", "is-active", media["target"]])
    if out.strip() != "active":
        raise Refused(
            f"the rig is not in the {media['mode']} mode ({media['target']} is "
            f"{out.strip() or 'inactive'}): `sudo rigup-mode {media['mode']}` switches to it, "
            "then `sudo rigup-bench --media`. Nothing was started."
        )
    status, body = host.get(f"{media['url']}/system_stats")
    if status != 200:
        raise Refused(
            f"{media['unit']} does not answer {media['url']}/system_stats ({status or body}): "
            "rigup-doctor says why. Nothing was started."
        )
    try:
        return media_bench.label(json.loads(body))
    except ValueError as exc:
        raise Refused(f"{media['url']}/system_stats is not JSON ({exc})") from exc


def run_row(
    media: dict,
    row: str,
    runner: Callable[[str, dict], comfyui.Result] = comfyui.run,
    overrides: dict | None = None,
    tiny_text_encoder: bool = False,
    fresh_seed: Callable[[], int] = lambda: secrets.randbelow(2**32),
) -> dict:
    """One media row through ComfyUI at ``media["url"]``: rigup.media.bench.figures plus
    ``"params"`` (the row's, with ``overrides``, and a ``fresh_seed()`` unless a seed is set, so
    ComfyUI runs it rather than answering from its cache) and ``"workflow"``; ``tiny_text_encoder``: the
    lab's tiny checkpoints (rigup.media.workflows.tiny_text_encoder). A workflow that cannot be
    loaded or take the parameters, or a ComfyUI that does not answer, is a row with status
    "error" and ``{"exception_type", "exception_message"}``."""
    name, params = media_bench.ROWS[row]
    params = {**params, **(overrides or {})}
    if "seed" not in params and "seed" in workflows.PARAMETERS.get(name, {}):
        # a seed of its own: ComfyUI answers a prompt it ran before from its cache (0.01 s on
        # the H200, tests/fixtures/media/h200-ltx-default-twice) instead of running it again
        params["seed"] = fresh_seed()
    entry: dict[str, Any] = {"row": row, "workflow": name, "params": params}
    try:
        wf = workflows.apply(name, workflows.load(f"{media['workflows']}/{name}.json"), params)
        if tiny_text_encoder:
            wf = workflows.tiny_text_encoder(wf)
        result = runner(media["url"], wf)
    except (workflows.WorkflowError, comfyui.ComfyUIError, OSError) as exc:
        return {
            **entry,
            "status": "error",
            "error": {"exception_type": type(exc).__name__, "exception_message": str(exc)},
        }
    return {**entry, **media_bench.figures(row, params, result)}


def bench_media(
    cfg: dict,
    host: Host,
    label: dict,
    rows: list[str] | None = None,
    runner: Callable[[str, dict], comfyui.Result] = comfyui.run,
    overrides: dict[str, dict] | None = None,
    tiny_text_encoder: bool = False,
) -> dict:
    """Run the media rows (all when ``rows`` is None; ``overrides``: :func:`parse_sets`'s); the
    record (saved like the LLM rows' by rigup.bench.save): ``{"kind": "media", "started",
    "finished", "comfyui": label, "url", "tiny_text_encoder", "rows": [run_row's, ...]}``."""
    unknown = [r for r in rows or [] if r not in media_bench.ROWS]
    if unknown:
        raise Refused(f"unknown media row(s) {unknown}; rows: {', '.join(media_bench.ROWS)}")
    record: dict[str, Any] = {
        "kind": "media",
        "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "comfyui": label,
        "url": cfg["media"]["url"],
        "tiny_text_encoder": tiny_text_encoder,
        "rows": [],
    }
    for row in rows or list(media_bench.ROWS):
        host.log(f"rigup-bench: media row {row} ...")
        entry = run_row(cfg["media"], row, runner, (overrides or {}).get(row), tiny_text_encoder)
        record["rows"].append(entry)
        host.log(f"rigup-bench: media row {row}: {row_cells(entry)[2]}")
    record["finished"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    return record


def label_line(label: dict) -> str:
    """``"ComfyUI 0.30.0 on cuda:0 NVIDIA H200 : cudaMallocAsync (24.0 GiB)"``."""
    devices = [
        f"{name} ({gib} GiB)" if gib else str(name)
        for name, gib in zip(
            label.get("devices") or [],
            label.get("vram_gib") or [None] * len(label.get("devices") or []),
            strict=False,
        )
    ]
    return f"ComfyUI {label.get('comfyui_version')} on {', '.join(devices) or 'no device named'}"


def error_text(error: dict | None) -> str:
    """ComfyUI's error as one line: node (type), exception type: message; a prompt refused by
    validation: its message and the nodes it names."""
    if not error:
        return "no error reported"
    where = ""
    if error.get("node_id"):
        where = f"node {error['node_id']} ({error.get('node_type')}): "
    elif error.get("node_errors"):
        where = f"nodes {', '.join(sorted(error['node_errors']))}: "
    kind = f"{error['exception_type']}: " if error.get("exception_type") else ""
    return f"{where}{kind}{str(error.get('exception_message', '')).strip()}"


def row_cells(r: dict) -> tuple[str, str, str]:
    """(row, what, this run) of a media row: the figures of a success, ComfyUI's error of a
    failure (never a figure)."""
    ran = what(r["row"], r.get("params") or media_bench.ROWS[r["row"]][1])
    if r.get("status") != "success":
        return r["row"], ran, f"FAILED ({r.get('status')}): {error_text(r.get('error'))}"
    text = f"{r['total_s']:.2f} s total, {r['s_per_step']:.2f} s/step (first step "
    text += f"{r['first_step_s']:.2f} s)"
    if r.get("s_per_video_s") is not None:
        text += f", {r['s_per_video_s']:.2f} s per s of video ({r['video_s']:g} s clip)"
    return r["row"], ran, text


def table(record: dict) -> str:
    """A media record as a Markdown table, headed by what ran it."""
    lines = [
        f"rigup-bench {record['started']} (media rows): {label_line(record['comfyui'])}",
        "figures are this device's: a CPU (lab) or another GPU's figure is not a 3090's"
        + (
            "; tiny checkpoints (--tiny-text-encoder): a test of the rows, not a speed"
            if record.get("tiny_text_encoder")
            else ""
        ),
        "",
        "| row | what | this run |",
        "| --- | --- | --- |",
    ]
    lines += ["| " + " | ".join(row_cells(r)) + " |" for r in record["rows"]]
    lines.append(
        "\ntotal: post to finished, model loads included; s/step: mean after the first step "
        "(/ws progress)"
    )
    return "\n".join(lines)


def llm_mode_hint(cfg: dict) -> str:
    """What to run for the media rows, said where the LLM rows are asked for."""
    media = cfg.get("media")
    if not media:
        return ""
    return (
        f"media rows (FLUX.2 image, LTX-2.3 clip): `sudo rigup-mode {media['mode']}` then "
        "`sudo rigup-bench --media`"
    )
