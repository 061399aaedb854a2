"""The lab summary's "talk to the lab" lines (lab/serving.py service_lines): each service at the
port this lab's inventory gives it, the exact curl a newcomer pastes, the API key only where the
converge had one, and ComfyUI only where it was installed."""

from __future__ import annotations

import runpy

import pytest

from lab.config import LabConfig
from lab.serving import KEY_FILES, SERVED_MODEL, service_lines
from roles.vllm.paths import VllmPaths
from roles.voxcpm.paths import VoxcpmPaths
from tests.conftest import REPO, load_group_data

DEFAULT_LAB = LabConfig.from_env({})


def test_the_default_lab_names_its_ports_and_the_exact_curls():
    text = "\n".join(service_lines(DEFAULT_LAB, {}, comfyui=True))
    assert (
        "curl -s 127.0.0.1:32222/v1/chat/completions -H 'Content-Type: application/json' -d "
        '\'{"model": "qwen3.6-27b", "messages": [{"role": "user", "content": "Hello"}]}\''
    ) in text
    assert (
        "curl -s 127.0.0.1:12222/v1/audio/speech -H 'Content-Type: application/json' -d "
        '\'{"input": "Hello from the lab.", "voice": "alloy"}\' -o hello.mp3'
    ) in text
    assert "ComfyUI, media mode: http://127.0.0.1:8188/" in text
    assert "Authorization" not in text and text.count("API key: none") == 2
    assert ".venv/bin/python -m lab ssh rigup-mode media" in text
    assert "RIGUP_LAB_NAME=" not in text  # the default lab needs no environment


@pytest.mark.parametrize("port", [2223, 2261])
def test_the_ports_are_the_ones_inventory_lab_gives_this_lab(monkeypatch, tmp_path, port):
    env = {"RIGUP_LAB_NAME": "h4-lab", "RIGUP_LAB_SSH_PORT": str(port)}
    for k, v in {**env, "RIGUP_LAB_STATE_DIR": str(tmp_path)}.items():
        monkeypatch.setenv(k, v)
    host = runpy.run_path(str(REPO / "inventory" / "lab.py"))["lab"][0][1]
    text = "\n".join(service_lines(LabConfig.from_env(env), {}, comfyui=True))
    assert f"127.0.0.1:{host['vllm_port']}/v1/chat/completions" in text
    assert f"127.0.0.1:{host['voxcpm_port']}/v1/audio/speech" in text
    assert f"http://127.0.0.1:{host['comfyui_port']}/" in text
    assert f"RIGUP_LAB_NAME=h4-lab RIGUP_LAB_SSH_PORT={port} .venv/bin/python -m lab ssh" in text


def test_a_key_exported_at_converge_is_sent_and_its_file_named():
    lines = service_lines(DEFAULT_LAB, {"VLLM_API_KEY": "k"}, comfyui=False)
    text = "\n".join(lines)
    (chat,) = [line for line in lines if "/v1/chat/completions" in line]
    assert '-H "Authorization: Bearer $VLLM_API_KEY"' in chat
    assert "/etc/rigup/vllm/secrets/api-key.env" in text and "'k'" not in text
    (speech,) = [line for line in lines if "/v1/audio/speech" in line]
    assert "Authorization" not in speech  # VOXCPM_API_KEY was not set
    assert "ComfyUI: not installed in this lab" in text


def test_the_layers_run_names_vllm_only():
    text = "\n".join(service_lines(DEFAULT_LAB, {}, comfyui=True, full=False))
    assert "32222" in text and "12222" not in text and "ComfyUI" not in text


def test_the_names_are_the_settings():
    data = load_group_data()
    assert SERVED_MODEL == data["vllm_served_model_name"]
    assert KEY_FILES["VLLM_API_KEY"] == VllmPaths.from_data(data).api_key_file
    assert KEY_FILES["VOXCPM_API_KEY"] == VoxcpmPaths.from_data(data).api_key_file
