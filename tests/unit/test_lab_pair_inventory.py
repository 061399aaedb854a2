"""The lab pair's group inventory (inventory/lab_rigs.py): one sound cluster by the rules every
group inventory meets, its rigs on the pair's link (lab/pairnet.py), the follower headless."""

from __future__ import annotations

import copy
import runpy

from roles.cluster.group import group_problems, member_of
from roles.settings import validate
from roles.vllm.flags import serve_args
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
