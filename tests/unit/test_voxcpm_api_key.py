"""The speech server's API key (files/voxcpm/voxcpm_server.py, ``VOXCPM_API_KEY``): the real
command line serving on a loopback port with the test double, called over HTTP and with OpenAI's
SDK, with and without the key."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

import openai
import pytest
from fastapi.testclient import TestClient

from tests.unit.speech_server import speech_server

REPO = Path(__file__).resolve().parents[2]
SERVER = REPO / "files" / "voxcpm" / "voxcpm_server.py"
KEY = "vox-" + os.urandom(12).hex()


def _get(url: str, key: str | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url)
    if key is not None:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with speech_server(tmp_path_factory.mktemp("speech"), KEY, load_seconds=0) as base:
        yield base


def test_readiness_stays_open_for_systemd(server):
    status, body = _get(f"{server}/ready")
    assert status == 200 and body["status"] == "ready"
    assert _get(f"{server}/health")[0] == 200


@pytest.mark.parametrize(
    "key",
    [None, "", "wrong", KEY + "x", KEY[:-1]],
    ids=["absent", "empty", "wrong", "key-plus-a-letter", "key-less-a-letter"],  # KEY is random
)
def test_the_api_refuses_a_missing_or_wrong_key(server, key):
    status, body = _get(f"{server}/v1/models", key)
    assert status == 401, body
    assert body["error"]["code"] == "invalid_api_key"
    assert KEY not in json.dumps(body)


def test_the_api_answers_with_the_key(server):
    status, body = _get(f"{server}/v1/models", KEY)
    assert status == 200 and body["data"][0]["id"] == "voxcpm2"


def test_openai_sdk_with_and_without_the_key(server):
    good = openai.OpenAI(base_url=f"{server}/v1", api_key=KEY, max_retries=0)
    audio = good.audio.speech.create(model="voxcpm2", voice="alloy", input="Hi.")
    assert len(audio.content) > 100
    bad = openai.OpenAI(base_url=f"{server}/v1", api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.audio.speech.create(model="voxcpm2", voice="alloy", input="Hi.")


def test_without_a_key_nothing_is_asked(tmp_path):
    spec = importlib.util.spec_from_file_location("voxcpm_server_nokey", SERVER)
    srv = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = srv  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(srv)
    (tmp_path / "config.json").write_text(json.dumps({"architecture": "voxcpm2"}))
    app = srv.create_app(
        srv.Settings(str(tmp_path)), srv.ToneTestDouble(0), load_in_background=False
    )
    srv.require_api_key(app, "")
    assert TestClient(app).get("/v1/models").status_code == 200
