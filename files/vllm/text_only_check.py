#!/usr/bin/env python3
"""Decide, with the installed vLLM's own config code, whether `vllm serve MODEL_DIR` would run
the model text-only.

Usage (run with the vLLM venv's python):

    python text_only_check.py MODEL_DIR --method {language_model_only,strip_vision_config}
                              [--api {auto,model_config,low_level}]

--method language_model_only: MODEL_DIR as it is, served with `--language-model-only`.
--method strip_vision_config: MODEL_DIR as it is (the caller has removed `vision_config` from
    its config.json), served without `--language-model-only`.

What is asked of vLLM (0.22.1 line numbers):
- EngineArgs(model=MODEL_DIR, language_model_only=...).create_model_config(): the ModelConfig
  `vllm serve` builds. It loads config.json through vLLM's registered Qwen3_5Config
  (vllm/transformers_utils/configs/qwen3_5.py), which re-creates a *default* vision_config
  when the key is missing (:183-184; default out_hidden_size 3584, :141), resolves the
  architecture, maps quant_method "auto-round" to vLLM's "inc" method
  (layers/quantization/inc.py, INCConfig.override_quantization_method) and, for a multimodal
  architecture, builds MultiModalConfig(language_model_only=...) (config/model.py:685-722).
- MultiModalConfig.get_limit_per_prompt(m) is 0 for every modality when language_model_only is
  set (config/multimodal.py:310-320).
- MULTIMODAL_REGISTRY.supports_multimodal_inputs(model_config) (multimodal/registry.py:103-139):
  False means vLLM runs "in text-only mode"; the engine's input processor, scheduler and model
  runner all take that value (v1/engine/input_processor.py:57, v1/core/sched/scheduler.py:185,
  v1/worker/gpu_model_runner.py:489).
- The vision tower is skipped when every modality of `_mark_tower_model` has limit 0
  (model_executor/models/interfaces.py:287): it is built on the meta device, replaced by
  StageMissingLayer, and AutoWeightsLoader skips its weights (models/utils.py:265).
- VllmConfig.get_quantization_config(): the quantization config object vLLM builds.

text_only is true when vLLM accepts no multimodal input AND skips the vision tower (or the
architecture is not multimodal at all).

Without an accelerator, vLLM's DeviceConfig default fails ("Failed to infer device type"); as
`vllm bench` does (vllm/entrypoints/cli/main.py:54-65), the CPU platform stands in only when
vLLM detects no platform. Config loading does not depend on the platform beyond that. If
ModelConfig cannot be built (--api auto), or with --api low_level, lower-level vLLM pieces are
used (get_config, ModelRegistry, MultiModalConfig); "api" in the output says which.

Output: one JSON line on stdout; exit 0 if text-only, 1 if not or on error ("error" set).
vLLM's logs go to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from vllm_offline import ensure_platform, json_result_writer  # next to this script

METHODS = ("language_model_only", "strip_vision_config")
VISION_SUMMARY_KEYS = (
    "out_hidden_size",
    "hidden_size",
    "depth",
    "num_heads",
    "intermediate_size",
    "patch_size",
    "spatial_merge_size",
    "temporal_patch_size",
)


def read_file_config(model_dir: Path) -> dict:
    with open(model_dir / "config.json", encoding="utf-8") as f:
        return json.load(f)


def visual_tensors_in_checkpoint(model_dir: Path) -> int | None:
    index = model_dir / "model.safetensors.index.json"
    if not index.is_file():
        return None
    with open(index, encoding="utf-8") as f:
        weight_map = json.load(f).get("weight_map", {})
    return sum(1 for name in weight_map if name.startswith(("model.visual.", "visual.")))


def summarize_vision(vision_config, file_vision: dict | None) -> dict | None:
    if vision_config is None:
        return None
    summary = {
        k: getattr(vision_config, k) for k in VISION_SUMMARY_KEYS if hasattr(vision_config, k)
    }
    summary["class"] = type(vision_config).__name__
    try:
        default = type(vision_config)()
        summary["equals_class_defaults"] = all(
            getattr(default, k, None) == v for k, v in summary.items() if k in VISION_SUMMARY_KEYS
        )
    except Exception:
        summary["equals_class_defaults"] = None
    summary["matches_file"] = (
        None
        if file_vision is None
        else all(file_vision.get(k) == v for k, v in summary.items() if k in VISION_SUMMARY_KEYS)
    )
    return summary


def causal_lm_registration(architectures: list[str]) -> dict[str, bool]:
    """Whether vLLM registers a text-only (ForCausalLM) twin of each multimodal architecture."""
    from vllm.model_executor.models import ModelRegistry

    supported = ModelRegistry.get_supported_archs()
    twins = {}
    for arch in architectures:
        if arch.endswith("ForConditionalGeneration"):
            twin = arch.removesuffix("ForConditionalGeneration") + "ForCausalLM"
            twins[twin] = twin in supported
    return twins


def quantization_summary(quant_config, method_in_file: str | None, vllm_method: str | None):
    info: dict = {"in_file": method_in_file, "vllm_method": vllm_method}
    if quant_config is None:
        info["recognized"] = method_in_file is None
        return info
    info["recognized"] = True
    info["config_class"] = type(quant_config).__name__
    for attr in ("weight_bits", "group_size", "sym", "packing_format", "block_name_to_quantize"):
        if hasattr(quant_config, attr):
            info[attr] = getattr(quant_config, attr)
    extra = getattr(quant_config, "extra_config", None)
    if extra is not None:
        info["extra_config_entries"] = len(extra)
    return info


def via_model_config(model_dir: Path, lmo: bool, result: dict) -> None:
    from vllm.config import LoadConfig, VllmConfig
    from vllm.engine.arg_utils import EngineArgs
    from vllm.multimodal import MULTIMODAL_REGISTRY

    model_config = EngineArgs(model=str(model_dir), language_model_only=lmo).create_model_config()
    result["api"] = "EngineArgs.create_model_config"
    hf_config = model_config.hf_config
    result["hf_config_class"] = type(hf_config).__name__
    result["hf_config_module"] = type(hf_config).__module__
    result["architectures"] = list(model_config.architectures)
    result["vllm_architecture"] = model_config.architecture
    result["text_hidden_size"] = model_config.get_hidden_size()
    result["vision_config"] = getattr(hf_config, "vision_config", None)
    result["multimodal_model"] = model_config.is_multimodal_model
    if model_config.is_multimodal_model:
        mm_config = model_config.get_multimodal_config()
        info = MULTIMODAL_REGISTRY._create_processing_info(model_config, tokenizer=None)
        modalities = sorted(info.supported_mm_limits)
        result["mm_limits"] = {m: mm_config.get_limit_per_prompt(m) for m in modalities}
        result["accepts_multimodal_inputs"] = MULTIMODAL_REGISTRY.supports_multimodal_inputs(
            model_config
        )
    try:
        quant = VllmConfig.get_quantization_config(model_config, LoadConfig())
        result["quantization"] = quantization_summary(
            quant,
            (getattr(hf_config, "quantization_config", None) or {}).get("quant_method"),
            model_config.quantization,
        )
    except Exception as e:
        result["quantization"] = {"recognized": False, "error": f"{type(e).__name__}: {e}"}


def via_low_level(model_dir: Path, lmo: bool, result: dict) -> None:
    """get_config + ModelRegistry + MultiModalConfig, for when ModelConfig cannot be built."""
    from vllm.config.multimodal import MultiModalConfig
    from vllm.model_executor.layers.quantization import (
        QUANTIZATION_METHODS,
        get_quantization_config,
    )
    from vllm.model_executor.models import ModelRegistry
    from vllm.transformers_utils.config import get_config

    hf_config = get_config(str(model_dir), trust_remote_code=False)
    result["api"] = "vllm.transformers_utils.config.get_config + ModelRegistry (low level)"
    result["hf_config_class"] = type(hf_config).__name__
    result["hf_config_module"] = type(hf_config).__module__
    architectures = list(getattr(hf_config, "architectures", None) or [])
    result["architectures"] = architectures
    text_config = hf_config.get_text_config()
    result["text_hidden_size"] = getattr(text_config, "hidden_size", None)
    result["vision_config"] = getattr(hf_config, "vision_config", None)
    infos = [ModelRegistry._try_inspect_model_cls(a) for a in architectures]
    known = [(a, i) for a, i in zip(architectures, infos, strict=True) if i is not None]
    result["vllm_architecture"] = known[0][0] if known else None
    multimodal = bool(known) and known[0][1].supports_multimodal
    result["multimodal_model"] = multimodal
    if multimodal:
        mm_config = MultiModalConfig(language_model_only=lmo)
        # the processing info needs a ModelConfig; Qwen-VL style models mark image+video
        modalities = ["image", "video"]
        result["mm_limits"] = {m: mm_config.get_limit_per_prompt(m) for m in modalities}
        result["accepts_multimodal_inputs"] = any(result["mm_limits"].values())
    quant_cfg = getattr(hf_config, "quantization_config", None)
    if quant_cfg:
        try:
            in_file = quant_cfg.get("quant_method")
            # as ModelConfig does: a method class may claim the checkpoint's quant_method
            # (INCConfig turns "auto-round" into "inc")
            method = next(
                (
                    override
                    for name in QUANTIZATION_METHODS
                    if (
                        override := get_quantization_config(name).override_quantization_method(
                            quant_cfg, None, hf_config=hf_config
                        )
                    )
                ),
                in_file,
            )
            quant = get_quantization_config(method).from_config(quant_cfg)
            result["quantization"] = quantization_summary(quant, in_file, method)
        except Exception as e:
            result["quantization"] = {"recognized": False, "error": f"{type(e).__name__}: {e}"}


def decide(model_dir: Path, method: str, api: str) -> dict:
    import vllm

    lmo = method == "language_model_only"
    result: dict = {
        "text_only": False,
        "method": method,
        "model_dir": str(model_dir),
        "vllm_version": vllm.__version__,
        "platform": ensure_platform(),
    }
    file_config = read_file_config(model_dir)
    file_vision = file_config.get("vision_config")
    result["vision_config_present_in_file"] = "vision_config" in file_config

    if api in ("auto", "model_config"):
        try:
            via_model_config(model_dir, lmo, result)
        except Exception as e:
            if api == "model_config":
                raise
            result["model_config_error"] = f"{type(e).__name__}: {e}"
            via_low_level(model_dir, lmo, result)
    else:
        via_low_level(model_dir, lmo, result)

    vision = summarize_vision(result.pop("vision_config"), file_vision)
    result["vision_config_after_vllm_load"] = vision
    result["registered_causal_lm"] = causal_lm_registration(result["architectures"])

    reasons: list[str] = []
    text_hidden = result.get("text_hidden_size")
    if method == "strip_vision_config" and result["vision_config_present_in_file"]:
        reasons.append("config.json still has vision_config: the strip has not been applied")
    if not result["vision_config_present_in_file"] and vision is not None:
        reasons.append(
            f"config.json has no vision_config, yet vLLM's {result['hf_config_class']} "
            f"({result['hf_config_module']}) created one: {vision['class']} with "
            f"out_hidden_size={vision.get('out_hidden_size')}"
            + (" (the class defaults)" if vision.get("equals_class_defaults") else "")
        )
    if (
        vision is not None
        and text_hidden is not None
        and vision.get("out_hidden_size") != text_hidden
    ):
        reasons.append(
            f"vision_config.out_hidden_size={vision.get('out_hidden_size')} does not match the "
            f"language model's hidden_size={text_hidden}"
        )
    twins = result["registered_causal_lm"]
    if twins and not any(twins.values()):
        reasons.append(
            f"vLLM registers no text-only architecture for {', '.join(result['architectures'])}"
            f" ({', '.join(twins)} is not registered): the multimodal class is used"
        )

    if not result["multimodal_model"]:
        result["text_only"] = True
        reasons.append(f"{result['vllm_architecture']} is not a multimodal model in vLLM")
    else:
        limits = result["mm_limits"]
        accepts = result["accepts_multimodal_inputs"]
        tower_skipped = all(v == 0 for v in limits.values())
        result["vision_tower_skipped"] = tower_skipped
        shown = ", ".join(f"{m}={n}" for m, n in limits.items())
        if tower_skipped:
            reasons.append(
                f"multimodal limits {shown}"
                + (" (--language-model-only)" if lmo else "")
                + ": the vision tower is built on the meta device as StageMissingLayer and its "
                "weights are skipped at load"
            )
        else:
            reasons.append(
                f"multimodal limits {shown}: vLLM builds the vision tower from "
                "vision_config and loads its weights"
            )
            n_visual = visual_tensors_in_checkpoint(model_dir)
            if n_visual:
                reasons.append(
                    f"the checkpoint holds {n_visual} model.visual.* tensors, which would be "
                    "loaded into that vision tower"
                )
        reasons.append(
            "vLLM accepts multimodal inputs"
            if accepts
            else "vLLM accepts no multimodal input (supports_multimodal_inputs is False): "
            "it runs in text-only mode"
        )
        result["text_only"] = (not accepts) and tower_skipped

    quant = result.get("quantization")
    if quant is not None:
        if quant.get("recognized"):
            reasons.append(
                f"quantization {quant.get('in_file')!r} recognized as vLLM method "
                f"{quant.get('vllm_method')!r} ({quant.get('config_class')})"
            )
        else:
            reasons.append(f"quantization not recognized: {quant.get('error')}")
    result["reasons"] = reasons
    return result


def main(argv: list[str]) -> int:
    emit = json_result_writer()

    cli = argparse.ArgumentParser(prog="text_only_check.py", description=__doc__.split("\n")[0])
    cli.add_argument("model_dir", type=Path)
    cli.add_argument("--method", required=True, choices=METHODS)
    cli.add_argument(
        "--api",
        default="auto",
        choices=("auto", "model_config", "low_level"),
        help="auto: ModelConfig, falling back to low-level pieces if it cannot be built",
    )
    try:
        opts = cli.parse_args(argv)
    except SystemExit as e:
        if e.code:
            emit({"text_only": False, "error": "bad usage (see --help)"})
            return 2
        return 0
    if not (opts.model_dir / "config.json").is_file():
        emit(
            {
                "text_only": False,
                "method": opts.method,
                "error": f"{opts.model_dir}/config.json not found",
            }
        )
        return 1

    try:
        result = decide(opts.model_dir, opts.method, opts.api)
    except Exception as e:
        message = " ".join(f"{type(e).__name__}: {e}".split())
        print(f"text_only_check: ERROR: {message}", file=sys.stderr, flush=True)
        emit({"text_only": False, "method": opts.method, "error": message})
        return 1
    emit(result)
    return 0 if result["text_only"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
