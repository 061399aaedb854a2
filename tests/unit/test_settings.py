"""Settings validation: the shipped file is valid, and each kind of bad value is refused with
a message naming the key."""

import pytest

from roles.common.settings import RULES, SettingsError, require_valid_settings, validate


def test_shipped_settings_are_valid(settings):
    assert validate(settings) == []


def test_every_rule_has_a_shipped_value(settings):
    assert set(RULES) <= set(settings), f"settings without a default: {set(RULES) - set(settings)}"


def test_seed_values(settings):
    """The seed recipe's figures, as the issue states them."""
    assert settings["vllm_version"] == "0.22.1"
    assert settings["vllm_tensor_parallel_size"] == 2
    assert settings["vllm_kv_cache_dtype"] == "fp8_e5m2"
    assert settings["vllm_block_size"] == 16
    assert settings["vllm_max_num_batched_tokens"] == 16384
    assert settings["vllm_speculative_config"] == {"method": "mtp", "num_speculative_tokens": 3}
    assert settings["vllm_max_model_len"] == 262144
    assert settings["vllm_host"] == "127.0.0.1"


@pytest.mark.parametrize(
    "key,value,fragment",
    [
        ("vllm_port", 0, "between 1 and 65535"),
        ("vllm_port", "8000", "must be an integer"),
        ("vllm_port", True, "must be an integer"),
        ("vllm_tensor_parallel_size", 0, "between 1 and 16"),
        ("vllm_kv_cache_dtype", "fp8_e5m3", "must be one of"),
        ("vllm_gpu_memory_utilization", 0, "(0.0, 1.0]"),
        ("vllm_gpu_memory_utilization", 1.5, "(0.0, 1.0]"),
        ("vllm_speculative_config", {"method": "mtp"}, "num_speculative_tokens"),
        ("vllm_speculative_config", {"num_speculative_tokens": 3}, "'method'"),
        ("vllm_speculative_config", "mtp", "must be a mapping"),
        ("vllm_max_model_len", -1, "between 1"),
        ("vllm_user", "Root User", "Unix user name"),
        ("vllm_text_only_method", "delete_vision", "language_model_only"),
        ("vllm_extra_args", "--enforce-eager", "list of strings"),
        ("vllm_env", {"BAD NAME": "1"}, "invalid variable name"),
        ("vllm_env", {"X": "a\nb"}, "one-line"),
        ("model_store_dir", "relative/path", "absolute path"),
        ("model_store_dir", "/srv/../etc", "plain absolute path"),
        ("model_store_dir", "/", "other than /"),
        ("model_revision", "../escape", "directory name"),
        ("model_source", "huggingface", "must be one of"),
        ("base_apt_packages", ["curl", "Bad Name"], "invalid Debian package names"),
        ("uv_version", "latest", "release number"),
        ("nvidia_gpu_count", 2.0, "must be an integer"),
    ],
)
def test_bad_value_is_named(settings, key, value, fragment):
    settings[key] = value
    problems = validate(settings)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{key}: ") and fragment in problems[0], problems[0]


def test_missing_key_is_named(settings):
    del settings["vllm_port"]
    assert validate(settings) == ["vllm_port: missing (set it in inventory/group_data/all.py)"]


def test_speculative_decoding_can_be_off(settings):
    settings["vllm_speculative_config"] = None
    assert validate(settings) == []


def test_tensor_parallel_must_fit_declared_gpus(settings):
    settings["nvidia_gpu_count"] = 1
    settings["voxcpm_gpu_index"] = 0  # issue 4: VoxCPM2's default GPU 1 needs a second GPU too
    (problem,) = validate(settings)
    assert problem.startswith("vllm_tensor_parallel_size: 2 is more than the 1 GPU(s)")


def test_host_without_gpus_keeps_seed_tensor_parallel(settings):
    """The lab declares 0 GPUs: the service is installed, not started, so TP=2 stays valid."""
    settings["nvidia_gpu_count"] = 0
    assert validate(settings) == []


def test_managed_flags_cannot_be_smuggled_in_extra_args(settings):
    settings["vllm_extra_args"] = ["--port=9000", "--enforce-eager"]
    (problem,) = validate(settings)
    assert problem.startswith("vllm_extra_args: --port is set by its own setting")


def test_model_source_outside_store(settings):
    settings["model_local_path"] = settings["model_store_dir"] + "/mirror"
    (problem,) = validate(settings)
    assert problem.startswith("model_local_path: the source must not lie inside")


def test_require_valid_settings_lists_all_and_says_nothing_changed(settings):
    settings["vllm_port"] = 70000
    settings["vllm_kv_cache_dtype"] = "int3"
    with pytest.raises(SettingsError) as err:
        require_valid_settings(settings, "rig.local")
    text = str(err.value)
    assert "for host rig.local" in text and "nothing was changed" in text
    assert "vllm_port:" in text and "vllm_kv_cache_dtype:" in text
