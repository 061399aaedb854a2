"""The speech server's audio encoding (voxcpm_server.py): OpenAI's response formats encoded with
PyAV, chunk by chunk as the synthesizer makes the audio (:class:`StreamEncoder`), mono float
samples, output rates."""

from __future__ import annotations

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
    muxer_options: tuple[tuple[str, str], ...] = ()  # FFmpeg muxer options


#: Ogg pages of at most 100 ms, so Opus audio leaves as it is encoded: FFmpeg's Ogg muxer holds
#: a page for up to ``page_duration`` microseconds, 1 s by default (libavformat/oggenc.c,
#: "page_duration"). Each page costs a 27-byte header and more: ~2 kb/s at 100 ms.
OGG_PAGE_MICROSECONDS = 100_000

#: OpenAI's response formats. Bit rates are rigup's choice for mono speech (OpenAI publishes
#: none); Opus is 48 kHz, the rate Opus decoders always output.
FORMATS: dict[str, AudioFormat] = {
    "mp3": AudioFormat("mp3", "libmp3lame", "s16p", "audio/mpeg", bit_rate=128_000),
    "opus": AudioFormat(
        "ogg",
        "libopus",
        "flt",
        "audio/ogg",
        bit_rate=64_000,
        rate=48_000,
        muxer_options=(("page_duration", str(OGG_PAGE_MICROSECONDS)),),
    ),
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


class _Sink:
    """A write-only file for FFmpeg's muxer, with no ``seek``: the muxer writes the stream as it
    goes and never goes back, so what it wrote can be sent at once. Headers that would carry the
    length are written as unknown: WAV's RIFF and data sizes 0xFFFFFFFF, FLAC's total samples
    0 (both mean "unknown" to their decoders: the streaming forms FFmpeg itself writes to a pipe)."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def write(self, data) -> int:
        self._parts.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        out = b"".join(self._parts)
        self._parts.clear()
        return out


class StreamEncoder:
    """Mono audio at ``rate`` Hz encoded as ``response_format`` (a key of :data:`FORMATS`) by
    FFmpeg through PyAV, chunk by chunk: :meth:`feed` takes the next waveform chunk and returns
    the bytes the muxer has written so far (b"" while the encoder still holds them), and
    :meth:`close` the rest. Rate and sample format are converted by FFmpeg's resampler
    (swresample, band-limited), which keeps its state across chunks. ``out_rate`` is the rate
    sent (:func:`output_rate`)."""

    #: bytes FFmpeg's I/O layer gathers before it hands them to the sink
    BUFFER_BYTES = 4096

    def __init__(self, response_format: str, rate: int):
        self.format = fmt = FORMATS[response_format]
        self.rate = rate
        self.out_rate = output_rate(fmt, rate)
        self.samples_in = 0
        self._sink = _Sink()
        self._out = av.open(
            self._sink,
            mode="w",
            format=fmt.container,
            buffer_size=self.BUFFER_BYTES,
            options=dict(fmt.muxer_options),
        )
        self._stream = self._out.add_stream(fmt.codec, rate=self.out_rate, layout="mono")
        if fmt.bit_rate:
            self._stream.bit_rate = fmt.bit_rate
        self._resampler = av.AudioResampler(
            format=fmt.sample_format,
            layout="mono",
            rate=self.out_rate,
            frame_size=self._stream.codec_context.frame_size or None,
        )

    def feed(self, waveform: np.ndarray) -> bytes:
        """Encode the next chunk (any shape, see :func:`mono_float`); the bytes ready to send."""
        audio = mono_float(waveform)
        self.samples_in += audio.size
        frame = av.AudioFrame.from_ndarray(audio[None, :], format="flt", layout="mono")
        frame.sample_rate = self.rate
        for piece in self._resampler.resample(frame):
            self._out.mux(self._stream.encode(piece))
        return self._sink.take()

    def close(self) -> bytes:
        """Flush the resampler, the encoder and the muxer (its trailer); the last bytes."""
        for piece in self._resampler.resample(None):
            self._out.mux(self._stream.encode(piece))
        self._out.mux(self._stream.encode(None))
        self._out.close()
        return self._sink.take()


def encode(waveform: np.ndarray, rate: int, response_format: str) -> tuple[bytes, int]:
    """``(file bytes, their sample rate)``: a whole waveform through :class:`StreamEncoder`
    (the same bytes the server streams)."""
    encoder = StreamEncoder(response_format, rate)
    return encoder.feed(waveform) + encoder.close(), encoder.out_rate
