"""The speech server's streamed answers (voxcpm_server.py): each answer of /v1/audio/speech is
synthesized chunk by chunk, encoded as it comes and sent at once."""

from __future__ import annotations

import logging
import queue
import threading
import time

import anyio.to_thread
import numpy as np
from voxcpm_audio import StreamEncoder, mono_float

log = logging.getLogger("voxcpm_server")

_END = object()  # what the producer puts last on a SpeechStream's queue


class StreamFailed(Exception):
    """No audio could be made; the message says what failed (for the error answer)."""


class EncodingFailed(StreamFailed):
    """FFmpeg refused the audio (e.g. a rate no encoder takes)."""

    def __init__(self, response_format: str, cause: Exception):
        super().__init__(f"encoding as {response_format} failed: {type(cause).__name__}: {cause}")


class SpeechStream:
    """One answer of /v1/audio/speech, sent as it is made: a producer thread holds the GPU lock
    (one synthesis at a time), takes each chunk from the synthesizer's ``synthesize_stream``,
    encodes it (:class:`voxcpm_audio.StreamEncoder`) and queues the bytes; the response sends
    them as they come.

    :meth:`start` waits for the first bytes, so a synthesis or encoding that fails before any
    audio exists is still an error answer (it raises :class:`StreamFailed`). A failure after that can
    only cut the response short: it is logged and the connection closed, and the client sees an
    incomplete body. A client that goes away stops the synthesis at its next chunk.
    """

    def __init__(self, synthesizer, lock, text, reference, response_format):
        self.synthesizer, self.lock = synthesizer, lock
        self.text, self.reference, self.response_format = text, reference, response_format
        self.out_rate = 0
        self.first_audio_s = 0.0
        self._queue: queue.Queue = queue.Queue()
        self._stopped = threading.Event()

    def _produce(self) -> None:
        started = time.monotonic()
        sent = False
        with self.lock:
            chunks = iter(())
            try:
                chunks = self.synthesizer.synthesize_stream(self.text, self.reference)
                encoder = self._encoding(
                    StreamEncoder, self.response_format, self.synthesizer.sample_rate
                )
                self.out_rate = encoder.out_rate
                for chunk in chunks:
                    if np.asarray(chunk).size == 0:
                        continue  # a step that made no samples
                    data = self._encoding(encoder.feed, mono_float(chunk))
                    if data or not sent:
                        if not sent:
                            self.first_audio_s = time.monotonic() - started
                        self._queue.put(data)
                        sent = True
                    if self._stopped.is_set():
                        log.info("client gone: synthesis stopped after %.1f s of audio",
                                 encoder.samples_in / encoder.rate)  # fmt: skip
                        return
                if not sent:
                    raise ValueError("the synthesizer returned no audio")
                self._queue.put(self._encoding(encoder.close))
                log.info(
                    "%s: %.2f s of audio in %.2f s (first audio after %.2f s)",
                    self.response_format,
                    encoder.samples_in / encoder.rate,
                    time.monotonic() - started,
                    self.first_audio_s,
                )
            except Exception as e:
                what = "encoding" if isinstance(e, EncodingFailed) else "synthesis"
                log.exception(f"{what} failed" + (" after audio was sent" if sent else ""))
                self._queue.put(e)
            finally:
                close = getattr(chunks, "close", None)
                if close:
                    close()
                self._queue.put(_END)

    def _encoding(self, step, *args):
        try:
            return step(*args)
        except Exception as e:
            raise EncodingFailed(self.response_format, e) from e

    def start(self) -> bytes:
        """Start the synthesis; the first bytes. Raises :class:`StreamFailed` when it fails
        before any audio."""
        threading.Thread(target=self._produce, name="synthesize", daemon=True).start()
        first = self._queue.get()
        if isinstance(first, StreamFailed):
            raise first
        if isinstance(first, Exception):
            raise StreamFailed(f"synthesis failed: {type(first).__name__}: {first}") from first
        return first

    async def body(self, first: bytes):
        """The response body: ``first``, then each piece as the producer queues it."""
        try:
            yield first
            while True:
                item = await anyio.to_thread.run_sync(self._queue.get)
                if item is _END:
                    return
                if isinstance(item, Exception):
                    raise RuntimeError("synthesis failed after audio was sent") from item
                if item:
                    yield item
        finally:
            self._stopped.set()
