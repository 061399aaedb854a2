"""rigup-bench's media rows (rigup/bench/media.py) on real captures: the H200 runs' results and
/system_stats (tests/fixtures/media/h200-*: ComfyUI 0.30.0 on one H200 capped at 24 GiB,
benchmarks/comfyui-gpu) and the CPU runs' /ws and /history (flux2-tiny, ltx-error-connector:
ComfyUI 0.30.0 --cpu with tiny checkpoints). The workflows are the shipped ones
(files/comfyui/workflows); doctor.json's ``media`` key is rendered from the shipped settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rigup import bench
from rigup.bench import media
from rigup.media import bench as media_bench
from rigup.media import comfyui
from roles.comfyui.paths import ComfyuiPaths
from roles.doctor.config import doctor_config

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "media"
WORKFLOWS = ROOT / "files" / "comfyui" / "workflows"
MODEL = "/srv/rigup/models/qwen3.6-27b-int4-autoround/mirror-2026-11"


def h200_result(run: str, workflow: str) -> comfyui.Result:
    """The H200 run's saved result (rigup.media.comfyui.Result's fields, its /ws messages
    counted, not kept)."""
    r = json.loads((FIXTURES / run / f"result-{workflow}.json").read_text())
    return comfyui.Result(r["prompt_id"], r["status"], r["outputs"], r["error"], r["timings"])


def h200_stats(run: str) -> dict:
    return json.loads((FIXTURES / run / "record.json").read_text())["system_stats"]


def cpu_result(name: str) -> comfyui.Result:
    """A CPU run's Result from its /history answer and /ws messages, as comfyui.run builds it."""
    history = json.loads((FIXTURES / name / "history.json").read_text())
    lines = (FIXTURES / name / "ws.jsonl").read_text().splitlines()
    messages = [(r["t"], r["msg"]) for r in map(json.loads, lines)]
    (prompt_id,) = history
    status, outputs, error = comfyui.outcome(prompt_id, history)
    timings = comfyui.step_timings(messages, prompt_id)
    timings["total_s"] = round(messages[-1][0], 3)
    return comfyui.Result(prompt_id, status, outputs, error, timings)


class Replay:
    """comfyui.run's place in bench_media: answers each workflow with a captured Result and
    keeps the workflows it was given (the shipped files with the row's parameters set)."""

    def __init__(self, results: dict[str, comfyui.Result]):
        self.results = results
        self.posted: list[tuple[str, dict]] = []

    def __call__(self, url: str, workflow: dict) -> comfyui.Result:
        self.posted.append((url, workflow))
        flux = any(n["class_type"] == "EmptyFlux2LatentImage" for n in workflow.values())
        return self.results["flux2" if flux else "ltx"]


@pytest.fixture
def cfg(settings):
    return doctor_config(settings, MODEL)


def test_doctor_json_names_comfyui_and_the_workflows(cfg, settings):
    assert cfg["media"] == {
        "unit": "comfyui.service",
        "mode": "media",
        "target": "rigup-media.target",
        "url": "http://127.0.0.1:8188",
        "workflows": ComfyuiPaths.from_data(settings).workflows,
    }
    assert cfg["media"]["workflows"] == "/etc/rigup/comfyui/workflows"


def test_no_media_key_without_comfyui(settings):
    settings["comfyui_install"] = False
    cfg = doctor_config(settings, MODEL)
    assert "media" not in cfg
    assert media.rows_listing(cfg) == ["media rows: none (comfyui_install is off on this rig)"]
    with pytest.raises(bench.Refused, match="no ComfyUI"):
        media.refuse_unless_media(cfg, bench.Host(runner=lambda argv: (0, "active\n")))


def test_the_label_of_the_h200_is_its_capped_memory():
    label = media_bench.label(h200_stats("h200-flux2-default"))
    assert label == {
        "comfyui_version": "0.30.0",
        "devices": ["cuda:0 NVIDIA H200 : cudaMallocAsync"],
        "vram_gib": [24.0],
    }
    assert (
        media.label_line(label)
        == "ComfyUI 0.30.0 on cuda:0 NVIDIA H200 : cudaMallocAsync (24.0 GiB)"
    )


def test_the_h200_rows_print_their_figures(tmp_path):
    flux = media_bench.figures(
        "flux2-1024",
        media_bench.ROWS["flux2-1024"][1],
        h200_result("h200-flux2-default", "flux2-dev-t2i"),
    )
    ltx = media_bench.figures(
        "ltx2.3-clip",
        media_bench.ROWS["ltx2.3-clip"][1],
        h200_result("h200-ltx-default", "ltx-2.3-t2v"),
    )
    assert media.row_cells(flux) == (
        "flux2-1024",
        "FLUX.2 [dev] image, 1024x1024, 20 steps",
        "29.00 s total, 0.44 s/step (first step 11.74 s)",
    )
    # docs/comfyui-gpu.md: 35.55 s, 0.68 s/step, 9.2 s per second of video (97 / 25 = 3.88 s)
    assert media.row_cells(ltx)[2] == (
        "35.55 s total, 0.68 s/step (first step 7.49 s), 9.16 s per s of video (3.88 s clip)"
    )


def test_a_run_is_recorded_labelled_and_read_back(cfg, tmp_path):
    cfg["media"]["workflows"] = str(WORKFLOWS)
    cfg["bench"]["results"] = str(tmp_path)
    replay = Replay(
        {
            "flux2": h200_result("h200-flux2-default", "flux2-dev-t2i"),
            "ltx": cpu_result("ltx-error-connector"),
        }
    )
    logged: list[str] = []
    host = bench.Host(log=logged.append)
    label = media_bench.label(h200_stats("h200-flux2-default"))
    record = media.bench_media(cfg, host, label, None, replay)
    # the shipped workflows, with the rows' parameters set
    (url, flux_wf), (_, ltx_wf) = replay.posted
    assert url == "http://127.0.0.1:8188"
    latent = next(n for n in flux_wf.values() if n["class_type"] == "EmptyFlux2LatentImage")
    assert (latent["inputs"]["width"], latent["inputs"]["height"]) == (1024, 1024)
    video = next(n for n in ltx_wf.values() if n["class_type"] == "EmptyLTXVLatentVideo")
    assert (video["inputs"]["width"], video["inputs"]["length"]) == (768, 97)
    ok, failed = record["rows"]
    assert (ok["status"], ok["total_s"], ok["s_per_step"]) == ("success", 29.003, 0.4419)
    # the failed row keeps ComfyUI's error and no figure per second of video
    assert failed["status"] == "error" and "s_per_video_s" not in failed
    assert failed["error"]["node_type"]
    path = bench.save(cfg, record)
    assert bench.latest(str(tmp_path), kind="media")["rows"] == record["rows"]
    assert bench.latest(str(tmp_path)) is None  # an LLM reader (rigup-report) skips it
    text = bench.table(bench.latest(str(tmp_path), kind=None))
    assert text.splitlines()[0].endswith(
        "(media rows): ComfyUI 0.30.0 on cuda:0 NVIDIA H200 : cudaMallocAsync (24.0 GiB)"
    )
    assert "| flux2-1024 | FLUX.2 [dev] image, 1024x1024, 20 steps | 29.00 s total" in text
    err = failed["error"]
    assert (
        f"| ltx2.3-clip | LTX-2.3 clip, 768x512, 97 frames at 25 fps (3.9 s), 20 steps | FAILED "
        f"(error): node {err['node_id']} ({err['node_type']}): {err['exception_type']}: " in text
    )
    assert path.startswith(str(tmp_path))
    assert logged[-1].startswith("rigup-bench: media row ltx2.3-clip: FAILED")


def test_a_missing_workflow_is_a_failed_row_not_a_figure(cfg, tmp_path):
    cfg["media"]["workflows"] = str(tmp_path)
    replay = Replay({})
    record = media.bench_media(cfg, bench.Host(log=lambda _: None), {}, ["flux2-1024"], replay)
    (row,) = record["rows"]
    assert replay.posted == []
    assert row["status"] == "error" and "total_s" not in row
    assert row["error"]["exception_type"] == "WorkflowError"
    assert media.row_cells(row)[2].startswith(f"FAILED (error): WorkflowError: {tmp_path}/")


def test_unknown_media_rows_are_refused(cfg):
    with pytest.raises(bench.Refused, match="unknown media row"):
        media.bench_media(cfg, bench.Host(), {}, ["sdxl"], Replay({}))


def test_in_the_llm_mode_it_says_how_to_switch(cfg):
    host = bench.Host(runner=lambda argv: (3, "inactive\n"), get=lambda url: (0, "refused"))
    with pytest.raises(bench.Refused, match=r"`sudo rigup-mode media` switches to it"):
        media.refuse_unless_media(cfg, host)
    assert "`sudo rigup-mode media` then `sudo rigup-bench --media`" in media.llm_mode_hint(cfg)


def test_in_the_media_mode_the_label_comes_from_system_stats(cfg):
    stats = json.dumps(h200_stats("h200-ltx-default"))
    asked: list[str] = []
    host = bench.Host(
        runner=lambda argv: (0, "active\n"), get=lambda url: (asked.append(url), (200, stats))[1]
    )
    assert media.refuse_unless_media(cfg, host)["devices"] == [
        "cuda:0 NVIDIA H200 : cudaMallocAsync"
    ]
    assert asked == ["http://127.0.0.1:8188/system_stats"]
    down = bench.Host(runner=lambda argv: (0, "active\n"), get=lambda url: (0, "refused"))
    with pytest.raises(bench.Refused, match="does not answer"):
        media.refuse_unless_media(cfg, down)


def test_the_listing_names_the_media_rows(cfg):
    lines = media.rows_listing(cfg)
    assert [line.split(":")[0] for line in lines] == [
        "media row flux2-1024",
        "media row ltx2.3-clip",
    ]
    assert "flux2-dev-t2i.json" in lines[0] and "ltx-2.3-t2v.json" in lines[1]


def test_set_and_the_tiny_text_encoder_are_recorded_and_shown(cfg, tmp_path):
    cfg["media"]["workflows"] = str(WORKFLOWS)
    replay = Replay({"ltx": cpu_result("ltx-error-connector")})
    overrides = media.parse_sets(["ltx2.3-clip.frames=9", "ltx2.3-clip.width=64"])
    assert overrides == {"ltx2.3-clip": {"frames": 9, "width": 64}}
    record = media.bench_media(
        cfg, bench.Host(log=lambda _: None), {}, ["ltx2.3-clip"], replay, overrides, True
    )
    ((_, wf),) = replay.posted
    assert not [n for n in wf.values() if n["class_type"] == "LTXAVTextEncoderLoader"]
    video = next(n for n in wf.values() if n["class_type"] == "EmptyLTXVLatentVideo")
    assert (video["inputs"]["width"], video["inputs"]["length"]) == (64, 9)
    (row,) = record["rows"]
    seed = row["params"].pop("seed")  # a fresh one: ComfyUI would answer a repeat from its cache
    assert row["params"] == {"width": 64, "height": 512, "frames": 9, "fps": 25, "steps": 20}
    noise = next(n for n in wf.values() if n["class_type"] == "RandomNoise")
    assert noise["inputs"]["noise_seed"] == seed
    assert row["video_s"] == 0.36
    text = media.table(record)
    assert "| ltx2.3-clip | LTX-2.3 clip, 64x512, 9 frames at 25 fps (0.4 s), 20 steps |" in text
    assert "tiny checkpoints (--tiny-text-encoder): a test of the rows, not a speed" in text


def test_bad_sets_are_refused_all_at_once():
    with pytest.raises(bench.Refused) as exc:
        media.parse_sets(["sdxl.steps=4", "flux2-1024.steps", "flux2-1024.width=wide"])
    assert "['sdxl.steps=4', 'flux2-1024.steps', 'flux2-1024.width=wide']" in str(exc.value)


def test_each_run_of_a_row_gets_a_seed_of_its_own_unless_one_is_set(cfg):
    """ComfyUI answers a prompt it already ran from its cache (the H200's second identical LTX-2.3
    prompt: 0.01 s, tests/fixtures/media/h200-ltx-default-twice): each run draws a seed, so the
    row is run, never read back; a seed the owner sets is kept."""
    cfg["media"]["workflows"] = str(WORKFLOWS)
    replay = Replay({"flux2": h200_result("h200-flux2-default", "flux2-dev-t2i")})
    seeds = iter([7, 8])
    runs = [
        media.run_row(cfg["media"], "flux2-1024", replay, None, False, lambda: next(seeds))
        for _ in range(2)
    ]
    assert [r["params"]["seed"] for r in runs] == [7, 8]
    assert [wf["noise"]["inputs"]["noise_seed"] for _, wf in replay.posted] == [7, 8]
    kept = media.run_row(cfg["media"], "flux2-1024", replay, {"seed": 42}, False, lambda: 9)
    assert kept["params"]["seed"] == 42
