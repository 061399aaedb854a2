"""The text-only edit and checkpoint drift, as pure functions."""

import pytest

from roles.model import drift
from roles.model.patch import patch_for, strip_vision_config

CONFIG = {
    "architectures": ["Qwen3_5ForConditionalGeneration"],
    "model_type": "qwen3_5",
    "text_config": {"hidden_size": 5120},
    "vision_config": {"out_hidden_size": 5120},
    "image_token_id": 248056,
}


def test_strip_removes_only_vision_config():
    out = strip_vision_config(CONFIG)
    assert "vision_config" not in out
    assert {k: v for k, v in CONFIG.items() if k != "vision_config"} == out
    assert "vision_config" in CONFIG, "the input must not be mutated"


def test_strip_is_idempotent():
    once = strip_vision_config(CONFIG)
    assert strip_vision_config(once) == once


def test_language_model_only_leaves_config_untouched():
    assert patch_for("language_model_only")(CONFIG) == CONFIG


def test_unknown_method_is_named():
    with pytest.raises(KeyError, match="unknown text-only method 'x'"):
        patch_for("x")


def test_drift_reports_missing_and_resized_but_not_rigup_files():
    source = {"config.json": 10, "a.safetensors": 100, "b.safetensors": 5}
    placed = {"config.json": 9, "config.json.rigup-orig": 10, "a.safetensors": 99}
    assert drift(source, placed) == [
        "a.safetensors: 99 bytes placed, 100 bytes in the source",
        "b.safetensors: missing from the placed copy",
    ]
    assert drift(source, {**source, "extra.txt": 1}) == []
