"""roles/vllm/combinations.py: settings that break vLLM only together are refused by the
settings check before any change, naming every key, with the diagnosis signature's fix."""

from __future__ import annotations

import pytest

from roles import settings as rigup_settings
from roles.common import diagnosis
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


def test_every_rule_names_a_signature_of_vllms_journal():
    for rule in combinations.COMBINATIONS:
        sig = diagnosis.by_id(rule.signature, "vllm-log")
        assert sig.pattern and sig.fix and rule.source
