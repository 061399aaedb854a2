"""The lab pair's group inventories: inventory/lab_rigs.py, one sound cluster by the rules every
group inventory meets, its rigs on the pair's link (lab/pairnet.py), the follower headless; and
inventory/lab_replicas.py, the same machines as two rigs alone behind the router on rig a."""

from __future__ import annotations

import copy
import runpy

from lab.pair_serving import VLLM_KEY_FILE
from roles.cluster.group import group_problems, member_of
from roles.router.replicas import replica_urls, router_addresses
from roles.settings import validate
from roles.vllm.flags import serve_args
from roles.vllm.paths import VllmPaths
from tests.conftest import REPO, Settings, load_group_data


def lab_pair_rigs(monkeypatch, tmp_path) -> dict[str, Settings]:
    monkeypatch.setenv("RIGUP_LAB_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("RIGUP_LAB_SSH_PORT", "2310")
    monkeypatch.delenv("RIGUP_LAB_PAIR", raising=False)
    hosts, group = runpy.run_path(str(REPO / "inventory" / "lab_rigs.py"))["lab_rigs"]
    base = load_group_data()
    return {name: Settings({**copy.deepcopy(base), **group, **data}) for name, data in hosts}


def test_the_lab_pair_is_one_sound_cluster(monkeypatch, tmp_path):
    rigs = lab_pair_rigs(monkeypatch, tmp_path)
    assert list(rigs) == ["rigs-a", "rigs-b"]
    for name, data in rigs.items():
        assert validate(data) == [], name
    assert group_problems(rigs) == []


def test_the_pair_uses_its_link_and_one_core_each(monkeypatch, tmp_path):
    rigs = lab_pair_rigs(monkeypatch, tmp_path)
    leader, follower = member_of("rigs-a", rigs), member_of("rigs-b", rigs)
    assert follower.master_addr == leader.address == "10.77.0.1"
    assert follower.address == "10.77.0.2"
    assert [rigs[n]["ssh_port"] for n in rigs] == [2310, 2311]
    assert [rigs[n]["vllm_env"]["VLLM_CPU_OMP_THREADS_BIND"] for n in rigs] == ["0", "1"]
    # the hub runs in the leader; both rigs reach it on the leader's address
    assert {rigs[n]["hf_endpoint"] for n in rigs} == {"http://10.77.0.1:27310"}
    assert rigs["rigs-a"]["model_lock_dir"] == rigs["rigs-b"]["model_lock_dir"]


def test_the_follower_is_headless_and_the_leader_serves(monkeypatch, tmp_path):
    rigs = lab_pair_rigs(monkeypatch, tmp_path)
    lead = serve_args(rigs["rigs-a"], "/m", member_of("rigs-a", rigs))
    follow = serve_args(rigs["rigs-b"], "/m", member_of("rigs-b", rigs))
    assert "--headless" in follow and "--headless" not in lead
    for args in (lead, follow):
        assert args[args.index("--pipeline-parallel-size") + 1] == "2"
        assert args[args.index("--kv-cache-memory-bytes") + 1] == "268435456"


def lab_replica_rigs(monkeypatch, tmp_path) -> dict[str, Settings]:
    monkeypatch.setenv("RIGUP_LAB_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("RIGUP_LAB_SSH_PORT", "2310")
    monkeypatch.delenv("RIGUP_LAB_PAIR", raising=False)
    hosts, group = runpy.run_path(str(REPO / "inventory" / "lab_replicas.py"))["lab_replicas"]
    base = load_group_data()
    return {name: Settings({**copy.deepcopy(base), **group, **data}) for name, data in hosts}


def test_the_replicas_are_two_sound_rigs_alone_behind_the_router_on_a(monkeypatch, tmp_path):
    rigs = lab_replica_rigs(monkeypatch, tmp_path)
    assert list(rigs) == ["rigs-a", "rigs-b"]
    for name, data in rigs.items():
        assert validate(data) == [], name
        assert member_of(name, rigs) is None  # each serves alone
    assert [rigs[n]["router_enabled"] for n in rigs] == [True, False]
    assert rigs["rigs-a"]["router_host"] == "10.77.0.1"
    # the router's upstreams and the replicas' firewall, both from the inventory's addresses
    urls, problems = replica_urls(rigs.items())
    assert (urls, problems) == (["http://10.77.0.1:8000", "http://10.77.0.2:8000"], [])
    assert router_addresses("rigs-b", [("rigs-a", rigs["rigs-a"])]) == (["10.77.0.1"], [])


def test_one_rig_runs_the_pairs_engine_on_the_pairs_core(monkeypatch, tmp_path):
    """Like for like: one rig's decode is compared with the pair's (tests/lab)."""
    alone = lab_replica_rigs(monkeypatch, tmp_path)
    pair = lab_pair_rigs(monkeypatch, tmp_path)
    for name in alone:
        for key in (
            "vllm_env",
            "vllm_speculative_config",
            "vllm_tensor_parallel_size",
            "hf_endpoint",
        ):
            assert alone[name][key] == pair[name][key], (name, key)
        args = serve_args(alone[name], "/m")
        assert "--pipeline-parallel-size" not in args and "--headless" not in args
        # one rank per engine: vLLM's CPU build wants one core list per rank (its
        # VLLM_CPU_OMP_THREADS_BIND, one core here), else the engine refuses to start
        assert args[args.index("--tensor-parallel-size") + 1] == "1"
        assert len(alone[name]["vllm_env"]["VLLM_CPU_OMP_THREADS_BIND"].split("|")) == 1
        # the same KV tokens as the pair: each rig holds both stages' full-attention layers
        kv = args[args.index("--kv-cache-memory-bytes") + 1]
        pair_kv = serve_args(pair[name], "/m", member_of(name, pair))
        assert int(kv) == 2 * int(pair_kv[pair_kv.index("--kv-cache-memory-bytes") + 1])


def test_the_labs_key_file_is_vllms(settings):
    assert VLLM_KEY_FILE == VllmPaths.from_data(settings).api_key_file
