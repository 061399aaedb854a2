"""The request side of rigup's VoxCPM2 speech server (voxcpm_server.py, installed beside it):
OpenAI's speech request and error shapes, the voices and how a request's voice resolves, and
the checks of a request before any synthesis. Pure: no FastAPI app, no synthesizer."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

#: OpenAI's limit for ``input`` of /v1/audio/speech (API reference, createSpeech).
MAX_INPUT_CHARS = 4096
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


def validation_error(errors: list[dict]) -> tuple[str, str | None, str | None]:
    """``(message, param, code)`` of OpenAI's error shape for FastAPI's validation ``errors``
    (their first), in the request's terms: the field, what it accepts."""
    first = errors[0] if errors else {}
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
    return message, param, first.get("type")


def voice_files(voices_dir: str | None) -> dict[str, str]:
    """The reference recordings: ``{name: <voices_dir>/<name>.wav}`` of each valid name, sorted
    ({} without a voices directory)."""
    if not voices_dir:
        return {}
    root = Path(voices_dir)
    if not root.is_dir():
        return {}
    return {p.stem: str(p) for p in sorted(root.glob("*.wav")) if VOICE_NAME.match(p.stem)}


def check_request(body: SpeechRequest, served_model_name: str) -> None:
    """Raise :class:`ApiError` for a request for another model (404), with blank input or a
    speed other than 1.0 (400): what no voice or instructions can fix."""
    if body.model is not None and body.model != served_model_name:
        raise ApiError(
            404,
            f"model {body.model!r} is not served here; this server serves {served_model_name!r}",
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


def speech_text(body: SpeechRequest) -> str:
    """The text VoxCPM2 speaks for a request: its ``input``, after ``instructions`` in the
    parentheses VoxCPM2 reads a voice description from (its README's voice design). Raises
    :class:`ApiError` (400) for parentheses in the instructions."""
    if not body.instructions:
        return body.input
    if any(c in body.instructions for c in "()"):
        raise ApiError(
            400,
            "instructions: must not contain parentheses (VoxCPM2 reads the "
            "description between them)",
            param="instructions",
        )
    return f"({body.instructions.strip()}){body.input}"
