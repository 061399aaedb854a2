"""roles/vllm/combinations.py: settings that break vLLM only together are refused by the
settings check before any change, naming every key, with the diagnosis signature's fix."""

from __future__ import annotations

import pytest

from rigup import diagnosis
from roles import settings as rigup_settings
from roles.vllm import combinations
from tests.conftest import load_group_data

EXPANDABLE = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}


def problems(**overrides) -> list[str]:
    return rigup_settings.validate(load_group_data() | overrides)


def test_the_defaults_meet_no_rule():
    assert combinations.problems(load_group_data()) == []


@pytest.mark.parametrize(
    "env",
    [
        EXPANDABLE,
        {"PYTORCH_ALLOC_CONF": "max_split_size_mb:512, expandable_segments:True"},
        {"PYTORCH_CUDA_ALLOC_CONF": "garbage_collection_threshold:0.8,expandable_segments:True"},
    ],
)
def test_expandable_segments_with_custom_all_reduce_and_cuda_graphs_is_refused(env):
    """vllm#42609: 2x3090 over NVLink (custom all-reduce on), CUDA graphs, expandable segments."""
    (line,) = problems(vllm_env=env)
    assert line.startswith("vllm_env: expandable_segments:True"), line
    for word in ("nvlink_required", "vllm_extra_args", "custom all-reduce", "CUDA graphs",
                 "vllm#42609", "'--disable-custom-all-reduce'", "'--enforce-eager'"):  # fmt: skip
        assert word in line, (word, line)
    assert diagnosis.by_id("vllm-custom-allreduce/expandable-segments").fix in line


@pytest.mark.parametrize(
    "overrides",
    [
        {"vllm_extra_args": ["--disable-custom-all-reduce"]},  # NCCL's all-reduce instead
        {"vllm_extra_args": ["--enforce-eager"]},  # no CUDA graphs
        {"vllm_tensor_parallel_size": 1},  # no all-reduce at all
        {"vllm_env": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False"}},
        {"vllm_env": {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512"}},
    ],
)
def test_each_way_out_of_the_combination_is_accepted(overrides):
    data = load_group_data() | {"vllm_env": EXPANDABLE} | overrides
    assert combinations.problems(data) == []


def test_without_nvlink_required_the_rule_still_holds_when_a_bridge_is_verified():
    """rigup-nvlink decides at boot; custom all-reduce is on whenever it verifies the bridge."""
    (line,) = combinations.problems(
        load_group_data() | {"vllm_env": EXPANDABLE, "nvlink_required": False}
    )
    assert "when it verifies one" in line


def test_the_cpu_build_has_no_custom_all_reduce_nor_cuda_graphs():
    derived = combinations.derive(load_group_data() | {"vllm_device": "cpu"})
    assert not derived.custom_all_reduce and not derived.cuda_graphs


def test_alloc_conf_reads_torchs_syntax_and_the_first_variable_wins():
    env = {
        "PYTORCH_ALLOC_CONF": "expandable_segments:False",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,max_split_size_mb:128",
    }
    assert combinations.alloc_conf(env) == {
        "expandable_segments": "False",
        "max_split_size_mb": "128",
    }
    assert combinations.alloc_conf({}) == {}


def test_every_rule_has_a_source_and_its_signature_exists():
    for rule in combinations.COMBINATIONS:
        assert rule.source and len(rule.keys) >= 2, rule.id
        if rule.signature:
            sig = diagnosis.by_id(rule.signature, "vllm-log")
            assert sig.pattern and rule.fix(None) == sig.fix


@pytest.mark.parametrize(
    "dtype", ["nvfp4", "fp8_per_token_head", "fp8_inc", "fp8_ds_mla", "fp8", "fp8_e4m3"]
)
def test_kv_cache_dtypes_ampere_cannot_run_are_refused_once(dtype):
    """What vLLM 0.22.1's code says an RTX 3090 (8.6) cannot run, each refused by one rule."""
    (line,) = problems(vllm_kv_cache_dtype=dtype)
    assert line.startswith(f"vllm_kv_cache_dtype: {dtype}"), line
    assert "nvidia_gpu_compute_capability" in line and "8.6" in line, line
    assert "fp8_e5m2" in line, line  # the fix names one that runs


@pytest.mark.parametrize(
    "dtype",
    [
        "auto",
        "bfloat16",
        "fp8_e5m2",
        "int8_per_token_head",
        "turboquant_k8v4",
        "turboquant_3bit_nc",
    ],
)
def test_kv_cache_dtypes_ampere_runs_are_accepted(dtype):
    """TurboQuant stores its FP8 keys as Triton's fp8e4b15 below 8.9 (vLLM 0.22.1
    v1/attention/ops/triton_turboquant_decode.py _use_fp8_e4b15), so Ampere runs it."""
    assert problems(vllm_kv_cache_dtype=dtype) == []


@pytest.mark.parametrize(("dtype", "capability"), [("nvfp4", "10.0"), ("fp8", "8.9")])
def test_newer_gpus_run_what_ampere_cannot(dtype, capability):
    data = load_group_data() | {
        "vllm_kv_cache_dtype": dtype,
        "nvidia_gpu_compute_capability": capability,
    }
    assert combinations.problems(data) == []


def test_the_hand_kept_fp8_e4m3_threshold_agrees_with_the_derived_table():
    """roles/vllm/settings.py KV_CACHE_MIN_COMPUTE_CAPABILITY (used by roles/settings.py with the
    journal's fp8e4nv signature) says what the table generated from vLLM's code says."""
    from roles.vllm.settings import KV_CACHE_MIN_COMPUTE_CAPABILITY

    for dtype, need in KV_CACHE_MIN_COMPUTE_CAPABILITY.items():
        for text in combinations.KV_CACHE_SUPPORT["capabilities"]:
            major, minor = (int(x) for x in text.split("."))
            refused = combinations.kv_cache_refusal(dtype, (major, minor)) is not None
            assert refused == ((major, minor) < need), (dtype, text)


def test_a_bench_arm_that_meets_a_rule_is_unavailable():
    """rigup-bench's arms are checked by the vLLM role's rules alone (roles/doctor/settings.py
    arm_problems); the combination rules read the NVIDIA keys they need there too."""
    from roles.doctor.settings import arm_problems

    (line,) = arm_problems(load_group_data(), {"settings": {"vllm_env": EXPANDABLE}})
    assert line.startswith("vllm_env: expandable_segments:True"), line
    (line,) = arm_problems(load_group_data(), {"settings": {"vllm_kv_cache_dtype": "nvfp4"}})
    assert line.startswith("vllm_kv_cache_dtype: nvfp4 on GPUs of compute capability 8.6"), line
