"""rigup's client that frees the media servers' memory (rigup/media/free.py) and its command
``rigup-free`` (files/doctor/rigup-free, run as installed: bin/ beside lib/), against the real
speech server's command line (files/voxcpm/voxcpm_server.py, test-double synthesizer, with an
API key) on a loopback port. ComfyUI's /free is proven against the real ComfyUI in the lab
(tests/lab/test_scenario_media.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rigup.media import free
from roles.common.libraries import PACKAGE
from tests.unit.speech_server import free_port, ready_status, speech_server

REPO = Path(__file__).resolve().parents[2]
SERVER = REPO / "files" / "voxcpm" / "voxcpm_server.py"
COMMAND = REPO / "files" / "doctor" / "rigup-free"
KEY = "vox-" + os.urandom(12).hex()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with speech_server(tmp_path_factory.mktemp("speech"), KEY, load_seconds=0.2) as base:
        yield base


def test_release_and_reload_with_the_key(server):
    released = free.release_speech(server, KEY)
    assert released["status"] == "released" and released["released_seconds"] >= 0
    assert ready_status(server)[1]["status"] == "released"
    ready = free.reload_speech(server, KEY, wait_s=30)
    assert ready["status"] == "ready" and ready["seconds"] >= 0.2  # the double's load time
    assert ready_status(server)[1]["status"] == "ready"


@pytest.mark.parametrize("key", [None, "wrong"])
def test_a_missing_or_wrong_key_is_an_error_naming_the_answer(server, key):
    with pytest.raises(free.FreeError, match="/release answered 401"):
        free.release_speech(server, key)
    assert ready_status(server)[1]["status"] == "ready", "released without the key"
    with pytest.raises(free.FreeError, match="/reload answered 401"):
        free.reload_speech(server, key)


def test_a_server_that_is_not_there_is_an_error_naming_the_url():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(free.FreeError, match=f"{url}/system_stats"):
        free.free_comfyui(url)
    with pytest.raises(free.FreeError, match=f"{url}/release"):
        free.release_speech(url, KEY)


def test_the_key_is_read_from_rigups_environment_file(tmp_path):
    path = tmp_path / "api-key.env"
    path.write_text(f"OTHER=x\nVOXCPM_API_KEY={KEY}\n")
    assert free.key_from_env_file(path, "VOXCPM_API_KEY") == KEY
    assert free.key_from_env_file(path, "VLLM_API_KEY") is None
    assert free.key_from_env_file(tmp_path / "absent.env", "VOXCPM_API_KEY") is None


@pytest.fixture
def installed(tmp_path, server):
    """rigup-free as a converge installs it, with a doctor.json naming the server and its key."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "rigup").symlink_to(PACKAGE)
    shutil.copy(COMMAND, tmp_path / "bin" / "rigup-free")
    key_file = tmp_path / "api-key.env"
    key_file.write_text(f"VOXCPM_API_KEY={KEY}\n")
    config = tmp_path / "doctor.json"
    config.write_text(
        json.dumps(
            {
                "speech": {
                    "unit": "voxcpm.service",
                    "url": server,
                    "api_key_file": str(key_file),
                    "api_key_name": "VOXCPM_API_KEY",
                }
            }
        )
    )

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(tmp_path / "bin" / "rigup-free"), *args, "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=120,
        )

    return run


def test_the_command_releases_and_reloads_the_speech_model(installed, server):
    done = installed("speech")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "released"
    assert ready_status(server)[1]["status"] == "released"
    back = installed("speech", "--reload", "--wait", "30")
    assert back.returncode == 0, back.stderr
    assert json.loads(back.stdout)["status"] == "ready"
    assert KEY not in done.stdout + done.stderr + back.stdout + back.stderr


def test_the_command_says_what_is_not_installed(installed):
    done = installed("comfyui")
    assert done.returncode == 2 and "comfyui is not installed on this rig" in done.stderr


def test_the_command_without_doctor_json_says_so(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "rigup").symlink_to(PACKAGE)
    shutil.copy(COMMAND, tmp_path / "bin" / "rigup-free")
    absent = tmp_path / "doctor.json"
    proc = subprocess.run(
        [sys.executable, str(tmp_path / "bin" / "rigup-free"), "speech", "--config", str(absent)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{absent} does not exist: rigup has not converged this host yet" in proc.stderr
