"""Rendering of the vLLM service from the settings."""

import json
import shlex

import pytest

from roles.common.command_line import systemd_quote
from roles.model import placed_path
from roles.vllm.flags import exec_start, health_url, serve_args, service_env
from roles.vllm.paths import VllmPaths

MODEL = "/srv/rigup/models/qwen3.6-27b-int4-autoround/mirror-2026-11"


def test_seed_command_line(settings):
    args = serve_args(settings, MODEL)
    assert args[0] == MODEL == placed_path(settings, settings["model_llm_manifest"])
    pairs = dict(zip(args[1::2], args[2::2], strict=False))
    assert pairs["--tensor-parallel-size"] == "2"
    assert pairs["--kv-cache-dtype"] == "fp8_e5m2"
    assert pairs["--block-size"] == "16"
    assert pairs["--max-num-batched-tokens"] == "16384"
    assert pairs["--max-model-len"] == "262144"
    assert pairs["--host"] == "127.0.0.1" and pairs["--port"] == "8000"
    spec = args[args.index("--speculative-config") + 1]
    assert spec == '{"method":"mtp","num_speculative_tokens":3}'
    assert "--language-model-only" in args


def test_serving_defaults_qwen_users_expect(settings):
    args = serve_args(settings, MODEL)
    assert args[args.index("--reasoning-parser") + 1] == "qwen3"
    assert args[args.index("--tool-call-parser") + 1] == "qwen3_coder"
    assert "--enable-auto-tool-choice" in args
    assert args[args.index("--max-num-seqs") + 1] == "8"
    assert "--no-enable-prefix-caching" in args and "--enable-chunked-prefill" in args
    assert args[args.index("--long-prefill-token-threshold") + 1] == "2048"
    generation = json.loads(args[args.index("--override-generation-config") + 1])
    assert generation == {
        "temperature": 0.6, "top_p": 0.95, "top_k": 20, "min_p": 0.0, "repetition_penalty": 1.0,
        "max_new_tokens": 32768,  # a request without max_tokens stops there (vllm#30599)
    }  # fmt: skip
    assert "--api-key" not in args, "the key travels in the environment, never in argv"


def test_each_default_can_be_turned_off(settings):
    settings.update(
        vllm_reasoning_parser="",
        vllm_tool_call_parser="",
        vllm_long_prefill_token_threshold=0,
        vllm_override_generation_config={},
        vllm_speculative_config=None,
        vllm_enable_prefix_caching=True,
    )
    args = serve_args(settings, MODEL)
    for flag in (
        "--reasoning-parser",
        "--enable-auto-tool-choice",
        "--long-prefill-token-threshold",
        "--override-generation-config",
        "--speculative-config",
    ):
        assert flag not in args
    assert "--enable-prefix-caching" in args


def test_strip_method_has_no_language_model_only_flag(settings):
    settings["vllm_text_only_method"] = "strip_vision_config"
    assert "--language-model-only" not in serve_args(settings, MODEL)


def test_no_speculative_config_when_off(settings):
    settings["vllm_speculative_config"] = None
    assert "--speculative-config" not in serve_args(settings, MODEL)


def test_extra_args_come_last(settings):
    settings["vllm_extra_args"] = ["--enforce-eager"]
    assert serve_args(settings, MODEL)[-1] == "--enforce-eager"


def test_systemd_quoting_round_trips_through_a_shell_like_split():
    """systemd's ExecStart= splitting matches POSIX quoting for what rigup emits, once systemd's
    own specifier (%%) and variable ($$) escapes are undone."""
    tricky = ['{"method":"mtp","num_speculative_tokens":3}', "50%", "$HOME", 'a "b"', "back\\slash"]
    line = " ".join(systemd_quote(a) for a in tricky)
    undone = line.replace("%%", "%").replace("$$", "$")
    assert shlex.split(undone) == tricky
    assert "%%" in line and "$$HOME" in line


def test_plain_args_stay_unquoted():
    assert systemd_quote("--tensor-parallel-size") == "--tensor-parallel-size"
    assert systemd_quote("/opt/rigup/vllm/venv/bin/vllm") == "/opt/rigup/vllm/venv/bin/vllm"


def test_exec_start(settings):
    line = exec_start(VllmPaths.from_data(settings).venv, serve_args(settings, MODEL))
    assert line.startswith("/opt/rigup/vllm/venv/bin/vllm serve /srv/rigup/models/")
    assert '"{\\"method\\":\\"mtp\\",\\"num_speculative_tokens\\":3}"' in line
    assert line.endswith(" $RIGUP_VLLM_INTERCONNECT_ARGS")


def test_service_env_is_offline_and_local(settings):
    env = service_env(settings, "/var/lib/rigup/vllm")
    assert env["HF_HUB_OFFLINE"] == "1" and env["VLLM_NO_USAGE_STATS"] == "1"
    assert all(
        v.startswith("/var/lib/rigup/vllm")
        for k, v in env.items()
        if k.endswith(("_HOME", "_DIR", "_ROOT"))
    )
    settings["vllm_env"] = {"VLLM_LOGGING_LEVEL": "DEBUG", "HF_HUB_OFFLINE": "0"}
    env = service_env(settings, "/h")
    assert env["VLLM_LOGGING_LEVEL"] == "DEBUG" and env["HF_HUB_OFFLINE"] == "0"


def test_health_url_probes_loopback_for_wildcard_binds(settings):
    assert health_url(settings) == "http://127.0.0.1:8000/health"
    settings["vllm_host"] = "0.0.0.0"
    assert health_url(settings) == "http://127.0.0.1:8000/health"
    settings["vllm_host"] = "::1"
    assert health_url(settings) == "http://[::1]:8000/health"


def test_args_file_is_json_list(settings):
    assert json.loads(json.dumps(serve_args(settings, MODEL))) == serve_args(settings, MODEL)


# ---- the CPU build (vllm_device = "cpu") -------------------------------------------------------
def test_cpu_engine_leaves_out_what_it_cannot_run(settings):
    from roles.vllm import served_args

    settings["vllm_device"] = "cpu"
    args, notes, env = served_args(settings, MODEL, [0, 1])
    assert "--kv-cache-dtype" not in args and "--speculative-config" not in args
    assert args[args.index("--gpu-memory-utilization") + 1] == "0.05"
    assert args[args.index("--tensor-parallel-size") + 1] == "2"
    assert env == {"VLLM_CPU_OMP_THREADS_BIND": "0|1"}
    said = "\n".join(notes)
    assert "FP8 KV cache is only supported on x86 (AMX/VEC) ISA" in said
    assert "speculative decode not supported in CPU GDN attention" in said
    # everything else of the rig's line is served as it is
    rig = serve_args(settings, MODEL)
    spec = rig[rig.index("--speculative-config") + 1]
    left_out = {"--kv-cache-dtype", "fp8_e5m2", "--speculative-config", spec}
    expected = [("0.05" if a == "0.94" else a) for a in rig if a not in left_out]
    assert args == [*expected, "--enforce-eager"]
    assert "finalize_loading" in said


@pytest.mark.parametrize(
    "cpus,tp,bind",
    [([0, 1], 2, "0|1"), (list(range(8)), 2, "0-3|4-7"), ([0, 1, 2], 2, "0|1"), ([0], 2, None)],
)
def test_cpu_groups(cpus, tp, bind):
    from roles.vllm.cpu import cpu_groups

    assert cpu_groups(cpus, tp) == bind


def test_cpu_engine_with_fewer_cpus_than_workers_runs_one(settings):
    from roles.vllm import served_args

    settings["vllm_device"] = "cpu"
    args, notes, env = served_args(settings, MODEL, [0])
    assert args[args.index("--tensor-parallel-size") + 1] == "1" and env == {}
    assert any("fewer than 2" in n for n in notes)


def test_cpu_list_parsing():
    from roles.vllm.cpu import parse_cpu_list

    assert parse_cpu_list("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]


def test_cpu_unit_runs_vllms_own_cli_through_the_launcher(settings):
    from roles.vllm import service_spec

    settings["vllm_device"] = "cpu"
    spec = service_spec(settings, MODEL, [0, 1])
    words = shlex.split(spec.exec_start.replace("$$", "$"))
    assert words[:3] == [
        "/opt/rigup/vllm/venv/bin/python",
        "/opt/rigup/vllm/bin/vllm_cli.py",
        "serve",
    ]
    assert "$RIGUP_VLLM_INTERCONNECT_ARGS" not in spec.exec_start
    assert spec.requires == () and spec.optional_env_files[0][1].endswith("api-key.env")
    assert spec.env["VLLM_CPU_OMP_THREADS_BIND"] == "0|1"
    assert "VLLM_USE_FLASHINFER_SAMPLER" not in spec.env and "CUDA_HOME" not in spec.env


def test_a_cpu_binding_in_vllm_env_is_the_users_own(settings):
    """VLLM_CPU_OMP_THREADS_BIND set in vllm_env reaches the service as written: rigup's own
    binding (one group per tensor-parallel worker from the allowed CPUs) does not replace it."""
    from roles.vllm import served_args, service_spec

    settings["vllm_device"] = "cpu"
    settings["vllm_env"] = {"VLLM_CPU_OMP_THREADS_BIND": "98|99"}
    spec = service_spec(settings, MODEL, [0, 1])
    assert spec.env["VLLM_CPU_OMP_THREADS_BIND"] == "98|99"
    _, notes, env = served_args(settings, MODEL, [0, 1])
    assert env == {} and "CPU workers bound as vllm_env says (98|99)" in " ".join(notes)


def test_service_env_keeps_the_engines_own_sockets_on_loopback(settings):
    """Every address vLLM 0.22.1, gloo and NCCL pick for the engine's internal sockets is
    loopback, and torch.distributed's store binds it too (files/vllm/sitecustomize.py on the
    unit's PYTHONPATH), whatever address the API is served on."""
    settings["vllm_host"] = "0.0.0.0"
    env = service_env(settings, "/var/lib/rigup/vllm")
    assert env["VLLM_HOST_IP"] == env["VLLM_LOOPBACK_IP"] == "127.0.0.1"
    assert env["GLOO_SOCKET_IFNAME"] == env["NCCL_SOCKET_IFNAME"] == "lo"
    lib = VllmPaths.from_data(settings).lib
    assert env["PYTHONPATH"] == lib == "/opt/rigup/vllm/lib"
