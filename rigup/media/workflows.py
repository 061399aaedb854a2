"""The API-format workflows rigup ships (files/comfyui/workflows/*.json) and their parameters.

A workflow's nodes have names as ids ("latent", "scheduler", ...); :data:`PARAMETERS` maps each
parameter a user sets to the node inputs that carry it, so one value lands everywhere it must
(FLUX.2's width is both the empty latent's and Flux2Scheduler's). :func:`apply` sets them,
refusing unknown parameters, missing nodes and wrong types, all at once, before any change.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

#: workflow name -> parameter -> [(node id, input name), ...]
PARAMETERS: dict[str, dict[str, list[tuple[str, str]]]] = {
    "flux2-dev-t2i": {
        "width": [("latent", "width"), ("scheduler", "width")],
        "height": [("latent", "height"), ("scheduler", "height")],
        "steps": [("scheduler", "steps")],
        "seed": [("noise", "noise_seed")],
        "prompt": [("prompt", "text")],
        "guidance": [("guidance", "guidance")],
        "filename_prefix": [("save", "filename_prefix")],
    },
    "ltx-2.3-t2v": {
        "width": [("video_latent", "width")],
        "height": [("video_latent", "height")],
        "frames": [("video_latent", "length"), ("audio_latent", "frames_number")],
        "fps": [("conditioning", "frame_rate"), ("audio_latent", "frame_rate"), ("video", "fps")],
        "steps": [("scheduler", "steps")],
        "cfg": [("guider", "cfg")],
        "seed": [("noise", "noise_seed")],
        "prompt": [("prompt", "text")],
        "negative": [("negative", "text")],
        "filename_prefix": [("save", "filename_prefix")],
    },
}
#: parameter -> accepted Python types
TYPES = {
    "width": int, "height": int, "steps": int, "frames": int, "seed": int,
    "fps": (int, float), "cfg": (int, float), "guidance": (int, float),
    "prompt": str, "negative": str, "filename_prefix": str,
}  # fmt: skip


class WorkflowError(ValueError):
    """A workflow or its parameters are wrong; the message lists every problem."""


def load(path: Path) -> dict:
    """The API-format workflow at ``path``. Raises WorkflowError when it is not one (a JSON
    object of nodes, each with "class_type" and "inputs")."""
    try:
        wf = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise WorkflowError(f"{path}: {e}") from e
    bad = (
        [
            k
            for k, v in wf.items()
            if not (isinstance(v, dict) and "class_type" in v and isinstance(v.get("inputs"), dict))
        ]
        if isinstance(wf, dict)
        else ["<root>"]
    )
    if bad:
        raise WorkflowError(
            f"{path}: not an API-format workflow (nodes without class_type/inputs: {bad})"
        )
    return wf


def apply(name: str, workflow: dict, params: dict) -> dict:
    """A copy of ``workflow`` (rigup's workflow ``name``) with ``params`` set. Raises
    WorkflowError listing unknown parameters, wrong types, and (node, input) targets the
    workflow lacks."""
    table = PARAMETERS.get(name)
    if table is None:
        raise WorkflowError(f"unknown workflow {name!r}; rigup's: {sorted(PARAMETERS)}")
    errors = []
    for key, value in params.items():
        if key not in table:
            errors.append(f"{key}: not a parameter of {name} ({', '.join(sorted(table))})")
            continue
        if not isinstance(value, TYPES[key]) or isinstance(value, bool):
            errors.append(f"{key}: {value!r} is not {TYPES[key]}")
        for node, inp in table[key]:
            if inp not in workflow.get(node, {}).get("inputs", {}):
                errors.append(f"{key}: node {node!r} has no input {inp!r}")
    if errors:
        raise WorkflowError("; ".join(errors))
    out = copy.deepcopy(workflow)
    for key, value in params.items():
        for node, inp in table[key]:
            out[node]["inputs"][inp] = value
    return out


def tiny_text_encoder(workflow: dict) -> dict:
    """The lab's one change for tiny checkpoints: LTXAVTextEncoderLoader always builds Gemma 3
    12B (comfy/text_encoders/lt.py; lab/media/weights.py says why it cannot be scaled), so its
    node becomes CLIPLoader type "ltxv" on the same file (a CLIP-L there at tiny scale). A
    workflow without that node is returned unchanged (FLUX.2's CLIPLoader takes CLIP-L as is)."""
    out = copy.deepcopy(workflow)
    for node in out.values():
        if node["class_type"] == "LTXAVTextEncoderLoader":
            node["class_type"] = "CLIPLoader"
            node["inputs"] = {
                "clip_name": node["inputs"]["text_encoder"],
                "type": "ltxv",
                "device": "default",
            }
    return out
