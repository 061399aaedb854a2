"""FLUX.2 [dev] checkpoints from ComfyUI's own classes (sources in lab/media/weights.py).

Files (files/model/manifests/flux2-dev.toml ``dest``):
  diffusion_models/flux2_dev_fp8mixed.safetensors  bare keys (UNETLoader), fp8 block Linears
  text_encoders/mistral_3_small_flux2_fp8.safetensors  full: Mistral 3 Small 24B fp8 + tekken;
                                                   tiny: CLIP-L (see weights.py on why)
  vae/flux2-vae.safetensors                        AutoencoderKL, batch-norm latent
The turbo LoRA of the manifest is not written (the shipped workflow does not load it).
"""

from __future__ import annotations

from pathlib import Path

from lab.media import materialize, te

DIFFUSION = "diffusion_models/flux2_dev_fp8mixed.safetensors"
TEXT_ENCODER = "text_encoders/mistral_3_small_flux2_fp8.safetensors"
VAE = "vae/flux2-vae.safetensors"

#: Transformer sizes per scale. head width 128 is fixed by detection (num_heads = hidden / sum of
#: axes_dim [32, 32, 32, 32]); in_channels 128 by the latent (comfy/latent_formats.py Flux2).
#: Full: FLUX.2 [dev] (black-forest-labs/FLUX.2-dev transformer config: 48 heads x 128,
#: 8 double + 48 single blocks, joint_attention_dim 15360). Tiny context 768 = CLIP-L's width.
SIZES = {
    "full": {"hidden": 6144, "depth": 8, "single": 48, "context": 15360},
    "tiny": {"hidden": 256, "depth": 1, "single": 1, "context": 768},
}
#: VAE widths: the encoder's ``ch`` is fixed at 128 by comfy/sd.py; the decoder's comes from the
#: file (decoder.conv_in.weight.shape[0] // 4), so the tiny decoder is narrower.
VAE_DECODER_CH = {"full": 128, "tiny": 32}


def seed_state_dict(scale: str) -> dict:
    """The keys (meta tensors) comfy.model_detection.detect_unet_config inspects for FLUX.2."""
    import torch

    s = SIZES[scale]
    meta = {"device": "meta"}
    sd = {
        "img_in.weight": torch.empty(s["hidden"], 128, **meta),
        "txt_in.weight": torch.empty(s["hidden"], s["context"], **meta),
        "double_stream_modulation_img.lin.weight": torch.empty(
            6 * 2 * s["hidden"], s["hidden"], **meta
        ),
        "guidance_in.in_layer.weight": torch.empty(s["hidden"], 256, **meta),
    }
    for i in range(s["depth"]):
        sd[f"double_blocks.{i}.img_attn.norm.key_norm.scale"] = torch.empty(128, **meta)
    for i in range(s["single"]):
        sd[f"single_blocks.{i}.norm.key_norm.scale"] = torch.empty(128, **meta)
    return sd


def diffusion_model(scale: str):
    """(model_config, diffusion module on meta) as ComfyUI detects and builds them."""
    import comfy.model_detection
    import torch

    sd = seed_state_dict(scale)
    model_config = comfy.model_detection.model_config_from_unet(sd, "")
    if model_config is None or model_config.unet_config.get("image_model") != "flux2":
        raise RuntimeError(f"ComfyUI does not detect the {scale} seed as FLUX.2: {model_config}")
    model_config.set_inference_dtype(torch.bfloat16, None)
    model = model_config.get_model(sd, "", device=torch.device("meta"))
    return model_config, model.diffusion_model


def vae_module(scale: str):
    """AutoencoderKL as comfy/sd.py VAE builds it for FLUX.2's VAE keys (on the CPU: small)."""
    from comfy.ldm.models.autoencoder import AutoencoderKL

    ddconfig = {
        "double_z": True, "z_channels": 32, "resolution": 256, "in_channels": 3, "out_ch": 3, "ch": 128,
        "ch_mult": [1, 2, 4, 4], "num_res_blocks": 2, "attn_resolutions": [], "dropout": 0.0,
        "batch_norm_latent": True,
    }  # fmt: skip
    dec = dict(ddconfig, ch=VAE_DECODER_CH[scale])
    kw = {"decoder_ddconfig": dec} if dec["ch"] != ddconfig["ch"] else {}
    return AutoencoderKL(ddconfig=ddconfig, embed_dim=32, **kw)


def write_all(scale: str, out: Path, *, device: str, seed: int, plan: bool = False) -> list[dict]:
    """Write the three FLUX.2 files under ``out``; return their records (see weights.build)."""
    _, dm = diffusion_model(scale)

    def fp8(name: str) -> bool:
        return name.startswith(("double_blocks.", "single_blocks."))

    files = [
        materialize.write_file(
            out,
            DIFFUSION,
            materialize.entries(dm, "", dtype="bfloat16", device=device, seed=seed, fp8=fp8),
            plan=plan,
        )
    ]
    if scale == "full":
        files.append(
            materialize.write_file(
                out, TEXT_ENCODER, te.mistral3_entries(device=device, seed=seed), plan=plan
            )
        )
    else:
        files.append(
            materialize.write_file(
                out, TEXT_ENCODER, te.clip_l_entries(device=device, seed=seed), plan=plan
            )
        )
    vae = vae_module(scale)
    files.append(
        materialize.write_file(
            out,
            VAE,
            materialize.entries(vae, "", dtype="bfloat16", device=device, seed=seed),
            plan=plan,
        )
    )
    return files


def verify(scale: str, out: Path) -> dict:
    """Load the files through ComfyUI's loaders (the code UNETLoader, CLIPLoader type flux2 and
    VAELoader run); return the detected model class, unet config, text encoder and VAE facts."""
    import comfy.sd
    import comfy.utils

    m = comfy.sd.load_diffusion_model(str(out / DIFFUSION))
    report = {
        "diffusion_model": {
            "model_config": type(m.model.model_config).__name__,
            "model_class": type(m.model).__name__,
            "image_model": m.model.model_config.unet_config.get("image_model"),
            "unet_config": {
                k: m.model.model_config.unet_config.get(k)
                for k in (
                    "hidden_size",
                    "num_heads",
                    "depth",
                    "depth_single_blocks",
                    "context_in_dim",
                    "in_channels",
                    "guidance_embed",
                )
            },
            "parameters": sum(p.numel() for p in m.model.diffusion_model.parameters()),
        }
    }
    sd = comfy.utils.load_torch_file(str(out / TEXT_ENCODER), safe_load=True)
    report["text_encoder"] = {"detect_te_model": str(comfy.sd.detect_te_model(sd))}
    clip = comfy.sd.load_clip([str(out / TEXT_ENCODER)], clip_type=comfy.sd.CLIPType.FLUX2)
    report["text_encoder"]["clip_class"] = type(clip.cond_stage_model).__name__
    del sd, clip
    vae_sd, meta = comfy.utils.load_torch_file(str(out / VAE), return_metadata=True)
    vae = comfy.sd.VAE(sd=vae_sd, metadata=meta)
    report["vae"] = {
        "first_stage_model": type(vae.first_stage_model).__name__,
        "latent_channels": vae.latent_channels,
        "downscale_ratio": vae.downscale_ratio,
    }
    return report
