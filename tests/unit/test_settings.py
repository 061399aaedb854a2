"""Settings validation: the shipped file is valid, and each kind of bad value is refused with
a message naming the key."""

import pytest

from roles.settings import RULES, SettingsError, require_valid_settings, validate


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
        ("model_sources", ["local", "s3"], "distinct values of local, huggingface, modelscope"),
        ("model_sources", [], "at least one"),
        ("model_local_dirs", ["relative"], "absolute path"),
        ("model_local_link", "symlink", "must be one of"),
        ("hf_endpoint", "hf-mirror.com", "http(s) URL"),
        ("hf_token_env", "HF TOKEN", "environment variable name"),
        ("model_replace_mismatched", "yes", "True or False"),
        ("model_backup_dir", "backup", "absolute path"),
        ("model_llm_manifest", "no-such-model", "not found"),
        ("base_apt_packages", ["curl", "Bad Name"], "invalid Debian package names"),
        ("uv_version", "latest", "pins uv==0.13.9"),
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
    settings["voxcpm_gpu_index"] = 0  # VoxCPM2's default GPU 1 needs a second GPU too
    problems = validate(settings)
    assert problems[0].startswith("vllm_tensor_parallel_size: 2 is more than the 1 GPU(s)")
    # and the media mode no longer fits one card either (ComfyUI 23 GiB + VoxCPM2 8 GiB)
    assert problems[1].startswith("VRAM budget: media mode oversubscribes GPU 0: 31.0 of 24 GiB")


def test_host_without_gpus_keeps_seed_tensor_parallel(settings):
    """The lab declares 0 GPUs: the service is installed, not started, so TP=2 stays valid."""
    settings["nvidia_gpu_count"] = 0
    assert validate(settings) == []


def test_managed_flags_cannot_be_smuggled_in_extra_args(settings):
    settings["vllm_extra_args"] = ["--port=9000", "--enforce-eager"]
    (problem,) = validate(settings)
    assert problem.startswith("vllm_extra_args: --port sets what vllm_port sets")


@pytest.mark.parametrize(
    ("extra", "token", "reason"),
    [
        (["--kv-cache-memory-bytes", "20G"], "--kv-cache-memory-bytes",
         "ignores --gpu-memory-utilization (vllm#53787)"),
        (["--kv_cache_memory_bytes=21474836480"], "--kv_cache_memory_bytes",
         "Set vllm_gpu_memory_utilization instead"),
        (["--num-gpu-blocks=4096"], "--num-gpu-blocks (an abbreviation of "
         "--num-gpu-blocks-override)", "fixes the number of KV-cache blocks"),
        (["--cpu-offload-gb", "8"], "--cpu-offload-gb", "reads them over PCIe"),
        (["--kv-offloading-size", "32"], "--kv-offloading-size", "KV cache in system memory"),
        (["--mamba-ssm-cache-dtype", "float16"], "--mamba-ssm-cache-dtype", "float32"),
    ],
)  # fmt: skip
def test_flags_that_move_vllms_memory_accounting_are_refused_with_why(
    settings, extra, token, reason
):
    """vllm-project/vllm#53787: the engine boots healthy and dies on the first real request,
    while the settings check printed a budget vLLM does not follow."""
    settings["vllm_extra_args"] = extra
    (problem,) = validate(settings)
    assert problem.startswith(f"vllm_extra_args: {token} changes vLLM's memory accounting: ")
    assert reason in problem


def test_the_cpu_build_may_size_its_kv_cache_in_bytes(settings):
    """No VRAM budget to keep true on the CPU build (the lab pair sizes its KV cache so)."""
    settings["vllm_extra_args"] = ["--kv-cache-memory-bytes", "268435456"]
    settings["vllm_device"] = "cpu"
    assert not [p for p in validate(settings) if p.startswith("vllm_extra_args")]


def test_a_flag_of_the_memory_groups_that_moves_no_memory_passes(settings):
    settings["vllm_extra_args"] = ["--prefix-caching-hash-algo", "sha256"]
    assert validate(settings) == []


def test_model_source_outside_store(settings):
    settings["model_local_dirs"] = [settings["model_store_dir"] + "/mirror"]
    (problem,) = validate(settings)
    assert problem.startswith("model_local_dirs: /srv/rigup/models/mirror and model_store_dir")


def test_model_backup_not_in_store(settings):
    settings["model_backup_dir"] = "/srv"
    (problem,) = validate(settings)
    assert problem.startswith("model_backup_dir: /srv and model_store_dir must not contain")


def test_require_valid_settings_lists_all_and_says_nothing_changed(settings):
    settings["vllm_port"] = 70000
    settings["vllm_kv_cache_dtype"] = "int3"
    with pytest.raises(SettingsError) as err:
        require_valid_settings(settings, "rig.local")
    text = str(err.value)
    assert "for host rig.local" in text and "nothing was changed" in text
    assert "vllm_port:" in text and "vllm_kv_cache_dtype:" in text


@pytest.mark.parametrize(
    "key,value,fragment",
    [
        ("nvidia_driver_branch", 570, "too old: vLLM 0.22.1's CUDA 13 wheels need an R580"),
        ("nvidia_driver_branch", "580", "driver branch number"),
        ("nvidia_driver_branch", 590, "590 is not a branch rigup supports: 580 ("),
        ("nvidia_driver_variant", "proprietary", "must be one of open, closed, server"),
        ("nvidia_install_path", "ppa", "must be one of ubuntu, nvidia-repo"),
        ("nvidia_power_limit_w", 20, "between 50 and 1000"),
        ("nvidia_power_limit_w", 290.5, "must be an integer"),
        ("nvidia_persistence_mode", "yes", "True or False"),
        ("nvlink_expected_links", 0, "between 1 and 18"),
        ("nvidia_cuda_keyring_sha256", "abc", "sha256"),
        ("nvidia_cuda_repo_url", "http://example.com/x", "https:// URL"),
        ("cuda_toolkit_version", "13.1.0", "pins cuda-toolkit==13.0.2"),
        ("nvidia_gpu_compute_capability", 8.6, "a compute capability such as"),
        ("nvidia_gpu_compute_capability", "sm_86", "a compute capability such as"),
    ],
)
def test_bad_nvidia_value_is_named(settings, key, value, fragment):
    problems = validate({**settings, key: value})
    assert any(p.startswith(f"{key}:") and fragment in p for p in problems), problems


@pytest.mark.parametrize("branch", [580, 595])
@pytest.mark.parametrize("variant", ["open", "closed", "server", "server-open"])
def test_supported_branches_and_variants_pass(settings, branch, variant):
    assert (
        validate({**settings, "nvidia_driver_branch": branch, "nvidia_driver_variant": variant})
        == []
    )


def test_unsupported_branch_names_the_supported_ones_and_their_source(settings):
    (problem,) = validate({**settings, "nvidia_driver_branch": 600})
    assert problem.startswith("nvidia_driver_branch: 600 is not a branch rigup supports")
    assert "580 (the default" in problem and "supported to 2028" in problem
    assert "595 (the branch NVIDIA's Ubuntu 26.04 driver containers start at" in problem
    assert "source: roles/nvidia/branches.py SUPPORTED_BRANCHES" in problem


def test_nvidia_repo_path_installs_only_the_open_variant(settings):
    problems = validate(
        {
            **settings,
            "nvidia_install_path": "nvidia-repo",
            "nvidia_cuda_keyring_sha256": "a" * 64,
            "nvidia_driver_variant": "server",
        }
    )
    assert len(problems) == 1 and problems[0].startswith("nvidia_driver_variant: 'server'")


def test_power_limit_unset_means_card_default(settings):
    assert validate({**settings, "nvidia_power_limit_w": None}) == []


def test_nvidia_repo_path_needs_the_keyring_pinned(settings):
    problems = validate({**settings, "nvidia_install_path": "nvidia-repo"})
    assert len(problems) == 1 and problems[0].startswith("nvidia_cuda_keyring_sha256:")
    assert (
        validate(
            {
                **settings,
                "nvidia_install_path": "nvidia-repo",
                "nvidia_cuda_keyring_sha256": "a" * 64,
            }
        )
        == []
    )


def test_seed_nvidia_values(settings):
    assert settings["nvidia_power_limit_w"] == 290
    assert settings["nvidia_persistence_mode"] is True
    assert settings["nvidia_driver_branch"] >= 580
    assert settings["nvlink_expected_links"] == 4 and settings["nvlink_required"] is True


def test_cuda_toolkit_version_matches_its_lock(settings):
    from pathlib import Path

    lock = (Path(__file__).resolve().parents[2] / "files/nvidia/cuda-toolkit.lock").read_text()
    assert f"cuda-toolkit=={settings['cuda_toolkit_version']} " in lock


@pytest.mark.parametrize(
    "key,value,lock",
    [
        ("vllm_version", "0.22.2", "requirements.lock pins vllm==0.22.1"),
        ("voxcpm_version", "2.1.0", "requirements.lock pins voxcpm==2.0.3"),
    ],
)
def test_versions_are_checked_against_their_locks(settings, key, value, lock):
    """A release number in the settings only documents the lock; editing it alone is refused."""
    settings[key] = value
    (problem,) = validate(settings)
    assert problem.startswith(f"{key}: '{value}' but ") and lock in problem
    assert "regenerate it" in problem


@pytest.mark.parametrize(
    "typo,meant",
    [
        ("vllm_prot", "vllm_port"),
        ("nvidia_power_limit", "nvidia_power_limit_w"),
        ("comfyui_prot", "comfyui_port"),
        ("model_source", "model_sources"),
    ],
)
def test_misspelled_keys_are_refused_with_the_likely_key(settings, typo, meant):
    settings[typo] = 9000
    (problem,) = validate(settings)
    assert problem.startswith(f"{typo}: not a rigup setting (did you mean {meant}?)"), problem


def test_keys_of_other_tools_are_not_rigup_settings(settings):
    settings.update(ssh_port=2222, ssh_user="root", _sudo=True)
    assert validate(settings) == []


@pytest.mark.parametrize(
    "key", ["model_store_dir", "rigup_prefix", "comfyui_base_dir", "uv_cache_dir"]
)
@pytest.mark.parametrize("path", ["/etc", "/usr", "/var", "/opt", "/boot", "/var/lib/", "//usr"])
def test_system_directories_are_never_rigup_directories(settings, key, path):
    settings[key] = path
    problems = validate(settings)
    assert any(p.startswith(f"{key}: ") and "system directory" in p for p in problems), problems


def test_a_mount_point_stays_a_valid_source_and_backup(settings):
    settings.update(model_local_dirs=["/mnt"], model_backup_dir="/media/backup")
    assert validate(settings) == []


def test_prefix_caching_with_mtp_is_refused_on_this_release(settings):
    settings["vllm_enable_prefix_caching"] = True
    (problem,) = validate(settings)
    assert problem.startswith("vllm_enable_prefix_caching: with MTP") and "vllm#43559" in problem
    settings["vllm_speculative_config"] = None  # MTP off: prefix caching is fine
    assert validate(settings) == []


@pytest.mark.parametrize(
    "key,value,fragment",
    [
        ("vllm_long_prefill_token_threshold", 16384, "must be below vllm_max_num_batched_tokens"),
        ("vllm_override_generation_config", {"presence_penalty": 1.5}, "ignores presence_penalty"),
        ("vllm_override_generation_config", {"temperature": "hot"}, "must be numbers"),
        ("vllm_override_generation_config", {"max_new_tokens": 0}, "max_new_tokens must be"),
        ("vllm_override_generation_config", {"max_new_tokens": 512.5}, "max_new_tokens must be"),
        ("vllm_tool_call_parser", "Qwen3 Coder", "tool-call parser name"),
        ("vllm_max_num_seqs", 0, "between 1 and 1024"),
        ("vllm_api_key_env", "VLLM API KEY", "environment variable name"),
    ],
)
def test_bad_serving_default_is_named(settings, key, value, fragment):
    settings[key] = value
    (problem,) = validate(settings)
    assert problem.startswith(f"{key}: ") and fragment in problem, problem


def test_default_answer_length_must_leave_room_for_a_prompt(settings):
    settings["vllm_override_generation_config"] = {"max_new_tokens": 262144}
    (problem,) = validate(settings)
    assert problem.startswith("vllm_override_generation_config: max_new_tokens 262144"), problem
    settings["vllm_override_generation_config"] = {"max_new_tokens": 262143}
    assert validate(settings) == []


@pytest.mark.parametrize("dtype", ["fp8", "fp8_e4m3"])
def test_fp8_e4m3_kv_cache_refused_on_ampere(settings, dtype):
    """Field report: fp8 / fp8_e4m3 on RTX 3090s (compute capability 8.6) passed the settings and
    vLLM died in Triton with "type fp8e4nv not supported in this architecture"."""
    assert settings["nvidia_gpu_compute_capability"] == "8.6"  # the shipped RTX 3090 value
    (problem,) = validate({**settings, "vllm_kv_cache_dtype": dtype})
    assert problem.startswith(
        f"vllm_kv_cache_dtype: {dtype} (FP8 E4M3) needs compute capability 8.9"
    )
    assert "fp8e4nv not supported in this architecture" in problem
    assert 'vllm_kv_cache_dtype = "fp8_e5m2"' in problem


@pytest.mark.parametrize("capability", ["8.9", "9.0", "12.0"])
def test_fp8_e4m3_kv_cache_fine_from_ada_on(settings, capability):
    for dtype in ("fp8", "fp8_e4m3", "fp8_e5m2"):
        settings = {**settings, "nvidia_gpu_compute_capability": capability}
        assert validate({**settings, "vllm_kv_cache_dtype": dtype}) == []


def test_seed_kv_cache_dtype_runs_on_ampere(settings):
    assert settings["vllm_kv_cache_dtype"] == "fp8_e5m2" and validate(settings) == []


@pytest.mark.parametrize("key", ["vllm_port", "voxcpm_port", "comfyui_port"])
@pytest.mark.parametrize("port", [1, 80, 443, 1023])
def test_ports_below_1024_are_refused(settings, key, port):
    settings[key] = port
    problems = validate(settings)
    assert any(p.startswith(f"{key}: {port} is below 1024") for p in problems), problems


def test_ports_from_1024_are_fine(settings):
    settings.update(vllm_port=1024, voxcpm_port=65535, comfyui_port=8189)
    assert validate(settings) == []


@pytest.mark.parametrize("address", ["0.0.0.0", "::", "192.168.1.20", "rig.lan"])
def test_comfyui_beyond_loopback_needs_its_named_opt_in(settings, address):
    settings["comfyui_host"] = address
    problems = validate(settings)
    assert [p for p in problems if "comfyui_allow_network_without_auth" in p], problems
    settings["comfyui_allow_network_without_auth"] = True
    assert validate(settings) == []


@pytest.mark.parametrize("address", ["127.0.0.1", "::1", "localhost", "127.0.0.53"])
def test_comfyui_on_loopback_needs_no_opt_in(settings, address):
    settings["comfyui_host"] = address
    assert validate(settings) == []


def test_speech_api_key_variable_is_checked(settings):
    settings["voxcpm_api_key_env"] = "not a name"
    assert any(p.startswith("voxcpm_api_key_env: must be") for p in validate(settings))


@pytest.mark.parametrize(
    "extra,clash",
    [
        (["--hos", "0.0.0.0"], "--hos (an abbreviation of --host) sets what vllm_host sets"),
        (["--host=0.0.0.0"], "--host sets what vllm_host sets"),
        (
            ["-tp", "1"],
            "-tp (an alias of --tensor-parallel-size) sets what vllm_tensor_parallel_size",
        ),
        (["--max_model_len", "4096"], "--max_model_len sets what vllm_max_model_len sets"),
        (
            ["--speculative-config.num_speculative_tokens", "1"],
            "--speculative-config.num_speculative_tokens sets what vllm_speculative_config sets",
        ),
        (["--api-key", "x"], "--api-key sets what vllm_api_key_env sets"),
    ],
)
def test_every_spelling_of_a_managed_vllm_flag_is_refused(settings, extra, clash):
    settings["vllm_extra_args"] = [*extra, "--enforce-eager"]
    (problem,) = validate(settings)
    assert problem.startswith(f"vllm_extra_args: {clash}"), problem


def test_unmanaged_extra_flags_pass(settings):
    settings["vllm_extra_args"] = ["--enforce-eager", "--max-logprobs", "5", "--hf-overrides={}"]
    assert validate(settings) == []
