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
    POST /release           frees the model's GPU memory, the server stays up (/ready: 503
                            "released"); POST /reload loads it again (voxcpm_memory.py)

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

The request and error shapes and the voices are in voxcpm_api.py, the synthesizers in
voxcpm_synth.py, the audio encoding in voxcpm_audio.py and the streamed answer in
voxcpm_stream.py, installed beside this script.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:  # imported by its path (tests): its modules are beside it
    sys.path.insert(0, _HERE)

from voxcpm_api import (  # noqa: E402  # noqa: E402
    DEFAULT_VOICE,
    OPENAI_VOICES,
    ApiError,
    SpeechRequest,
    VoiceId,
    alias_problems,
    check_request,
    error_body,
    resolve_voice,
    speech_text,
    validation_error,
    voice_files,
)
from voxcpm_api import MAX_INPUT_CHARS as MAX_INPUT_CHARS  # noqa: E402
from voxcpm_api import VOICE_NAME as VOICE_NAME  # noqa: E402
from voxcpm_audio import FORMATS  # noqa: E402
from voxcpm_audio import PCM_SAMPLE_RATE as PCM_SAMPLE_RATE  # noqa: E402
from voxcpm_audio import mono_float as mono_float  # noqa: E402
from voxcpm_audio import output_rate as output_rate  # noqa: E402
from voxcpm_memory import ADMIN_PATHS, add_memory_routes  # noqa: E402
from voxcpm_stream import SpeechStream, StreamFailed  # noqa: E402
from voxcpm_synth import Synthesizer, ToneTestDouble, VoxCPM2Synthesizer  # noqa: E402

log = logging.getLogger("voxcpm_server")

#: voxcpm 2.0.3 reads ``architecture`` from config.json to choose VoxCPM2Model (voxcpm/core.py).
VOXCPM2_ARCHITECTURE = "voxcpm2"
EXIT_BAD_MODEL_DIR = 2
EXIT_BAD_ARGUMENTS = 2
EXIT_LOAD_FAILED = 3


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
    """With ``key``, answer every ``/v1/*`` request and the release and reload routes
    (:data:`voxcpm_memory.ADMIN_PATHS`) without ``Authorization: Bearer <key>`` with 401 in
    OpenAI's error shape (OpenAI's SDK sends the header; vLLM's --api-key works alike).
    /health and /ready stay open for systemd's readiness check. Without ``key``, nothing."""
    if not key:
        return
    import hmac

    expected = f"Bearer {key}".encode()

    @app.middleware("http")
    async def _api_key(request: Request, call_next):
        given = request.headers.get("authorization", "").encode()
        path = request.url.path
        guarded = path.startswith("/v1/") or path.rstrip("/") in ADMIN_PATHS
        if guarded and not hmac.compare_digest(given, expected):
            why = "missing or wrong API key (send Authorization: Bearer <key>)"
            return JSONResponse(error_body(401, why, code="invalid_api_key"), 401)
        return await call_next(request)


@dataclass
class ServiceState:
    """Readiness of the synthesizer: ``loading`` -> ``ready`` or ``failed``; ``ready`` ->
    ``released`` (POST /release) -> ``loading`` (POST /reload)."""

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


def loader(state: ServiceState, synthesizer: Synthesizer, on_load_failure: list):
    """The function that loads ``synthesizer`` once, recording in ``state`` "ready" with the
    seconds it took, or "failed" with the error (logged) and then calling each of
    ``on_load_failure`` (the CLI's stops the server: exit EXIT_LOAD_FAILED)."""

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

    return load


def add_error_handlers(app: FastAPI) -> None:
    """Every error in OpenAI's shape: rigup's :class:`ApiError` (503 with Retry-After), a
    request that fails validation (400), and Starlette's own (404 of an unknown path, ...)."""

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError):
        headers = {"Retry-After": "10"} if exc.status == 503 else None
        return JSONResponse(
            error_body(exc.status, exc.message, exc.param, exc.code), exc.status, headers=headers
        )

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        message, param, code = validation_error(exc.errors())
        return JSONResponse(error_body(400, message, param, code), 400)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        return JSONResponse(error_body(exc.status_code, str(exc.detail)), exc.status_code)


def require_ready(state: ServiceState) -> None:
    """Raise :class:`ApiError` 503 (``model_loading``, ``model_failed`` with the error, or
    ``model_released``) until the synthesizer is loaded."""
    if state.status == "ready":
        return
    why = {
        "failed": f"the model failed to load: {state.error}",
        "released": "the model is released (POST /reload loads it); retry later",
    }.get(state.status, "the model is still loading; retry later")
    raise ApiError(503, why, code=f"model_{state.status}")


def add_status_routes(
    app: FastAPI, settings: Settings, synthesizer: Synthesizer, state: ServiceState
) -> None:
    """``GET /health``, ``/ready``, ``/v1/models`` and ``/v1/audio/voices``."""

    @app.get("/health")
    def health():
        return {"status": "ok", "synthesizer": synthesizer.name}

    @app.get("/ready")
    def ready():
        body = {
            "status": state.status,
            "synthesizer": synthesizer.name,
            "model": settings.served_model_name,
            "model_dir": settings.model_dir,
            "sample_rate": synthesizer.sample_rate if state.status == "ready" else None,
            "load_seconds": state.load_seconds,
            "error": state.error,
            "pid": os.getpid(),  # the unit's readiness check matches it against $MAINPID
        }
        return JSONResponse(body, 200 if state.status == "ready" else 503)

    @app.get("/v1/models")
    def models():
        return {
            "object": "list",
            "data": [{"id": settings.served_model_name, "object": "model", "owned_by": "rigup"}],
        }

    @app.get("/v1/audio/voices")
    def voices():
        recordings = voice_files(settings.voices_dir)
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


def add_speech_route(
    app: FastAPI,
    settings: Settings,
    synthesizer: Synthesizer,
    state: ServiceState,
    generate_lock: threading.Lock,
) -> None:
    """``POST /v1/audio/speech``: one synthesis at a time on the GPU (``generate_lock``),
    streamed as it is encoded (:class:`SpeechStream`), an error answer when no audio could be
    made (503 when the model was released meanwhile)."""

    @app.post("/v1/audio/speech")
    def speech(body: SpeechRequest):
        check_request(body, settings.served_model_name)
        requested = body.voice.id if isinstance(body.voice, VoiceId) else body.voice
        voice, reference = resolve_voice(
            requested, settings.voice_aliases, voice_files(settings.voices_dir)
        )
        text = speech_text(body)
        require_ready(state)
        stream = SpeechStream(synthesizer, generate_lock, text, reference, body.response_format)
        try:
            first = stream.start()
        except StreamFailed as e:  # no audio could be made: still an error answer
            require_ready(state)  # released between the check above and the synthesis
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


def create_app(settings: Settings, synthesizer: Synthesizer, *, load_in_background=True):
    """The FastAPI app. ``load_in_background``: start loading the synthesizer in a thread when
    the app starts (the service); tests may call ``app.state.load()`` themselves."""
    state = ServiceState()
    on_load_failure: list = []  # callbacks (the CLI stops the server: exit EXIT_LOAD_FAILED)
    load = loader(state, synthesizer, on_load_failure)

    async def lifespan(app):
        if load_in_background:
            threading.Thread(target=load, name="load-synthesizer", daemon=True).start()
        yield

    app = FastAPI(title="rigup VoxCPM2 speech server", lifespan=lifespan)
    app.state.load = load
    app.state.service = state
    app.state.on_load_failure = on_load_failure
    add_error_handlers(app)
    add_status_routes(app, settings, synthesizer, state)
    generate_lock = threading.Lock()
    add_speech_route(app, settings, synthesizer, state, generate_lock)
    add_memory_routes(app, synthesizer, state, generate_lock, load)
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
