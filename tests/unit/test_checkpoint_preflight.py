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
