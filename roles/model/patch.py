"""The text-only edit of a Qwen3.6 checkpoint's config.json, as pure functions.

docs/text-only.md explains the methods: what the seed did, what the pinned vLLM does, and why
rigup defaults to ``language_model_only`` (config.json untouched).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def strip_vision_config(config: dict[str, Any]) -> dict[str, Any]:
    """The seed's edit: ``config.json`` without its top-level ``vision_config`` (shape kept
    otherwise). Idempotent: a config without the key comes back equal."""
    return {key: value for key, value in config.items() if key != "vision_config"}


def unchanged(config: dict[str, Any]) -> dict[str, Any]:
    """No edit: ``--language-model-only`` makes vLLM skip the vision encoder at serve time."""
    return config


#: text-only method (setting ``vllm_text_only_method``) -> edit applied to config.json
PATCHES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "language_model_only": unchanged,
    "strip_vision_config": strip_vision_config,
}


def patch_for(method: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The config.json edit for ``method``; raises ``KeyError`` naming the known methods."""
    try:
        return PATCHES[method]
    except KeyError:
        raise KeyError(
            f"unknown text-only method {method!r}; known: {', '.join(PATCHES)}"
        ) from None
