"""The on-target checks (files/vllm/check_args.py, files/vllm/text_only_check.py) run with a
real vLLM venv's python against rigup's argv and the constructed checkpoint.

    RIGUP_VLLM_PYTHON=/var/tmp/vllm-venv/bin/python .venv/bin/pytest tests/vllm   # a local venv
    RIGUP_VLLM_ON_LAB=1 .venv/bin/pytest tests/vllm    # the venv rigup deployed on the lab machine

The lab scenario (tests/lab/test_scenario.py) runs the second form after converging the lab, so CI
proves these facts with the vLLM venv rigup itself built on a Debian 13 host.

Every script run imports vLLM (~10 s), so the runs start together in a small pool when the
module's first test asks for them. No GPU is needed (see the scripts' docstrings).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from lab.checkpoint import build_checkpoint
from rigup.nvidia import interconnect_env
from tests.vllm.forkserver import Job, run_all

REPO = Path(__file__).resolve().parents[2]
CHECK_ARGS = REPO / "files" / "vllm" / "check_args.py"
TEXT_ONLY = REPO / "files" / "vllm" / "text_only_check.py"
SHARED = REPO / "files" / "vllm" / "vllm_offline.py"
NAMES = REPO / "files" / "vllm" / "vllm_names.py"
ON_LAB = os.environ.get("RIGUP_VLLM_ON_LAB") == "1"
#: the venv rigup deploys (roles/common/paths.py, default settings)
LAB_PYTHON = "/opt/rigup/vllm/venv/bin/python"
VLLM_PYTHON = LAB_PYTHON if ON_LAB else os.environ.get("RIGUP_VLLM_PYTHON", "")

pytestmark = pytest.mark.skipif(
    not VLLM_PYTHON,
    reason="no pinned vLLM to run: set RIGUP_VLLM_PYTHON to a python with it (e.g. "
    "/var/tmp/vllm-venv/bin/python), or RIGUP_VLLM_ON_LAB=1 for a converged lab machine",
)

SPEC = '{"method":"mtp","num_speculative_tokens":3}'
SEED = [
    "/srv/models/x",
    "--served-model-name", "qwen3.6-27b",
    "--tensor-parallel-size", "2",
    "--kv-cache-dtype", "fp8_e5m2",
    "--block-size", "16",
    "--max-num-batched-tokens", "16384",
    "--speculative-config", SPEC,
    "--max-model-len", "262144",
    "--host", "127.0.0.1",
    "--port", "8000",
    "--language-model-only",
    "--gpu-memory-utilization", "0.92",
]  # fmt: skip


# vLLM's own hybrid block-size alignment (docs/text-only.md) on the constructed config, TP=2:
# prints {"kv/mtp/user_block": resulting block_size}. Private API of the pinned version.
BLOCK_SIZE_PROBE = """
import json, sys, types
from vllm import platforms
if platforms.current_platform.is_unspecified():
    from vllm.platforms.cpu import CpuPlatform
    platforms.current_platform = CpuPlatform()
from vllm.config import CacheConfig, ParallelConfig
from vllm.engine.arg_utils import EngineArgs
from vllm.model_executor.models.config import Qwen3_5ForConditionalGenerationConfig
from vllm.platforms.interface import Platform
from vllm.v1.attention.backends.triton_attn import TritonAttentionBackend
model_config = EngineArgs(model=sys.argv[1], language_model_only=True).create_model_config()
out = {}
for kv, mtp, block in [("auto", 0, 16), ("auto", 3, 16), ("fp8_e5m2", 0, 16),
                       ("fp8_e5m2", 3, 16), ("fp8_e5m2", 3, 1024), ("fp8_e5m2", 3, 2048)]:
    cache = CacheConfig(block_size=block, cache_dtype=kv)
    vllm_config = types.SimpleNamespace(
        model_config=model_config, cache_config=cache,
        parallel_config=ParallelConfig(tensor_parallel_size=2),
        speculative_config=types.SimpleNamespace(num_speculative_tokens=mtp) if mtp else None)
    Qwen3_5ForConditionalGenerationConfig.verify_and_update_config(vllm_config)
    Platform._align_hybrid_block_size(vllm_config, TritonAttentionBackend)
    out[f"{kv}/{mtp}/{block}"] = cache.block_size
sys.stdout.write(json.dumps(out) + "\\n")
"""


def _replace(argv: list[str], flag: str, value: str) -> list[str]:
    out = list(argv)
    out[out.index(flag) + 1] = value
    return out


def pinned_version() -> str:
    """The vLLM pin of files/vllm/requirements.in (``vllm==X.Y.Z``)."""
    text = (REPO / "files" / "vllm" / "requirements.in").read_text()
    match = re.search(r"^vllm==(\S+)", text, re.MULTILINE)
    assert match, "no vllm== pin in files/vllm/requirements.in"
    return match[1]


@dataclass
class Run:
    rc: int
    out: str
    err: str

    @property
    def result(self) -> dict:
        lines = self.out.splitlines()
        assert len(lines) == 1, f"expected one JSON line on stdout, got: {self.out!r}"
        return json.loads(lines[0])

    @property
    def fail_line(self) -> str:
        return next((line for line in self.err.splitlines() if ": FAIL: " in line), "")


def _strip(config: dict) -> dict:
    try:
        from roles.model.patch import strip_vision_config
    except ImportError:  # rigup's own edit when present, else the same edit
        return {k: v for k, v in config.items() if k != "vision_config"}
    return strip_vision_config(config)


def _rigup_argv(settings: dict, model: Path) -> list[str]:
    from roles.vllm.flags import serve_args

    return serve_args(settings, str(model))


#: extra flags (vllm_extra_args) and whether vLLM's parser, given rigup's managed flags, must
#: refuse them (files/vllm/check_args.py --managed): every spelling of a managed flag is refused
MANAGED_CASES = {
    "managed_abbreviation": (["--hos", "0.0.0.0"], "--hos sets --host (host), which vllm_host"),
    "managed_alias": (["-tp", "1"], "-tp sets --tensor-parallel-size (tensor_parallel_size)"),
    "managed_underscore": (["--max_model_len", "4096"], "--max_model_len sets --max-model-len"),
    "managed_equals": (["--port=9"], "--port sets --port (port), which vllm_port decides"),
    "managed_json_key": (
        ["--speculative-config.num_speculative_tokens", "1"],
        "--speculative-config.num_speculative_tokens sets --speculative-config",
    ),
    "unmanaged_abbreviation": (["--enforce-eag"], "--enforce-eag is taken only as an abbreviation"),
    "unmanaged_ok": (["--enforce-eager", "--max-logprobs", "5"], None),
}


#: names vLLM 0.22.1 resolves only at start, set through rigup's settings (overrides) or
#: vllm_extra_args, and the problem lines check_args.py --managed must print (None: accepted).
#: vllm_names.py reads the valid names from the pinned vLLM's registries.
NAME_CASES: dict[str, tuple[dict, list[str], list[str] | None]] = {
    "names_parsers": (
        {"vllm_reasoning_parser": "qwen4", "vllm_tool_call_parser": "qwen3coder"},
        [],
        [
            "vllm_reasoning_parser: 'qwen4' is not a reasoning parser of this vLLM (did you mean qwen3",
            "vllm_tool_call_parser: 'qwen3coder' is not a tool-call parser of this vLLM (did you "
            "mean qwen3_coder",
        ],
    ),
    "names_extra": (
        {},
        [
            "--chat-template",
            "chatml",
            "--quantization",
            "autoround",
            "--load-format",
            "safetensor",
            "--model-impl",
            "transformer",
        ],
        [
            "vllm_extra_args: --chat-template: 'chatml' is not a chat template file or built-in "
            "chat template of this vLLM (did you mean template_chatml.jinja",
            "vllm_extra_args: --quantization: 'autoround' is not a quantization method",
            "vllm_extra_args: --load-format: 'safetensor' is not a load format of this vLLM (did "
            "you mean safetensors",
            "vllm_extra_args: --model-impl: 'transformer' is not a model implementation of this "
            "vLLM (did you mean transformers",
        ],
    ),
    "names_speculative_method": (
        {"vllm_speculative_config": {"method": "mpt", "num_speculative_tokens": 3}},
        [],
        [
            "vllm_speculative_config: method: 'mpt' is not a speculative method of this vLLM (did you mean mtp"
        ],
    ),
    "names_kv_cache_dtype": (
        {"vllm_kv_cache_dtype": "fp8_e5m3"},
        [],
        ["vllm_kv_cache_dtype: invalid choice 'fp8_e5m3' (did you mean fp8_e5m2"],
    ),
    "names_valid": (
        {"vllm_reasoning_parser": "qwen3", "vllm_tool_call_parser": "qwen3_coder"},
        [
            "--chat-template",
            "template_chatml.jinja",
            "--quantization",
            "inc",
            "--load-format",
            "safetensors",
            "--tokenizer-mode",
            "hf",
            "--mamba-backend",
            "TRITON",  # vLLM upper-cases it: MambaBackendEnum[name.upper()]
            "--model-impl",
            "vllm",
            "--config-format",
            "hf",
        ],
        None,
    ),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Run]:
    tmp = tmp_path_factory.mktemp("pinned-vllm")
    scripts = {}
    for src in (CHECK_ARGS, TEXT_ONLY, SHARED, NAMES):
        scripts[src] = tmp / src.name
        shutil.copy2(src, scripts[src])
    ckpt = build_checkpoint(tmp / "ckpt")
    stripped = tmp / "ckpt-stripped"
    shutil.copytree(ckpt, stripped)
    config = json.loads((stripped / "config.json").read_text())
    (stripped / "config.json").write_text(json.dumps(_strip(config), indent=2))

    argvs = {
        "seed": SEED,
        "seed_with_model": [str(ckpt), *SEED[1:]],
        "typo": [a.replace("--kv-cache-dtype", "--kv-cache-dtpye") for a in SEED],
        "removed_flag": [*SEED, "--disable-log-requests"],
        "bad_spec_json": _replace(
            SEED, "--speculative-config", "{method:mtp,num_speculative_tokens:3}"
        ),
        "bad_spec_key": _replace(
            SEED, "--speculative-config", '{"method":"mtp","num_spec_tokens":3}'
        ),
        "bad_kv_dtype": _replace(SEED, "--kv-cache-dtype", "fp8_e5m3"),
        "bad_gpu_util": _replace(SEED, "--gpu-memory-utilization", "1.5"),
        # What rigup-nvlink adds when the interconnect is not verified (rigup/nvidia)
        "interconnect_fallback": [*SEED, *interconnect_env(None)[1]],
    }
    from tests.conftest import load_group_data

    for method in ("language_model_only", "strip_vision_config"):
        settings = load_group_data() | {"vllm_text_only_method": method}
        argvs[f"rigup_{method}"] = _rigup_argv(
            settings, ckpt if method == "language_model_only" else stripped
        )
    from roles.vllm.settings import ALIASES, MANAGED

    rigup = argvs["rigup_language_model_only"]
    argvs["rigup_max_model_len_over_the_model"] = _replace(rigup, "--max-model-len", "5000000")
    managed_file = tmp / "managed.json"
    managed_file.write_text(
        json.dumps({"extra_start": len(rigup), "managed": MANAGED, "aliases": ALIASES})
    )
    for name, (extra, _) in MANAGED_CASES.items():
        argvs[name] = [*rigup, *extra]
    for name, (overrides, extra, _) in NAME_CASES.items():
        settings = load_group_data() | {"vllm_extra_args": extra} | overrides
        argvs[name] = _rigup_argv(settings, ckpt)
        (tmp / f"{name}.managed.json").write_text(
            json.dumps({"extra_start": len(argvs[name]) - len(extra), "managed": MANAGED})
        )

    commands: dict[str, list[str]] = {}
    for name, argv in argvs.items():
        path = tmp / f"{name}.json"
        path.write_text(json.dumps(argv))
        extra = ["--with-model"] if name.startswith(("seed_with_model", "rigup_")) else []
        if name in MANAGED_CASES:
            extra = ["--managed", str(managed_file)]
        if name in NAME_CASES:
            extra = ["--managed", str(tmp / f"{name}.managed.json")]
        commands[name] = [VLLM_PYTHON, str(scripts[CHECK_ARGS]), str(path), *extra]
    for name, model, method in (
        ("text_only_lmo", ckpt, "language_model_only"),
        ("text_only_strip", stripped, "strip_vision_config"),
        ("text_only_strip_plus_lmo", stripped, "language_model_only"),
    ):
        commands[name] = [VLLM_PYTHON, str(scripts[TEXT_ONLY]), str(model), "--method", method]

    commands["block_size_probe"] = [VLLM_PYTHON, "-c", BLOCK_SIZE_PROBE, str(ckpt)]

    # The model-free argvs name paths that do not exist here. With HF_HUB_OFFLINE=1 (as the
    # rig's service env sets it) vLLM resolves the model offline, which fails for a missing
    # path: that case has its own run; the other model-free runs go with the Hub mode off
    # (nothing is fetched). Runs on real directories inherit the caller's environment.
    commands["offline_missing"] = [*commands["seed"]]
    model_free = {name for name, argv in argvs.items() if argv[0] == SEED[0]}
    env_for = {name: os.environ | {"HF_HUB_OFFLINE": "0"} for name in model_free}
    env_for["offline_missing"] = os.environ | {"HF_HUB_OFFLINE": "1"}

    if ON_LAB:
        from lab.config import LabConfig
        from lab.machine import LabMachine

        machine = LabMachine(LabConfig.from_env(), log=lambda _: None)
        machine.ssh(f"mkdir -p {shlex.quote(str(tmp))}")
        machine.push(tmp, str(tmp))  # same paths inside the machine

    def go(name: str, cmd: list[str]) -> Run:
        env = env_for.get(name, os.environ)
        offline = shlex.quote(env.get("HF_HUB_OFFLINE", ""))
        line = f"cd {shlex.quote(str(tmp))} && HF_HUB_OFFLINE={offline} {shlex.join(cmd)}"
        p = machine.ssh(line, check=False, timeout=600)
        return Run(p.returncode, p.stdout, p.stderr)

    workers = max(1, min(4, os.cpu_count() or 1))
    if not ON_LAB:  # vLLM imported once per environment, each run a fork (tests/vllm/forkserver.py)
        jobs = {
            name: Job(
                tuple(cmd[1:]), str(tmp), tuple(sorted(env_for.get(name, os.environ).items()))
            )
            for name, cmd in commands.items()
        }
        return {name: Run(*r) for name, r in run_all(VLLM_PYTHON, jobs, workers).items()}
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {name: pool.submit(go, name, cmd) for name, cmd in commands.items()}
        return {name: f.result() for name, f in futures.items()}


# ---- check_args.py ---------------------------------------------------------------------------
def test_seed_argv_passes(runs):
    r = runs["seed"]
    assert r.rc == 0, r.err[-2000:]
    res = r.result
    assert res["ok"] is True
    assert res["vllm_version"] == pinned_version()
    args = res["args"]
    assert args["model"] == "/srv/models/x"
    assert args["served_model_name"] == ["qwen3.6-27b"]
    assert args["tensor_parallel_size"] == 2
    assert args["kv_cache_dtype"] == "fp8_e5m2"
    assert args["block_size"] == 16
    assert args["max_num_batched_tokens"] == 16384
    assert args["speculative_config"] == json.loads(SPEC)
    assert args["max_model_len"] == 262144
    assert (args["host"], args["port"]) == ("127.0.0.1", 8000)
    assert args["language_model_only"] is True
    assert args["gpu_memory_utilization"] == 0.92
    assert "AsyncEngineArgs.from_cli_args" in res["checks"]
    assert res["warnings"] == []


def test_seed_argv_against_the_constructed_checkpoint(runs):
    r = runs["seed_with_model"]
    assert r.rc == 0, r.err[-2000:]
    model = r.result["model"]
    assert model["architecture"] == "Qwen3_5ForConditionalGeneration"
    assert model["quantization"] == "inc"  # vLLM's name for AutoRound ("auto-round")
    assert model["is_hybrid"] is True
    assert model["max_model_len"] == 262144
    assert model["speculative"] == {
        "method": "mtp",
        "num_speculative_tokens": 3,
        "draft_architecture": "Qwen3_5MTP",
    }


@pytest.mark.parametrize("name", ["rigup_language_model_only", "rigup_strip_vision_config"])
def test_rigup_serve_args_pass(runs, name):
    r = runs[name]
    assert r.rc == 0, r.err[-2000:]
    assert r.result["ok"] is True


def test_max_model_len_beyond_the_model_is_refused_with_the_model(runs):
    """vllm_max_model_len = 5000000 against a checkpoint of 262144 positions: vLLM's own model
    config refuses it before the unit changes (the deploy's check runs --with-model)."""
    error = _failed(runs["rigup_max_model_len_over_the_model"])
    assert "create_model_config" in error and "5000000" in error, error


@pytest.mark.parametrize("name", sorted(MANAGED_CASES))
def test_extra_flags_may_not_set_managed_values(runs, name):
    fragment = MANAGED_CASES[name][1]
    r = runs[name]
    if fragment is None:
        assert r.rc == 0, r.err[-2000:]
        assert "managed flags" in r.result["checks"]
        return
    error = _failed(r)
    assert error.startswith("vllm_extra_args: ") and fragment in error, error


def test_interconnect_fallback_flag_is_accepted(runs):
    """Without a verified NVLink the unit appends --disable-custom-all-reduce
    ($RIGUP_VLLM_INTERCONNECT_ARGS): vLLM 0.22.1's parser must take it."""
    r = runs["interconnect_fallback"]
    assert r.rc == 0, r.err[-2000:]
    assert r.result["args"]["disable_custom_all_reduce"] is True


def _failed(r: Run) -> str:
    assert r.rc == 1, r.err[-2000:]
    res = r.result
    assert res["ok"] is False
    assert res["error"] in r.fail_line
    return res["error"]


def test_offline_with_missing_model_path_fails_with_a_hint(runs):
    error = _failed(runs["offline_missing"])
    assert error.startswith("model path /srv/models/x does not exist; with HF_HUB_OFFLINE=1")


def test_misspelled_flag_fails_naming_it(runs):
    error = _failed(runs["typo"])
    assert "unrecognized arguments" in error and "--kv-cache-dtpye" in error


def test_removed_flag_fails_naming_it(runs):
    error = _failed(runs["removed_flag"])
    assert "unrecognized arguments: --disable-log-requests" in error


def test_bad_speculative_json_fails(runs):
    error = _failed(runs["bad_spec_json"])
    assert "--speculative-config" in error and "invalid JSON" in error


def test_unknown_speculative_key_fails(runs):
    error = _failed(runs["bad_spec_key"])
    assert "--speculative-config" in error and "'num_spec_tokens'" in error


def test_invalid_kv_cache_dtype_lists_the_choices(runs):
    error = _failed(runs["bad_kv_dtype"])
    assert error.startswith("--kv-cache-dtype: invalid choice 'fp8_e5m3' (did you mean fp8_e5m2")
    choices = error.split("; valid: ", 1)[1].split(", ")
    assert "fp8_e5m2" in choices and "auto" in choices, error


@pytest.mark.parametrize("name", sorted(NAME_CASES))
def test_names_resolved_at_start_are_checked_naming_the_setting(runs, name):
    """Every name vLLM looks up only at start is checked against its registry, each failure in
    one run, naming the rigup setting (or vllm_extra_args and the flag) and the closest names."""
    expected = NAME_CASES[name][2]
    r = runs[name]
    if expected is None:
        assert r.rc == 0, r.err[-2000:]
        assert "names vLLM resolves at start" in r.result["checks"]
        return
    error = _failed(r)
    for fragment in expected:
        assert fragment in error, error
    assert error.count(" is not a ") + error.count(": invalid choice ") == len(expected), error


def test_out_of_range_value_fails_naming_the_flag(runs):
    error = _failed(runs["bad_gpu_util"])
    assert error.startswith("--gpu-memory-utilization:")


# ---- text_only_check.py ----------------------------------------------------------------------
def test_language_model_only_is_text_only(runs):
    r = runs["text_only_lmo"]
    assert r.rc == 0, r.err[-2000:]
    res = r.result
    assert res["text_only"] is True
    assert res["api"] == "EngineArgs.create_model_config"
    assert res["hf_config_class"] == "Qwen3_5Config"
    assert res["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    assert res["vision_config_present_in_file"] is True
    assert res["vision_config_after_vllm_load"]["out_hidden_size"] == 5120
    assert res["vision_config_after_vllm_load"]["matches_file"] is True
    assert res["text_hidden_size"] == 5120
    assert res["mm_limits"] == {"image": 0, "video": 0}
    assert res["accepts_multimodal_inputs"] is False
    assert res["vision_tower_skipped"] is True
    q = res["quantization"]
    assert (q["recognized"], q["in_file"], q["vllm_method"]) == (True, "auto-round", "inc")
    assert (q["weight_bits"], q["group_size"], q["sym"]) == (4, 128, True)


def test_stripped_vision_config_is_not_text_only(runs):
    """The seed's edit on vLLM 0.22.1: Qwen3_5Config re-creates a default vision_config whose
    out_hidden_size (3584) does not match the 27B's hidden size (5120), no text-only Qwen3.5
    architecture exists, and without --language-model-only vLLM builds the vision tower and
    accepts images."""
    r = runs["text_only_strip"]
    assert r.rc == 1, r.err[-2000:]
    res = r.result
    assert res["text_only"] is False
    assert res["vision_config_present_in_file"] is False
    vision = res["vision_config_after_vllm_load"]
    assert vision["out_hidden_size"] == 3584 and vision["equals_class_defaults"] is True
    assert res["text_hidden_size"] == 5120
    assert res["registered_causal_lm"] == {"Qwen3_5ForCausalLM": False}
    assert res["multimodal_model"] is True
    assert res["accepts_multimodal_inputs"] is True
    assert res["vision_tower_skipped"] is False
    assert all(n > 0 for n in res["mm_limits"].values())


def test_stripped_config_plus_flag_is_text_only(runs):
    """With --language-model-only the strip changes nothing: the (default-shaped) vision
    tower is skipped either way."""
    res = runs["text_only_strip_plus_lmo"].result
    assert res["text_only"] is True
    assert res["vision_config_after_vllm_load"]["out_hidden_size"] == 3584


# ---- --block-size on a hybrid model (docs/text-only.md) -------------------------------------
def test_block_size_16_is_raised_for_the_hybrid_model(runs):
    r = runs["block_size_probe"]
    assert r.rc == 0, r.err[-3000:]
    sizes = json.loads(r.out.strip().splitlines()[-1])
    assert sizes == {
        "auto/0/16": 784,  # bf16 KV, no MTP: the value 2x3090 owners see in their logs
        "auto/3/16": 800,
        "fp8_e5m2/0/16": 1568,
        "fp8_e5m2/3/16": 1600,  # rigup's seed flags
        "fp8_e5m2/3/1024": 2048,  # too small: next multiple of the user's value
        "fp8_e5m2/3/2048": 2048,  # large enough: kept
    }
