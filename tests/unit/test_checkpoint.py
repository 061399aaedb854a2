"""The constructed Qwen3.6-27B-AutoRound-shaped checkpoint (lab/checkpoint.py), checked with
the controller venv only (numpy + safetensors, no torch, no vLLM)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors import safe_open

from lab.checkpoint import build_checkpoint

QUANT_SUFFIXES = ("qweight", "qzeros", "scales")


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    return build_checkpoint(tmp_path_factory.mktemp("ckpt") / "qwen")


def load(ckpt: Path, name: str) -> dict:
    return json.loads((ckpt / name).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def config(ckpt) -> dict:
    return load(ckpt, "config.json")


@pytest.fixture(scope="module")
def weight_map(ckpt) -> dict[str, str]:
    return load(ckpt, "model.safetensors.index.json")["weight_map"]


def test_side_files_present(ckpt):
    for name in (
        "config.json",
        "generation_config.json",
        "preprocessor_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "model.safetensors.index.json",
    ):
        assert (ckpt / name).is_file(), name


def test_tiny(ckpt):
    total = sum(p.stat().st_size for p in ckpt.iterdir())
    assert total < 3 * 1024 * 1024, f"{total} bytes"


def test_index_maps_every_tensor_to_an_existing_shard(ckpt, weight_map):
    shards = sorted(set(weight_map.values()))
    assert shards == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    total = 0
    seen: set[str] = set()
    for shard in shards:
        with safe_open(str(ckpt / shard), framework="numpy") as f:
            names = set(f.keys())
            assert f.metadata() == {"format": "pt"}
            for name in names:
                total += f.get_tensor(name).nbytes
        assert names == {n for n, s in weight_map.items() if s == shard}, shard
        seen |= names
    assert seen == set(weight_map)
    assert load(ckpt, "model.safetensors.index.json")["metadata"]["total_size"] == total


def test_config_has_both_configs(config):
    assert config["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    assert config["model_type"] == "qwen3_5"
    text, vision = config["text_config"], config["vision_config"]
    assert text["model_type"] == "qwen3_5_text"
    assert text["hidden_size"] == 5120
    assert vision["out_hidden_size"] == text["hidden_size"]
    assert len(text["layer_types"]) == text["num_hidden_layers"] == 64
    assert set(text["layer_types"]) == {"linear_attention", "full_attention"}
    assert text["mtp_num_hidden_layers"] >= 1
    for key in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id"):
        assert isinstance(config[key], int), key


def test_autoround_quantization_config(config):
    q = config["quantization_config"]
    assert q["quant_method"] == "auto-round"
    assert (q["bits"], q["group_size"], q["sym"]) == (4, 128, True)
    # the packings vLLM's INCConfig accepts
    assert q["packing_format"] in {"auto_round:auto_gptq", "auto_round:auto_awq"}
    assert q["block_name_to_quantize"] == "model.language_model.layers"


def test_tensor_names_follow_the_layer_types(config, weight_map):
    names = set(weight_map)
    for i, kind in enumerate(config["text_config"]["layer_types"]):
        p = f"model.language_model.layers.{i}"
        if kind == "linear_attention":
            assert f"{p}.linear_attn.in_proj_qkv.qweight" in names
            assert f"{p}.linear_attn.A_log" in names
            assert not any(n.startswith(f"{p}.self_attn.") for n in names)
        else:
            assert f"{p}.self_attn.q_proj.qweight" in names
            assert not any(n.startswith(f"{p}.linear_attn.") for n in names)
        assert f"{p}.mlp.down_proj.scales" in names
    depth = config["vision_config"]["depth"]
    assert {f"model.visual.blocks.{j}.attn.qkv.weight" for j in range(depth)} <= names
    assert "model.visual.merger.linear_fc2.weight" in names
    assert "mtp.fc.weight" in names and "lm_head.weight" in names


def test_quantized_modules_are_complete_and_only_in_decoder_blocks(config, weight_map):
    q = config["quantization_config"]
    modules: dict[str, set[str]] = {}
    for name in weight_map:
        module, _, suffix = name.rpartition(".")
        if suffix in QUANT_SUFFIXES:
            modules.setdefault(module, set()).add(suffix)
    assert modules, "no quantized tensors"
    for module, suffixes in modules.items():
        assert suffixes == set(QUANT_SUFFIXES), module
        assert module.startswith(q["block_name_to_quantize"] + "."), module
    # what AutoRound leaves in 16 bit: named in extra_config, stored as plain .weight
    for module, cfg in q["extra_config"].items():
        assert cfg["bits"] == 16
        assert f"{module}.weight" in weight_map and module not in modules
        assert re.search(r"\.linear_attn\.in_proj_[ab]$", module)


def test_tokenizer_ids_match_config(ckpt, config):
    tok = load(ckpt, "tokenizer.json")
    added = {t["content"]: t["id"] for t in tok["added_tokens"]}
    assert added["<|image_pad|>"] == config["image_token_id"]
    assert added["<|video_pad|>"] == config["video_token_id"]
    assert added["<|vision_start|>"] == config["vision_start_token_id"]
    # `tokenizers` keeps an added token's id only if the model vocab has it there
    assert all(tok["model"]["vocab"][content] == i for content, i in added.items())
    tcfg = load(ckpt, "tokenizer_config.json")
    assert "<|im_start|>" in tcfg["chat_template"]
    assert added[tcfg["eos_token"]] in load(ckpt, "generation_config.json")["eos_token_id"]


def test_build_is_deterministic(tmp_path):
    a = build_checkpoint(tmp_path / "a")
    b = build_checkpoint(tmp_path / "b")
    for f in a.iterdir():
        assert f.read_bytes() == (b / f.name).read_bytes(), f.name


def test_unknown_variant_is_named(tmp_path):
    with pytest.raises(ValueError, match="unknown checkpoint variant 'x'"):
        build_checkpoint(tmp_path, variant="x")


def test_main_builds_one(tmp_path):
    script = Path(__file__).resolve().parents[2] / "lab" / "checkpoint.py"
    out = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "c")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == str(tmp_path / "c")
    assert (tmp_path / "c" / "config.json").is_file()
