"""Each rank's `vllm serve` line of a cluster of rigs (inventory/rigs.py), checked by the pinned
vLLM's own parser, argument validation, engine arguments and model config
(files/vllm/check_args.py, as the deploy runs it before the unit changes), against the
constructed checkpoint; and the multi-node flags refused in vllm_extra_args under vLLM's other
spellings.

    RIGUP_VLLM_PYTHON=/var/tmp/vllm-venv/bin/python .venv/bin/pytest tests/vllm/test_cluster_argv.py
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from lab.checkpoint import build_checkpoint
from roles.cluster.group import member_of
from roles.vllm import served_args
from roles.vllm.settings import ALIASES, MANAGED
from tests.unit.test_cluster_group import example_rigs
from tests.vllm.forkserver import Job, run_all
from tests.vllm.test_pinned_vllm import CHECK_ARGS, NAMES, SHARED, VLLM_PYTHON, Run

pytestmark = pytest.mark.skipif(
    not VLLM_PYTHON or os.environ.get("RIGUP_VLLM_ON_LAB") == "1",
    reason="no local pinned vLLM to run: set RIGUP_VLLM_PYTHON to a python with it",
)

#: extra flags that would set a multi-node value under another spelling -> the flag named
EXTRA = {
    "extra_nnodes": (["--nnodes", "3"], "--nnodes"),
    "extra_node_rank_short": (["-r", "1"], "--node-rank"),
    "extra_pp_short": (["-pp", "4"], "--pipeline-parallel-size"),
    "extra_headless": (["--headless"], "--headless"),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Run]:
    tmp = tmp_path_factory.mktemp("cluster-vllm")
    for src in (CHECK_ARGS, SHARED, NAMES):
        shutil.copy2(src, tmp / src.name)
    ckpt = str(build_checkpoint(tmp / "ckpt"))
    rigs = example_rigs()
    commands = {}
    for name, rank in (("rig-a.local", "leader"), ("rig-b.local", "follower")):
        argv, _, _ = served_args(rigs[name], ckpt, [0, 1], member_of(name, rigs))
        (tmp / f"{rank}.json").write_text(json.dumps(argv))
        managed = {"extra_start": len(argv), "managed": MANAGED, "aliases": ALIASES}
        (tmp / f"{rank}.managed.json").write_text(json.dumps(managed))
        commands[rank] = [
            VLLM_PYTHON, str(tmp / CHECK_ARGS.name), str(tmp / f"{rank}.json"), "--with-model",
            "--managed", str(tmp / f"{rank}.managed.json"),
        ]  # fmt: skip
        if rank == "follower":
            for case, (extra, _) in EXTRA.items():
                (tmp / f"{case}.json").write_text(json.dumps([*argv, *extra]))
                commands[case] = [
                    VLLM_PYTHON, str(tmp / CHECK_ARGS.name), str(tmp / f"{case}.json"),
                    "--managed", str(tmp / f"{rank}.managed.json"),
                ]  # fmt: skip

    env = tuple(sorted(os.environ.items()))
    jobs = {name: Job(tuple(cmd[1:]), str(tmp), env) for name, cmd in commands.items()}
    return {name: Run(*r) for name, r in run_all(VLLM_PYTHON, jobs, workers=2).items()}


@pytest.mark.parametrize("rank", ["leader", "follower"])
def test_each_ranks_line_passes_vllms_own_checks(runs, rank):
    r = runs[rank]
    assert r.rc == 0, r.err[-2000:]
    assert r.result["ok"] is True


@pytest.mark.parametrize("case", sorted(EXTRA))
def test_extra_args_may_not_set_the_multi_node_flags(runs, case):
    r = runs[case]
    assert r.rc == 1, r.err[-2000:]
    error = r.result["error"]
    assert error.startswith("vllm_extra_args: ") and EXTRA[case][1] in error, error
