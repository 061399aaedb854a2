"""Names `vllm serve` resolves only when the engine or the API server starts, checked against the
installed vLLM's own registries (used by check_args.py, next to it on the host).

vLLM's argument parser takes many names as plain strings and looks them up only later: a
reasoning parser that does not exist passes ``vllm serve``'s parser and the engine dies at start
("Reasoning parser 'qwen4' not found"). Each :class:`NameRule` says where the pinned vLLM looks a
name up, and reads the valid names from that very registry at check time (plugins a flag loads
are imported first, as vLLM's ``setup_server`` does), so the list never drifts from the release.

Flags whose values argparse already restricts (``choices``, e.g. ``--kv-cache-dtype`` from
``CacheDType`` in vllm/config/cache.py) fail in vLLM's parser; :func:`explain_invalid_choice`
rewrites that message with the rigup setting and the closest valid names.

The pure parts (:func:`did_you_mean`, :func:`unknown_name`, :func:`explain_invalid_choice`,
:func:`label_for`) need no vLLM; the registries are imported lazily.
"""

from __future__ import annotations

import difflib
import re
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

#: characters that make a --chat-template value a template rather than a name or path
#: (vllm/entrypoints/chat_utils.py validate_chat_template: JINJA_CHARS)
JINJA_CHARS = "{}\n"


def did_you_mean(value: str, names: Iterable[str], n: int = 3) -> list[str]:
    """Up to ``n`` names closest to ``value``, best first: those difflib rates >= 0.6
    (case-insensitive), then those that contain ``value`` (``chatml`` ->
    ``template_chatml.jinja``): ``did_you_mean("qwen4", ["qwen3", "deepseek_r1"]) == ["qwen3"]``."""
    by_lower = {name.lower(): name for name in names}
    close = difflib.get_close_matches(value.lower(), list(by_lower), n=n, cutoff=0.6)
    close += [low for low in by_lower if value and value.lower() in low and low not in close]
    return [by_lower[c] for c in close[:n]]


def unknown_name(label: str, what: str, value: str, names: Iterable[str], source: str) -> str:
    """One problem line for a name vLLM would not find: the label (the rigup setting, or
    ``vllm_extra_args: --flag``), the closest names and every valid one.

    ``source``: where vLLM resolves the name (shown so the user can check the release)."""
    names = sorted(set(names))
    close = did_you_mean(value, names)
    hint = f" (did you mean {' or '.join(close)}?)" if close else ""
    return (
        f"{label}: {value!r} is not a {what} of this vLLM{hint}; vLLM resolves it at start "
        f"({source}) and would die there. Valid: {', '.join(names)}"
    )


_INVALID_CHOICE = re.compile(
    r"^argument (?P<flags>[^:]+): invalid choice: '(?P<value>.*)' \(choose from (?P<choices>.*)\)$"
)


def explain_invalid_choice(message: str, label_of: Callable[[str], str]) -> str | None:
    """argparse's "argument --kv-cache-dtype: invalid choice: 'fp8_e5m3' (choose from 'auto', ...)"
    with the rigup setting (``label_of(flag)``) and did-you-mean; None for other messages."""
    m = _INVALID_CHOICE.match(message)
    if not m:
        return None
    flag = next((f for f in m["flags"].split("/") if f.startswith("--")), m["flags"])
    choices = [c.strip().strip("'\"") for c in m["choices"].split(",") if c.strip()]
    close = did_you_mean(m["value"], choices)
    hint = f" (did you mean {' or '.join(close)}?)" if close else ""
    return f"{label_of(flag)}: invalid choice {m['value']!r}{hint}; valid: {', '.join(choices)}"


def label_for(flag: str, from_extra: bool, managed: Mapping[str, str]) -> str:
    """Who set ``flag``: the rigup setting that renders it (``managed``: flag -> setting), or
    ``vllm_extra_args: --flag`` for a flag the user added, or the flag itself without either."""
    if from_extra:
        return f"vllm_extra_args: {flag}"
    return managed.get(flag) or flag


# ---- the registries of the installed vLLM (imported lazily) ----------------------------------


def _reasoning_parsers(ns) -> list[str]:
    from vllm.reasoning import ReasoningParserManager

    plugin = getattr(ns, "reasoning_parser_plugin", None)
    if plugin and len(plugin) > 3:  # as vllm/entrypoints/openai/api_server.py setup_server
        ReasoningParserManager.import_reasoning_parser(plugin)
    return ReasoningParserManager.list_registered()


def _tool_parsers(ns) -> list[str]:
    from vllm.tool_parsers import ToolParserManager

    plugin = getattr(ns, "tool_parser_plugin", None)
    if plugin and len(plugin) > 3:  # as setup_server
        ToolParserManager.import_tool_parser(plugin)
    return ToolParserManager.list_registered()


def _quantization_methods(ns) -> list[str]:
    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS

    return list(QUANTIZATION_METHODS)


def _load_formats(ns) -> list[str]:
    from vllm.model_executor.model_loader import _LOAD_FORMAT_TO_MODEL_LOADER

    return list(_LOAD_FORMAT_TO_MODEL_LOADER)


def _tokenizer_modes(ns) -> list[str]:
    from vllm.config.model import TokenizerMode
    from vllm.tokenizers.registry import TokenizerRegistry

    return sorted(set(typing.get_args(TokenizerMode)) | set(TokenizerRegistry.tokenizers))


def _speculative_methods(ns) -> list[str]:
    from vllm.config.speculative import SpeculativeMethod

    return list(typing.get_args(SpeculativeMethod))


def _model_impls(ns) -> list[str]:
    from vllm.config.model import ModelImpl

    return list(typing.get_args(ModelImpl))


def _config_formats(ns) -> list[str]:
    from vllm.transformers_utils.config import _CONFIG_FORMAT_TO_CONFIG_PARSER

    return ["auto", *_CONFIG_FORMAT_TO_CONFIG_PARSER]


def _mamba_backends(ns) -> list[str]:
    from vllm.config.mamba import MambaBackendEnum

    return [member.name.lower() for member in MambaBackendEnum]


def chat_template_names() -> list[str]:
    """vLLM's built-in chat templates (vllm/transformers_utils/chat_templates/*.jinja)."""
    from vllm.transformers_utils.chat_templates.registry import CHAT_TEMPLATES_DIR

    return sorted(p.name for p in Path(CHAT_TEMPLATES_DIR).glob("*.jinja"))


@dataclass(frozen=True)
class NameRule:
    """A flag whose string value vLLM looks up in a registry only at start.

    ``dest``: argparse destination; ``key``: for a JSON flag, the key inside it; ``what``: the
    kind of name, for the message; ``source``: vLLM 0.22.1's function that resolves it;
    ``names``: reads the valid names from the installed vLLM given the parsed namespace;
    ``fold``: how vLLM normalises the value before the lookup (e.g. ``str.lower`` where it
    upper-cases an enum member's name)."""

    dest: str
    what: str
    source: str
    names: Callable[[typing.Any], list[str]]
    key: str | None = None
    fold: Callable[[str], str] = str


RULES: tuple[NameRule, ...] = (
    NameRule(
        "reasoning_parser",
        "reasoning parser",
        "ReasoningParserManager.get_reasoning_parser, vllm/reasoning/abs_reasoning_parsers.py",
        _reasoning_parsers,
    ),
    NameRule(
        "tool_call_parser",
        "tool-call parser",
        "ToolParserManager.get_tool_parser, vllm/tool_parsers/abstract_tool_parser.py",
        _tool_parsers,
    ),
    NameRule(
        "quantization",
        "quantization method",
        "get_quantization_config, vllm/model_executor/layers/quantization/__init__.py",
        _quantization_methods,
    ),
    NameRule(
        "load_format",
        "load format",
        "get_model_loader, vllm/model_executor/model_loader/__init__.py",
        _load_formats,
    ),
    NameRule(
        "tokenizer_mode",
        "tokenizer mode",
        "TokenizerRegistry, vllm/tokenizers/registry.py",
        _tokenizer_modes,
    ),
    NameRule(
        "speculative_config",
        "speculative method",
        "SpeculativeConfig.method (SpeculativeMethod), vllm/config/speculative.py",
        _speculative_methods,
        key="method",
    ),
    NameRule(
        "model_impl",
        "model implementation",
        "ModelConfig.model_impl (ModelImpl), vllm/config/model.py",
        _model_impls,
    ),
    NameRule(
        "config_format",
        "config format",
        "get_config_parser, vllm/transformers_utils/config.py",
        _config_formats,
    ),
    NameRule(
        "mamba_backend",
        "Mamba backend",
        "MambaBackendEnum[name.upper()], EngineArgs.create_engine_config, vllm/engine/arg_utils.py",
        _mamba_backends,
        fold=str.lower,
    ),
)


def _chat_template_problem(value: str, label: str) -> str | None:
    """vLLM's rule (chat_utils.validate_chat_template): a template text, an existing file, or
    the name of a built-in template."""
    if any(c in value for c in JINJA_CHARS) or Path(value).exists():
        return None
    names = chat_template_names()
    if value in names:
        return None
    return unknown_name(
        label,
        "chat template file or built-in chat template",
        value,
        names,
        "validate_chat_template, vllm/entrypoints/chat_utils.py; a path must exist on the host",
    )


def name_problems(ns, dests: Iterable[str], label_of: Callable[[str], str]) -> list[str]:
    """Every name among the given destinations (``dests``, set from argv) that the installed
    vLLM would not find at start, one problem line each (``[]`` when all resolve).
    ``label_of(dest)`` names who set it (see :func:`label_for`)."""
    given = set(dests)
    problems = []
    for rule in RULES:
        if rule.dest not in given:
            continue
        value = getattr(ns, rule.dest, None)
        if rule.key is not None:
            value = value.get(rule.key) if isinstance(value, dict) else None
        if not isinstance(value, str) or not value:
            continue
        names = rule.names(ns)
        if rule.fold(value) not in {rule.fold(name) for name in names}:
            label = label_of(rule.dest)
            if rule.key:
                label = f"{label}: {rule.key}"
            problems.append(unknown_name(label, rule.what, value, names, rule.source))
    template = getattr(ns, "chat_template", None)
    if "chat_template" in given and isinstance(template, str):
        problem = _chat_template_problem(template, label_of("chat_template"))
        if problem:
            problems.append(problem)
    return problems
