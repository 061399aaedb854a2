#!/usr/bin/env python3
"""rigup's HTTP server for VoxCPM2 text-to-speech (the voxcpm package ships none).

An OpenAI-style speech endpoint plus health and readiness, serving the VoxCPM2 checkpoint from a
local model directory (rigup places it; the unit sets HF_HUB_OFFLINE=1, nothing is downloaded):

    POST /v1/audio/speech   {"input": "...", "voice": "alloy", "response_format": "mp3"}
                            -> 200 audio/mpeg (mono; every format of OpenAI's speech API)
    GET  /health            liveness: 200 while the process serves HTTP
    GET  /ready             readiness: 200 once the synthesizer is loaded, 503 before (or failed);
                            its "pid" lets systemd tell this server from another on the port
    GET  /v1/models         the served model name (OpenAI list shape)
    GET  /v1/audio/voices   voice names: "default" plus <voices-dir>/<name>.wav, and the voice
                            each of OpenAI's voice names resolves to

Request fields follow OpenAI's ``POST /v1/audio/speech`` (platform.openai.com/docs/api-reference/
audio/createSpeech): ``model`` (optional; when given it must be the served name), ``input`` (1 to
4096 characters, OpenAI's limit), ``voice``, ``instructions``, ``response_format`` and ``speed``.
What VoxCPM2 does with them (voxcpm 2.0.3, ``VoxCPM.generate`` in voxcpm/core.py):

- ``voice`` (a name, or OpenAI's custom-voice object ``{"id": name}``), resolved in this order:
  1. one of OpenAI's voice names (:data:`OPENAI_VOICES`: alloy, ash, ...) mapped by
     ``--voice-alias NAME=VOICE`` (rigup's setting ``voxcpm_voice_aliases``) is that voice;
  2. "default" is the model's own voice;
  3. any other name is the reference recording ``<voices-dir>/<name>.wav``, passed as
     ``reference_wav_path`` (VoxCPM2 voice cloning);
  4. one of OpenAI's voice names that is neither mapped nor recorded is the default voice, so
     clients that send "alloy" (OpenAI's SDK and chat front-ends do) are answered.
  The ``X-Voice`` header names the voice that spoke.
- ``instructions``: VoxCPM2's voice design / style control, which its README writes as a
  parenthesised description in front of the text: ``"(instructions)input"``.
- ``response_format``: OpenAI's six, encoded with PyAV (FFmpeg's encoders; :data:`FORMATS`):
  "mp3" (the default, as OpenAI's), "opus" (Ogg), "aac" (ADTS), "flac", "wav" (16-bit PCM) at
  the model's rate (48 kHz; Opus at 48 kHz, its own rate), and "pcm": raw signed 16-bit
  little-endian mono at 24 kHz, as OpenAI's pcm (resampled by FFmpeg's swresample). The
  ``X-Sample-Rate`` header gives the rate of the audio sent. The answer is streamed as it is
  synthesized and encoded (:class:`SpeechStream`; ``X-First-Audio-Seconds``: the time to the
  first audio): headers that would carry the length say "unknown" (WAV, FLAC).
- ``speed``: VoxCPM2 has no speed control; only 1.0 is accepted (use ``instructions``).
Errors use OpenAI's shape ``{"error": {"message", "type", "param", "code"}}``: 400 for a bad
request, 404 for an unknown model, 503 (with Retry-After) while loading, 500 if synthesis fails.

Synthesizers (``--synthesizer``): "voxcpm" loads VoxCPM2 with voxcpm's own API
(``VoxCPM(voxcpm_model_path=..., zipenhancer_model_path=None, enable_denoiser=False, ...)``) on
``--device``. "test-double" is a TEST DOUBLE for hosts without the model or a GPU (rigup's lab):
it loads nothing and returns a deterministic tone instead of speech; everything else (requests,
validation, voices, encoding, errors, readiness) is this same server. rigup selects it only with
the setting ``voxcpm_test_double_synthesizer`` (off by default); /ready and every audio response
say which synthesizer answered (``"synthesizer"``, header ``X-Synthesizer``).

Either way the model directory is checked at start: ``config.json`` must say
``"architecture": "voxcpm2"`` (how voxcpm 2.0.3 picks VoxCPM2Model); otherwise exit 2.

The synthesizers are in voxcpm_synth.py, the audio encoding in voxcpm_audio.py and the
streamed answer in voxcpm_stream.py, installed beside this script.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:  # imported by its path (tests): its modules are beside it
    sys.path.insert(0, _HERE)

from voxcpm_audio import FORMATS  # noqa: E402
from voxcpm_audio import PCM_SAMPLE_RATE as PCM_SAMPLE_RATE  # noqa: E402
from voxcpm_audio import mono_float as mono_float  # noqa: E402
from voxcpm_audio import output_rate as output_rate  # noqa: E402
from voxcpm_stream import SpeechStream, StreamFailed  # noqa: E402
from voxcpm_synth import Synthesizer, ToneTestDouble, VoxCPM2Synthesizer  # noqa: E402

log = logging.getLogger("voxcpm_server")

#: OpenAI's limit for ``input`` of /v1/audio/speech (API reference, createSpeech).
MAX_INPUT_CHARS = 4096
#: voxcpm 2.0.3 reads ``architecture`` from config.json to choose VoxCPM2Model (voxcpm/core.py).
VOXCPM2_ARCHITECTURE = "voxcpm2"
VOICE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
DEFAULT_VOICE = "default"
#: The voice names of OpenAI's speech API (openai 3.57.0, types/audio/speech_create_params.py).
#: rigup's settings rule for ``voxcpm_voice_aliases`` reads this tuple from this file.
OPENAI_VOICES = (
    "alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer",
    "verse", "marin", "cedar",
)  # fmt: skip
#: OpenAI's response formats, in the order its API reference lists them; mp3 is its default.
ResponseFormat = Literal["mp3", "opus", "aac", "flac", "wav", "pcm"]
DEFAULT_RESPONSE_FORMAT = "mp3"
EXIT_BAD_MODEL_DIR = 2
EXIT_BAD_ARGUMENTS = 2
EXIT_LOAD_FAILED = 3


class ApiError(Exception):
    """An error answered in OpenAI's shape."""

    def __init__(
        self, status: int, message: str, *, param: str | None = None, code: str | None = None
    ):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code


def error_body(status: int, message: str, param: str | None = None, code: str | None = None):
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


class VoiceId(BaseModel):
    """OpenAI's custom-voice object ``{"id": "..."}``: here the name of a voice."""

    model_config = ConfigDict(extra="forbid")

    id: str


class SpeechRequest(BaseModel):
    """Body of ``POST /v1/audio/speech`` (OpenAI's fields; unknown fields are refused)."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    input: str = Field(min_length=1, max_length=MAX_INPUT_CHARS)
    voice: str | VoiceId = DEFAULT_VOICE
    instructions: str | None = Field(default=None, max_length=MAX_INPUT_CHARS)
    response_format: ResponseFormat = DEFAULT_RESPONSE_FORMAT
    speed: float = Field(default=1.0, ge=0.25, le=4.0)
    stream_format: Literal["audio"] | None = None


# --------------------------------------------------------------------------------------------
# the service


def check_model_dir(model_dir: str) -> str | None:
    """Why ``model_dir`` is not a VoxCPM2 checkpoint directory, or None when it is one."""
    config = Path(model_dir) / "config.json"
    if not config.is_file():
        return f"{config} does not exist: the VoxCPM2 model is not placed there"
    try:
        arch = str(json.loads(config.read_text(encoding="utf-8")).get("architecture", ""))
    except (ValueError, OSError, AttributeError) as e:
        return f"{config} is not a JSON object: {e}"
    if arch.lower() != VOXCPM2_ARCHITECTURE:
        return f"{config} says architecture {arch!r}, not {VOXCPM2_ARCHITECTURE!r}"
    return None


#: The variable the API key is read from: rigup stores it 0600 on the host (voxcpm_api_key_env)
#: and systemd hands it over (EnvironmentFile=). Unset or empty: no key is asked for.
API_KEY_ENV = "VOXCPM_API_KEY"


def require_api_key(app: FastAPI, key: str | None) -> None:
    """With ``key``, answer every ``/v1/*`` request without ``Authorization: Bearer <key>`` with
    401 in OpenAI's error shape (OpenAI's SDK sends the header; vLLM's --api-key works alike).
    /health and /ready stay open for systemd's readiness check. Without ``key``, nothing."""
    if not key:
        return
    import hmac

    expected = f"Bearer {key}".encode()

    @app.middleware("http")
    async def _api_key(request: Request, call_next):
        given = request.headers.get("authorization", "").encode()
        if request.url.path.startswith("/v1/") and not hmac.compare_digest(given, expected):
            why = "missing or wrong API key (send Authorization: Bearer <key>)"
            return JSONResponse(error_body(401, why, code="invalid_api_key"), 401)
        return await call_next(request)


@dataclass
class ServiceState:
    """Readiness of the synthesizer: ``loading`` -> ``ready`` or ``failed``."""

    status: str = "loading"
    error: str | None = None
    load_seconds: float | None = None
    started: float = field(default_factory=time.monotonic)


@dataclass
class Settings:
    model_dir: str
    served_model_name: str = "voxcpm2"
    voices_dir: str | None = None
    #: OpenAI voice name -> voice ("default" or a recording's name): ``--voice-alias``
    voice_aliases: dict[str, str] = field(default_factory=dict)


def alias_problems(aliases: dict[str, str]) -> list[str]:
    """Why ``aliases`` (OpenAI voice name -> voice) cannot be served; empty when it can."""
    problems = []
    for name, voice in aliases.items():
        if name not in OPENAI_VOICES:
            problems.append(f"{name!r} is not one of OpenAI's voices ({', '.join(OPENAI_VOICES)})")
        if not isinstance(voice, str) or not VOICE_NAME.match(voice):
            problems.append(f"{name!r} maps to {voice!r}, not a voice name")
    return problems


def resolve_voice(
    requested: str, aliases: dict[str, str], recordings: dict[str, str]
) -> tuple[str, str | None]:
    """``(voice, reference recording or None)`` for the ``voice`` of a request.

    In order: an OpenAI voice name mapped in ``aliases`` is its voice; ``"default"`` is the
    model's own voice; a name in ``recordings`` (name -> <voices-dir>/<name>.wav) is that
    recording; an OpenAI voice name neither mapped nor recorded is the default voice. Anything
    else is an :class:`ApiError` (400) listing what there is.
    """
    voice = aliases.get(requested, requested) if requested in OPENAI_VOICES else requested
    if voice == DEFAULT_VOICE:
        return DEFAULT_VOICE, None
    if not VOICE_NAME.match(voice):
        raise ApiError(400, f"voice: invalid voice name {voice!r}", param="voice")
    if voice in recordings:
        return voice, recordings[voice]
    if requested in aliases:
        raise ApiError(
            400,
            f"voice: {requested!r} is mapped to {voice!r} on this server (voice aliases), but "
            f"there is no recording {voice}.wav in the voices directory "
            f"(voices: {', '.join([DEFAULT_VOICE, *recordings])})",
            param="voice",
        )
    if voice in OPENAI_VOICES:
        return DEFAULT_VOICE, None
    known = ", ".join([DEFAULT_VOICE, *recordings])
    raise ApiError(
        400,
        f"voice: unknown voice {voice!r} (voices: {known}; OpenAI's voice names "
        f"{', '.join(OPENAI_VOICES)} are accepted as well)",
        param="voice",
    )


def create_app(settings: Settings, synthesizer: Synthesizer, *, load_in_background=True):
    """The FastAPI app. ``load_in_background``: start loading the synthesizer in a thread when
    the app starts (the service); tests may call ``app.state.load()`` themselves."""
    state = ServiceState()
    generate_lock = threading.Lock()  # one synthesis at a time on the GPU
    on_load_failure: list = []  # callbacks (the CLI stops the server: exit EXIT_LOAD_FAILED)

    def load() -> None:
        started = time.monotonic()
        try:
            synthesizer.load()
        except Exception as e:  # reported by /ready and the log, then the process exits
            state.status, state.error = "failed", f"{type(e).__name__}: {e}"
            log.exception("loading the %s synthesizer failed", synthesizer.name)
            for callback in on_load_failure:
                callback()
            return
        state.load_seconds = round(time.monotonic() - started, 3)
        state.status = "ready"
        log.info("%s synthesizer ready in %.1f s", synthesizer.name, state.load_seconds)

    async def lifespan(app):
        if load_in_background:
            threading.Thread(target=load, name="load-synthesizer", daemon=True).start()
        yield

    app = FastAPI(title="rigup VoxCPM2 speech server", lifespan=lifespan)
    app.state.load = load
    app.state.service = state
    app.state.on_load_failure = on_load_failure

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError):
        headers = {"Retry-After": "10"} if exc.status == 503 else None
        return JSONResponse(
            error_body(exc.status, exc.message, exc.param, exc.code), exc.status, headers=headers
        )

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        loc = [str(p) for p in first.get("loc", ()) if p != "body"]
        param = loc[0] if loc else None
        message = first.get("msg", "invalid request")
        if param == "voice":  # the union str | {"id": str} reports each alternative
            message = 'voice: must be a voice name or an object {"id": "<voice name>"}'
        elif first.get("type") == "extra_forbidden":
            message = f"unknown field {param!r} (fields: {', '.join(SpeechRequest.model_fields)})"
        elif first.get("type") == "json_invalid":
            message = "the request body is not valid JSON"
        elif first.get("type") == "literal_error":
            expected = first.get("ctx", {}).get("expected", "")
            message = f"{param}: {first.get('input')!r} is not supported; use {expected}"
        elif param:
            message = f"{param}: {message}"
        return JSONResponse(error_body(400, message, param, first.get("type")), 400)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        return JSONResponse(error_body(exc.status_code, str(exc.detail)), exc.status_code)

    def readiness() -> dict:
        return {
            "status": state.status,
            "synthesizer": synthesizer.name,
            "model": settings.served_model_name,
            "model_dir": settings.model_dir,
            "sample_rate": synthesizer.sample_rate if state.status == "ready" else None,
            "load_seconds": state.load_seconds,
            "error": state.error,
            "pid": os.getpid(),  # the unit's readiness check matches it against $MAINPID
        }

    @app.get("/health")
    def health():
        return {"status": "ok", "synthesizer": synthesizer.name}

    @app.get("/ready")
    def ready():
        body = readiness()
        return JSONResponse(body, 200 if state.status == "ready" else 503)

    @app.get("/v1/models")
    def models():
        return {
            "object": "list",
            "data": [{"id": settings.served_model_name, "object": "model", "owned_by": "rigup"}],
        }

    def voice_files() -> dict[str, str]:
        if not settings.voices_dir:
            return {}
        root = Path(settings.voices_dir)
        if not root.is_dir():
            return {}
        return {p.stem: str(p) for p in sorted(root.glob("*.wav")) if VOICE_NAME.match(p.stem)}

    @app.get("/v1/audio/voices")
    def voices():
        recordings = voice_files()
        openai: dict[str, str | None] = {}
        for name in OPENAI_VOICES:
            try:
                openai[name] = resolve_voice(name, settings.voice_aliases, recordings)[0]
            except ApiError:  # mapped to a recording that is not there
                openai[name] = None
        return {
            "voices": [DEFAULT_VOICE, *[v for v in recordings if v != DEFAULT_VOICE]],
            "openai_voices": openai,
        }

    @app.post("/v1/audio/speech")
    def speech(body: SpeechRequest):
        if body.model is not None and body.model != settings.served_model_name:
            raise ApiError(
                404,
                f"model {body.model!r} is not served here; this server serves "
                f"{settings.served_model_name!r}",
                param="model",
                code="model_not_found",
            )
        if not body.input.strip():
            raise ApiError(400, "input: must contain text, not only whitespace", param="input")
        if body.speed != 1.0:
            raise ApiError(
                400,
                f"speed: VoxCPM2 has no speed control, only 1.0 is accepted (got {body.speed}); "
                "ask for a pace in 'instructions' instead, e.g. 'slightly faster'",
                param="speed",
            )
        requested = body.voice.id if isinstance(body.voice, VoiceId) else body.voice
        voice, reference = resolve_voice(requested, settings.voice_aliases, voice_files())
        text = body.input
        if body.instructions:
            if any(c in body.instructions for c in "()"):
                raise ApiError(
                    400,
                    "instructions: must not contain parentheses (VoxCPM2 reads the "
                    "description between them)",
                    param="instructions",
                )
            text = f"({body.instructions.strip()}){text}"
        if state.status != "ready":
            status = 503
            why = (
                f"the model failed to load: {state.error}"
                if state.status == "failed"
                else "the model is still loading; retry later"
            )
            raise ApiError(status, why, code=f"model_{state.status}")

        stream = SpeechStream(synthesizer, generate_lock, text, reference, body.response_format)
        try:
            first = stream.start()
        except StreamFailed as e:  # no audio could be made: still an error answer
            raise ApiError(500, str(e)) from None
        return StreamingResponse(
            stream.body(first),
            media_type=FORMATS[body.response_format].media_type,
            headers={
                "X-Synthesizer": synthesizer.name,
                "X-Voice": voice,
                "X-Sample-Rate": str(stream.out_rate),
                "X-First-Audio-Seconds": f"{stream.first_audio_s:.3f}",
            },
        )

    return app


# --------------------------------------------------------------------------------------------
# command line


def parse_args(argv: list[str]) -> argparse.Namespace:
    cli = argparse.ArgumentParser(prog="voxcpm_server.py", description=__doc__.split("\n")[0])
    cli.add_argument("--model-dir", required=True, help="placed VoxCPM2 checkpoint directory")
    cli.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback)")
    cli.add_argument("--port", type=int, default=8100)
    cli.add_argument("--served-model-name", default="voxcpm2")
    cli.add_argument("--voices-dir", default=None, help="reference recordings <name>.wav")
    cli.add_argument(
        "--voice-alias",
        action="append",
        default=[],
        metavar="OPENAI_VOICE=VOICE",
        help="answer one of OpenAI's voice names with a voice of this server ('default' or a "
        "recording's name); repeatable. Unmapped OpenAI voice names speak with the default voice",
    )
    cli.add_argument("--device", default="cuda", help="torch device for VoxCPM2 (cuda, cpu, ...)")
    cli.add_argument("--no-optimize", action="store_true", help="skip torch.compile")
    cli.add_argument("--cfg-value", type=float, default=2.0, help="voxcpm's default: 2.0")
    cli.add_argument("--inference-timesteps", type=int, default=10, help="voxcpm's default: 10")
    cli.add_argument(
        "--synthesizer",
        choices=("voxcpm", "test-double"),
        default="voxcpm",
        help="test-double: a tone instead of speech, for hosts without the model (tests only)",
    )
    cli.add_argument(
        "--test-double-load-seconds",
        type=float,
        default=2.0,
        help="how long the test double pretends to load",
    )
    return cli.parse_args(argv)


def main(argv: list[str]) -> int:
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    problem = check_model_dir(args.model_dir)
    if problem:
        print(f"voxcpm_server: {problem}", file=sys.stderr, flush=True)
        return EXIT_BAD_MODEL_DIR
    aliases = dict(a.partition("=")[::2] for a in args.voice_alias)
    problems = alias_problems(aliases)
    if problems:
        print(f"voxcpm_server: --voice-alias: {'; '.join(problems)}", file=sys.stderr, flush=True)
        return EXIT_BAD_ARGUMENTS
    if args.synthesizer == "test-double":
        log.warning("TEST DOUBLE synthesizer selected: a tone is returned instead of speech")
        synthesizer: Synthesizer = ToneTestDouble(args.test_double_load_seconds)
    else:
        synthesizer = VoxCPM2Synthesizer(
            args.model_dir,
            args.device,
            not args.no_optimize,
            args.cfg_value,
            args.inference_timesteps,
        )
    settings = Settings(args.model_dir, args.served_model_name, args.voices_dir, aliases)
    for name, voice in sorted(aliases.items()):
        recording = Path(args.voices_dir or ".") / f"{voice}.wav"
        if voice != DEFAULT_VOICE and not recording.is_file():
            log.warning("voice %r is mapped to %r, but %s does not exist", name, voice, recording)
    app = create_app(settings, synthesizer)
    require_api_key(app, os.environ.get(API_KEY_ENV))
    server = uvicorn.Server(
        uvicorn.Config(app, host=args.host, port=args.port, log_level="info", access_log=True)
    )

    def stop() -> None:
        server.should_exit = True

    app.state.on_load_failure.append(stop)
    server.run()
    return EXIT_LOAD_FAILED if app.state.service.status == "failed" else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
