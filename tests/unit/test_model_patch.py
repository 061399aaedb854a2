"""The text-only edit of config.json, as pure functions."""

import pytest

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
