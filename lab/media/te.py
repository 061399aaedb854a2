"""Text encoders as ComfyUI builds them (sources and the reason tiny runs use CLIP-L: weights.py).

* :func:`mistral3_entries`: comfy/text_encoders/llama.py Mistral3Small24B with its fixed
  Mistral3Small24BConfig (5120 wide, 40 layers), decoder Linears float8_e4m3fn as the released
  "mistral_3_small_flux2_fp8" file, plus ``tekken_model``: a tekken.json that
  comfy/text_encoders/flux.py load_mistral_tokenizer accepts (byte-level vocabulary, Mistral's
  control tokens at their ranks), not Mistral's 131k-token vocabulary (not downloadable here).
* :func:`gemma3_entries`: comfy/text_encoders/llama.py Gemma3_12B (fixed Gemma3_12B_Config, with
  its vision tower and projector as ComfyUI's class has them), "fp4 mixed" as the released
  file's name says: decoder-layer Linears NVFP4 (materialize._nvfp4_entries, quantized by
  ComfyUI's own QuantizedTensor), embeddings, norms and the vision tower bf16; plus
  ``spiece_model``: a SentencePiece model trained here on :data:`CORPUS` with Gemma's special ids
  (pad 0, eos 1, bos 2, unk 3). Which layers the release keeps in bf16 is not known here.
* :func:`clip_l_entries`: comfy/clip_model.py CLIPTextModel with comfy/sd1_clip_config.json
  (CLIP ViT-L/14 text tower, 123 M parameters) in fp16; ComfyUI tokenizes it with its bundled
  comfy/sd1_tokenizer, so nothing rides in the file.
"""

from __future__ import annotations

import base64
import io
import json

from lab.media import materialize
from lab.media.safetensors_out import Entry

#: Mistral tekken control tokens used by ComfyUI's Flux2Tokenizer template, at their tekken ranks
#: (Mistral's tokenizer docs: <unk> 0, <s> 1, </s> 2, [INST] 3, [/INST] 4, [SYSTEM_PROMPT] 17,
#: [/SYSTEM_PROMPT] 18); the other 993 of the 1000 special ranks are <SPECIAL_n> placeholders.
TEKKEN_SPECIAL = {
    0: "<unk>",
    1: "<s>",
    2: "</s>",
    3: "[INST]",
    4: "[/INST]",
    17: "[SYSTEM_PROMPT]",
    18: "[/SYSTEM_PROMPT]",
}
TEKKEN_SPECIAL_COUNT = 1000
#: Text the SentencePiece model is trained on (fixed, so the tokenizer is reproducible).
CORPUS = (
    "a photograph of a red fox in the snow at sunrise, cinematic lighting, sharp focus. "
    "A cinematic close-up of machinery assembling itself with glowing circuits and smoke. "
    "The quick brown fox jumps over the lazy dog while the camera pans slowly to the left. "
    "pc game, console game, video game, cartoon, childish, ugly, blurry, low quality. "
    "You are a helpful assistant that describes images and videos in detail. "
)


def tekken_json() -> bytes:
    """A tekken.json (Mistral's tokenizer file format) with a 256-entry byte-level vocabulary."""
    specials = [
        {"rank": r, "token_str": TEKKEN_SPECIAL.get(r, f"<SPECIAL_{r}>"), "is_control": True}
        for r in range(TEKKEN_SPECIAL_COUNT)
    ]
    vocab = [
        {"rank": b, "token_bytes": base64.b64encode(bytes([b])).decode(), "token_str": None}
        for b in range(256)
    ]
    doc = {
        "config": {
            "pattern": r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
            "num_vocab_tokens": 256,
            "default_vocab_size": 131072,
            "default_num_special_tokens": TEKKEN_SPECIAL_COUNT,
            "version": "v7",
        },
        "vocab": vocab,
        "special_tokens": specials,
    }
    return json.dumps(doc).encode()


def spiece_model(vocab_size: int = 512) -> bytes:
    """A SentencePiece BPE model with byte fallback and Gemma's special ids, trained on CORPUS."""
    import sentencepiece

    buf = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS.split(". ") * 20),
        model_writer=buf,
        vocab_size=vocab_size,
        model_type="bpe",
        byte_fallback=True,
        pad_id=0,
        eos_id=1,
        bos_id=2,
        unk_id=3,
        character_coverage=1.0,
        minloglevel=2,
    )
    return buf.getvalue()


def _llama_module(cls_name: str):
    import comfy.ops
    import comfy.text_encoders.llama as llama
    import torch

    return getattr(llama, cls_name)({}, torch.bfloat16, torch.device("meta"), comfy.ops.manual_cast)


def mistral3_entries(*, device: str, seed: int) -> list[Entry]:
    """Mistral 3 Small 24B (40 layers) fp8 with a tekken_model payload."""
    module = _llama_module("Mistral3Small24B")
    entries = materialize.entries(
        module,
        "",
        dtype="bfloat16",
        device=device,
        seed=seed,
        fp8=lambda n: n.startswith("model.layers."),
    )
    return entries + [materialize.uint8_entry("tekken_model", tekken_json())]


def gemma3_entries(*, device: str, seed: int) -> list[Entry]:
    """Gemma 3 12B (ComfyUI's class: text model, vision tower, projector), decoder Linears NVFP4,
    with spiece_model."""
    module = _llama_module("Gemma3_12B")
    # Gemma's RMSNorm adds 1 to its weight (rms_norm_add): materialize.unit_params leaves it zeros
    entries = materialize.entries(
        module,
        "",
        dtype="bfloat16",
        device=device,
        seed=seed,
        nvfp4=lambda n: n.startswith("model.layers."),
    )
    return entries + [materialize.uint8_entry("spiece_model", spiece_model())]


def clip_l_entries(*, device: str, seed: int) -> list[Entry]:
    """CLIP-L text tower (comfy/sd1_clip_config.json), fp16, keys as ComfyUI's SD1ClipModel loads."""
    import os

    import comfy.clip_model
    import comfy.ops
    import torch

    cfg_path = os.path.join(os.path.dirname(comfy.clip_model.__file__), "sd1_clip_config.json")
    with open(cfg_path) as f:
        config = json.load(f)
    module = comfy.clip_model.CLIPTextModel(
        config, torch.float16, torch.device("meta"), comfy.ops.manual_cast
    )
    # position_ids is a buffer ComfyUI never saves for CLIP; text_projection is loaded when present
    return materialize.entries(module, "", dtype="float16", device=device, seed=seed)
