"""rigup's VoxCPM2 HTTP server (files/voxcpm/voxcpm_server.py): its real FastAPI app, request
validation, voices, encoding of every response format, errors and readiness, through Starlette's
TestClient (and OpenAI's own SDK on top of it). Every audio answer is decoded back with PyAV.

VoxCPM2 itself cannot run here (no weights, no GPU): the synthesizer is the server's own
``ToneTestDouble`` or, where a test needs a failing or recording engine, a small double defined
below. Only the synthesizer is replaced; everything else is the app the service runs.
"""

from __future__ import annotations

import contextlib
import http.client
import importlib.util
import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
import typing
import wave
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np
import openai
import pytest
from fastapi.testclient import TestClient
from openai.types.audio import speech_create_params

from roles.voxcpm import settings as voxcpm_settings

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


def make_client(model_dir, synthesizer, *, voices_dir=None, loaded=True, aliases=None):
    voices = str(voices_dir) if voices_dir else None
    settings = srv.Settings(str(model_dir), "voxcpm2", voices, dict(aliases or {}))
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


@dataclass
class Decoded:
    container: str  # FFmpeg's demuxer name ("raw" for pcm)
    codec: str
    rate: int
    channels: int
    samples: np.ndarray  # mono float in [-1, 1]

    @property
    def seconds(self) -> float:
        return self.samples.size / self.rate


def decode(data: bytes, response_format: str) -> Decoded:
    """Decode an answer back with PyAV (pcm: raw signed 16-bit LE mono at OpenAI's 24 kHz)."""
    if response_format == "pcm":
        samples = np.frombuffer(data, "<i2").astype(np.float32) / 32768.0
        return Decoded("raw", "pcm_s16le", srv.PCM_SAMPLE_RATE, 1, samples)
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        ctx = stream.codec_context
        pieces = []
        for frame in container.decode(stream):
            x = frame.to_ndarray().astype(np.float32)
            if frame.format.name.startswith("s16"):
                x /= 32768.0
            pieces.append(x.reshape(ctx.layout.nb_channels, -1)[0])
        return Decoded(
            container.format.name,
            ctx.name,
            ctx.sample_rate,
            ctx.layout.nb_channels,
            np.concatenate(pieces),
        )


def spectrum_peak(samples: np.ndarray, rate: int) -> tuple[float, float, float]:
    """(frequency of the strongest component in Hz, its amplitude, share of the energy within
    20 Hz of it) over the middle half of ``samples`` (codec start-up and tails left out)."""
    mid = samples[samples.size // 4 : samples.size * 3 // 4]
    window = np.hanning(mid.size)
    power = np.abs(np.fft.rfft(mid * window)) ** 2
    freqs = np.fft.rfftfreq(mid.size, 1 / rate)
    peak = float(freqs[power.argmax()])
    share = float(power[np.abs(freqs - peak) <= 20].sum() / power.sum())
    return peak, float(np.abs(mid).max()), share


#: response_format -> (Content-Type, demuxer, decoder, rate, how the file starts,
#: the most samples the codec may add at 48 kHz: encoder delay and padding to whole frames)
EXPECTED = {
    # a stream has no Xing/LAME frame telling the decoder to trim LAME's delay and padding (FFmpeg's
    # mp3 muxer writes it only to a seekable output, libavformat/mp3enc.c): up to two frames more
    "mp3": ("audio/mpeg", "mp3", "mp3float", 48000, (b"ID3", b"\xff\xfb"), 2 * 1152),
    "opus": ("audio/ogg", "ogg", "opus", 48000, (b"OggS",), 960),
    "aac": ("audio/aac", "aac", "aac", 48000, (b"\xff\xf1",), 2 * 1024),
    "flac": ("audio/flac", "flac", "flac", 48000, (b"fLaC",), 0),
    "wav": ("audio/wav", "wav", "pcm_s16le", 48000, (b"RIFF",), 0),
    "pcm": ("audio/pcm", "raw", "pcm_s16le", 24000, (b"",), 0),
}


def literal_values(annotation) -> set[str]:
    """The strings of every ``Literal`` in a type annotation (through unions)."""
    if typing.get_origin(annotation) is typing.Literal:
        return set(typing.get_args(annotation))
    return {v for arg in typing.get_args(annotation) for v in literal_values(arg)}


def test_the_formats_are_openais():
    """The six formats of OpenAI's SDK (openai 3.57.0's ``response_format`` Literal), no more."""
    sdk = typing.get_type_hints(speech_create_params.SpeechCreateParams)["response_format"]
    assert literal_values(sdk) == set(srv.FORMATS) == set(EXPECTED)


@pytest.mark.parametrize("response_format", list(EXPECTED))
def test_each_format_decodes_to_the_tone(client, double, response_format):
    """Each format answers with its Content-Type and a file PyAV decodes with the expected
    demuxer and decoder, mono, at the expected rate, as long as the synthesized audio, and the
    signal is the test double's 440 Hz tone at its amplitude (0.3)."""
    text = "Hello rig"  # 9 characters: 0.45 s of tone
    r = client.post("/v1/audio/speech", json={"input": text, "response_format": response_format})
    assert r.status_code == 200, r.text
    media_type, demuxer, decoder, rate, magic, extra = EXPECTED[response_format]
    assert r.headers["content-type"] == media_type
    assert r.headers["x-synthesizer"] == "test-double" and r.headers["x-voice"] == "default"
    assert r.headers["x-sample-rate"] == str(rate)
    assert 0 <= float(r.headers["x-first-audio-seconds"]) < 10
    assert r.content.startswith(magic), r.content[:16]
    got = decode(r.content, response_format)
    assert (got.container, got.codec, got.rate, got.channels) == (demuxer, decoder, rate, 1)
    want = int(0.45 * rate)
    assert want <= got.samples.size <= want + extra * rate // 48000, got.samples.size
    peak, amplitude, share = spectrum_peak(got.samples, rate)
    assert abs(peak - 440) <= 3, peak
    assert amplitude == pytest.approx(0.3, abs=0.03) and share > 0.95, (amplitude, share)
    assert double.calls == [(text, None)]


@pytest.mark.parametrize("response_format", ["wav", "flac"])
def test_lossless_formats_carry_the_synthesized_samples(client, double, response_format):
    r = client.post("/v1/audio/speech", json={"input": "abc", "response_format": response_format})
    got = decode(r.content, response_format)
    want = double.synthesize("abc", None)
    assert got.samples.size == want.size
    assert np.abs(got.samples - want).max() <= 1.5 / 32768  # 16-bit quantisation only


def test_wav_is_read_by_pythons_wave_module(client):
    r = client.post("/v1/audio/speech", json={"input": "Hello rig", "response_format": "wav"})
    channels, width, rate, frames = read_wav(r.content)
    assert (channels, width, rate, len(frames)) == (1, 2, 48000, 2 * int(0.45 * 48000))


def test_mp3_is_the_default_as_in_openais_api(client):
    r = client.post("/v1/audio/speech", json={"input": "Hello rig", "voice": "alloy"})
    assert r.status_code == 200 and r.headers["content-type"] == "audio/mpeg"
    assert decode(r.content, "mp3").codec == "mp3float"


class TwoTones(srv.ToneTestDouble):
    """440 Hz plus 15 kHz (above the 12 kHz a 24 kHz signal can hold), at 48 kHz."""

    def synthesize(self, text, reference_wav):
        t = np.arange(48000, dtype=np.float32) / 48000
        return 0.3 * np.sin(2 * np.pi * 440 * t) + 0.3 * np.sin(2 * np.pi * 15000 * t)


def test_pcm_is_resampled_to_24_khz_without_aliasing(model_dir):
    """OpenAI's pcm is 24 kHz: the 48 kHz audio is low-pass filtered and resampled, so a 15 kHz
    component disappears instead of folding back to 9 kHz as dropping every other sample does."""
    client = make_client(model_dir, TwoTones())
    r = client.post("/v1/audio/speech", json={"input": "x", "response_format": "pcm"})
    assert r.status_code == 200 and r.headers["x-sample-rate"] == "24000"
    assert len(r.content) == 2 * 24000
    got = decode(r.content, "pcm").samples
    power = np.abs(np.fft.rfft(got * np.hanning(got.size))) ** 2
    freqs = np.fft.rfftfreq(got.size, 1 / 24000)

    def level(hz):
        return power[np.abs(freqs - hz) <= 20].sum()

    assert level(9000) < level(440) * 1e-4, (level(9000), level(440))  # below -40 dB
    naive = TwoTones().synthesize("x", None)[::2]
    naive_power = np.abs(np.fft.rfft(naive * np.hanning(naive.size))) ** 2
    assert naive_power[np.abs(freqs - 9000) <= 20].sum() > level(440) * 0.5  # the alias it avoids


def test_the_voices_are_openais():
    """The server's OpenAI voice names are those of OpenAI's SDK (openai 3.57.0), and the
    settings rule reads the same tuple from the server file."""
    sdk = typing.get_type_hints(speech_create_params.SpeechCreateParams)["voice"]
    names = literal_values(sdk)
    assert names == set(srv.OPENAI_VOICES) and len(srv.OPENAI_VOICES) == 13
    assert voxcpm_settings.OPENAI_VOICES == srv.OPENAI_VOICES
    assert voxcpm_settings.VOICE_NAME.pattern == srv.VOICE_NAME.pattern


@pytest.mark.parametrize("voice", srv.OPENAI_VOICES)
def test_every_openai_voice_unmapped_speaks_with_the_default_voice(client, double, voice):
    r = client.post("/v1/audio/speech", json={"input": "Hi", "voice": voice})
    assert r.status_code == 200, r.text
    assert r.headers["x-voice"] == "default" and double.calls == [("Hi", None)]


@pytest.fixture
def aliased(model_dir, voices, double) -> TestClient:
    (voices / "echo.wav").write_bytes((voices / "narrator.wav").read_bytes())
    aliases = {"alloy": "narrator", "onyx": "default", "nova": "gone"}
    return make_client(model_dir, double, voices_dir=voices, aliases=aliases)


@pytest.mark.parametrize(
    ("voice", "speaks", "recording"),
    [
        ("alloy", "narrator", "narrator"),  # mapped to a recording
        ("onyx", "default", None),  # mapped to the default voice
        ("echo", "echo", "echo"),  # not mapped, but there is a recording of that name
        ("shimmer", "default", None),  # not mapped, no recording: the default voice
        ("narrator", "narrator", "narrator"),  # one's own voice by name
        ({"id": "narrator"}, "narrator", "narrator"),  # OpenAI's custom-voice object
        ({"id": "alloy"}, "narrator", "narrator"),
        ("default", "default", None),
    ],
)
def test_voice_aliases_resolve(aliased, double, voices, voice, speaks, recording):
    r = aliased.post("/v1/audio/speech", json={"input": "Hi", "voice": voice})
    assert r.status_code == 200, r.text
    assert r.headers["x-voice"] == speaks
    assert double.calls == [("Hi", str(voices / f"{recording}.wav") if recording else None)]


def test_an_alias_to_a_missing_recording_is_named(aliased, double):
    r = aliased.post("/v1/audio/speech", json={"input": "Hi", "voice": "nova"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "voice"
    message = r.json()["error"]["message"]
    assert "'nova' is mapped to 'gone'" in message and "no recording gone.wav" in message
    assert double.calls == []


def test_voices_lists_recordings_and_what_each_openai_voice_is(aliased):
    body = aliased.get("/v1/audio/voices").json()
    assert body["voices"] == ["default", "echo", "narrator"]
    assert list(body["openai_voices"]) == list(srv.OPENAI_VOICES)
    assert body["openai_voices"]["alloy"] == "narrator" and body["openai_voices"]["echo"] == "echo"
    assert body["openai_voices"]["nova"] is None and body["openai_voices"]["ash"] == "default"


def test_instructions_are_a_prefix(client, double, voices):
    r = client.post(
        "/v1/audio/speech",
        json={"input": "Hi", "voice": "narrator", "instructions": "calm, low voice"},
    )
    assert r.status_code == 200, r.text
    assert double.calls[-1] == ("(calm, low voice)Hi", str(voices / "narrator.wav"))


@pytest.fixture
def sdk(client) -> openai.OpenAI:
    """OpenAI's own SDK, its HTTP client the TestClient (an httpx2 client) of the real app."""
    return openai.OpenAI(
        base_url="http://testserver/v1", api_key="unused", http_client=client, max_retries=0
    )


@pytest.mark.parametrize("response_format", list(EXPECTED))
def test_openai_sdk_gets_every_format(sdk, response_format):
    audio = sdk.audio.speech.create(
        model="voxcpm2", voice="alloy", input="Hello rig", response_format=response_format
    )
    got = decode(audio.content, response_format)
    assert got.rate == EXPECTED[response_format][3]
    assert abs(spectrum_peak(got.samples, got.rate)[0] - 440) <= 3


def test_openai_sdk_default_format_and_refusals(sdk):
    audio = sdk.audio.speech.create(model="voxcpm2", voice="coral", input="Hello rig")
    assert audio.response.headers["content-type"] == "audio/mpeg"
    assert decode(audio.content, "mp3").codec == "mp3float"
    with pytest.raises(openai.BadRequestError, match="no speed control"):
        sdk.audio.speech.create(model="voxcpm2", voice="alloy", input="x", speed=1.5)
    with pytest.raises(openai.NotFoundError, match="not served here"):
        sdk.audio.speech.create(model="tts-1", voice="alloy", input="x")


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
        (
            {"input": "x", "response_format": "ogg"},
            "response_format",
            "'ogg' is not supported; use 'mp3', 'opus', 'aac', 'flac', 'wav' or 'pcm'",
        ),
        ({"input": "x", "response_format": "MP3"}, "response_format", "'MP3' is not supported"),
        ({"input": "x", "stream_format": "sse"}, "stream_format", "use 'audio'"),
        ({"input": "x", "speed": 1.5}, "speed", "no speed control"),
        ({"input": "x", "speed": 0.5}, "speed", "no speed control"),
        ({"input": "x", "speed": 9}, "speed", "less than or equal to 4"),
        ({"input": "x", "voice": "nobody"}, "voice", "unknown voice 'nobody' (voices: default"),
        ({"input": "x", "voice": "nobody"}, "voice", "OpenAI's voice names alloy, ash,"),
        ({"input": "x", "voice": "../etc/passwd"}, "voice", "invalid voice name"),
        ({"input": "x", "voice": {"id": "../x"}}, "voice", "invalid voice name"),
        ({"input": "x", "voice": {"name": "alloy"}}, "voice", 'or an object {"id"'),
        ({"input": "x", "voice": 7}, "voice", "must be a voice name"),
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


def test_encoding_error_is_a_500_naming_the_format(model_dir, monkeypatch):
    class Refusing(sys.modules["voxcpm_audio"].StreamEncoder):
        def feed(self, waveform):
            raise ValueError("no encoder")

    monkeypatch.setattr(sys.modules["voxcpm_stream"], "StreamEncoder", Refusing)
    r = make_client(model_dir, srv.ToneTestDouble()).post(
        "/v1/audio/speech", json={"input": "x", "response_format": "opus"}
    )
    assert r.status_code == 500
    assert r.json()["error"]["message"] == "encoding as opus failed: ValueError: no encoder"


def test_unknown_path_is_a_json_404(client):
    r = client.get("/v1/audio/transcriptions")
    assert r.status_code == 404 and r.json()["error"]["message"] == "Not Found"


def test_mono_float_clips_and_rejects_empty_audio():
    audio = srv.mono_float(np.array([[0.0, 1.0, -1.0], [2.0, -3.0, np.nan]], dtype=np.float64))
    assert audio.dtype == np.float32 and audio.tolist() == [0, 1, -1, 1, -1, 0]
    with pytest.raises(ValueError, match="no audio"):
        srv.mono_float(np.array([], dtype=np.float32))


def test_output_rate_follows_what_the_encoder_takes():
    assert srv.output_rate(srv.FORMATS["mp3"], 48000) == 48000
    assert srv.output_rate(srv.FORMATS["mp3"], 96000) == 48000  # LAME's highest
    assert srv.output_rate(srv.FORMATS["aac"], 50000) == 64000  # the next rate AAC takes
    assert srv.output_rate(srv.FORMATS["flac"], 50000) == 50000  # any rate
    assert srv.output_rate(srv.FORMATS["opus"], 16000) == 48000
    assert srv.output_rate(srv.FORMATS["pcm"], 48000) == 24000


def test_alias_problems():
    assert srv.alias_problems({"alloy": "narrator", "cedar": "default"}) == []
    problems = srv.alias_problems({"aloy": "default", "echo": "../x"})
    assert "'aloy' is not one of OpenAI's voices" in problems[0]
    assert "'echo' maps to '../x', not a voice name" in problems[1]


def test_check_model_dir(tmp_path, model_dir):
    assert srv.check_model_dir(str(model_dir)) is None
    assert "does not exist" in srv.check_model_dir(str(tmp_path / "absent"))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.json").write_text('{"architecture": "voxcpm"}')
    assert "not 'voxcpm2'" in srv.check_model_dir(str(tmp_path / "other"))


def test_cli_refuses_a_voice_alias_of_no_openai_voice(model_dir):
    proc = subprocess.run(
        [sys.executable, str(SERVER), "--model-dir", str(model_dir), "--voice-alias", "tts=x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "--voice-alias: 'tts' is not one of OpenAI's" in proc.stderr


def test_cli_refuses_a_directory_that_is_not_voxcpm2(tmp_path):
    """The real command line exits 2 before serving, naming the problem."""
    proc = subprocess.run(
        [sys.executable, str(SERVER), "--model-dir", str(tmp_path), "--synthesizer", "test-double"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "config.json does not exist" in proc.stderr


# ---- streaming: the answer leaves as it is made ------------------------------------------------
class GatedDouble(srv.ToneTestDouble):
    """The tone in chunks; after the first chunk it waits until the client has read the first
    bytes (``first_bytes_read``, at most 10 s): a server that buffered the whole answer would
    send nothing before that, and ``released_by_client`` would be False."""

    def __init__(self, seconds_per_chunk: float = 0.0):
        super().__init__(load_seconds=0)
        self.seconds_per_chunk = seconds_per_chunk  # how long each chunk takes to make
        self.first_bytes_read = threading.Event()
        self.finished = threading.Event()
        self.released_by_client: bool | None = None
        self.chunks_made = 0
        self.completed: list[str] = []  # the texts whose synthesis ran to its end

    def synthesize_stream(self, text, reference_wav):
        chunks = super().synthesize_stream(text, reference_wav)
        yield next(chunks)
        self.released_by_client = self.first_bytes_read.wait(10)
        for chunk in chunks:
            time.sleep(self.seconds_per_chunk)
            self.chunks_made += 1
            yield chunk
        self.completed.append(text)
        self.finished.set()


@contextlib.contextmanager
def serving(model_dir, synthesizer):
    """The app served for real by uvicorn (as the service runs it) on a free loopback port."""
    import uvicorn

    settings = srv.Settings(str(model_dir), "voxcpm2", None, {})
    app = srv.create_app(settings, synthesizer, load_in_background=False)
    app.state.load()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def _speech(port: int, body: dict) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    conn.request("POST", "/v1/audio/speech", json.dumps(body), {"Content-Type": "application/json"})
    return conn, conn.getresponse()


@pytest.mark.parametrize("response_format", list(EXPECTED))
def test_the_first_bytes_arrive_before_the_synthesis_ends(model_dir, response_format):
    """Each format is streamed: the response's first bytes are read while the synthesizer is
    still held after its first chunk; the whole answer then decodes to all the audio."""
    double = GatedDouble()
    with serving(model_dir, double) as port:
        conn, response = _speech(port, {"input": "x" * 20, "response_format": response_format})
        assert response.status == 200, response.read()
        assert response.getheader("transfer-encoding") == "chunked"
        first = response.read1(1 << 20)
        assert first and not double.finished.is_set()
        double.first_bytes_read.set()
        rest = response.read()
        conn.close()
    assert double.released_by_client is True, "nothing was sent before the synthesis ended"
    rate = EXPECTED[response_format][3]
    got = decode(first + rest, response_format)
    want = int(20 * double.seconds_per_char * rate)
    assert want <= got.samples.size <= want + EXPECTED[response_format][5] * rate // 48000


def test_a_client_that_goes_away_stops_the_synthesis_and_frees_the_model(model_dir):
    """The synthesis stops at its next chunk and releases the one-at-a-time lock: the next
    request is answered."""
    double = GatedDouble(seconds_per_chunk=0.02)  # 4096 characters: 1,024 chunks, 20 s
    with serving(model_dir, double) as port:
        conn, response = _speech(port, {"input": "x" * 4096, "response_format": "pcm"})
        assert response.status == 200 and response.read1(1 << 16)
        conn.close()
        double.first_bytes_read.set()
        time.sleep(0.5)
        conn, response = _speech(port, {"input": "hello", "response_format": "wav"})
        assert response.status == 200
        assert decode(response.read(), "wav").samples.size == int(0.25 * 48000)
        conn.close()
    assert double.completed == ["hello"], "the first synthesis ran to its end"
    assert double.chunks_made < 200, double.chunks_made
