"""LTX-2.3 checkpoints from ComfyUI's own classes (sources in lab/media/weights.py).

Files (files/model/manifests/ltx-2.3-22b-dev-fp8.toml and ltx-2-gemma-3-12b.toml ``dest``):
  checkpoints/ltx-2.3-22b-dev-fp8.safetensors   model.diffusion_model.* (LTXAV), vae.*,
                                                audio_vae.* + vocoder.*, and (full) the Gemma
                                                text_embedding_projection.*; metadata "config"
  text_encoders/gemma_3_12B_it_fp4_mixed.safetensors  full: Gemma 3 12B + spiece_model;
                                                tiny: CLIP-L (see weights.py on why)
The distilled LoRA and the spatial upscaler of the ltx-2.3 set are not written (the shipped
workflow is the template's single-stage path without them).

:data:`RELEASED_CONFIG` is the metadata "config" of the released LTX-2.3 22B checkpoint (the
sections ComfyUI reads: "transformer" -> comfy/model_detection.py, "vae" -> comfy/sd.py VAE,
"audio_vae" and "vocoder" -> comfy/ldm/lightricks/vae/audio_vae.py AudioVAE), as published in
the file's safetensors header. :func:`config` scales it down for ``tiny``.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from lab.media import materialize, te

CHECKPOINT = "checkpoints/ltx-2.3-22b-dev-fp8.safetensors"
TEXT_ENCODER = "text_encoders/gemma_3_12B_it_fp4_mixed.safetensors"

_RES = [["res_x", {"num_layers": 4}], ["res_x", {"num_layers": 6}], ["res_x", {"num_layers": 4}], ["res_x", {"num_layers": 2}], ["res_x", {"num_layers": 2}]]  # fmt: skip
RELEASED_CONFIG = {
    "transformer": {
        "_class_name": "AVTransformer3DModel", "activation_fn": "gelu-approximate", "attention_bias": True,
        "attention_head_dim": 128, "attention_type": "default", "caption_channels": 3840, "cross_attention_dim": 4096,
        "double_self_attention": False, "dropout": 0.0, "in_channels": 128, "norm_elementwise_affine": False,
        "norm_eps": 1e-06, "norm_num_groups": 32, "num_attention_heads": 32, "num_embeds_ada_norm": 1000,
        "num_layers": 48, "num_vector_embeds": None, "only_cross_attention": False, "cross_attention_norm": True,
        "out_channels": 128, "upcast_attention": False, "use_linear_projection": False, "qk_norm": "rms_norm",
        "standardization_norm": "rms_norm", "positional_embedding_type": "rope", "positional_embedding_theta": 10000.0,
        "positional_embedding_max_pos": [20, 2048, 2048], "timestep_scale_multiplier": 1000,
        "av_ca_timestep_scale_multiplier": 1000.0, "causal_temporal_positioning": True,
        "audio_num_attention_heads": 32, "audio_attention_head_dim": 64, "use_audio_video_cross_attention": True,
        "share_ff": False, "audio_out_channels": 128, "audio_cross_attention_dim": 2048,
        "audio_positional_embedding_max_pos": [20], "av_cross_ada_norm": True, "use_embeddings_connector": True,
        "connector_attention_head_dim": 128, "connector_num_attention_heads": 32, "connector_num_layers": 8,
        "connector_positional_embedding_max_pos": [4096], "connector_num_learnable_registers": 128,
        "connector_norm_output": True, "use_middle_indices_grid": True, "apply_gated_attention": True,
        "connector_apply_gated_attention": True, "caption_projection_first_linear": False,
        "caption_projection_second_linear": False, "caption_proj_input_norm": False,
        "connector_learnable_registers_std": 1, "caption_proj_before_connector": True,
        "audio_connector_attention_head_dim": 64, "audio_connector_num_attention_heads": 32,
        "cross_attention_adaln": True, "text_encoder_norm_type": "per_token_rms", "rope_type": "split",
        "frequencies_precision": "float64",
    },
    "vae": {
        "_class_name": "CausalVideoAutoencoder", "dims": 3, "in_channels": 3, "out_channels": 3, "latent_channels": 128,
        "encoder_blocks": [_RES[0], ["compress_space_res", {"multiplier": 2}], _RES[1], ["compress_time_res", {"multiplier": 2}], _RES[2], ["compress_all_res", {"multiplier": 2}], _RES[3], ["compress_all_res", {"multiplier": 1}], _RES[4]],
        "decoder_blocks": [_RES[0], ["compress_space", {"multiplier": 2}], _RES[1], ["compress_time", {"multiplier": 2}], _RES[2], ["compress_all", {"multiplier": 1}], _RES[3], ["compress_all", {"multiplier": 2}], _RES[4]],
        "scaling_factor": 1.0, "norm_layer": "pixel_norm", "patch_size": 4, "latent_log_var": "uniform",
        "use_quant_conv": False, "causal_decoder": False, "timestep_conditioning": False,
        "normalize_latent_channels": False, "encoder_base_channels": 128, "decoder_base_channels": 128,
        "spatial_padding_mode": "zeros",
    },
    "scheduler": {"_class_name": "RectifiedFlowScheduler", "num_train_timesteps": 1000, "shifting": None, "base_resolution": None, "sampler": "LinearQuadratic"},
    "audio_vae": {
        "model": {"params": {"ddconfig": {
            "double_z": True, "mel_bins": 64, "z_channels": 8, "resolution": 256, "downsample_time": False,
            "in_channels": 2, "out_ch": 2, "ch": 128, "ch_mult": [1, 2, 4], "num_res_blocks": 2, "attn_resolutions": [],
            "dropout": 0.0, "mid_block_add_attention": False, "norm_type": "pixel", "causality_axis": "height"},
            "sampling_rate": 16000}},
        "preprocessing": {
            "audio": {"sampling_rate": 16000, "max_wav_value": 32768.0, "duration": 5.12, "stereo": True, "causal_padding": 3},
            "stft": {"filter_length": 1024, "hop_length": 160, "win_length": 1024, "causal": True},
            "mel": {"n_mel_channels": 64, "mel_fmin": 0, "mel_fmax": 8000}},
    },
    "vocoder": {
        "vocoder": {
            "upsample_initial_channel": 1536, "resblock": "AMP1", "upsample_rates": [5, 2, 2, 2, 2, 2],
            "resblock_kernel_sizes": [3, 7, 11], "upsample_kernel_sizes": [11, 4, 4, 4, 4, 4],
            "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]], "stereo": True, "use_tanh_at_final": False,
            "activation": "snakebeta", "use_bias_at_final": False},
        "bwe": {
            "upsample_initial_channel": 512, "resblock": "AMP1", "upsample_rates": [6, 5, 2, 2, 2],
            "resblock_kernel_sizes": [3, 7, 11], "upsample_kernel_sizes": [12, 11, 4, 4, 4],
            "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]], "stereo": True, "use_tanh_at_final": False,
            "activation": "snakebeta", "use_bias_at_final": False, "apply_final_activation": False,
            "input_sampling_rate": 16000, "output_sampling_rate": 48000, "hop_length": 80, "n_fft": 512,
            "win_size": 512, "num_mels": 64},
    },
}  # fmt: skip


def config(scale: str) -> dict:
    """The metadata "config" for ``scale``: RELEASED_CONFIG, or for ``tiny`` the same structure
    narrowed (1 layer, 1-layer connectors, every width 768 = the tiny CLIP-L text encoder's, at
    the released head widths; VAEs with 1-layer blocks and 16 / 8 base channels;
    vocoders 128 / 64 channels wide, one resblock kernel). Sample rates, strides, patch sizes and latent
    channel counts stay as released (the workflow's latent shapes depend on them)."""
    cfg = copy.deepcopy(RELEASED_CONFIG)
    if scale == "full":
        return cfg
    # The conditioning reaching the model is the tiny CLIP-L's 768-wide output. LTX-2.3 feeds it
    # unprojected (caption_projection_first_linear False) to both connectors unless it is video +
    # audio wide (av_model.py preprocess_text_embeds), and with the caption projection before the
    # connector each stream's context must be as wide as that stream (_prepare_context): so video
    # and audio streams, cross-attention and connectors are all 768 wide, at the released head
    # widths (video 6 x 128, audio 12 x 64; released: 32 x 128 = 4096 and 32 x 64 = 2048).
    cfg["transformer"].update(
        num_layers=1, num_attention_heads=6, attention_head_dim=128, cross_attention_dim=768,
        audio_num_attention_heads=12, audio_attention_head_dim=64, audio_cross_attention_dim=768,
        caption_channels=768, connector_num_layers=1, connector_num_attention_heads=6,
        connector_attention_head_dim=128, audio_connector_num_attention_heads=12,
        audio_connector_attention_head_dim=64, connector_num_learnable_registers=8,
    )  # fmt: skip
    vae = cfg["vae"]
    for blocks in (vae["encoder_blocks"], vae["decoder_blocks"]):
        for name, params in blocks:
            if name == "res_x":
                params["num_layers"] = 1
    vae.update(encoder_base_channels=16, decoder_base_channels=16)
    cfg["audio_vae"]["model"]["params"]["ddconfig"].update(ch=8, num_res_blocks=1)
    # each upsampling stage halves the width: 6 (vocoder) and 5 (BWE) stages need >= 64 / 32
    for part, width in ((cfg["vocoder"]["vocoder"], 128), (cfg["vocoder"]["bwe"], 64)):
        part.update(
            upsample_initial_channel=width,
            resblock_kernel_sizes=[3],
            resblock_dilation_sizes=[[1, 3, 5]],
        )
    return cfg


def seed_state_dict(cfg: dict) -> dict:
    """The keys (meta tensors) comfy.model_detection.detect_unet_config inspects for LTXAV."""
    import torch

    t = cfg["transformer"]
    p = "model.diffusion_model."
    inner = t["num_attention_heads"] * t["attention_head_dim"]
    sd = {
        p + "adaln_single.emb.timestep_embedder.linear_1.bias": torch.empty(inner, device="meta"),
        p + "audio_adaln_single.linear.weight": torch.empty(1, 1, device="meta"),
    }
    for i in range(t["num_layers"]):
        sd[p + f"transformer_blocks.{i}.attn2.to_k.weight"] = torch.empty(
            inner, t["cross_attention_dim"], device="meta"
        )
    return sd


def diffusion_model(cfg: dict):
    """(model_config, LTXAV diffusion module on meta) as ComfyUI detects and builds them."""
    import comfy.model_detection
    import torch

    sd = seed_state_dict(cfg)
    model_config = comfy.model_detection.model_config_from_unet(
        sd, "model.diffusion_model.", metadata={"config": json.dumps(cfg)}
    )
    if model_config is None or model_config.unet_config.get("image_model") != "ltxav":
        raise RuntimeError(f"ComfyUI does not detect the seed as LTXAV: {model_config}")
    model_config.set_inference_dtype(torch.bfloat16, None)
    return model_config, model_config.get_model(
        sd, "model.diffusion_model.", device=torch.device("meta")
    ).diffusion_model


def vae_modules(cfg: dict):
    """(VideoVAE, AudioVAE) as comfy/sd.py and LTXVAudioVAELoader build them from the config."""
    from comfy.ldm.lightricks.vae.audio_vae import AudioVAE
    from comfy.ldm.lightricks.vae.causal_video_autoencoder import VideoVAE

    return VideoVAE(version=2, config=cfg["vae"]), AudioVAE({"config": json.dumps(cfg)})


def projection_module():
    """The Gemma feature projection LTX-2.3's checkpoint carries (comfy/text_encoders/lt.py
    DualLinearProjection, 3840 x 49 -> 4096 video + 2048 audio; sd_detect -> dual_linear)."""
    import comfy.ops
    import torch
    from comfy.text_encoders.lt import DualLinearProjection

    return DualLinearProjection(
        3840 * 49,
        4096,
        2048,
        dtype=torch.bfloat16,
        device=torch.device("meta"),
        operations=comfy.ops.manual_cast,
    )


def write_all(scale: str, out: Path, *, device: str, seed: int, plan: bool = False) -> list[dict]:
    """Write the LTX-2.3 checkpoint and text encoder under ``out``; return their records."""
    cfg = config(scale)
    _, dm = diffusion_model(cfg)
    video_vae, audio_vae = vae_modules(cfg)
    entries = materialize.entries(
        dm, "model.diffusion_model.", dtype="bfloat16", device=device, seed=seed,
        fp8=lambda n: n.startswith("transformer_blocks."),
    )  # fmt: skip
    entries += materialize.entries(video_vae, "vae.", dtype="bfloat16", device=device, seed=seed)
    for name, entry in (
        (e.name, e)
        for e in materialize.entries(audio_vae, "", dtype="bfloat16", device=device, seed=seed)
    ):
        if name.startswith("autoencoder."):
            entries.append(
                materialize.Entry(
                    "audio_vae." + name.removeprefix("autoencoder."),
                    entry.shape,
                    entry.dtype,
                    entry.produce,
                )
            )
        elif name.startswith("vocoder."):
            entries.append(entry)
    if scale == "full":
        entries += materialize.entries(
            projection_module(),
            "text_embedding_projection.",
            dtype="bfloat16",
            device=device,
            seed=seed,
        )
    files = [materialize.write_file(out, CHECKPOINT, entries, {"config": json.dumps(cfg)}, plan)]
    te_entries = (
        te.gemma3_entries(device=device, seed=seed)
        if scale == "full"
        else te.clip_l_entries(device=device, seed=seed)
    )
    files.append(materialize.write_file(out, TEXT_ENCODER, te_entries, plan=plan))
    return files


def verify(scale: str, out: Path) -> dict:
    """Load the files the way CheckpointLoaderSimple, LTXVAudioVAELoader and (full)
    LTXAVTextEncoderLoader / (tiny) CLIPLoader type ltxv do; return what ComfyUI detected."""
    import comfy.sd
    import comfy.utils

    ckpt = str(out / CHECKPOINT)
    model, _clip, vae, _ = comfy.sd.load_checkpoint_guess_config(
        ckpt, output_vae=True, output_clip=False
    )
    mc = model.model.model_config
    report = {
        "diffusion_model": {
            "model_config": type(mc).__name__,
            "model_class": type(model.model).__name__,
            "image_model": mc.unet_config.get("image_model"),
            "unet_config": {k: mc.unet_config.get(k) for k in ("num_layers", "num_attention_heads", "attention_head_dim", "cross_attention_dim", "audio_cross_attention_dim", "caption_channels", "apply_gated_attention", "cross_attention_adaln")},
            "parameters": sum(p.numel() for p in model.model.diffusion_model.parameters()),
        },
        "vae": {"first_stage_model": type(vae.first_stage_model).__name__, "latent_channels": vae.latent_channels},
    }  # fmt: skip
    sd, metadata = comfy.utils.load_torch_file(ckpt, return_metadata=True)
    asd = comfy.utils.state_dict_prefix_replace(
        sd, {"audio_vae.": "autoencoder.", "vocoder.": "vocoder."}, filter_keys=True
    )
    audio = comfy.sd.VAE(sd=asd, metadata=metadata)
    report["audio_vae"] = {
        "first_stage_model": type(audio.first_stage_model).__name__,
        "vocoder": type(audio.first_stage_model.vocoder).__name__,
        "output_sample_rate": getattr(audio.first_stage_model, "output_sample_rate", None),
    }
    del sd, asd
    te_sd = comfy.utils.load_torch_file(str(out / TEXT_ENCODER), safe_load=True)
    report["text_encoder"] = {"detect_te_model": str(comfy.sd.detect_te_model(te_sd))}
    del te_sd
    if scale == "full":
        clip = comfy.sd.load_clip([str(out / TEXT_ENCODER), ckpt], clip_type=comfy.sd.CLIPType.LTXV)
    else:
        clip = comfy.sd.load_clip([str(out / TEXT_ENCODER)], clip_type=comfy.sd.CLIPType.LTXV)
    report["text_encoder"]["clip_class"] = type(clip.cond_stage_model).__name__
    return report
