"""The quantization checks of the checkpoint preflight (checkpoint_preflight.py, installed
beside it): which quantization vLLM 0.22.1's AutoRound reader gives each layer, and the layers
vLLM fuses into one whose parts differ (intel/auto-round#1726). Standard library only, pure."""

from __future__ import annotations

import re

#: Used only with --no-vllm: vLLM 0.22.1's packed_modules_mapping (models/qwen3_5.py:440-450,
#: :557-560 with qwen3_vl.py:1613-1623; qwen3_next.py:717-726). One-part entries fuse nothing.
_QWEN3_5_FUSED = {
    "qkv_proj": ["q_proj", "k_proj", "v_proj"],
    "gate_up_proj": ["gate_proj", "up_proj"],
    "in_proj_qkvz": ["in_proj_qkv", "in_proj_z"],
    "in_proj_ba": ["in_proj_b", "in_proj_a"],
}
BUILTIN_FUSED = {
    "Qwen3_5ForConditionalGeneration": _QWEN3_5_FUSED,
    "Qwen3_5ForCausalLM": _QWEN3_5_FUSED,
    "Qwen3NextForCausalLM": {
        "qkv_proj": ["q_proj", "k_proj", "v_proj"],
        "gate_up_proj": ["gate_proj", "up_proj"],
    },
}
#: The tensors of a GPTQ-packed (AutoRound auto_gptq / auto_awq) quantized linear layer.
QUANTIZED_PARTS = ("qweight", "qzeros", "scales", "g_idx")


def layer_quantization(quant: dict, name: str, quantized: bool) -> tuple:
    """``(bits, group_size, sym)`` vLLM 0.22.1's AutoRound reader gives the layer ``name``
    (INCConfig.get_layer_config's get_config, inc.py:142-181): its exact ``extra_config`` entry,
    else the first ``extra_config`` key holding a regular-expression character that matches
    it, else the checkpoint's defaults (16-bit when ``quantized`` is False)."""
    bits, group, sym = quant.get("bits", 4), quant.get("group_size", 128), quant.get("sym", True)
    default = (bits if quantized else 16, group if quantized else -1, sym if quantized else True)
    extra = quant.get("extra_config") or {}

    def of(cfg: dict) -> tuple:
        return (
            cfg.get("bits", default[0]),
            cfg.get("group_size", default[1]),
            cfg.get("sym", default[2]),
        )

    if name in extra:
        return of(extra[name])
    for pattern, cfg in extra.items():
        if isinstance(pattern, str) and any(c in pattern for c in r"*+?^$()[]{}|\\"):
            try:
                if re.search(pattern, name):
                    return of(cfg)
            except re.error:
                continue
    return default


def fused_problems(quant: dict, names: list[str], fused: dict[str, list[str]]) -> list[str]:
    """The fused layers (``fused``: vLLM's packed_modules_mapping) whose parts differ in
    quantization, as config.json's quantization_config gives it or as the tensors are stored."""
    modules: dict[str, set[str]] = {}
    for n in names:
        module, _, part = n.rpartition(".")
        modules.setdefault(module, set()).add(part)
    extra = quant.get("extra_config") or {}
    blocks = quant.get("block_name_to_quantize") or quant.get("to_quant_block_names") or []
    blocks = blocks.split(",") if isinstance(blocks, str) else list(blocks)
    seen, by_config, by_tensors = set(), [], []
    for module in sorted(modules):
        head, _, last = module.rpartition(".")
        for key, subs in fused.items():
            if len(subs) < 2 or last not in subs or f"{head}.{key}" in seen:
                continue
            fused_name = f"{head}.{key}"
            seen.add(fused_name)
            parts = [f"{head}.{sub}" for sub in subs if f"{head}.{sub}" in modules]
            if extra and fused_name not in extra:
                quantized = not blocks or any(fused_name.startswith(b) for b in blocks)
                configs = {p: layer_quantization(quant, p, quantized) for p in parts}
                if len(set(configs.values())) > 1:
                    by_config.append((fused_name, configs))
            stored = {p: bool(modules[p] & set(QUANTIZED_PARTS)) for p in parts}
            if len(set(stored.values())) > 1:
                by_tensors.append((fused_name, stored))
    problems = []
    if by_config:
        name, configs = by_config[0]
        shown = ", ".join(
            f"{p.rsplit('.', 1)[-1]} bits/group_size/sym {c}" for p, c in configs.items()
        )
        problems.append(
            f"{len(by_config)} layer(s) vLLM fuses have parts with different quantization in "
            f"quantization_config (extra_config): {name} ({shown}); vLLM 0.22.1 builds each as "
            f"one layer with one quantization and refuses to load: `ValueError: Fused module "
            f"'{name}' requires consistent quant config for {sorted(configs)}` "
            "(intel/auto-round#1726). Use a checkpoint quantized with one scheme for the parts "
            "of each fused layer (AutoRound: the same --layer_config for gate_proj and up_proj, "
            "q/k/v_proj, in_proj_qkv and in_proj_z, in_proj_b and in_proj_a)"
        )
    if by_tensors:
        name, stored = by_tensors[0]
        shown = ", ".join(
            f"{p.rsplit('.', 1)[-1]} {'quantized' if q else 'unquantized'}"
            for p, q in stored.items()
        )
        problems.append(
            f"{len(by_tensors)} layer(s) vLLM fuses are stored half quantized: {name} ({shown}); "
            "vLLM builds them as one layer with one quantization, so the other half cannot be "
            "loaded. Use a checkpoint whose fused parts share one format"
        )
    return problems
