"""The speech server's release and reload routes (files/voxcpm/voxcpm_memory.py): the model
leaves and comes back while the server stays up, readiness says which, a synthesis under way
finishes first, and the API key guards both routes as it guards /v1/*."""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

REPO = Path(__file__).resolve().parents[2]
SERVER = REPO / "files" / "voxcpm" / "voxcpm_server.py"

_spec = importlib.util.spec_from_file_location("voxcpm_server_release", SERVER)
srv = importlib.util.module_from_spec(_spec)
sys.modules["voxcpm_server_release"] = srv
_spec.loader.exec_module(srv)


class CountingDouble(srv.ToneTestDouble):
    """The tone test double, counting its loads and releases."""

    def __init__(self, load_seconds: float = 0.0):
        super().__init__(load_seconds)
        self.loads = self.releases = 0

    def load(self):
        super().load()
        self.loads += 1

    def release(self):
        self.releases += 1
        return super().release()


class HeldSynthesis(CountingDouble):
    """Synthesis that waits for ``go`` before its audio: a release must wait for it."""

    def __init__(self):
        super().__init__()
        self.started, self.go = threading.Event(), threading.Event()

    def synthesize(self, text, reference_wav):
        self.started.set()
        assert self.go.wait(10), "the test never let the synthesis finish"
        return super().synthesize(text, reference_wav)


@pytest.fixture
def model_dir(tmp_path) -> Path:
    (tmp_path / "config.json").write_text(json.dumps({"architecture": "voxcpm2"}))
    return tmp_path


def _client(model_dir, synthesizer, key=None) -> tuple[TestClient, object]:
    app = srv.create_app(srv.Settings(str(model_dir)), synthesizer, load_in_background=False)
    srv.require_api_key(app, key)
    app.state.load()
    return TestClient(app), app


def _wait_ready(c: TestClient, seconds: float = 10) -> dict:
    deadline = time.monotonic() + seconds
    while (r := c.get("/ready")).status_code != 200:
        assert time.monotonic() < deadline, r.json()
        time.sleep(0.01)
    return r.json()


def test_release_frees_the_model_and_the_server_stays_up(model_dir):
    double = CountingDouble()
    c, _ = _client(model_dir, double)
    r = c.post("/release")
    assert r.status_code == 200 and r.json()["status"] == "released", r.json()
    assert double.releases == 1 and double.released
    assert c.get("/health").status_code == 200
    ready = c.get("/ready")
    assert ready.status_code == 503 and ready.json()["status"] == "released"
    assert ready.json()["sample_rate"] is None
    speech = c.post("/v1/audio/speech", json={"input": "hello"})
    assert speech.status_code == 503 and speech.headers["retry-after"] == "10"
    assert speech.json()["error"]["code"] == "model_released"
    # again: nothing more to free, the same answer, the model is not released twice
    again = c.post("/release")
    assert again.status_code == 200 and again.json()["status"] == "released"
    assert double.releases == 1


def test_reload_loads_it_again_and_speech_is_answered(model_dir):
    double = CountingDouble(load_seconds=0.05)
    c, _ = _client(model_dir, double)
    assert c.post("/release").status_code == 200
    r = c.post("/reload")
    assert r.status_code == 202 and r.json() == {"status": "loading"}
    assert _wait_ready(c)["status"] == "ready"
    assert double.loads == 2 and not double.released
    speech = c.post("/v1/audio/speech", json={"input": "hello", "response_format": "wav"})
    assert speech.status_code == 200 and speech.content[:4] == b"RIFF"
    loaded = c.post("/reload")
    assert loaded.status_code == 200 and loaded.json()["status"] == "ready"
    assert double.loads == 2, "a reload of a loaded model loaded it again"


def test_no_release_while_the_model_loads(model_dir):
    double = CountingDouble()
    app = srv.create_app(srv.Settings(str(model_dir)), double, load_in_background=False)
    c = TestClient(app)
    r = c.post("/release")
    assert r.status_code == 409 and r.json()["status"] == "loading"
    assert double.releases == 0


def test_a_release_waits_for_the_synthesis_under_way(model_dir):
    double = HeldSynthesis()
    c, _ = _client(model_dir, double)
    answers: dict[str, object] = {}
    speech = threading.Thread(
        target=lambda: answers.update(
            speech=c.post("/v1/audio/speech", json={"input": "x" * 20, "response_format": "wav"})
        )
    )
    speech.start()
    assert double.started.wait(10)
    release = threading.Thread(target=lambda: answers.update(release=c.post("/release")))
    release.start()
    time.sleep(0.3)
    assert release.is_alive() and double.releases == 0, "released under a running synthesis"
    double.go.set()
    speech.join(10), release.join(10)
    assert answers["speech"].status_code == 200 and answers["speech"].content[:4] == b"RIFF"
    assert answers["release"].status_code == 200 and double.releases == 1


@pytest.mark.parametrize("path", ["/release", "/reload", "/release/"])
def test_the_api_key_guards_release_and_reload(model_dir, path):
    double = CountingDouble()
    c, _ = _client(model_dir, double, key="k-123")
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        r = c.post(path, headers=headers)
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    assert double.releases == 0 and double.loads == 1
    assert c.get("/ready").status_code == 200  # readiness stays open for systemd
    ok = c.post(path.rstrip("/"), headers={"Authorization": "Bearer k-123"})
    assert ok.status_code == 200, ok.json()
