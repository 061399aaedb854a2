"""The voxcpm role's pure parts: paths, server arguments, environment, start decision,
the CPython fact and install environment, its settings rules, the manifest and the lab script."""

from __future__ import annotations

import shlex
import subprocess
import tomllib

import pytest

from lab.voxcpm_lab import LAB_PYTHON_VERSION, PYTHON_DOWNLOADS_JSON, python_mirror_script
from roles.common.service import is_loopback
from roles.model import placed_path
from roles.model.manifest import MANIFEST_DIR as MANIFESTS
from roles.settings import validate
from roles.voxcpm.paths import VoxcpmPaths
from roles.voxcpm.python import PythonVersion, python_install_env
from roles.voxcpm.service import (
    exec_start,
    probe_url,
    server_args,
    service_env,
    start_decision,
)

MODEL = "/srv/rigup/models/voxcpm2/unverified-2026-11"


def test_paths_follow_the_settings_and_the_manifest(settings):
    p = VoxcpmPaths.from_data(settings)
    assert placed_path(settings, settings["voxcpm_model_manifest"]) == MODEL
    assert p.python == "/opt/rigup/voxcpm/venv/bin/python"
    assert p.env_file == "/etc/rigup/voxcpm/voxcpm.env"
    assert p.voices == "/var/lib/rigup/voxcpm/voices"
    assert p.interpreter("3.12.16", "x86_64") == (
        "/opt/rigup/python/cpython-3.12.16-linux-x86_64-gnu/bin/python3.12"
    )


def test_server_args_and_exec_start(settings):
    p = VoxcpmPaths.from_data(settings)
    args = server_args(settings, p, MODEL)
    pairs = dict(zip(args[::2], args[1::2], strict=False))
    assert pairs["--model-dir"] == MODEL and pairs["--host"] == "127.0.0.1"
    assert pairs["--port"] == "8100" and pairs["--device"] == "cuda"
    assert "--synthesizer" not in args and "--no-optimize" not in args
    assert "--voice-alias" not in args  # voxcpm_voice_aliases = {}: OpenAI's names speak "default"
    settings.update(voxcpm_voice_aliases={"onyx": "default", "alloy": "narrator"})
    args = server_args(settings, p, MODEL)
    i = args.index("--voice-alias")
    assert args[i : i + 4] == ["--voice-alias", "alloy=narrator", "--voice-alias", "onyx=default"]
    settings.update(voxcpm_test_double_synthesizer=True, voxcpm_torch_compile=False)
    args = server_args(settings, p, MODEL)
    assert args[-3:] == ["--no-optimize", "--synthesizer", "test-double"]
    line = exec_start(p, args)
    assert shlex.split(line)[:2] == [p.python, p.server] and "test-double" in line


def test_service_env_is_offline_on_the_chosen_gpu(settings):
    env = service_env(settings, VoxcpmPaths.from_data(settings))
    assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1"
    assert env["CUDA_VISIBLE_DEVICES"] == str(settings["voxcpm_gpu_index"])
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert all(v.startswith("/var/lib/rigup/voxcpm") for k, v in env.items() if k.endswith("DIR"))


def test_probe_url_reaches_a_wildcard_bind_over_loopback(settings):
    assert probe_url(settings) == "http://127.0.0.1:8100/ready"
    settings["voxcpm_host"] = "::"
    assert probe_url(settings, "/health") == "http://127.0.0.1:8100/health"
    settings["voxcpm_host"] = "::1"
    assert probe_url(settings) == "http://[::1]:8100/ready"


@pytest.mark.parametrize(
    "blocker,double,runs",
    [(None, False, True), ("no driver", False, False), ("no driver", True, True)],
)
def test_start_decision(settings, blocker, double, runs):
    settings.update(voxcpm_test_double_synthesizer=double)
    why = start_decision(settings, blocker)
    assert (why is None) == runs
    if not runs:
        assert why == blocker


def test_python_version_fact_parses_captured_output():
    fact = PythonVersion()
    assert fact.process(["3.12.16"]) == "3.12.16"
    assert fact.process([]) is None
    assert fact.process(["Traceback (most recent call last):"]) is None


def test_python_install_env():
    base = python_install_env("/opt/rigup/python")
    assert base == "UV_PYTHON_INSTALL_DIR=/opt/rigup/python UV_PYTHON_DOWNLOADS=manual"
    mirrored = python_install_env("/opt/rigup/python", "file:///mnt/nas/pbs", "/srv/l.json")
    assert "UV_PYTHON_INSTALL_MIRROR=file:///mnt/nas/pbs" in mirrored
    assert "UV_PYTHON_DOWNLOADS_JSON_URL=/srv/l.json" in mirrored


@pytest.mark.parametrize(
    "key,value,message",
    [
        ("voxcpm_python_version", "3.14.0", "3.11.x-3.12.x"),
        ("voxcpm_python_version", "3.12", "3.11.x-3.12.x"),
        ("voxcpm_python_version", "3.10.19", "needs 3.11 or later: fastapi 0.165.0 and av"),
        ("voxcpm_voice_aliases", ["alloy"], "must be a dict of OpenAI voice name -> voice"),
        ("voxcpm_voice_aliases", {"aloy": "default"}, "'aloy' is not one of OpenAI's voice names"),
        ("voxcpm_voice_aliases", {"alloy": "my voice"}, "'alloy' maps to 'my voice': give"),
        ("voxcpm_voice_aliases", {"alloy": 1}, "'alloy' maps to 1"),
        ("voxcpm_python_install_mirror", "ftp://nas/pbs", "http(s):// or file:// URL"),
        ("voxcpm_python_downloads_json", "relative/list.json", "absolute path"),
        ("voxcpm_test_double_synthesizer", "yes", "True or False"),
        ("voxcpm_vram_gib", 0, "must be in (0.0"),
        ("voxcpm_port", 8000, "is vllm_port too"),
        ("voxcpm_gpu_index", 2, "GPU 2 does not exist"),
    ],
)
def test_bad_voxcpm_settings_are_named(settings, key, value, message):
    settings[key] = value
    problems = validate(settings)
    assert any(p.startswith(f"{key}:") and message in p for p in problems), problems


def test_shipped_settings_are_valid_with_mirrors(settings):
    settings.update(
        voxcpm_python_version="3.11.15",
        voxcpm_voice_aliases={"alloy": "narrator", "onyx": "default", "cedar": "my_voice-2"},
        voxcpm_python_install_mirror="https://mirror.example/pbs",
        voxcpm_python_downloads_json="file:///srv/mirror/python/downloads.json",
    )
    assert validate(settings) == []


def test_manifest_is_unpinned_and_invents_nothing():
    manifest = tomllib.loads((MANIFESTS / "voxcpm2.toml").read_text())
    assert manifest["state"] == "unpinned" and manifest["repo_id"] == "openbmb/VoxCPM2"
    assert "files" not in manifest  # no sizes or hashes without the hub
    assert "*.safetensors" in manifest["include"] and "*.json" in manifest["include"]


def test_lab_python_mirror_script_is_valid_shell():
    script = python_mirror_script("http://deb.debian.org/debian")
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    assert f"test -f {PYTHON_DOWNLOADS_JSON} && exit 0" in script
    assert "bookworm main" in script and LAB_PYTHON_VERSION in script


@pytest.mark.parametrize(
    "address,loopback",
    [("127.0.0.1", True), ("127.0.1.1", True), ("::1", True), ("localhost", True),
     ("0.0.0.0", False), ("::", False), ("192.168.1.20", False), ("rig.local", False)],
)  # fmt: skip
def test_is_loopback(address, loopback):
    assert is_loopback(address) is loopback


@pytest.mark.parametrize("name", ["OPENAI_VOICES", "PCM_SAMPLE_RATE", "VOICE_NAME"])
def test_every_server_constant_the_role_and_tests_read_is_found(name):
    """settings and tests/infra read these from the speech server's files without importing
    them: each must be assigned in the server or a module beside it."""
    from roles.voxcpm.settings import server_constant

    assert server_constant(name) is not None


def test_an_unknown_server_constant_is_a_lookup_error():
    from roles.voxcpm.settings import server_constant

    with pytest.raises(LookupError, match="NO_SUCH_NAME"):
        server_constant("NO_SUCH_NAME")
