"""The answer length rigup sets for requests without max_tokens (vllm_override_generation_config's
max_new_tokens, vllm#30599), checked with the pinned vLLM: rigup's rendered arguments, parsed by
vLLM's own parser and built into its ModelConfig against the constructed checkpoint, give the
default max_tokens, and the serving layer's get_max_tokens caps a request at it
(docs/serving.md, "What clients meet")."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess

import pytest

from lab.checkpoint import build_checkpoint
from roles.vllm.flags import serve_args
from tests.conftest import load_group_data
from tests.vllm.test_pinned_vllm import CHECK_ARGS, NAMES, ON_LAB, SHARED, VLLM_PYTHON

pytestmark = pytest.mark.skipif(
    not VLLM_PYTHON,
    reason="no pinned vLLM to run: set RIGUP_VLLM_PYTHON, or RIGUP_VLLM_ON_LAB=1",
)

#: argv JSON file -> what vLLM makes of it. The override_max_tokens line is the expression of
#: OpenAIServingChat/OpenAIServingCompletion.__init__ (vLLM 0.22.1) for generation_config "auto".
PROBE = """
import json, sys
sys.path.insert(0, sys.argv[2])
import check_args
from vllm_offline import ensure_platform
ensure_platform()
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.entrypoints.utils import get_max_tokens
top, serve, command = check_args.build_parser()
ns = top.parse_args(["serve", *json.load(open(sys.argv[1]))])
ns.model = ns.model_tag or ns.model
mc = AsyncEngineArgs.from_cli_args(ns).create_model_config()
defaults = mc.get_diff_sampling_param()
override = mc.override_generation_config.get("max_new_tokens")
out = {"generation_config": mc.generation_config, "defaults": defaults}
for name, asked in (("absent", None), ("more", 200000), ("less", 50)):
    out[name] = get_max_tokens(mc.max_model_len, asked, 100, defaults, override)
sys.stdout.write(json.dumps(out) + "\\n")
"""


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("generation")
    for src in (CHECK_ARGS, NAMES, SHARED):
        shutil.copy2(src, tmp / src.name)
    ckpt = build_checkpoint(tmp / "ckpt")
    (tmp / "argv.json").write_text(json.dumps(serve_args(load_group_data(), str(ckpt))))
    command = [VLLM_PYTHON, "-c", PROBE, str(tmp / "argv.json"), str(tmp)]
    if ON_LAB:
        from lab.config import LabConfig
        from lab.machine import LabMachine

        machine = LabMachine(LabConfig.from_env(), log=lambda _: None)
        machine.ssh(f"mkdir -p {shlex.quote(str(tmp))}")
        machine.push(tmp, str(tmp))
        p = machine.ssh(shlex.join(command), check=False, timeout=900)
    else:
        p = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=tmp)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_max_new_tokens_is_the_default_max_tokens(probe):
    expected = load_group_data()["vllm_override_generation_config"]["max_new_tokens"]
    assert probe["generation_config"] == "auto"
    assert probe["defaults"]["max_tokens"] == expected
    assert "max_new_tokens" not in probe["defaults"]
    assert probe["absent"] == expected  # not 262144 - 100


def test_max_new_tokens_caps_a_request_and_a_smaller_one_stands(probe):
    expected = load_group_data()["vllm_override_generation_config"]["max_new_tokens"]
    assert probe["more"] == expected
    assert probe["less"] == 50
