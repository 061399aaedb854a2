"""The shipped ComfyUI workflows (files/comfyui/workflows) and rigup.media.workflows' parameters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rigup.media import workflows

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "files" / "comfyui" / "workflows"
MANIFESTS = ROOT / "files" / "model" / "manifests"


@pytest.mark.parametrize("name", sorted(workflows.PARAMETERS))
def test_every_parameter_lands_on_an_input_of_the_shipped_file(name):
    wf = workflows.load(SHIPPED / f"{name}.json")
    for param, targets in workflows.PARAMETERS[name].items():
        for node, inp in targets:
            assert inp in wf[node]["inputs"], (param, node, inp)


@pytest.mark.parametrize("name", sorted(workflows.PARAMETERS))
def test_links_point_at_nodes_of_the_workflow(name):
    wf = workflows.load(SHIPPED / f"{name}.json")
    for node_id, node in wf.items():
        for inp, value in node["inputs"].items():
            if isinstance(value, list):
                assert value[0] in wf and isinstance(value[1], int), (node_id, inp, value)


def test_the_workflows_load_the_manifests_files():
    """Every model file a shipped workflow names is a ``dest`` of rigup's manifests."""
    dests = set()
    for toml in MANIFESTS.glob("*.toml"):
        for line in toml.read_text().splitlines():
            if line.startswith("dest = "):
                dests.add(json.loads(line.split("=", 1)[1].strip()).split("/", 1)[1])
    keys = ("unet_name", "clip_name", "vae_name", "ckpt_name", "text_encoder")
    for name in workflows.PARAMETERS:
        wf = workflows.load(SHIPPED / f"{name}.json")
        named = {n["inputs"][k] for n in wf.values() for k in keys if k in n["inputs"]}
        assert named and named <= dests, (name, named - dests)


def test_width_sets_the_latent_and_the_scheduler():
    wf = workflows.load(SHIPPED / "flux2-dev-t2i.json")
    out = workflows.apply("flux2-dev-t2i", wf, {"width": 64, "height": 48, "steps": 2})
    assert (out["latent"]["inputs"]["width"], out["scheduler"]["inputs"]["width"]) == (64, 64)
    assert (out["latent"]["inputs"]["height"], out["scheduler"]["inputs"]["height"]) == (48, 48)
    assert out["scheduler"]["inputs"]["steps"] == 2
    assert wf["latent"]["inputs"]["width"] == 1024, "apply must not change its argument"


def test_frames_and_fps_set_video_and_audio_alike():
    wf = workflows.load(SHIPPED / "ltx-2.3-t2v.json")
    out = workflows.apply("ltx-2.3-t2v", wf, {"frames": 9, "fps": 24})
    assert (
        out["video_latent"]["inputs"]["length"]
        == out["audio_latent"]["inputs"]["frames_number"]
        == 9
    )
    assert (
        out["conditioning"]["inputs"]["frame_rate"]
        == out["audio_latent"]["inputs"]["frame_rate"]
        == 24
    )
    assert out["video"]["inputs"]["fps"] == 24


def test_bad_parameters_are_all_named_before_any_change():
    wf = workflows.load(SHIPPED / "flux2-dev-t2i.json")
    with pytest.raises(workflows.WorkflowError) as e:
        workflows.apply("flux2-dev-t2i", wf, {"frames": 9, "width": "64", "steps": True})
    msg = str(e.value)
    assert (
        "frames: not a parameter of flux2-dev-t2i" in msg
        and "width: '64'" in msg
        and "steps: True" in msg
    )
    with pytest.raises(workflows.WorkflowError, match="node 'latent' has no input 'width'"):
        workflows.apply(
            "flux2-dev-t2i", {"latent": {"class_type": "X", "inputs": {}}}, {"width": 64}
        )
    with pytest.raises(workflows.WorkflowError, match="unknown workflow"):
        workflows.apply("sdxl", wf, {})


def test_load_refuses_a_ui_format_workflow(tmp_path):
    path = tmp_path / "ui.json"
    path.write_text(json.dumps({"nodes": [], "links": []}))
    with pytest.raises(workflows.WorkflowError, match="not an API-format workflow"):
        workflows.load(path)


def test_tiny_text_encoder_swaps_only_the_ltx_loader():
    ltx = workflows.load(SHIPPED / "ltx-2.3-t2v.json")
    out = workflows.tiny_text_encoder(ltx)
    assert out["text_encoder"] == {
        "class_type": "CLIPLoader",
        "inputs": {
            "clip_name": "gemma_3_12B_it_fp4_mixed.safetensors",
            "type": "ltxv",
            "device": "default",
        },
        "_meta": ltx["text_encoder"]["_meta"],
    }
    assert {k: v for k, v in out.items() if k != "text_encoder"} == {
        k: v for k, v in ltx.items() if k != "text_encoder"
    }
    flux = workflows.load(SHIPPED / "flux2-dev-t2i.json")
    assert workflows.tiny_text_encoder(flux) == flux
