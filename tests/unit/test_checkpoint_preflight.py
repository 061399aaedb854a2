"""files/model/checkpoint_preflight.py on the constructed Qwen3.6 checkpoint and broken variants,
with its built-in prefix table (tests/vllm/test_checkpoint_preflight.py runs the same variants
against the pinned vLLM's own registry on the lab)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from lab.checkpoint import build_checkpoint

SCRIPT = Path(__file__).resolve().parents[2] / "files" / "model" / "checkpoint_preflight.py"
QUANT = SCRIPT.with_name("checkpoint_quant.py")


def _module():
    spec = importlib.util.spec_from_file_location("checkpoint_preflight", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cp = _module()


def rename_tensors(ckpt: Path, rename) -> None:
    """Rewrite the index's tensor names (the shards are not read by the preflight)."""
    index = ckpt / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    weight_map = {}
    for name, shard in data["weight_map"].items():
        for new in rename(name):
            weight_map[new] = shard
    data["weight_map"] = weight_map
    index.write_text(json.dumps(data))


def lm_head_quantized(name: str) -> list[str]:
    if name == "lm_head.weight":
        return ["lm_head.qweight", "lm_head.qzeros", "lm_head.scales"]
    return [name]


def causal_lm_names(name: str) -> list[str]:
    return [name.replace("model.language_model.", "model.", 1)]


@pytest.fixture(scope="module")
def variants(tmp_path_factory) -> dict[str, Path]:
    """The constructed checkpoint and variants, each broken in one way (shared with tests/vllm)."""
    return build_variants(tmp_path_factory.mktemp("preflight"))


def build_variants(tmp: Path) -> dict[str, Path]:
    good = build_checkpoint(tmp / "good")
    out = {"good": good}
    for name, rename in (
        ("lm_head_quantized", lm_head_quantized),
        ("causal_lm_names", causal_lm_names),
    ):
        out[name] = tmp / name
        shutil.copytree(good, out[name])
        rename_tensors(out[name], rename)
    return out


def run(model: Path, method: str = "language_model_only", *extra: str) -> tuple[int, dict]:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(model), "--method", method, "--no-vllm", *extra],
        capture_output=True,
        text=True,
    )
    return proc.returncode, json.loads(proc.stdout)


def test_constructed_checkpoint_passes(variants):
    rc, result = run(variants["good"])
    assert rc == 0, result
    assert result["architecture"] == "Qwen3_5ForConditionalGeneration"
    assert result["vision_tensors"] > 0 and result["problems"] == []


def test_quantized_lm_head_is_named(variants):
    rc, result = run(variants["lm_head_quantized"])
    assert rc == 1
    (problem,) = result["problems"]
    assert problem.startswith(
        "lm_head is quantized (lm_head.qweight, lm_head.qzeros, lm_head.scales)"
    )
    # vLLM's own words in the journal (AutoWeightsLoader), so that a search for them finds this
    assert (
        "ValueError: There is no module or parameter named 'lm_head.qweight' in "
        "Qwen3_5ForCausalLM" in problem
    )
    assert "KeyError" not in problem


def test_weight_prefixes_that_do_not_match_the_architecture(variants):
    rc, result = run(variants["causal_lm_names"])
    assert rc == 1
    (problem,) = result["problems"]
    assert "do not match Qwen3_5ForConditionalGeneration" in problem
    assert "model.layers.*" in problem and "model.language_model.*" in problem


def test_vision_tensors_with_the_strip_method(variants):
    rc, result = run(variants["good"], "strip_vision_config")
    assert rc == 1
    assert (
        "vision tensors" in result["problems"][0] and "language_model_only" in result["problems"][0]
    )


def test_text_only_export_without_vision_tensors():
    config = {"architectures": ["Qwen3_5ForCausalLM"], "tie_word_embeddings": False}
    names = ["model.embed_tokens.weight", "model.layers.0.mlp.down_proj.weight", "lm_head.weight"]
    ok = cp.preflight(
        config, names, "strip_vision_config", cp.BUILTIN_PREFIXES["Qwen3_5ForCausalLM"]
    )
    assert ok["ok"], ok
    bad = cp.preflight(
        config, [*names, "model.visual.patch_embed.proj.weight"], "language_model_only", None
    )
    assert "architecture Qwen3_5ForCausalLM is text-only" in bad["problems"][0]


def test_quant_lm_head_flag_without_tensors():
    config = {
        "architectures": ["X"],
        "quantization_config": {"quant_method": "auto-round", "quant_lm_head": True},
    }
    result = cp.preflight(config, ["lm_head.weight"], "language_model_only", None)
    assert "quant_lm_head = true" in result["problems"][0]
    assert "named 'lm_head.qweight' in X`" in result["problems"][0]


def test_single_file_checkpoint_header_is_read(tmp_path):
    header = json.dumps(
        {"__metadata__": {}, "lm_head.weight": {}, "model.norm.weight": {}}
    ).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    assert cp.tensor_names(tmp_path) == ["lm_head.weight", "model.norm.weight"]


def test_the_constructed_checkpoint_keeps_its_mtp_head(variants):
    rc, result = run(variants["good"], "language_model_only", "--speculative-method", "mtp")
    assert rc == 0, result


def test_mtp_on_without_mtp_tensors_is_refused_naming_the_fix(tmp_path, variants):
    """MTP on (the default vllm_speculative_config) but the checkpoint's MTP head was dropped:
    refused before vLLM is configured, saying how to fix it."""
    ckpt = tmp_path / "no-mtp"
    shutil.copytree(variants["good"], ckpt)
    rename_tensors(ckpt, lambda name: [] if name.startswith("mtp.") else [name])
    rc, result = run(ckpt, "language_model_only", "--speculative-method", "mtp")
    assert rc == 1
    (problem,) = result["problems"]
    assert 'MTP is on (vllm_speculative_config method "mtp")' in problem
    assert "no mtp.* tensors" in problem
    assert "vllm_speculative_config = None" in problem and "keeps its MTP head" in problem
    rc, result = run(ckpt)  # MTP off: the same checkpoint is fine
    assert rc == 0, result


def test_every_shard_the_index_names_must_be_there(tmp_path, variants):
    ckpt = tmp_path / "half"
    shutil.copytree(variants["good"], ckpt)
    (ckpt / "model-00002-of-00002.safetensors").unlink()
    rc, result = run(ckpt)
    assert rc == 1
    (problem,) = result["problems"]
    assert problem.startswith(
        "model.safetensors.index.json names 1 shard(s) that are not in the checkpoint "
        "directory: model-00002-of-00002.safetensors"
    )


# --- layers vLLM fuses, and the MTP head's format -------------------------------------------------


def good(variants) -> tuple[dict, list[str]]:
    ckpt = variants["good"]
    return json.loads((ckpt / "config.json").read_text()), cp.tensor_names(ckpt)


def with_extra(config: dict, extra: dict) -> dict:
    quant = config["quantization_config"]
    return {
        **config,
        "quantization_config": {**quant, "extra_config": {**quant["extra_config"], **extra}},
    }


def check(config: dict, names: list[str], **kw) -> dict:
    return cp.preflight(config, names, "language_model_only", None, **kw)


LAYER0 = "model.language_model.layers.0"


def test_the_lab_checkpoints_fused_layers_are_consistent(variants):
    """Its extra_config keeps in_proj_a AND in_proj_b at 16 bit: one fused in_proj_ba."""
    config, names = good(variants)
    assert check(config, names)["problems"] == []


def test_gate_and_up_with_different_bits_are_refused_in_vllms_words(variants):
    """intel/auto-round#1726: gate_proj and up_proj quantized differently."""
    config, names = good(variants)
    result = check(with_extra(config, {f"{LAYER0}.mlp.gate_proj": {"bits": 8}}), names)
    (problem,) = result["problems"]
    assert (
        f"`ValueError: Fused module '{LAYER0}.mlp.gate_up_proj' requires consistent quant config "
        f"for ['{LAYER0}.mlp.gate_proj', '{LAYER0}.mlp.up_proj']`" in problem
    )
    assert "gate_proj bits/group_size/sym (8, 128, True)" in problem
    assert "up_proj bits/group_size/sym (4, 128, True)" in problem
    assert problem.startswith("1 layer(s) vLLM fuses") and "auto-round#1726" in problem


@pytest.mark.parametrize(
    ("extra", "fused"),
    [
        # a regular-expression key, as vLLM reads it (inc.py: keys with a special character)
        ({r".*\.v_proj": {"group_size": 64}}, "self_attn.qkv_proj"),
        # the gated-delta-net pair in_proj_b / in_proj_a, one left at 4 bits
        ({"__b__": {"bits": 4}}, "linear_attn.in_proj_ba"),
        ({"__qkv__": {"sym": False}}, "linear_attn.in_proj_qkvz"),
    ],
)
def test_every_fused_group_of_the_architecture_is_checked(variants, extra, fused):
    config, names = good(variants)
    quant = config["quantization_config"]
    linear = sorted(k.rsplit(".linear_attn.", 1)[0] for k in quant["extra_config"])[0]
    key, value = next(iter(extra.items()))
    if key == "__b__":
        extra = {f"{linear}.linear_attn.in_proj_b": value}
        quant["extra_config"].pop(f"{linear}.linear_attn.in_proj_b")
    elif key == "__qkv__":
        extra = {f"{linear}.linear_attn.in_proj_qkv": value}
    result = check(with_extra(config, extra), names)
    (problem,) = result["problems"]
    assert f".{fused}' requires consistent quant config" in problem, problem


def test_the_same_change_to_every_part_is_consistent(variants):
    config, names = good(variants)
    extra = {f"{LAYER0}.mlp.{p}": {"bits": 8} for p in ("gate_proj", "up_proj")}
    assert check(with_extra(config, extra), names)["problems"] == []


def test_a_fused_layer_stored_half_quantized_is_refused(variants):
    config, names = good(variants)
    half = [
        n.replace(f"{LAYER0}.mlp.up_proj.qweight", f"{LAYER0}.mlp.up_proj.weight")
        for n in names
        if not n.startswith((f"{LAYER0}.mlp.up_proj.qzeros", f"{LAYER0}.mlp.up_proj.scales"))
    ]
    (problem,) = check(config, half)["problems"]
    assert f"stored half quantized: {LAYER0}.mlp.gate_up_proj" in problem
    assert "gate_proj quantized, up_proj unquantized" in problem


def test_a_quantized_mtp_head_is_refused_while_mtp_is_on(variants):
    config, names = good(variants)
    quantized = []
    for n in names:
        if n.startswith("mtp.layers.") and n.endswith("proj.weight"):
            base = n.removesuffix(".weight")
            quantized += [f"{base}.qweight", f"{base}.qzeros", f"{base}.scales"]
        else:
            quantized.append(n)
    (problem,) = check(config, quantized, speculative_method="mtp")["problems"]
    assert "MTP head is quantized" in problem and ".qweight" in problem
    assert "does not name mtp" in problem and "vllm_speculative_config = None" in problem
    assert check(config, quantized)["problems"] == []  # MTP off: the head is not loaded


def test_a_missing_mtp_head_says_what_vllm_really_does(variants):
    config, names = good(variants)
    no_mtp = [n for n in names if not n.startswith("mtp.")]
    (problem,) = check(config, no_mtp, speculative_method="mtp")["problems"]
    assert "still starts and serves" in problem and "0 % acceptance" in problem
    assert "z-lab/paroquant#42" in problem and "would fail to load" not in problem
