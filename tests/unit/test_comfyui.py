"""ComfyUI role: rendered arguments, environment and unit, its settings rules, the GitCheckout
fact on captured git output, and the FLUX.2 Dev / LTX-2.3 model manifests."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from roles.comfyui.flags import exec_start, main_args, service_env, system_stats_url
from roles.comfyui.git import GitCheckout
from roles.comfyui.paths import ComfyuiPaths
from roles.settings import validate

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "files" / "model" / "manifests"

#: ComfyUI model folders (folder_paths.py of the pinned v0.8.0: folder_names_and_paths keys)
COMFYUI_FOLDERS = {
    "checkpoints", "configs", "loras", "vae", "text_encoders", "clip", "diffusion_models", "unet",
    "clip_vision", "style_models", "embeddings", "diffusers", "vae_approx", "controlnet",
    "t2i_adapter", "gligen", "upscale_models", "latent_upscale_models", "hypernetworks",
    "photomaker", "classifiers", "model_patches", "audio_encoders",
}  # fmt: skip


def test_default_arguments(settings):
    assert main_args(settings) == [
        "--listen", "127.0.0.1",
        "--port", "8188",
        "--base-directory", "/srv/rigup/comfyui",
        "--database-url", "sqlite:////srv/rigup/comfyui/user/comfyui.db",
        "--disable-auto-launch",
        "--cuda-device", "0",
        "--reserve-vram", "1.0",
    ]  # fmt: skip


def test_cpu_mode_replaces_the_gpu_flags(settings):
    settings |= {"comfyui_cpu": True, "comfyui_extra_args": ["--preview-method", "auto"]}
    args = main_args(settings)
    assert "--cpu" in args and "--cuda-device" not in args and "--reserve-vram" not in args
    assert args[-2:] == ["--preview-method", "auto"]


def test_never_highvram_or_gpu_only_by_default(settings):
    assert not {"--highvram", "--gpu-only"} & set(main_args(settings))


def test_exec_start_and_probe(settings):
    line = exec_start(settings)
    assert line.startswith("/opt/rigup/comfyui/venv/bin/python /opt/rigup/comfyui/src/main.py ")
    assert "sqlite:////srv/rigup/comfyui/user/comfyui.db" in line
    assert system_stats_url(settings) == "http://127.0.0.1:8188/system_stats"
    settings["comfyui_host"] = "0.0.0.0"
    assert system_stats_url(settings) == "http://127.0.0.1:8188/system_stats"


def test_service_env_is_offline_and_private(settings):
    env = service_env(settings)
    home = ComfyuiPaths.from_data(settings).home
    assert env["HF_HUB_OFFLINE"] == "1" and env["DO_NOT_TRACK"] == "1"
    assert env["HOME"] == home and env["TMPDIR"] == f"{home}/tmp"
    settings["comfyui_env"] = {"COMFYUI_EXTRA": "1"}
    assert service_env(settings)["COMFYUI_EXTRA"] == "1"


@pytest.mark.parametrize(
    "key,value,fragment",
    [
        ("comfyui_extra_args", ["--highvram"], "keeps every model in VRAM"),
        ("comfyui_extra_args", ["--gpu-only"], "keeps every model in VRAM"),
        ("comfyui_extra_args", ["--port=9000"], "--port sets what comfyui_port sets"),
        ("comfyui_extra_args", ["--listen", "0.0.0.0"], "--listen sets what comfyui_host sets"),
        (
            "comfyui_extra_args",
            ["--list"],
            "--list (an abbreviation of --listen) sets what comfyui_host sets",
        ),
        ("comfyui_extra_args", ["--highv"], "keeps every model in VRAM"),
        ("comfyui_commit", "v0.8.0", "40-character git commit"),
        ("comfyui_commit", "FC0CB10BCBEE6E73ED3CAF34C27F7BDE4559A07F", "40-character git commit"),
        ("comfyui_release", "v0.8.0 beta", "a release tag of ComfyUI"),
        ("comfyui_lock_dir", "releases", "absolute path"),
        ("comfyui_git_url", "http://example.org/ComfyUI.git", "https://"),
        ("comfyui_git_url", "relative/mirror", "https://"),
        ("comfyui_base_dir", "/srv/rigup/models", "directory of its own"),
        ("comfyui_cpu", "yes", "True or False"),
        ("comfyui_reserve_vram_gib", -1, "must be in [0.0"),
        ("comfyui_models", ["flux 2"], "must be a manifest name"),
        ("comfyui_models", ["no-such-model"], "not found"),
        ("rigup_mode", "gaming", "must be one of llm, media"),
    ],
)
def test_bad_comfyui_or_mode_setting_is_named(settings, key, value, fragment):
    settings[key] = value
    problems = validate(settings)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{key}: ") and fragment in problems[0], problems[0]


def test_local_mirror_path_is_a_valid_source(settings):
    settings["comfyui_git_url"] = "/srv/mirror/ComfyUI.git"
    assert validate(settings) == []


# ---- GitCheckout fact (output captured from the lab machine) -----------------------------------
def test_git_checkout_fact():
    clean = [
        "@head fc0cb10bcbee6e73ed3caf34c27f7bde4559a07f",
        "@origin /srv/mirror/ComfyUI.git",
    ]
    assert GitCheckout().process(clean) == {
        "head": "fc0cb10bcbee6e73ed3caf34c27f7bde4559a07f",
        "origin": "/srv/mirror/ComfyUI.git",
        "dirty": [],
    }
    dirty = GitCheckout().process([*clean, "@dirty  M nodes.py", "@dirty ?? my_node.py"])
    assert dirty["dirty"] == [" M nodes.py", "?? my_node.py"]
    assert GitCheckout().process(["@absent"]) is None


# ---- model manifests (format 1, docs/models.md) ---------------------------------------------------
MANIFEST_KEYS = {
    "format", "name", "description", "state", "repo_id", "ref", "revision", "gated",
    "modelscope_id", "modelscope_revision", "include", "exclude", "files",
    "comfyui_min_release", "comfyui_min_release_source",
}  # fmt: skip


LTX_23 = (
    "ltx-2.3-22b-dev-fp8",
    "ltx-2.3-spatial-upscaler",
    "ltx-2.3-distilled-lora",
    "ltx-2-gemma-3-12b",
)


def _manifests() -> list[str]:
    from tests.conftest import load_group_data

    return sorted(load_group_data()["comfyui_models"])


@pytest.mark.parametrize("name", _manifests())
def test_comfyui_manifest_follows_the_format(name):
    path = MANIFESTS / f"{name}.toml"
    assert path.exists(), f"{path} is missing"
    m = tomllib.loads(path.read_text())
    assert set(m) <= MANIFEST_KEYS, set(m) - MANIFEST_KEYS
    assert m["format"] == 1 and m["name"] == name
    assert m["repo_id"].count("/") == 1
    # each ComfyUI manifest states the oldest release that loads it, and where that is stated
    assert m["comfyui_min_release"].startswith("v0.") and m["comfyui_min_release_source"]
    # nothing here reaches Hugging Face: no invented commit or hash
    assert m["state"] == "unpinned" and not all(c in "0123456789abcdef" for c in m["revision"])
    dests = [f["dest"] for f in m["files"]]
    assert len(dests) == len(set(dests))
    for f in m["files"]:
        assert "sha256" not in f and "size" not in f, f"{name}: unverifiable hub value"
        assert f["dest"].split("/")[0] in COMFYUI_FOLDERS, f["dest"]
        assert f["dest"].split("/")[-1] == f["path"].split("/")[-1]
        assert ".." not in f["path"].split("/") and not f["path"].startswith("/")


def test_model_sets_cover_flux2_and_ltx23(settings):
    assert settings["comfyui_models"] == ["flux2-dev", *LTX_23]
    dests = set()
    for name in LTX_23:
        m = tomllib.loads((MANIFESTS / f"{name}.toml").read_text())
        dests |= {f["dest"].split("/")[0] for f in m["files"]}
    # what ComfyUI's LTX-2.3 templates load: checkpoint, text encoder, LoRAs, latent upscaler
    assert dests == {"checkpoints", "text_encoders", "loras", "latent_upscale_models"}


def test_manifests_parse_with_the_model_machinery():
    from roles.model.manifest import load_manifest

    for name in _manifests():
        load_manifest(str(MANIFESTS / f"{name}.toml"))
