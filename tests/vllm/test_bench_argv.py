"""rigup-bench's command line for `vllm bench serve` (rigup/bench bench_argv), read by
the pinned vLLM's own benchmark parser: every option exists and means what rigup relies on.

    RIGUP_VLLM_PYTHON=/var/tmp/vllm-venv/bin/python .venv/bin/pytest tests/vllm   # a local venv
    RIGUP_VLLM_ON_LAB=1 .venv/bin/pytest tests/vllm    # the venv rigup deployed on the lab
"""

from __future__ import annotations

import json
import shlex
from subprocess import run

import pytest

from rigup import bench
from roles.doctor.config import doctor_config
from tests.conftest import load_group_data
from tests.vllm.test_pinned_vllm import ON_LAB, VLLM_PYTHON

pytestmark = pytest.mark.skipif(
    not VLLM_PYTHON,
    reason="no pinned vLLM to run: set RIGUP_VLLM_PYTHON, or RIGUP_VLLM_ON_LAB=1",
)

#: vLLM's benchmark parser, as `vllm bench serve` builds it (benchmarks/serve.py add_cli_args)
PARSE = """
import json, sys
from vllm.benchmarks.serve import add_cli_args
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser(prog="vllm bench serve")
add_cli_args(parser)
args = parser.parse_args(json.loads(sys.argv[1]))
out = {}
for k, v in vars(args).items():
    try:
        out[k] = json.loads(json.dumps(v))
    except (TypeError, ValueError):
        out[k] = repr(v)
print(json.dumps(out))
"""


def test_vllms_benchmark_parser_reads_rigups_command_line():
    cfg = doctor_config(load_group_data(), "/srv/rigup/models/x/r")
    argv = bench.bench_argv(
        cfg,
        bench.Shape(4, 512, 256, 16),
        seed=7,
        salt="rigup-bench-test",
        result_dir="/tmp/r",
        filename="result.json",
        label="users-4",
    )
    assert argv[2:4] == ["bench", "serve"]
    cmd = [VLLM_PYTHON, "-c", PARSE, json.dumps(argv[4:])]
    if ON_LAB:
        from lab.config import LabConfig
        from lab.machine import LabMachine

        p = LabMachine(LabConfig.from_env(), log=lambda _: None).ssh(
            shlex.join(cmd), check=False, timeout=300
        )
    else:
        p = run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    args = json.loads(p.stdout.strip().splitlines()[-1])
    assert (args["backend"], args["endpoint"], args["dataset_name"]) == (
        "openai",
        "/v1/completions",
        "random",
    )
    assert (args["random_input_len"], args["random_output_len"]) == (512, 256)
    assert (args["num_prompts"], args["max_concurrency"], args["seed"]) == (16, 4, 7)
    assert args["tokenizer"] == "/srv/rigup/models/x/r" and args["model"] == "qwen3.6-27b"
    assert args["percentile_metrics"] == "ttft,tpot,itl,e2el"
    assert args["ready_check_timeout_sec"] == 0 and args["ignore_eos"] is True
    assert args["extra_body"] == {"cache_salt": "rigup-bench-test"}
    assert args["save_result"] is True and args["result_filename"] == "result.json"
