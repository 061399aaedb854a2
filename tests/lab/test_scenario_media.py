"""The lab scenario, media workflows: comfyui.service (ComfyUI 0.30.0 on the CPU, the lab's
release) executes rigup's two shipped workflows, FLUX.2 [dev] text to image and LTX-2.3 text to
video with audio (files/comfyui/workflows), submitted through ComfyUI's own API by rigup's client
as installed on the machine (rigup.media: /prompt, /ws, /history).

The checkpoints are tiny random-weight ones, generated on the machine by lab/media/weights.py with
the machine's own ComfyUI checkout and venv (ComfyUI's classes and detection: FLUX.2 and LTXAV),
put in the lab's local model directory under the manifests' paths and placed by the model
machinery (comfyui_models), exactly as real files are. Files the workflows do not load (the
FLUX.2 turbo LoRA, the Gemma LoRA) are empty safetensors placeholders. The one change to a shipped
workflow is rigup.media.workflows.tiny_text_encoder (LTX-2.3's Gemma loader becomes CLIPLoader:
ComfyUI fixes Gemma 3 12B's size, lab/media/weights.py says why).
"""

from __future__ import annotations

import base64
import json
import shlex
from pathlib import Path

import pytest

from lab import comfyui_lab, voxcpm_lab
from rigup.media import container, workflows
from tests.lab.labtools import LAB_MARKS, active, pyinfra

pytestmark = LAB_MARKS

REPO = Path(__file__).resolve().parents[2]
PREFIX = "/opt/rigup"  # rigup_prefix: the host package rigup in lib (roles/common/service.py)
COMFYUI = f"{PREFIX}/comfyui"  # roles/comfyui/paths.py: src, venv
MIRROR = "/srv/mirror"  # the lab's model_local_dirs
WORK = "/var/tmp/rigup-media"
#: manifest -> {file path in the manifest's repository: generated file under models/}
FILES = {
    "flux2-dev": {
        "split_files/diffusion_models/flux2_dev_fp8mixed.safetensors": "diffusion_models/flux2_dev_fp8mixed.safetensors",
        "split_files/text_encoders/mistral_3_small_flux2_fp8.safetensors": "text_encoders/mistral_3_small_flux2_fp8.safetensors",
        "split_files/vae/flux2-vae.safetensors": "vae/flux2-vae.safetensors",
        "split_files/loras/Flux2TurboComfyv2.safetensors": None,
    },
    "ltx-2.3-22b-dev-fp8": {
        "ltx-2.3-22b-dev-fp8.safetensors": "checkpoints/ltx-2.3-22b-dev-fp8.safetensors",
    },
    "ltx-2-gemma-3-12b": {
        "split_files/text_encoders/gemma_3_12B_it_fp4_mixed.safetensors": "text_encoders/gemma_3_12B_it_fp4_mixed.safetensors",
        "split_files/loras/gemma-3-12b-it-abliterated_lora_rank64_bf16.safetensors": None,
    },
}  # fmt: skip
#: an empty safetensors file (8-byte header length, a JSON header, no tensors)
_PLACEHOLDER = (
    "import json, os, struct, sys\n"
    "h = json.dumps({'__metadata__': {'rigup': 'lab placeholder, not loaded'}}).encode()\n"
    "h += b' ' * (-len(h) % 8)\n"
    "os.makedirs(os.path.dirname(sys.argv[1]), exist_ok=True)\n"
    "open(sys.argv[1], 'wb').write(struct.pack('<Q', len(h)) + h)\n"
)
SIZES = {
    "flux2-dev-t2i": {"width": 64, "height": 48, "steps": 2},
    "ltx-2.3-t2v": {"width": 64, "height": 64, "frames": 9, "fps": 25, "steps": 2},
}


@pytest.fixture(scope="module")
def placed(converged):
    """Tiny checkpoints generated on the machine, placed by deploys/comfyui.py from the local
    model directory, ComfyUI restarted on them in the media mode; yields the lab machine."""
    lab = converged
    lab.ssh("rigup-mode media")
    lab.ssh(f"rm -rf {WORK} && mkdir -p {WORK}/lab/media {WORK}/workflows")
    for f in sorted((REPO / "lab" / "media").glob("*.py")):
        lab.push(f, f"{WORK}/lab/media/{f.name}")
    lab.ssh(f"touch {WORK}/lab/__init__.py")
    for f in sorted((REPO / "files" / "comfyui" / "workflows").glob("*.json")):
        lab.push(f, f"{WORK}/workflows/{f.name}")
    reports = {}
    for model in ("flux2", "ltx2.3"):
        out = lab.ssh(
            f"cd {WORK} && {COMFYUI}/venv/bin/python -m lab.media.weights --model {model} --scale tiny"
            f" --out {WORK}/models --comfyui {COMFYUI}/src 2>{WORK}/weights-{model}.log"
        ).stdout
        reports[model] = json.loads(out)
        print(f"\n{model} tiny: written in {reports[model]['write_s']} s, ComfyUI detected "
              f"{reports[model]['comfyui']['diffusion_model']['model_class']}")  # fmt: skip
    for manifest, files in FILES.items():
        for rel, generated in files.items():
            dest = f"{MIRROR}/{manifest}/{rel}"
            if generated is None:
                lab.ssh(f"python3 -c {shlex.quote(_PLACEHOLDER)} {dest}")
            else:
                lab.ssh(f"mkdir -p $(dirname {dest}) && cp {WORK}/models/{generated} {dest}")
    data = f"comfyui_models={json.dumps(sorted(FILES))}"
    proc = pyinfra("-y", "inventory/lab.py", "deploys/comfyui.py", "--data", data)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lab.ssh("systemctl restart comfyui.service")  # ComfyUI caches loaded models by file name
    assert active(lab, "comfyui.service") == "active"
    lab.reports = reports
    return lab


def test_comfyui_detects_the_tiny_checkpoints_as_flux2_and_ltxav(placed):
    """The generator's own check, run on the machine's ComfyUI: its loaders build Flux2 and
    LTXAV (model_detection), with LTX-2.3's gated attention, the VocoderWithBWE audio VAE, and
    no key left out ("missing" / "unexpected" in ComfyUI's load log)."""
    flux, ltx = placed.reports["flux2"]["comfyui"], placed.reports["ltx2.3"]["comfyui"]
    assert (flux["diffusion_model"]["model_class"], flux["diffusion_model"]["image_model"]) == (
        "Flux2",
        "flux2",
    )
    assert (ltx["diffusion_model"]["model_class"], ltx["diffusion_model"]["image_model"]) == (
        "LTXAV",
        "ltxav",
    )
    assert ltx["diffusion_model"]["unet_config"]["apply_gated_attention"] is True
    assert (ltx["audio_vae"]["vocoder"], ltx["audio_vae"]["output_sample_rate"]) == (
        "VocoderWithBWE",
        48000,
    )
    for report in (flux, ltx):
        assert not [line for line in report["log"] if "missing" in line or "unexpected" in line], (
            report["log"]
        )


@pytest.mark.parametrize("name", sorted(SIZES))
def test_a_shipped_workflow_runs_through_comfyui_service(placed, media, name):
    """rigup's client on the machine submits the shipped workflow (small sizes) to
    comfyui.service: /history says success, the output file exists, and it is what was asked
    (PNG of the set size; MP4 with an H.264 video track of the set size and frame count and an
    AAC audio track at LTX-2.3's 48 kHz)."""
    lab = placed
    port = comfyui_lab.lab_comfyui_port(lab.cfg)
    sets = " ".join(f"--set {k}={v}" for k, v in SIZES[name].items())
    tiny = " --tiny-text-encoder" if name.startswith("ltx") else ""
    run = lab.ssh(
        f"cd {PREFIX}/lib && python3 -m rigup.media {WORK}/workflows/{name}.json"
        f" --url http://127.0.0.1:{port} {sets}{tiny} --timeout 900",
        check=False,
    )
    assert run.stdout.strip(), (
        f"the client printed nothing (exit {run.returncode}): {run.stderr[-3000:]}"
    )
    result = json.loads(run.stdout)
    print(
        f"\n{name}: {result['status']} in {result['timings']['total_s']} s, {result['timings']['nodes']}"
    )
    assert run.returncode == 0 and result["status"] == "success", result
    (out,) = result["outputs"]
    path = f"/srv/rigup/comfyui/output/{out['subfolder']}/{out['filename']}".replace("//", "/")
    raw = base64.b64decode(lab.ssh(f"base64 -w0 {shlex.quote(path)}").stdout)
    p = SIZES[name]
    if name.startswith("flux2"):
        assert container.png_size(raw) == (p["width"], p["height"])
    else:
        tracks = {t["handler"]: t for t in container.mp4_tracks(raw)}
        v, a = tracks["vide"], tracks["soun"]
        assert (v["codec"], v["width"], v["height"], v["samples"]) == (
            "avc1",
            p["width"],
            p["height"],
            p["frames"],
        )
        assert (a["codec"], a["sample_rate"], a["channels"]) == ("mp4a", 48000, 2)
    assert workflows.PARAMETERS[name]  # the parameters the run set are rigup's


#: the media rows at the lab's sizes (rigup.media.bench.ROWS's rows, SIZES's parameters)
BENCH_SETS = {"flux2-1024": SIZES["flux2-dev-t2i"], "ltx2.3-clip": SIZES["ltx-2.3-t2v"]}


def test_rigup_bench_media_rows_run_through_comfyui_service(placed, media):
    """``rigup-bench --media`` as an owner runs it, on the workflows the converge placed in
    /etc/rigup/comfyui/workflows and ComfyUI's URL from doctor.json: both rows succeed with
    figures, labelled with what ran them (ComfyUI 0.30.0 on the CPU, never a 3090), and the run is
    kept as a media record that ``--last`` reads back."""
    sets = " ".join(
        f"--set {row}.{k}={v}" for row, params in BENCH_SETS.items() for k, v in params.items()
    )
    run = placed.ssh(f"rigup-bench --media --tiny-text-encoder {sets}", check=False)
    assert run.returncode == 0, f"exit {run.returncode}: {run.stdout[-3000:]}{run.stderr[-3000:]}"
    path = run.stdout.rpartition("\nrecord: ")[2].strip()
    # its progress lines share stdout with the table: the record is read back, as an owner would
    record = json.loads(placed.ssh("rigup-bench --last --json").stdout)
    print(f"\nrigup-bench --media: {[(r['row'], r['total_s']) for r in record['rows']]}")
    assert record["kind"] == "media" and record["tiny_text_encoder"] is True
    assert record["comfyui"]["comfyui_version"] == "0.30.0"
    assert [str(d).lower() for d in record["comfyui"]["devices"]] == ["cpu"], record["comfyui"]
    assert [r["row"] for r in record["rows"]] == list(BENCH_SETS)
    for r in record["rows"]:
        assert r["status"] == "success" and r["total_s"] > 0 and r["s_per_step"] > 0, r
        # the sampler ran every step it was asked (a prompt answered from ComfyUI's cache has none)
        assert r["steps"] == BENCH_SETS[r["row"]]["steps"] and isinstance(
            r["params"]["seed"], int
        ), r
        assert r["params"] | BENCH_SETS[r["row"]] == r["params"], r
    (clip,) = [r for r in record["rows"] if r["row"] == "ltx2.3-clip"]
    assert clip["video_s"] == pytest.approx(BENCH_SETS["ltx2.3-clip"]["frames"] / 25, abs=0.01)
    assert "(media rows): ComfyUI 0.30.0 on cpu" in run.stdout, run.stdout
    assert "(media rows): ComfyUI 0.30.0 on cpu" in placed.ssh("rigup-bench --last").stdout
    assert (
        path.strip()
        and placed.ssh(f"test -f {shlex.quote(path.strip())}", check=False).returncode == 0
    )


def _flux2(lab, port: int) -> dict:
    """The FLUX.2 workflow at the lab's size through rigup's client: the very prompt of
    test_a_shipped_workflow_runs_through_comfyui_service (the workflow's own seed)."""
    sets = " ".join(f"--set {k}={v}" for k, v in SIZES["flux2-dev-t2i"].items())
    run = lab.ssh(
        f"cd {PREFIX}/lib && python3 -m rigup.media {WORK}/workflows/flux2-dev-t2i.json"
        f" --url http://127.0.0.1:{port} {sets} --timeout 900",
        check=False,
    )
    assert run.returncode == 0, f"exit {run.returncode}: {run.stdout[-2000:]}{run.stderr[-2000:]}"
    return json.loads(run.stdout)


def test_rigup_free_comfyui_unloads_its_models_and_it_stays_up(placed, media):
    """``rigup-free comfyui`` (ComfyUI's POST /free): ComfyUI stays up, and the same prompt that
    it answered from its cache before (no sampler step) runs every step after the free: its
    models and cached outputs are gone, and it loads them again."""
    lab = placed
    port = comfyui_lab.lab_comfyui_port(lab.cfg)
    cached = _flux2(lab, port)
    if cached["timings"]["nodes"]:  # new to this ComfyUI (the test above did not run): again
        cached = _flux2(lab, port)
    assert cached["status"] == "success" and not cached["timings"]["nodes"], cached["timings"]
    freed = json.loads(lab.ssh("rigup-free comfyui").stdout)
    print(f"\nrigup-free comfyui: {freed}")
    assert freed["freed"] is True and freed["device"].lower().startswith("cpu"), freed
    assert active(lab, "comfyui.service") == "active"
    again = _flux2(lab, port)
    (sampler,) = again["timings"]["nodes"].values()
    assert sampler["steps"] == SIZES["flux2-dev-t2i"]["steps"], again["timings"]


def test_rigup_free_speech_releases_and_reloads_the_model(media):
    """``rigup-free speech``: the speech server stays up, /ready says released (503) and a speech
    request is answered 503 model_released; ``--reload`` brings it back and speech is answered."""
    lab = media
    url = f"http://127.0.0.1:{voxcpm_lab.lab_voxcpm_port(lab.cfg)}"
    speak = (
        f"curl -sS -o /dev/null -w '%{{http_code}}' {url}/v1/audio/speech "
        "-H 'Content-Type: application/json' -d '{\"input\": \"Hello.\"}'"
    )
    released = json.loads(lab.ssh("rigup-free speech").stdout)
    assert released["status"] == "released", released
    ready = lab.ssh(f"curl -sS -w '\\n%{{http_code}}' {url}/ready").stdout.splitlines()
    assert ready[-1] == "503" and json.loads(ready[0])["status"] == "released", ready
    assert lab.ssh(speak).stdout == "503"
    assert active(lab, "voxcpm.service") == "active"
    back = json.loads(lab.ssh("rigup-free speech --reload").stdout)
    print(
        f"\nrigup-free speech: released in {released['released_seconds']} s, back in {back['seconds']} s"
    )
    assert back["status"] == "ready" and back["synthesizer"] == "test-double", back
    assert lab.ssh(speak).stdout == "200"
