"""The media mode's benchmark rows: FLUX.2 [dev] image time at 1024x1024 and LTX-2.3 clip time,
each one run of rigup's shipped workflow through ComfyUI's API (rigup.media.comfyui), labelled
with the ComfyUI version and device that ran it (GET /system_stats), so a lab's CPU figure is
never read as a rig's.

``python3 -m rigup.media.bench --url http://127.0.0.1:8188 --workflows DIR [--rows ...]
[--set row.key=value ...] [--tiny-text-encoder] [--json]`` prints one line per row.

Figures (all from the run's /ws progress and its terminal message, :func:`figures`): total s
(post to finished: model loads included, as an owner waits them), s per sampler step after the
first, the first step's s; for a clip also the clip's length (frames / fps, s) and total s per
second of video. Printed, never judged.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from pathlib import Path

from rigup.media import comfyui, workflows

#: row id -> (workflow name, parameters). FLUX.2 at 1024x1024 and 20 steps (ComfyUI's FLUX.2
#: template defaults); LTX-2.3 at 768x512, 97 frames at 25 fps (3.9 s of video) and 20 steps
#: (EmptyLTXVLatentVideo's and LTXVScheduler's defaults).
ROWS = {
    "flux2-1024": ("flux2-dev-t2i", {"width": 1024, "height": 1024, "steps": 20}),
    "ltx2.3-clip": (
        "ltx-2.3-t2v",
        {"width": 768, "height": 512, "frames": 97, "fps": 25, "steps": 20},
    ),
}


def figures(row: str, params: dict, result: comfyui.Result) -> dict:
    """A row's figures from a run's :class:`rigup.media.comfyui.Result`: ``{"row", "status",
    "total_s", "s_per_step", "first_step_s", "steps"}`` plus, for a clip, ``"video_s"`` (frames /
    fps) and ``"s_per_video_s"``. A failed run keeps its error (node, exception) instead."""
    out: dict = {"row": row, "status": result.status, "total_s": result.timings.get("total_s")}
    nodes = result.timings.get("nodes", {})
    sampler = max(nodes.values(), key=lambda n: n.get("steps") or 0, default={})
    out.update({k: sampler.get(k) for k in ("steps", "s_per_step", "first_step_s")})
    if "frames" in params:
        out["video_s"] = round(params["frames"] / params["fps"], 3)
        if result.status == "success":
            out["s_per_video_s"] = round(out["total_s"] / out["video_s"], 3)
    if result.status != "success":
        out["error"] = result.error
    return out


def label(stats: dict) -> dict:
    """What ran the rows, from ComfyUI's GET /system_stats JSON: ``{"comfyui_version",
    "devices": [name, ...], "vram_gib": [GiB per device, as ComfyUI saw it]}``. A device name
    is torch's as ComfyUI prints it (``"cuda:0 NVIDIA H200 : cudaMallocAsync"``, ``"cpu"``);
    vram_gib shows a capped card as capped (the H200 runs under 24 GiB: 24.0)."""
    devices = stats.get("devices", [])
    return {
        "comfyui_version": stats.get("system", {}).get("comfyui_version"),
        "devices": [d.get("name") for d in devices],
        "vram_gib": [
            round(d["vram_total"] / 2**30, 1) if d.get("vram_total") else None for d in devices
        ],
    }


def system(base_url: str) -> dict:
    """:func:`label` of ComfyUI's GET /system_stats at ``base_url``."""
    with urllib.request.urlopen(f"{base_url}/system_stats", timeout=30) as r:
        return label(json.load(r))


def main(argv: list[str] | None = None) -> int:
    """CLI (see the module docstring); exit 0 when every row succeeded."""
    ap = argparse.ArgumentParser(prog="python3 -m rigup.media.bench")
    ap.add_argument("--url", default="http://127.0.0.1:8188")
    ap.add_argument(
        "--workflows", type=Path, required=True, help="directory of rigup's workflow files"
    )
    ap.add_argument("--rows", nargs="*", default=sorted(ROWS), choices=sorted(ROWS))
    ap.add_argument("--set", action="append", default=[], metavar="ROW.KEY=VALUE")
    ap.add_argument("--tiny-text-encoder", action="store_true", help="the lab's tiny checkpoints")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    overrides: dict[str, dict] = {}
    for item in args.set:
        key, _, value = item.partition("=")
        row, _, param = key.rpartition(".")
        if row not in ROWS or not param or not value:
            ap.error(f"--set takes ROW.KEY=VALUE with ROW in {sorted(ROWS)}: {item!r}")
        overrides.setdefault(row, {})[param] = json.loads(value)
    label = system(args.url)
    results = []
    for row in args.rows:
        name, params = ROWS[row]
        params = {**params, **overrides.get(row, {})}
        try:
            wf = workflows.apply(name, workflows.load(args.workflows / f"{name}.json"), params)
        except workflows.WorkflowError as e:
            print(f"error: {row}: {e}", file=sys.stderr)
            return 2
        if args.tiny_text_encoder:
            wf = workflows.tiny_text_encoder(wf)
        rec = figures(row, params, comfyui.run(args.url, wf))
        results.append({**rec, "params": params, **label})
        if not args.json:
            extra = f", {rec['s_per_video_s']} s per s of video" if "s_per_video_s" in rec else ""
            print(
                f"{row}: {rec['status']}, {rec['total_s']} s total, {rec['s_per_step']} s/step "
                f"(first step {rec['first_step_s']} s){extra}; {params}; ComfyUI "
                f"{label['comfyui_version']} on {', '.join(label['devices'])}"
            )
    if args.json:
        print(json.dumps(results, indent=2))
    return 0 if all(r["status"] == "success" for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
