"""Many rigs in one inventory: each rig's cluster settings and the rules across the rigs of a
cluster (roles/cluster/settings.py, roles/cluster/group.py), on the shipped example
(inventory/rigs.py) and on bad group inventories made from it."""

from __future__ import annotations

import copy
import runpy

import pytest

from roles.cluster.group import group_problems, member_of
from roles.settings import validate
from tests.conftest import REPO, Settings, load_group_data


def example_rigs() -> dict[str, Settings]:
    """inventory/rigs.py as pyinfra merges it: all.py, then the group data, then the host data."""
    hosts, group = runpy.run_path(str(REPO / "inventory" / "rigs.py"))["rigs"]
    base = load_group_data()
    return {name: Settings({**copy.deepcopy(base), **group, **data}) for name, data in hosts}


def test_the_shipped_example_is_one_sound_cluster():
    rigs = example_rigs()
    for name, data in rigs.items():
        assert validate(data) == [], name
    assert group_problems(rigs) == []


def test_the_leader_address_is_read_from_the_leader():
    rigs = example_rigs()
    follower = member_of("rig-b.local", rigs)
    leader = member_of("rig-a.local", rigs)
    assert follower.master_addr == leader.address == "10.77.0.1"
    assert follower.peers == (("rig-a.local", "10.77.0.1"),)
    assert leader.peers == (("rig-b.local", "10.77.0.2"),)
    assert (leader.is_leader, follower.is_leader) == (True, False)


def test_a_rig_alone_is_no_member(settings):
    assert member_of("rig", {"rig": settings}) is None
    assert group_problems({"rig": settings, "other": settings}) == []


def _bad(**per_rig) -> list[str]:
    rigs = example_rigs()
    for name, overrides in per_rig.items():
        rigs[f"{name}.local"].update(overrides)
    return group_problems(rigs)


@pytest.mark.parametrize(
    ("per_rig", "expected"),
    [
        (
            {"rig-b": {"vllm_node_rank": 0}},
            ["cluster 'pair': vllm_node_rank: rig-a.local and rig-b.local are all rank 0",
             "cluster 'pair': vllm_node_rank: no rig has rank 1"],
        ),
        (
            {"rig-a": {"vllm_node_rank": 1}},
            ["cluster 'pair': vllm_node_rank: no rig is the leader (rank 0)",
             "cluster 'pair': vllm_node_rank: rig-a.local and rig-b.local are all rank 1"],
        ),
        (
            {"rig-b": {"vllm_kv_cache_dtype": "bfloat16"}},
            ["rig-b.local: vllm_kv_cache_dtype: 'bfloat16', but the leader rig-a.local has "
             "'fp8_e5m2'"],
        ),
        (
            {"rig-b": {"vllm_device": "cpu"}},
            ["rig-b.local: vllm_device: 'cpu', but the leader rig-a.local has 'cuda'"],
        ),
        (
            {"rig-b": {"vllm_max_model_len": 131072}},
            ["rig-b.local: vllm_max_model_len: 131072, but the leader rig-a.local has 262144"],
        ),
        (
            {"rig-b": {"model_llm_manifest": "qwen3.6-27b-int4-autoround-tiny"}},
            ["rig-b.local: model_llm_manifest: 'qwen3.6-27b-int4-autoround-tiny', but the "
             "leader rig-a.local has"],
        ),
        (
            {"rig-b": {"nvidia_gpu_count": 1}},
            ["cluster 'pair': vllm_tensor_parallel_size × vllm_pipeline_parallel_size = 2 × 2 "
             "= 4, but its rigs declare 3 GPU(s) (nvidia_gpu_count: rig-a.local 2, rig-b.local 1)"],
        ),
        (
            {"rig-b": {"cluster_private_address": "10.77.0.1"}},
            ["cluster 'pair': cluster_private_address: rig-a.local and rig-b.local all have "
             "10.77.0.1"],
        ),
        (
            {"rig-b": {"cluster_private_address": "fd00:77::2"}},
            ["cluster 'pair': cluster_private_address: IPv4 and IPv6 mixed (rig-a.local "
             "10.77.0.1, rig-b.local fd00:77::2)"],
        ),
        (
            {"rig-b": {"vllm_master_port": 29600}},
            ["rig-b.local: vllm_master_port: 29600, but the leader rig-a.local has 29501"],
        ),
    ],
)  # fmt: skip
def test_bad_group_inventories_are_refused_naming_the_rig_and_the_key(per_rig, expected):
    problems = _bad(**per_rig)
    for want in expected:
        assert any(p.startswith(want) for p in problems), (want, problems)
    assert len(problems) == len(expected), problems


def test_every_problem_of_a_cluster_at_once():
    problems = _bad(
        **{"rig-b": {"vllm_node_rank": 0, "vllm_max_model_len": 4096, "nvidia_gpu_count": 1}}
    )
    keys = [p.split(": ")[1] for p in problems]
    assert keys.count("vllm_node_rank") == 2 and "vllm_max_model_len" in keys, problems
    assert any("declare 3 GPU(s)" in p for p in problems), problems


def test_rigs_in_the_cluster_count_against_nnodes():
    rigs = example_rigs()
    extra = copy.deepcopy(rigs["rig-b.local"])
    extra.update(vllm_node_rank=1, cluster_private_address="10.77.0.3")
    rigs["rig-c.local"] = extra
    problems = group_problems(rigs)
    assert any(
        p.startswith("cluster 'pair': vllm_nnodes: 2, but the inventory has 3 rig(s)")
        for p in problems
    ), problems
    assert any("rig-b.local and rig-c.local are all rank 1" in p for p in problems), problems


def test_the_same_model_lock_on_every_rig(tmp_path):
    rigs = example_rigs()
    manifest = rigs["rig-a.local"]["model_llm_manifest"]
    for name, text in (("a", "commit = 'one'\n"), ("b", "commit = 'two'\n")):
        (tmp_path / name).mkdir()
        (tmp_path / name / f"{manifest}.lock").write_text(text)
        rigs[f"rig-{name}.local"]["model_lock_dir"] = str(tmp_path / name)
    problems = group_problems(rigs)
    assert len(problems) == 1 and problems[0].startswith(
        "rig-b.local: model_llm_manifest: its model lock (lock sha256 "
    ), problems
    (tmp_path / "b" / f"{manifest}.lock").write_text("commit = 'one'\n")
    assert group_problems(rigs) == []
    (tmp_path / "b" / f"{manifest}.lock").unlink()
    assert "(no lock yet)" in group_problems(rigs)[0]


def test_two_clusters_in_one_inventory_are_checked_apart():
    rigs = example_rigs()
    for name, rank, address in (("rig-c.local", 0, "10.78.0.1"), ("rig-d.local", 1, "10.78.0.2")):
        rigs[name] = copy.deepcopy(rigs["rig-a.local"])
        rigs[name].update(
            cluster_name="other", vllm_node_rank=rank, cluster_private_address=address
        )
    assert group_problems(rigs) == []
    assert member_of("rig-d.local", rigs).master_addr == "10.78.0.1"


# ---- one rig's own cluster settings (roles/cluster/settings.py) ------------------------------
def test_a_member_names_its_cluster_link_and_stage(settings):
    settings.update(vllm_nnodes=2, vllm_node_rank=2)
    problems = validate(settings)
    assert [p.split(":")[0] for p in problems] == [
        "cluster_name",
        "vllm_node_rank",
        "vllm_pipeline_parallel_size",
        "cluster_private_address",
        "cluster_private_ifname",
        "vllm_speculative_config",
    ], problems


def test_a_rig_alone_has_one_stage_and_rank_0(settings):
    settings.update(vllm_pipeline_parallel_size=2, vllm_node_rank=1)
    assert [p.split(":")[0] for p in validate(settings)] == [
        "vllm_node_rank",
        "vllm_pipeline_parallel_size",
    ]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("cluster_private_address", "rig-a.local"),
        ("cluster_private_address", "127.0.0.1"),
        ("cluster_private_address", "0.0.0.0"),
        ("cluster_private_ifname", "an interface name too long"),
        ("cluster_private_ifname", "eth0; rm"),
        ("cluster_name", "two words"),
        ("vllm_nnodes", 0),
        ("vllm_master_port", 70000),
    ],
)
def test_bad_cluster_values_name_their_key(settings, key, value):
    settings[key] = value
    assert [p.split(":")[0] for p in validate(settings)] == [key]


def test_no_speculative_decoding_across_rigs():
    rig = example_rigs()["rig-b.local"]
    rig["vllm_speculative_config"] = {"method": "mtp", "num_speculative_tokens": 3}
    assert [p.split(":")[0] for p in validate(rig)] == ["vllm_speculative_config"]
    alone = load_group_data()
    assert alone["vllm_speculative_config"] and validate(alone) == []


def test_each_rig_stage_uses_all_its_gpus():
    rig = example_rigs()["rig-a.local"]
    rig["nvidia_gpu_count"] = 4
    problems = validate(rig)
    assert any(
        p.startswith("vllm_tensor_parallel_size: 2 on a rig of a cluster that declares 4")
        for p in problems
    ), problems
