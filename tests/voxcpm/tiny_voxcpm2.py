#!/usr/bin/env python3
"""Construct a tiny VoxCPM2 checkpoint with voxcpm 2.0.3's own classes (random weights).

Usage (with the voxcpm venv's python, e.g. /opt/rigup/voxcpm/venv/bin/python):

    python tiny_voxcpm2.py OUT_DIR

OUT_DIR gets what ``VoxCPM2Model.from_local`` reads (voxcpm/model/voxcpm2.py): config.json
(``"architecture": "voxcpm2"``, a VoxCPMConfig with every dimension shrunk and
``dtype: float32`` for the CPU), a character-level fast tokenizer (tokenizer.json +
tokenizer_config.json, for ``LlamaTokenizerFast.from_pretrained``), model.safetensors (the
state dict of a ``VoxCPM2Model`` built from that config) and audiovae.safetensors (an
``AudioVAEV2`` of the config's audio_vae_config, which keeps VoxCPM2's 16 kHz in / 48 kHz out).

It speaks nonsense, but it is VoxCPM2 to voxcpm's code: loading, tokenizing, the generation
loop and the AudioVAE decode all run for real, on the CPU, in a few seconds. One weight is set
on purpose: the stop head always predicts "stop", so generation ends after voxcpm's ``min_len``
(2 patches) instead of running to ``max_len`` with random weights.

Prints one JSON line: {"dir": ..., "bytes": ..., "parameters": ...}.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

#: Characters the tokenizer knows, after its special tokens; ids 101-104 are VoxCPM2's audio
#: markers (voxcpm2.py: audio_start/end 101/102, ref_audio_start/end 103/104), so the
#: vocabulary is padded past them.
CHARS = " abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?'-:;()"
VOCAB_SIZE = 160
HIDDEN = 64
HEADS = 4


def config() -> dict:
    head_dim = HIDDEN // HEADS
    lm = {
        "bos_token_id": 1,
        "eos_token_id": 2,
        "hidden_size": HIDDEN,
        "intermediate_size": 2 * HIDDEN,
        "max_position_embeddings": 512,
        "num_attention_heads": HEADS,
        "num_hidden_layers": 2,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-5,
        "rope_scaling": {
            "type": "longrope",
            "long_factor": [1.0] * (head_dim // 2),
            "short_factor": [1.0] * (head_dim // 2),
            "original_max_position_embeddings": 512,
        },
        "vocab_size": VOCAB_SIZE,
        "use_mup": False,
        "scale_emb": 1.0,
        "dim_model_base": HIDDEN,
        "scale_depth": 1.0,
        "rope_theta": 10000.0,
    }
    small = {"hidden_dim": HIDDEN, "ffn_dim": 2 * HIDDEN, "num_heads": HEADS, "num_layers": 1}
    return {
        "architecture": "voxcpm2",
        "lm_config": lm,
        "patch_size": 4,
        "feat_dim": 64,
        "residual_lm_num_layers": 1,
        "scalar_quantization_latent_dim": 32,
        "scalar_quantization_scale": 9,
        "encoder_config": small,
        "dit_config": {**small, "cfm_config": {}},
        "audio_vae_config": {
            "encoder_dim": 16,
            "latent_dim": 64,
            "decoder_dim": 128,  # halved once per decoder rate (6 of them): >= 64
            "cond_dim": 16,
        },
        "max_length": 512,
        "device": "cpu",
        "dtype": "float32",
    }


def write_tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    specials = ["<unk>", "<s>", "</s>"]
    vocab = {tok: i for i, tok in enumerate(specials)}
    for ch in CHARS:
        vocab.setdefault(ch, len(vocab))
    filler = 0
    while len(vocab) < VOCAB_SIZE:  # unused ids up to the audio markers and past them
        vocab[f"<unused{filler}>"] = len(vocab)
        filler += 1
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "LlamaTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
                "add_bos_token": False,
                "add_eos_token": False,
                "model_max_length": 512,
            },
            indent=2,
        )
    )


def build(out: Path) -> dict:
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaTokenizerFast
    from voxcpm.model.voxcpm2 import VoxCPM2Model, VoxCPMConfig
    from voxcpm.modules.audiovae import AudioVAEConfigV2, AudioVAEV2

    out.mkdir(parents=True, exist_ok=True)
    cfg = config()
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    write_tokenizer(out)

    torch.manual_seed(0)
    model_config = VoxCPMConfig.model_validate(cfg)
    tokenizer = LlamaTokenizerFast.from_pretrained(str(out))
    vae = AudioVAEV2(config=AudioVAEConfigV2.model_validate(cfg["audio_vae_config"]))
    model = VoxCPM2Model(model_config, tokenizer, vae, device="cpu")
    with torch.no_grad():
        # stop_head(silu(stop_proj(h))).argmax() == 1 ("stop") for every h (voxcpm2.py:1090):
        # stop_proj gives the constant 1, silu(1) > 0, and only the "stop" row is positive
        model.stop_proj.weight.zero_()
        model.stop_proj.bias.fill_(1.0)
        model.stop_head.weight[0].fill_(-1.0)
        model.stop_head.weight[1].fill_(1.0)
    state = {
        k: v.detach().contiguous().clone()
        for k, v in model.state_dict().items()
        if not k.startswith("audio_vae.")
    }
    save_file(state, str(out / "model.safetensors"))
    save_file(
        {k: v.detach().contiguous().clone() for k, v in vae.state_dict().items()},
        str(out / "audiovae.safetensors"),
    )
    size = sum(f.stat().st_size for f in out.iterdir() if f.is_file())
    params = sum(v.numel() for v in state.values())
    return {"dir": str(out), "bytes": size, "parameters": params}


if __name__ == "__main__":
    print(json.dumps(build(Path(sys.argv[1]))))
