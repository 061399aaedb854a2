"""The speech server's audio encoding (voxcpm_server.py): OpenAI's response formats encoded with
PyAV, mono float samples, output rates."""

from __future__ import annotations

import io
from dataclasses import dataclass

import av
import numpy as np

#: OpenAI's pcm: "raw samples in 24kHz (16-bit signed, low-endian), without the header".
PCM_SAMPLE_RATE = 24_000


@dataclass(frozen=True)
class AudioFormat:
    """How one ``response_format`` is made with FFmpeg (through PyAV)."""

    container: str  # FFmpeg muxer
    codec: str  # FFmpeg encoder
    sample_format: str  # a sample format the encoder takes
    media_type: str  # Content-Type of the response
    bit_rate: int | None = None  # lossy codecs only
    rate: int | None = None  # fixed output rate; None: the synthesizer's (if the encoder takes it)


#: OpenAI's response formats. Bit rates are rigup's choice for mono speech (OpenAI publishes
#: none); Opus is 48 kHz, the rate Opus decoders always output.
FORMATS: dict[str, AudioFormat] = {
    "mp3": AudioFormat("mp3", "libmp3lame", "s16p", "audio/mpeg", bit_rate=128_000),
    "opus": AudioFormat("ogg", "libopus", "flt", "audio/ogg", bit_rate=64_000, rate=48_000),
    "aac": AudioFormat("adts", "aac", "fltp", "audio/aac", bit_rate=128_000),
    "flac": AudioFormat("flac", "flac", "s16", "audio/flac"),
    "wav": AudioFormat("wav", "pcm_s16le", "s16", "audio/wav"),
    "pcm": AudioFormat("s16le", "pcm_s16le", "s16", "audio/pcm", rate=PCM_SAMPLE_RATE),
}


def mono_float(waveform: np.ndarray) -> np.ndarray:
    """A synthesizer's waveform (any shape, nominally in [-1, 1]) as mono float32 in [-1, 1].

    Values outside [-1, 1] are clipped; NaN becomes 0. Raises ``ValueError`` for an empty array.
    """
    audio = np.asarray(waveform, dtype=np.float32).reshape(-1)
    if audio.size == 0:
        raise ValueError("the synthesizer returned no audio")
    audio = np.nan_to_num(audio, nan=0.0, posinf=1.0, neginf=-1.0)
    return np.clip(audio, -1.0, 1.0)


def output_rate(fmt: AudioFormat, rate: int) -> int:
    """The rate ``fmt`` is sent at for audio made at ``rate``: the format's own rate, else
    ``rate`` when the encoder takes it, else the encoder's nearest rate above (or its highest)."""
    if fmt.rate:
        return fmt.rate
    rates = av.Codec(fmt.codec, "w").audio_rates
    if not rates or rate in rates:
        return rate
    above = [r for r in rates if r > rate]
    return min(above) if above else max(rates)


def encode(waveform: np.ndarray, rate: int, response_format: str) -> tuple[bytes, int]:
    """``(file bytes, their sample rate)``: mono audio at ``rate`` Hz encoded as
    ``response_format`` (a key of :data:`FORMATS`) by FFmpeg through PyAV; the rate and the
    sample format are converted by FFmpeg's resampler (swresample, band-limited)."""
    fmt = FORMATS[response_format]
    audio = mono_float(waveform)
    out_rate = output_rate(fmt, rate)
    buf = io.BytesIO()
    with av.open(buf, mode="w", format=fmt.container) as out:
        stream = out.add_stream(fmt.codec, rate=out_rate, layout="mono")
        if fmt.bit_rate:
            stream.bit_rate = fmt.bit_rate
        frame = av.AudioFrame.from_ndarray(audio[None, :], format="flt", layout="mono")
        frame.sample_rate = rate
        resampler = av.AudioResampler(
            format=fmt.sample_format,
            layout="mono",
            rate=out_rate,
            frame_size=stream.codec_context.frame_size or None,
        )
        for piece in [*resampler.resample(frame), *resampler.resample(None)]:
            out.mux(stream.encode(piece))
        out.mux(stream.encode(None))
    return buf.getvalue(), out_rate
