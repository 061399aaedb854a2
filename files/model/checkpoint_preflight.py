#!/usr/bin/env python3
"""Checkpoint preflight: problems the pinned vLLM would only hit while loading the weights,
found from config.json and the tensor names, before any service is configured.

Usage (with the vLLM venv's python; without vLLM importable, --no-vllm uses the built-in table):

    checkpoint_preflight.py MODEL_DIR --method {language_model_only,strip_vision_config}
                            [--speculative-method METHOD] [--no-vllm]

Checks, each with its own message:
0. Every shard the index (``model.safetensors.index.json``) names is in MODEL_DIR: a copy made
   by an interrupted download can hold the index and only some shards.
1. Quantized lm_head in an AutoRound checkpoint. vLLM 0.22.1's AutoRound reader (INCConfig,
   layers/quantization/inc.py) builds the LM head unquantized unless ``block_name_to_quantize``
   names it (``quantized = not isinstance(layer, ParallelLMHead)``, and its GPTQ/AWQ configs
   are created with ``lm_head_quantized=False``); a checkpoint holding ``lm_head.qweight`` then
   fails at load with vLLM's weight loader error (AutoWeightsLoader, models/utils.py), as it
   appears in the journal: ``ValueError: There is no module or parameter named
   'lm_head.qweight' in Qwen3_5ForCausalLM`` (the class that holds the LM head: the language
   model of a ForConditionalGeneration checkpoint, LANGUAGE_MODEL_CLASS).
2. Vision tensors present or absent versus the text-only method: with ``strip_vision_config``
   vLLM re-creates a default vision config (docs/text-only.md) and would load ``model.visual.*``
   tensors into a tower of the wrong shape; a ForCausalLM architecture with vision tensors
   leaves them unexpected. Absent vision tensors are fine with ``language_model_only``.
3. Weight-name prefixes versus the architecture in config.json: the prefixes vLLM's model class
   accepts are read from its ``hf_to_vllm_mapper`` (WeightsMapper.orig_to_new_prefix) in the
   pinned vLLM (``ModelRegistry._try_load_model_cls``); ``mtp.`` (the MTP head, loaded by the
   speculative drafter) is always accepted. E.g. Qwen3_5ForConditionalGeneration accepts
   ``model.language_model.``, ``model.visual.``, ``lm_head.`` (qwen3_vl.py:1629-1635); a
   checkpoint exported as ForCausalLM (``model.layers.*``) does not match it.
4. Speculative decoding by MTP (``--speculative-method mtp``, from vllm_speculative_config) needs
   the checkpoint's multi-token-prediction head: for the architectures whose MTP weights vLLM
   loads as ``mtp.*`` (Qwen3.5/3.6, Qwen3-Next: qwen3_5_mtp.py, qwen3_next_mtp.py), a checkpoint
   without any ``mtp.*`` tensor (an export or quantization that dropped the head) is refused.

5. Layers vLLM fuses into one (``packed_modules_mapping`` of the architecture's class:
   gate/up -> gate_up_proj, q/k/v -> qkv_proj, the gated-delta-net in_proj_qkv/in_proj_z ->
   in_proj_qkvz and in_proj_b/in_proj_a -> in_proj_ba) must share one quantization: with an
   ``extra_config``, vLLM 0.22.1's AutoRound reader (INCConfig.get_layer_config, inc.py:206-219)
   raises ``ValueError: Fused module '...gate_up_proj' requires consistent quant config for
   [...]`` when their bits/group_size/sym differ (intel/auto-round#1726); and a fused layer whose
   parts are stored one quantized and one not cannot be loaded into one layer either.
6. With MTP on, the MTP head must be what vLLM builds: quantized ``mtp.*`` tensors
   (qweight/qzeros/scales) are refused (the vllm#49552 kind; AutoRound copies the MTP head
   unquantized unless told otherwise, intel/auto-round#1755).

Tensor names come from ``model.safetensors.index.json`` or, for a single file, the header of
``model.safetensors`` (8-byte length + JSON, the safetensors format). Output: one JSON line on
stdout ({"ok", "problems", "notes", "architecture", "accepted_prefixes", ...}); exit 0 when ok,
1 with problems, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # checkpoint_quant.py is beside it
from checkpoint_quant import BUILTIN_FUSED, QUANTIZED_PARTS, fused_problems  # noqa: E402

METHODS = ("language_model_only", "strip_vision_config")
VISION_PREFIXES = ("model.visual.", "visual.", "vision_tower.", "model.vision_tower.")
ALWAYS_ACCEPTED = ("mtp.",)
#: Used only with --no-vllm (unit tests, hosts without the vLLM venv): the same prefixes vLLM
#: 0.22.1's mappers give (qwen3_vl.py hf_to_vllm_mapper; ForCausalLM classes map nothing).
BUILTIN_PREFIXES = {
    "Qwen3_5ForConditionalGeneration": ("model.visual.", "lm_head.", "model.language_model."),
    "Qwen3_5ForCausalLM": ("model.", "lm_head."),
}
#: architectures whose MTP head vLLM loads from ``mtp.*`` tensors
MTP_PREFIX = "mtp."
MTP_ARCHITECTURES = (
    "Qwen3_5ForConditionalGeneration",
    "Qwen3_5ForCausalLM",
    "Qwen3_5MoeForConditionalGeneration",
    "Qwen3_5MoeForCausalLM",
    "Qwen3NextForCausalLM",
)
INDEX = "model.safetensors.index.json"


def missing_shards(model_dir: Path) -> list[str]:
    """The shard files the index names that are not in ``model_dir`` (sorted)."""
    index = model_dir / INDEX
    if not index.is_file():
        return []
    weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map", {})
    return sorted({s for s in weight_map.values() if not (model_dir / s).is_file()})


#: The vLLM class whose weight loader meets ``lm_head.*`` (vLLM 0.22.1, models/qwen3_5.py: the
#: ForConditionalGeneration classes hand the language model's weights, lm_head included, to
#: their ``language_model``, whose AutoWeightsLoader raises the error). Others: the architecture.
LANGUAGE_MODEL_CLASS = {
    "Qwen3_5ForConditionalGeneration": "Qwen3_5ForCausalLM",
    "Qwen3_5MoeForConditionalGeneration": "Qwen3_5MoeForCausalLM",
}


def lm_head_load_error(architecture: str, tensor: str = "lm_head.qweight") -> str:
    """vLLM's error for a quantized LM head it builds unquantized, as users see it in
    ``journalctl -u vllm`` (so that a search for it finds rigup's explanation)."""
    cls = LANGUAGE_MODEL_CLASS.get(architecture, architecture)
    return f"ValueError: There is no module or parameter named '{tensor}' in {cls}"


def tensor_names(model_dir: Path) -> list[str]:
    """Tensor names of the checkpoint (index weight_map, or the single file's header)."""
    index = model_dir / INDEX
    if index.is_file():
        return sorted(json.loads(index.read_text(encoding="utf-8")).get("weight_map", {}))
    single = model_dir / "model.safetensors"
    if single.is_file():
        with open(single, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length))
        return sorted(k for k in header if k != "__metadata__")
    return []


def vllm_accepted_prefixes(architecture: str) -> tuple[tuple[str, ...] | None, str]:
    """(HF weight prefixes the pinned vLLM's class for ``architecture`` accepts, where from)."""
    from vllm.model_executor.models import ModelRegistry

    cls = ModelRegistry._try_load_model_cls(architecture)
    if cls is None:
        return None, f"vLLM does not register {architecture}"
    mapper = getattr(cls, "hf_to_vllm_mapper", None)
    prefixes = tuple(getattr(mapper, "orig_to_new_prefix", {}) or {})
    if not prefixes:
        return ("model.", "lm_head."), f"{cls.__name__} (no hf_to_vllm_mapper: names used as-is)"
    return prefixes, f"{cls.__module__}.{cls.__name__}.hf_to_vllm_mapper"


def vllm_fused_modules(architecture: str) -> tuple[dict[str, list[str]] | None, str]:
    """(the packed_modules_mapping of the pinned vLLM's class for ``architecture``, where from)."""
    from vllm.model_executor.models import ModelRegistry

    cls = ModelRegistry._try_load_model_cls(architecture)
    if cls is None:
        return None, f"vLLM does not register {architecture}"
    mapping = dict(getattr(cls, "packed_modules_mapping", {}) or {})
    return mapping, f"{cls.__module__}.{cls.__name__}.packed_modules_mapping"


def lm_head_problems(config: dict, names: list[str], quant: dict, blocks: list[str]) -> list[str]:
    """The LM head: quantized in an AutoRound checkpoint (vLLM builds it unquantized), or
    without weights (no ``lm_head.*`` and untied embeddings)."""
    architecture = (config.get("architectures") or ["?"])[0]
    auto_round = quant.get("quant_method") in ("auto-round", "intel/auto-round")
    head_q = sorted(
        n
        for n in names
        if n.startswith("lm_head.")
        and n.rsplit(".", 1)[-1] in ("qweight", "qzeros", "scales", "g_idx")
    )
    if auto_round and (head_q or quant.get("quant_lm_head")):
        what = ", ".join(head_q[:3]) if head_q else "quant_lm_head = true in quantization_config"
        first = "lm_head.qweight" if "lm_head.qweight" in head_q or not head_q else head_q[0]
        return [
            f"lm_head is quantized ({what}) in this AutoRound checkpoint: vLLM 0.22.1's AutoRound "
            "reader (INCConfig) builds the LM head unquantized"
            + (f" (block_name_to_quantize = {blocks} does not name it)" if blocks else "")
            + f" and loading fails with `{lm_head_load_error(architecture, first)}`. Use a "
            "checkpoint exported with an unquantized lm_head (AutoRound's default; no "
            "--quant_lm_head)."
        ]
    tied = config.get(
        "tie_word_embeddings", (config.get("text_config") or {}).get("tie_word_embeddings", False)
    )
    if names and not tied and not any(n.startswith("lm_head.") for n in names):
        return ["no lm_head.* tensor and tie_word_embeddings is false: the LM head has no weights"]
    return []


def vision_findings(config: dict, names: list[str], method: str) -> tuple[list, list, int]:
    """Vision tensors against the text-only ``method`` and the architecture:
    ``(problems, notes, number of vision tensors)``."""
    architecture = (config.get("architectures") or ["?"])[0]
    problems: list[str] = []
    notes: list[str] = []
    vision = [n for n in names if n.startswith(VISION_PREFIXES)]
    conditional = architecture.endswith("ForConditionalGeneration")
    if method == "strip_vision_config" and vision:
        problems.append(
            f"{len(vision)} vision tensors ({vision[0]}, ...) with text-only method "
            "strip_vision_config: vLLM 0.22.1 re-creates a default vision config when "
            "vision_config is removed and would load them into a vision tower of the wrong "
            'shape; use vllm_text_only_method = "language_model_only" (docs/text-only.md)'
        )
    elif vision and not conditional:
        problems.append(
            f"{len(vision)} vision tensors ({vision[0]}, ...) but the architecture {architecture} "
            "is text-only: vLLM has no module for them (unexpected weights)"
        )
    elif conditional and not vision:
        notes.append(
            f"{architecture} without vision tensors: fine only because the vision tower is "
            f"skipped (method {method}); multimodal serving would fail"
        )
    elif vision:
        notes.append(f"{len(vision)} vision tensors: skipped at load with {method}")
    if conditional and "vision_config" not in config and method == "language_model_only":
        notes.append(
            "config.json has no vision_config: vLLM re-creates a default one (docs/text-only.md)"
        )
    return problems, notes, len(vision)


def prefix_problems(architecture: str, names: list[str], accepted: tuple | None) -> list[str]:
    """Tensor names vLLM's class for ``architecture`` does not accept (``accepted``: its
    prefixes; None: not known, nothing checked)."""
    if accepted is None or not names:
        return []
    ok = (*accepted, *ALWAYS_ACCEPTED)
    stray = [n for n in names if not n.startswith(ok)]
    if not stray:
        return []
    heads = sorted({".".join(n.split(".")[:2]) + ".*" for n in stray})
    return [
        f"{len(stray)} of {len(names)} tensor names do not match {architecture} "
        f"(config.json architectures): found {', '.join(heads[:5])}; vLLM's class "
        f"accepts {', '.join(p + '*' for p in ok)}. The checkpoint was exported for "
        "another architecture (e.g. a ForCausalLM export names its layers model.layers.*)"
    ]


def mtp_findings(architecture: str, names: list[str], blocks: list[str]) -> tuple[list, list]:
    """The MTP head speculative decoding by MTP needs: missing, or quantized.
    ``(problems, notes)``."""
    if not names:
        return [], []
    if architecture not in MTP_ARCHITECTURES:
        return [], [f"MTP head not checked: {architecture} is not a known MTP architecture"]
    mtp = [n for n in names if n.startswith(MTP_PREFIX)]
    mtp_q = sorted(n for n in mtp if n.rsplit(".", 1)[-1] in QUANTIZED_PARTS)
    if not mtp:
        return [
            f"speculative decoding by MTP is on (vllm_speculative_config method "
            f'"mtp") but the checkpoint has no {MTP_PREFIX}* tensors: its '
            "multi-token-prediction head was left out when it was exported or "
            "quantized. vLLM 0.22.1 still starts and serves, with a drafter that has no "
            "trained weights: every draft is rejected (0 % acceptance, as "
            "z-lab/paroquant#42 saw on 2x3090), so decode is slower than without MTP. "
            "Turn MTP off (vllm_speculative_config = None) or use a checkpoint that "
            "keeps its MTP head"
        ], []
    if not mtp_q:
        return [], []
    in_blocks = any(MTP_PREFIX.startswith(b) or b.startswith("mtp") for b in blocks)
    return [
        f"speculative decoding by MTP is on but the checkpoint's MTP head is "
        f"quantized ({len(mtp_q)} tensors: {', '.join(mtp_q[:3])}, ...): "
        + (
            f"block_name_to_quantize = {blocks} does not name mtp, so vLLM 0.22.1 "
            "builds the drafter unquantized and cannot load these tensors"
            if blocks and not in_blocks
            else "vLLM's MTP drafter is built and validated for the unquantized "
            "head AutoRound copies by default (vllm#49552, intel/auto-round#1755)"
        )
        + ". Use a checkpoint whose mtp.* tensors are BF16 (AutoRound's default "
        "copy of the MTP weights), or turn MTP off (vllm_speculative_config = None)"
    ], []


def preflight(
    config: dict,
    names: list[str],
    method: str,
    accepted: tuple[str, ...] | None,
    speculative_method: str | None = None,
    missing: list[str] | None = None,
    fused: dict[str, list[str]] | None = None,
) -> dict:
    """The checks on a config.json, its tensor names and the shards missing from the
    directory (``missing``); ``fused`` is vLLM's packed_modules_mapping of the architecture
    (None: the built-in table). Pure. Returns ``{"ok", "architecture", "tensors",
    "vision_tensors", "problems", "notes"}``."""
    architecture = (config.get("architectures") or ["?"])[0]
    problems: list[str] = []
    if missing:  # every indexed shard present
        problems.append(
            f"{INDEX} names {len(missing)} shard(s) that are not in the checkpoint directory: "
            f"{', '.join(missing[:5])} (an interrupted or partial copy); place the model again"
        )
    quant = config.get("quantization_config") or {}
    blocks = quant.get("block_name_to_quantize") or quant.get("to_quant_block_names") or ""
    blocks = blocks.split(",") if isinstance(blocks, str) else list(blocks)
    problems += lm_head_problems(config, names, quant, blocks)
    vision_problems, notes, vision = vision_findings(config, names, method)
    problems += vision_problems
    problems += prefix_problems(architecture, names, accepted)
    if speculative_method == "mtp":
        mtp_problems, mtp_notes = mtp_findings(architecture, names, blocks)
        problems += mtp_problems
        notes += mtp_notes
    # layers vLLM fuses share one quantization
    fusion = BUILTIN_FUSED.get(architecture, {}) if fused is None else fused
    if quant and names:
        problems.extend(fused_problems(quant, names, fusion))
    return {
        "ok": not problems,
        "architecture": architecture,
        "tensors": len(names),
        "vision_tensors": vision,
        "problems": problems,
        "notes": notes,
    }


def main(argv: list[str]) -> int:
    cli = argparse.ArgumentParser(
        prog="checkpoint_preflight.py", description=__doc__.split("\n")[0]
    )
    cli.add_argument("model_dir", type=Path)
    cli.add_argument("--method", required=True, choices=METHODS)
    cli.add_argument("--speculative-method", default=None, help="vllm_speculative_config method")
    cli.add_argument("--no-vllm", action="store_true", help="use the built-in prefix table")
    try:
        opts = cli.parse_args(argv)
    except SystemExit as e:
        return 2 if e.code else 0
    out = sys.stdout
    if not opts.no_vllm:  # vLLM logs to stdout; the JSON line must be alone there
        import os

        out = os.fdopen(os.dup(1), "w")
        os.dup2(2, 1)
    config_file = opts.model_dir / "config.json"
    if not config_file.is_file():
        print(json.dumps({"ok": False, "problems": [f"{config_file} not found"]}), file=out)
        return 1
    config = json.loads(config_file.read_text(encoding="utf-8"))
    architecture = (config.get("architectures") or ["?"])[0]
    if opts.no_vllm:
        accepted, source = BUILTIN_PREFIXES.get(architecture), "built-in table (--no-vllm)"
        fused, fused_source = BUILTIN_FUSED.get(architecture, {}), "built-in table (--no-vllm)"
    else:
        accepted, source = vllm_accepted_prefixes(architecture)
        fused, fused_source = vllm_fused_modules(architecture)
    result = preflight(
        config,
        tensor_names(opts.model_dir),
        opts.method,
        accepted,
        speculative_method=opts.speculative_method,
        missing=missing_shards(opts.model_dir),
        fused=fused or {},
    )
    result["fused_modules"], result["fused_modules_from"] = fused, fused_source
    result["accepted_prefixes"] = list(accepted) if accepted else None
    result["prefixes_from"] = source
    if not opts.no_vllm:
        import vllm

        result["vllm_version"] = vllm.__version__
    for problem in result["problems"]:
        print(f"checkpoint_preflight: PROBLEM: {problem}", file=sys.stderr)
    print(json.dumps(result), file=out, flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
