"""rigup's VoxCPM2 HTTP server (files/voxcpm/voxcpm_server.py): its real FastAPI app, request
validation, WAV encoding, errors and readiness, through Starlette's TestClient.

VoxCPM2 itself cannot run here (no weights, no GPU): the synthesizer is the server's own
``ToneTestDouble`` or, where a test needs a failing or recording engine, a small double defined
below. Only the synthesizer is replaced; everything else is the app the service runs.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

REPO = Path(__file__).resolve().parents[2]
SERVER = REPO / "files" / "voxcpm" / "voxcpm_server.py"

_spec = importlib.util.spec_from_file_location("voxcpm_server", SERVER)
srv = importlib.util.module_from_spec(_spec)
sys.modules["voxcpm_server"] = srv
_spec.loader.exec_module(srv)


class RecordingDouble(srv.ToneTestDouble):
    """The tone test double, remembering what the server asked it to synthesize."""

    def __init__(self):
        super().__init__(load_seconds=0)
        self.calls: list[tuple[str, str | None]] = []

    def synthesize(self, text, reference_wav):
        self.calls.append((text, reference_wav))
        return super().synthesize(text, reference_wav)


class FailingLoad(srv.ToneTestDouble):
    def load(self):
        raise RuntimeError("CUDA out of memory")


class FailingSynthesis(srv.ToneTestDouble):
    def synthesize(self, text, reference_wav):
        raise RuntimeError("boom")


@pytest.fixture
def model_dir(tmp_path) -> Path:
    d = tmp_path / "voxcpm2"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"architecture": "voxcpm2"}))
    return d


@pytest.fixture
def voices(tmp_path) -> Path:
    d = tmp_path / "voices"
    d.mkdir()
    with wave.open(str(d / "narrator.wav"), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
        w.writeframes(b"\0\0" * 1600)
    (d / "not a voice.wav").write_bytes(b"")
    return d


def make_client(model_dir, synthesizer, *, voices_dir=None, loaded=True) -> TestClient:
    settings = srv.Settings(str(model_dir), "voxcpm2", str(voices_dir) if voices_dir else None)
    app = srv.create_app(settings, synthesizer, load_in_background=False)
    if loaded:
        app.state.load()
    return TestClient(app)


@pytest.fixture
def double() -> RecordingDouble:
    return RecordingDouble()


@pytest.fixture
def client(model_dir, voices, double) -> TestClient:
    return make_client(model_dir, double, voices_dir=voices)


def read_wav(data: bytes) -> tuple[int, int, int, bytes]:
    with wave.open(io.BytesIO(data)) as w:
        return w.getnchannels(), w.getsampwidth(), w.getframerate(), w.readframes(w.getnframes())


def test_speech_returns_a_wav_of_the_synthesized_audio(client, double):
    r = client.post("/v1/audio/speech", json={"input": "Hello rig", "voice": "default"})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "audio/wav"
    assert r.headers["x-synthesizer"] == "test-double"
    channels, width, rate, frames = read_wav(r.content)
    assert (channels, width, rate) == (1, 2, 48000)
    expected = srv.pcm16(double.synthesize("Hello rig", None))
    assert frames == expected and len(frames) == 2 * int(0.05 * 9 * 48000)
    assert float(r.headers["x-audio-seconds"]) == pytest.approx(0.45, abs=1e-3)
    assert double.calls[0] == ("Hello rig", None)


def test_pcm_format_is_raw_16_bit(client):
    r = client.post("/v1/audio/speech", json={"input": "ab", "response_format": "pcm"})
    assert r.status_code == 200 and r.headers["content-type"] == "audio/pcm"
    assert r.headers["x-sample-rate"] == "48000"
    assert len(r.content) == 2 * int(0.1 * 48000) and not r.content.startswith(b"RIFF")


def test_named_voice_is_a_reference_recording_and_instructions_a_prefix(client, double, voices):
    r = client.post(
        "/v1/audio/speech",
        json={"input": "Hi", "voice": "narrator", "instructions": "calm, low voice"},
    )
    assert r.status_code == 200, r.text
    assert double.calls[-1] == ("(calm, low voice)Hi", str(voices / "narrator.wav"))
    assert client.get("/v1/audio/voices").json() == {"voices": ["default", "narrator"]}


def test_model_field_must_name_the_served_model(client):
    assert client.post("/v1/audio/speech", json={"input": "x", "model": "voxcpm2"}).is_success
    r = client.post("/v1/audio/speech", json={"input": "x", "model": "tts-1"})
    assert r.status_code == 404
    err = r.json()["error"]
    assert (
        err["code"] == "model_not_found" and err["param"] == "model" and "voxcpm2" in err["message"]
    )
    assert client.get("/v1/models").json()["data"][0]["id"] == "voxcpm2"


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({}, "input", "Field required"),
        ({"input": ""}, "input", "at least 1 character"),
        ({"input": "   "}, "input", "only whitespace"),
        ({"input": "x" * 4097}, "input", "at most 4096"),
        ({"input": "x", "response_format": "mp3"}, "response_format", "'wav' or 'pcm'"),
        ({"input": "x", "speed": 1.5}, "speed", "no speed control"),
        ({"input": "x", "speed": 9}, "speed", "less than or equal to 4"),
        ({"input": "x", "voice": "nobody"}, "voice", "unknown voice 'nobody'"),
        ({"input": "x", "voice": "../etc/passwd"}, "voice", "invalid voice name"),
        ({"input": "x", "instructions": "a (b)"}, "instructions", "parentheses"),
        ({"input": "x", "respone_format": "wav"}, "respone_format", "unknown field"),
    ],
)
def test_bad_requests_get_openai_style_400(client, double, body, param, words):
    r = client.post("/v1/audio/speech", json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param
    assert words in err["message"], err["message"]
    assert double.calls == []


def test_body_that_is_not_json_is_a_400(client):
    r = client.post(
        "/v1/audio/speech", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]


def test_readiness_before_and_after_the_load(model_dir):
    double = srv.ToneTestDouble(load_seconds=0)
    settings = srv.Settings(str(model_dir))
    app = srv.create_app(settings, double, load_in_background=False)
    with TestClient(app) as c:
        assert c.get("/health").status_code == 200
        before = c.get("/ready")
        assert before.status_code == 503 and before.json()["status"] == "loading"
        r = c.post("/v1/audio/speech", json={"input": "early"})
        assert r.status_code == 503 and r.headers["retry-after"] == "10"
        assert r.json()["error"]["code"] == "model_loading"
        app.state.load()
        after = c.get("/ready")
        assert after.status_code == 200
        assert after.json() | {"load_seconds": None, "pid": None} == {
            "status": "ready",
            "synthesizer": "test-double",
            "model": "voxcpm2",
            "model_dir": str(model_dir),
            "sample_rate": 48000,
            "load_seconds": None,
            "error": None,
            "pid": None,
        }
        assert after.json()["pid"] == os.getpid()
        assert c.post("/v1/audio/speech", json={"input": "now"}).status_code == 200


def test_background_load_on_startup(model_dir):
    app = srv.create_app(srv.Settings(str(model_dir)), srv.ToneTestDouble(load_seconds=0))
    with TestClient(app) as c:  # the lifespan starts the loader thread
        for _ in range(200):
            if c.get("/ready").status_code == 200:
                break
            import time

            time.sleep(0.01)
        assert c.get("/ready").json()["status"] == "ready"


def test_failed_load_is_reported_and_stops_the_server(model_dir):
    client = make_client(model_dir, FailingLoad(), loaded=False)
    stopped = []
    client.app.state.on_load_failure.append(lambda: stopped.append(True))
    client.app.state.load()
    ready = client.get("/ready")
    assert ready.status_code == 503 and ready.json()["status"] == "failed"
    assert "CUDA out of memory" in ready.json()["error"] and stopped == [True]
    r = client.post("/v1/audio/speech", json={"input": "x"})
    assert r.status_code == 503 and "failed to load" in r.json()["error"]["message"]


def test_synthesis_error_is_a_500_in_openai_shape(model_dir):
    r = make_client(model_dir, FailingSynthesis()).post("/v1/audio/speech", json={"input": "x"})
    assert r.status_code == 500
    assert r.json()["error"]["type"] == "server_error" and "boom" in r.json()["error"]["message"]


def test_unknown_path_is_a_json_404(client):
    r = client.get("/v1/audio/transcriptions")
    assert r.status_code == 404 and r.json()["error"]["message"] == "Not Found"


def test_pcm16_clips_and_rejects_empty_audio():
    data = srv.pcm16(np.array([0.0, 1.0, -1.0, 2.0, -3.0, np.nan], dtype=np.float32))
    assert np.frombuffer(data, "<i2").tolist() == [0, 32767, -32767, 32767, -32767, 0]
    with pytest.raises(ValueError, match="no audio"):
        srv.pcm16(np.array([], dtype=np.float32))


def test_check_model_dir(tmp_path, model_dir):
    assert srv.check_model_dir(str(model_dir)) is None
    assert "does not exist" in srv.check_model_dir(str(tmp_path / "absent"))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.json").write_text('{"architecture": "voxcpm"}')
    assert "not 'voxcpm2'" in srv.check_model_dir(str(tmp_path / "other"))


def test_cli_refuses_a_directory_that_is_not_voxcpm2(tmp_path):
    """The real command line exits 2 before serving, naming the problem."""
    proc = subprocess.run(
        [sys.executable, str(SERVER), "--model-dir", str(tmp_path), "--synthesizer", "test-double"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "config.json does not exist" in proc.stderr
