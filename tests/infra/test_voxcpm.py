"""voxcpm role: the CPython it runs on, the locked venv, the placed model, the hardened
unit and the HTTP service, with expectations from the settings.

Where ``voxcpm_test_double_synthesizer`` is on (the lab), the service runs for real but speaks
through rigup's test double: the tests that need VoxCPM2 itself are skipped with that reason, and
test_synthesizer_is_what_the_settings_say reports which synthesizer answered.

The speech API is also called as chat front-ends call it: with OpenAI's own Python SDK on the
controller, through an SSH tunnel to the service's loopback port (the ``forward`` fixture), in
every response format, each answer decoded back with PyAV.
"""

from __future__ import annotations

import io
import json
import shlex
import time

import av
import numpy as np
import openai
import pytest

from roles.common.service import is_loopback
from roles.model import placed_path
from roles.modes.budget import MODES
from roles.nvidia.layer import gpu_blocker
from roles.voxcpm.paths import UNIT, VoxcpmPaths
from roles.voxcpm.service import probe_url, server_args, service_env, start_decision
from roles.voxcpm.settings import OPENAI_VOICES, VOICE_NAME, server_constant
from tests.infra.checks import (
    check_service_user,
    check_unit_properties,
    check_venv_matches_lock,
    env_file_values,
)

MEDIA_TARGET = MODES["media"]


@pytest.fixture(scope="session")
def vp(data) -> VoxcpmPaths:
    return VoxcpmPaths.from_data(data)


@pytest.fixture(scope="session")
def should_run(host, data) -> bool:
    return start_decision(data, gpu_blocker(data, host.exists("nvidia-smi"))) is None


@pytest.fixture(scope="session")
def model_dir(data) -> str:
    return placed_path(data, data.get("voxcpm_model_manifest"))


#: Shell words that send the speech API's key when the host has one (voxcpm_api_key_env): read
#: on the host by the same command, so the key never reaches the test's output.
AUTH = """auth=$(sed -n 's/^VOXCPM_API_KEY=//p' {file} 2>/dev/null); """
AUTH_HEADER = """${auth:+-H "Authorization: Bearer $auth"}"""


def _curl(host, data, url: str, *args: str):
    """(HTTP status, body) of a request made on the host itself."""
    out = host.run(
        AUTH.format(file=VoxcpmPaths.from_data(data).api_key_file)
        + f"curl -sS --max-time 30 {AUTH_HEADER} -o /tmp/rigup-voxcpm-body -w '%{{http_code}}' "
        + " ".join(shlex.quote(a) for a in args)
        + f" {shlex.quote(url)}; echo; cat /tmp/rigup-voxcpm-body; rm -f /tmp/rigup-voxcpm-body"
    )
    status, _, body = out.stdout.partition("\n")
    return status.strip(), body


def _speech(host, data, body: dict, out: str = "/tmp/rigup-voxcpm.wav"):
    url = probe_url(data, "/v1/audio/speech")
    res = host.run(
        AUTH.format(file=VoxcpmPaths.from_data(data).api_key_file)
        + f"curl -sS --max-time 120 {AUTH_HEADER} -o {out} -D - "
        "-H 'Content-Type: application/json' "
        f"--data {shlex.quote(json.dumps(body))} {shlex.quote(url)}"
    )
    return res


def test_service_user(host, data, vp):
    check_service_user(host, data.get("voxcpm_user"), vp.home, "deploys/voxcpm.py")


def test_venv_runs_on_the_pinned_cpython_in_voxcpm_range(host, data, vp):
    want = data.get("voxcpm_python_version")
    out = host.run(f"{vp.python} -c 'import platform, sys; print(platform.python_version())'")
    assert out.rc == 0, f"no working venv at {vp.venv}: {out.stderr[-400:]} (run deploys/voxcpm.py)"
    got = out.stdout.strip()
    assert got == want, f"{vp.venv} runs Python {got}, {want} expected (run deploys/voxcpm.py)"
    minor = tuple(int(x) for x in got.split(".")[:2])
    assert (3, 11) <= minor <= (3, 12), f"the voxcpm lock needs Python 3.11-3.12, venv has {got}"
    home = host.run(f"{vp.python} -c 'import sys; print(sys.base_prefix)'").stdout.strip()
    assert home.startswith(vp.python_install_dir + "/"), (
        f"the venv's interpreter {home} is not rigup's uv-managed CPython under "
        f"{vp.python_install_dir}"
    )


def test_voxcpm_version(host, data, vp):
    out = host.run(f"{vp.python} -c 'import importlib.metadata as m; print(m.version(\"voxcpm\"))'")
    assert out.rc == 0, f"no voxcpm in {vp.venv}: {out.stderr.strip()[-400:]}"
    assert out.stdout.strip() == data.get("voxcpm_version"), (
        f"voxcpm {out.stdout.strip()} installed in {vp.venv}, {data.get('voxcpm_version')} "
        "expected (re-run deploys/voxcpm.py)"
    )


def test_venv_matches_lock(host, paths, vp):
    check_venv_matches_lock(host, paths, vp.python, vp.lock)


def test_voxcpm_api_the_server_calls_exists(host, vp):
    """The server calls voxcpm 2.0.3's VoxCPM(voxcpm_model_path=, zipenhancer_model_path=,
    enable_denoiser=, optimize=, device=) and .generate / .generate_streaming(text=,
    reference_wav_path=, cfg_value=, inference_timesteps=, retry_badcase=): check those names
    against the installed package's signatures."""
    code = (
        "import inspect, json; from voxcpm import VoxCPM; "
        "print(json.dumps([list(inspect.signature(VoxCPM.__init__).parameters), "
        "list(inspect.signature(VoxCPM._generate).parameters), "
        "hasattr(VoxCPM, 'generate_streaming')]))"
    )
    out = host.run(f"{vp.python} -c {shlex.quote(code)}")
    assert out.rc == 0, f"voxcpm does not import in {vp.venv}: {out.stderr[-800:]}"
    init, generate, streaming = json.loads(out.stdout.strip().splitlines()[-1])
    assert streaming, "VoxCPM has no generate_streaming: the server streams through it"
    for name in ("voxcpm_model_path", "zipenhancer_model_path", "enable_denoiser", "optimize"):
        assert name in init, f"VoxCPM.__init__ has no {name!r}: {init}"
    assert "device" in init, init
    for name in ("text", "reference_wav_path", "cfg_value", "inference_timesteps", "retry_badcase"):
        assert name in generate, f"VoxCPM.generate has no {name!r}: {generate}"


def test_model_is_placed_read_only(host, vp, model_dir):
    config = host.file(f"{model_dir}/config.json")
    assert config.exists, f"{model_dir}/config.json is missing: run deploys/voxcpm.py"
    assert config.user == "root" and config.mode & 0o022 == 0, (
        f"{config.path} must be root-owned and not writable by others"
    )
    arch = json.loads(config.content_string).get("architecture")
    assert arch == "voxcpm2", f"{config.path} says architecture {arch!r}, not 'voxcpm2'"


@pytest.mark.unit(UNIT)
def test_unit_runs_the_rendered_command(host, data, vp, model_dir):
    assert host.file(vp.unit).exists, f"{vp.unit} is missing: run deploys/voxcpm.py"
    show = host.run(
        f"systemctl show {UNIT} -p User -p ExecStart -p EnvironmentFiles -p LoadState -p PartOf"
    )
    props = dict(line.split("=", 1) for line in show.stdout.splitlines() if "=" in line)
    assert props.get("LoadState") == "loaded", f"{UNIT} is not loaded: {props}"
    assert props.get("User") == data.get("voxcpm_user"), f"{UNIT} runs as {props.get('User')!r}"
    exec_start = props.get("ExecStart", "")
    assert f"path={vp.python} " in exec_start and vp.server in exec_start, exec_start
    args = server_args(data, vp, model_dir)
    for flag, value in zip(args, args[1:] + [""], strict=True):
        if flag.startswith("--"):
            given = flag if value.startswith("--") or not value else f"{flag} {value}"
            assert given in exec_start, f"{UNIT} does not pass {given}: {exec_start}"
    assert ("--synthesizer test-double" in exec_start) == bool(
        data.get("voxcpm_test_double_synthesizer")
    ), f"{UNIT}'s synthesizer differs from voxcpm_test_double_synthesizer: {exec_start}"
    env_files = [x for x in show.stdout.splitlines() if x.startswith("EnvironmentFiles=")]
    assert any(vp.env_file in x for x in env_files), f"{UNIT} does not read {vp.env_file}"
    assert MEDIA_TARGET in props.get("PartOf", ""), f"{UNIT} is not PartOf={MEDIA_TARGET}"


@pytest.mark.unit(UNIT)
def test_unit_file_verifies(host):
    out = host.run(f"systemd-analyze verify {UNIT}")
    problems = [
        x for x in (out.stdout + out.stderr).splitlines() if UNIT in x and MEDIA_TARGET not in x
    ]
    assert not problems, f"systemd-analyze verify: {out.stdout}{out.stderr}"


@pytest.mark.unit(UNIT)
def test_unit_is_hardened(host, data):
    want = {
        "RemoveIPC": "yes",
        "UMask": "0077",
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "ProtectProc": "invisible",
        "CapabilityBoundingSet": "",
        "RestrictSUIDSGID": "yes",
        "Restart": "always",
    }
    check_unit_properties(host, UNIT, want, "deploys/voxcpm.py")
    if is_loopback(data.get("voxcpm_host")):  # systemd lists the prefixes in no fixed order
        out = host.run(f"systemctl show {UNIT} -p IPAddressDeny -p IPAddressAllow")
        got = {k: set(v.split()) for k, _, v in (x.partition("=") for x in out.stdout.split("\n"))}
        assert got.get("IPAddressDeny") == {"0.0.0.0/0", "::/0"}, got
        assert got.get("IPAddressAllow") == {"127.0.0.0/8", "::1/128"}, (
            f"{UNIT} bound to loopback must allow loopback only: {got}; re-run deploys/voxcpm.py"
        )


def test_env_file_private_offline_and_complete(host, data, vp):
    lines = env_file_values(host, vp.env_file, data.get("voxcpm_user"), "deploys/voxcpm.py")
    assert lines == service_env(data, vp), (
        f"{vp.env_file} differs from the settings: re-run deploys/voxcpm.py"
    )
    assert lines["HF_HUB_OFFLINE"] == "1", "the service must load the model offline"


@pytest.mark.unit(UNIT)
def test_service_state_follows_settings_gpus_and_the_mode(host, should_run, active_mode):
    """Where it can run, voxcpm.service is enabled (linked into rigup-media.target) and runs
    exactly in the media mode; elsewhere it stays stopped and unlinked."""
    svc = host.service(UNIT)
    if should_run:
        media = active_mode == "media"
        assert svc.is_enabled, f"{UNIT} should be enabled (linked into {MEDIA_TARGET})"
        assert svc.is_running == media, (
            f"{UNIT} {'is not' if media else 'is'} running in the {active_mode or 'no'} mode: "
            "it runs exactly in the media mode"
        )
    else:
        assert not svc.is_running and not svc.is_enabled, (
            f"{UNIT} must stay stopped and disabled on a host without GPUs or NVIDIA driver"
        )


NOT_HERE = f"{UNIT} is not meant to run on this host (no GPU/driver, no test double)"


@pytest.fixture
def running(should_run):
    """Skips where voxcpm.service never runs; the mode is the ``serving`` marker's part."""
    if not should_run:
        pytest.skip(NOT_HERE)


@pytest.mark.serving(UNIT)
@pytest.mark.unit(UNIT)
def test_listens_on_the_configured_address_only(host, data, running):
    sockets = host.run(f"ss -Htln 'sport = :{data.get('voxcpm_port')}'").stdout.split("\n")
    local = [line.split()[3] for line in sockets if line.strip()]
    want = f"{data.get('voxcpm_host')}:{data.get('voxcpm_port')}"
    assert local == [want], f"{UNIT} listens on {local}, expected only {want}"


@pytest.mark.serving(UNIT)
@pytest.mark.unit(UNIT)
def test_synthesizer_is_what_the_settings_say(host, data, running, model_dir):
    status, body = _curl(host, data, probe_url(data, "/ready"))
    assert status == "200", f"/ready answered {status}: {body}"
    ready = json.loads(body)
    double = bool(data.get("voxcpm_test_double_synthesizer"))
    assert ready["synthesizer"] == ("test-double" if double else "voxcpm"), ready
    assert ready["model_dir"] == model_dir, ready
    assert ready["sample_rate"] == 48000, ready
    if double:
        pytest.skip(
            "voxcpm_test_double_synthesizer is on: the service answers with rigup's TEST DOUBLE "
            "tone, not VoxCPM2 speech (the model and a GPU are not available here)"
        )


@pytest.mark.serving(UNIT)
@pytest.mark.unit(UNIT)
def test_speech_endpoint_returns_a_wav(host, data, running):
    body = {
        "input": "rigup checks the speech endpoint.",
        "voice": "default",
        "response_format": "wav",
    }
    res = _speech(host, data, body)
    assert res.rc == 0 and " 200" in res.stdout.splitlines()[0], res.stdout + res.stderr
    headers = {
        k.strip().lower(): v.strip()
        for k, _, v in (line.partition(":") for line in res.stdout.splitlines()[1:])
    }
    assert headers.get("content-type") == "audio/wav", headers
    probe = (
        # a streamed WAV's header gives no length (0xFFFFFFFF): count the frames that came
        "import json, wave; w = wave.open('/tmp/rigup-voxcpm.wav'); "
        "n = len(w.readframes(w.getnframes())) // w.getsampwidth(); "
        "print(json.dumps([w.getnchannels(), w.getsampwidth(), w.getframerate(), n]))"
    )
    out = host.run(f"{VoxcpmPaths.from_data(data).python} -c {shlex.quote(probe)}")
    channels, width, rate, frames = json.loads(out.stdout.strip())
    assert (channels, width, rate) == (1, 2, int(headers["x-sample-rate"])), out.stdout
    assert frames > rate * 0.2, f"only {frames} frames of audio for a sentence"


@pytest.mark.serving(UNIT)
@pytest.mark.unit(UNIT)
def test_speech_endpoint_refuses_bad_requests_in_openai_shape(host, data, running):
    url = probe_url(data, "/v1/audio/speech")
    status, body = _curl(
        host, data, url, "-H", "Content-Type: application/json", "--data", '{"input": ""}'
    )
    assert status == "400", f"empty input answered {status}: {body}"
    assert json.loads(body)["error"]["param"] == "input", body
    status, body = _curl(
        host,
        data,
        url,
        "-H",
        "Content-Type: application/json",
        "--data",
        '{"input": "x", "model": "tts-1"}',
    )
    assert status == "404" and json.loads(body)["error"]["code"] == "model_not_found", body


# --- OpenAI's Python SDK against the service -----------------------------------------------------

#: response_format -> (Content-Type, FFmpeg demuxer PyAV decodes it with); pcm has no container
SDK_FORMATS = {
    "mp3": ("audio/mpeg", "mp3"),
    "opus": ("audio/ogg", "ogg"),
    "aac": ("audio/aac", "aac"),
    "flac": ("audio/flac", "flac"),
    "wav": ("audio/wav", "wav"),
    "pcm": ("audio/pcm", None),
}
SDK_TEXT = "rigup checks the speech API with OpenAI's SDK."


@pytest.fixture(scope="session")
def sdk(forward, host, data, vp, should_run) -> openai.OpenAI:
    """OpenAI's SDK on the controller, talking to voxcpm.service through an SSH tunnel (with
    the speech API's key when the host has one)."""
    if not should_run:
        pytest.skip(NOT_HERE)
    local = forward(data.get("voxcpm_host"), data.get("voxcpm_port"))
    key = host.run(f"sed -n 's/^VOXCPM_API_KEY=//p' {vp.api_key_file} 2>/dev/null").stdout.strip()
    return openai.OpenAI(
        base_url=f"http://127.0.0.1:{local}/v1", api_key=key or "unused", max_retries=0, timeout=300
    )


def _decode(content: bytes, response_format: str) -> tuple[str | None, int, int, np.ndarray]:
    """(demuxer, sample rate, channels, mono float samples) of an answer, decoded with PyAV;
    pcm is OpenAI's raw signed 16-bit little-endian mono at 24 kHz."""
    if response_format == "pcm":
        rate = server_constant("PCM_SAMPLE_RATE")
        return None, rate, 1, np.frombuffer(content, "<i2").astype(np.float32) / 32768.0
    with av.open(io.BytesIO(content)) as container:
        stream = container.streams.audio[0]
        channels = stream.codec_context.layout.nb_channels
        pieces = []
        for frame in container.decode(stream):
            x = frame.to_ndarray().astype(np.float32)
            if frame.format.name.startswith("s16"):
                x /= 32768.0
            pieces.append(x.reshape(channels, -1)[0])
        return (
            container.format.name,
            stream.codec_context.sample_rate,
            channels,
            np.concatenate(pieces),
        )


def _peak_hz(samples: np.ndarray, rate: int) -> float:
    mid = samples[samples.size // 4 : samples.size * 3 // 4]
    power = np.abs(np.fft.rfft(mid * np.hanning(mid.size))) ** 2
    return float(np.fft.rfftfreq(mid.size, 1 / rate)[power.argmax()])


@pytest.mark.serving(UNIT)
@pytest.mark.unit(UNIT)
@pytest.mark.parametrize("response_format", list(SDK_FORMATS))
def test_openai_sdk_speaks_every_format(sdk, data, running, response_format):
    """``audio.speech.create(model=<served name>, voice="alloy", ...)`` as OpenAI's SDK sends it
    answers in each of OpenAI's formats with its Content-Type, a file PyAV decodes, mono, as long
    as the server says; from the test double, the decoded signal is its 440 Hz tone."""
    started = time.monotonic()
    audio = sdk.audio.speech.create(
        model=data.get("voxcpm_served_model_name"),
        voice="alloy",
        input=SDK_TEXT,
        response_format=response_format,
    )
    seconds = time.monotonic() - started
    headers = audio.response.headers
    media_type, demuxer = SDK_FORMATS[response_format]
    assert headers["content-type"] == media_type, dict(headers)
    got_demuxer, rate, channels, samples = _decode(audio.content, response_format)
    assert (got_demuxer, rate, channels) == (demuxer, int(headers["x-sample-rate"]), 1)
    if response_format == "pcm":
        assert rate == 24000
    said = samples.size / rate  # streamed: no header can carry the length before the end
    assert said > 0.2, f"{said:.3f} s decoded"
    if data.get("voxcpm_test_double_synthesizer"):
        # the double's tone is this long; lossy codecs add up to two frames (mp3: no Xing frame
        # in a stream to trim LAME's delay and padding)
        made = len(SDK_TEXT) * server_constant("TEST_DOUBLE_SECONDS_PER_CHAR")
        assert said == pytest.approx(made, abs=0.06), f"{said:.3f} s decoded, {made} s made"
        assert abs(_peak_hz(samples, rate) - 440) <= 3, "the test double's tone did not survive"
    else:
        assert np.sqrt(np.mean(samples**2)) > 1e-3, "VoxCPM2 answered silence"
    print(
        f"\nOpenAI SDK {response_format}: {seconds:.2f} s for {len(audio.content)} B "
        f"({said:.2f} s of audio, first audio after {headers['x-first-audio-seconds']} s)"
    )


def _expected_voice(name: str, aliases: dict, recordings: set[str]) -> str | None:
    """What OpenAI's voice ``name`` speaks with (the server's order; None: mapped to a missing
    recording)."""
    voice = aliases.get(name, name)
    if voice == "default" or voice in recordings:
        return voice
    return None if name in aliases else "default"


@pytest.mark.serving(UNIT)
@pytest.mark.unit(UNIT)
def test_openai_voices_resolve_as_the_settings_say(host, sdk, data, vp, running):
    """The voice each of OpenAI's names speaks with follows ``voxcpm_voice_aliases`` (and the
    recordings on the host); the SDK's default request (no response_format) is answered in mp3,
    OpenAI's default, by the voice "alloy" resolves to."""
    aliases = data.get("voxcpm_voice_aliases")
    listed = host.run(f"find {shlex.quote(vp.voices)} -maxdepth 1 -name '*.wav' -printf '%f\\n'")
    names = (n.removesuffix(".wav") for n in listed.stdout.split("\n") if n)
    recordings = {n for n in names if VOICE_NAME.match(n)}
    voices = sdk.get("/audio/voices", cast_to=object)
    want = {name: _expected_voice(name, aliases, recordings) for name in OPENAI_VOICES}
    differ = {n: v for n, v in voices["openai_voices"].items() if want.get(n) != v}
    assert not differ, (
        f"{UNIT} resolves OpenAI's voices {differ}, the settings say "
        f"{ {n: want.get(n) for n in differ} } (voxcpm_voice_aliases {aliases}, recordings "
        f"{sorted(recordings)} in {vp.voices}): re-run deploys/voxcpm.py"
    )
    audio = sdk.audio.speech.create(
        model=data.get("voxcpm_served_model_name"), voice="alloy", input=SDK_TEXT
    )
    assert audio.response.headers["content-type"] == "audio/mpeg"
    assert audio.response.headers["x-voice"] == want["alloy"]


def test_voice_aliases_name_recordings_that_exist(host, data, vp):
    for name, voice in sorted(data.get("voxcpm_voice_aliases").items()):
        if voice != "default":
            assert host.file(f"{vp.voices}/{voice}.wav").is_file, (
                f"voxcpm_voice_aliases maps {name!r} to {voice!r}, but {vp.voices}/{voice}.wav "
                "does not exist: put the recording there (readable by the voxcpm group)"
            )


@pytest.mark.serving(UNIT)
@pytest.mark.unit(UNIT)
def test_openai_sdk_gets_clear_refusals(sdk, data, running):
    model = data.get("voxcpm_served_model_name")
    with pytest.raises(openai.BadRequestError, match="VoxCPM2 has no speed control"):
        sdk.audio.speech.create(model=model, voice="alloy", input="x", speed=1.25)
    with pytest.raises(openai.BadRequestError, match="use 'mp3', 'opus', 'aac', 'flac', 'wav'"):
        sdk.audio.speech.create(model=model, voice="alloy", input="x", response_format="ogg")
    with pytest.raises(openai.NotFoundError, match="model_not_found|not served here"):
        sdk.audio.speech.create(model="tts-1", voice="alloy", input="x")
