"""lab/media's pure parts (no torch, no ComfyUI): the streaming safetensors writer, LTX-2.3's
configs and the synthetic tekken tokenizer file."""

from __future__ import annotations

import json
import struct

import pytest

from lab.media import ltx, safetensors_out, te


def test_safetensors_header_offsets_and_bytes(tmp_path):
    entries = [
        safetensors_out.Entry("a", (2, 3), "F32", lambda: struct.pack("<6f", *range(6))),
        safetensors_out.Entry("b", (4,), "BF16", lambda: b"\x00\x3f" * 4),
    ]
    path = tmp_path / "x.safetensors"
    n = safetensors_out.write(path, entries, {"config": "{}"})
    raw = path.read_bytes()
    assert n == len(raw)
    (hlen,) = struct.unpack("<Q", raw[:8])
    assert hlen % 8 == 0
    header = json.loads(raw[8 : 8 + hlen])
    assert header["a"] == {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}
    assert header["b"] == {"dtype": "BF16", "shape": [4], "data_offsets": [24, 32]}
    assert header["__metadata__"] == {"config": "{}"}
    assert struct.unpack("<6f", raw[8 + hlen : 8 + hlen + 24]) == tuple(float(i) for i in range(6))


def test_safetensors_refuses_a_short_tensor_and_leaves_no_file(tmp_path):
    bad = [safetensors_out.Entry("a", (4,), "F32", lambda: b"\x00" * 8)]
    with pytest.raises(ValueError, match="a: produced 8 bytes, expected 16"):
        safetensors_out.write(tmp_path / "x.safetensors", bad)
    assert not (tmp_path / "x.safetensors").exists()
    with pytest.raises(ValueError, match="duplicate"):
        safetensors_out.write(tmp_path / "y.safetensors", [bad[0], bad[0]])


def test_ltx_full_config_is_the_released_one_and_tiny_keeps_its_rates():
    assert ltx.config("full") == ltx.RELEASED_CONFIG
    tiny, full = ltx.config("tiny"), ltx.RELEASED_CONFIG
    t = tiny["transformer"]
    # ComfyUI's LTX-2.3 context path: each stream as wide as its cross-attention and connector
    assert t["num_attention_heads"] * t["attention_head_dim"] == t["cross_attention_dim"] == 768
    assert (
        t["audio_num_attention_heads"] * t["audio_attention_head_dim"]
        == t["audio_cross_attention_dim"]
        == 768
    )
    assert t["connector_num_attention_heads"] * t["connector_attention_head_dim"] == 768
    assert t["audio_connector_num_attention_heads"] * t["audio_connector_attention_head_dim"] == 768
    for key in (
        "in_channels",
        "out_channels",
        "audio_out_channels",
        "apply_gated_attention",
        "caption_proj_before_connector",
    ):
        assert t[key] == full["transformer"][key], key
    assert (
        tiny["vae"]["patch_size"] == full["vae"]["patch_size"]
        and tiny["vae"]["latent_channels"] == 128
    )
    for part in ("vocoder", "bwe"):
        assert tiny["vocoder"][part]["upsample_rates"] == full["vocoder"][part]["upsample_rates"]
        # every upsampling stage halves the width: it must stay >= 1 channel
        assert (
            tiny["vocoder"][part]["upsample_initial_channel"]
            >> len(tiny["vocoder"][part]["upsample_rates"])
            >= 1
        )
    assert tiny["vocoder"]["bwe"]["output_sampling_rate"] == 48000


def test_tekken_has_mistrals_control_tokens_and_a_byte_vocabulary():
    doc = json.loads(te.tekken_json())
    specials = {s["rank"]: s["token_str"] for s in doc["special_tokens"]}
    assert len(specials) == doc["config"]["default_num_special_tokens"] == 1000
    assert (specials[1], specials[3], specials[4], specials[17]) == (
        "<s>",
        "[INST]",
        "[/INST]",
        "[SYSTEM_PROMPT]",
    )
    assert [v["rank"] for v in doc["vocab"]] == list(range(256))
