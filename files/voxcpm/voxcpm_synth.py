"""The speech server's synthesizers (voxcpm_server.py's ``--synthesizer``): VoxCPM2 through
voxcpm's own API, and the tone test double."""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Iterator
from typing import Protocol

import numpy as np

#: VoxCPM2's output rate (voxcpm 2.0.3 README: "48kHz"); the real model reports its own.
VOXCPM2_SAMPLE_RATE = 48_000
#: the test double's tone per input character (testinfra reads it to know the length to expect)
TEST_DOUBLE_SECONDS_PER_CHAR = 0.05


class Synthesizer(Protocol):
    """What the server needs from a text-to-speech engine."""

    name: str
    sample_rate: int

    def load(self) -> None: ...

    def release(self) -> dict:
        """Free the model (its GPU memory); ``load`` brings it back. What was freed, e.g.
        ``{"cuda_reserved_mib_before": 7800.0, "cuda_reserved_mib_after": 0.0}`` ({} when
        nothing is measured)."""
        ...

    def synthesize(self, text: str, reference_wav: str | None) -> np.ndarray:
        """Mono waveform, float32 in [-1, 1], at ``sample_rate``."""
        ...

    def synthesize_stream(self, text: str, reference_wav: str | None) -> Iterator[np.ndarray]:
        """The same waveform in chunks, each yielded as soon as it is made."""
        ...


class VoxCPM2Synthesizer:
    """VoxCPM2 through voxcpm's own API (voxcpm 2.0.3: voxcpm/core.py ``VoxCPM``)."""

    name = "voxcpm"

    def __init__(self, model_dir: str, device: str, optimize: bool, cfg_value: float, steps: int):
        self.model_dir, self.device, self.optimize = model_dir, device, optimize
        self.cfg_value, self.steps = cfg_value, steps
        self.sample_rate = VOXCPM2_SAMPLE_RATE
        self._model = None

    def load(self) -> None:
        from voxcpm import VoxCPM  # heavy (torch); imported only by the real synthesizer

        # The denoiser (ZipEnhancer) would be fetched from ModelScope: not loaded, as in
        # voxcpm's README example (load_denoiser=False).
        self._model = VoxCPM(
            voxcpm_model_path=self.model_dir,
            zipenhancer_model_path=None,
            enable_denoiser=False,
            optimize=self.optimize,
            device=self.device,
        )
        self.sample_rate = int(self._model.tts_model.sample_rate)

    def release(self) -> dict:
        """Drop the model and hand its cached blocks back to the driver
        (``torch.cuda.empty_cache``); on a CUDA device the memory torch held before and after,
        in MiB (``torch.cuda.memory_reserved``: the CUDA context itself, ~0.5 GiB, stays)."""
        import torch

        cuda = str(self.device).startswith("cuda") and torch.cuda.is_available()
        before = torch.cuda.memory_reserved() / 2**20 if cuda else None
        self._model = None
        gc.collect()
        if not cuda:
            return {}
        torch.cuda.empty_cache()
        return {
            "cuda_reserved_mib_before": round(before, 1),
            "cuda_reserved_mib_after": round(torch.cuda.memory_reserved() / 2**20, 1),
        }

    def synthesize(self, text: str, reference_wav: str | None) -> np.ndarray:
        return self._model.generate(
            text=text,
            reference_wav_path=reference_wav,
            cfg_value=self.cfg_value,
            inference_timesteps=self.steps,
        )

    def synthesize_stream(self, text: str, reference_wav: str | None) -> Iterator[np.ndarray]:
        """voxcpm's ``generate_streaming`` (voxcpm 2.0.3, voxcpm/core.py): a chunk per
        generation step, as the model decodes it. voxcpm retries a bad case (audio far longer
        than its text) only when not streaming (model/voxcpm.py turns ``retry_badcase`` off, with
        a warning, in streaming mode): it is passed off here, since sent audio cannot be taken
        back; ``max_len`` still bounds a runaway generation."""
        return self._model.generate_streaming(
            text=text,
            reference_wav_path=reference_wav,
            cfg_value=self.cfg_value,
            inference_timesteps=self.steps,
            retry_badcase=False,
        )


class ToneTestDouble:
    """TEST DOUBLE standing in for VoxCPM2 where the model cannot run (no weights, no GPU).

    Loads nothing (waits ``load_seconds`` so readiness can be observed before and after "load")
    and returns a deterministic 440 Hz tone, 50 ms per input character (at most 30 s), at 48 kHz;
    streamed in chunks of ``chunk_seconds``. After ``release`` it refuses to synthesize until
    the next ``load``, as the real model would have nothing to run.
    """

    name = "test-double"
    sample_rate = VOXCPM2_SAMPLE_RATE
    seconds_per_char = TEST_DOUBLE_SECONDS_PER_CHAR
    max_seconds = 30.0
    chunk_seconds = 0.2

    def __init__(self, load_seconds: float = 0.0):
        self.load_seconds = load_seconds
        self.released = False

    def load(self) -> None:
        time.sleep(self.load_seconds)
        self.released = False

    def release(self) -> dict:
        """Forget the (pretend) model: synthesis fails until the next ``load``."""
        self.released = True
        return {}

    def synthesize(self, text: str, reference_wav: str | None) -> np.ndarray:
        if self.released:
            raise RuntimeError("the test double's model is released")
        seconds = min(self.max_seconds, self.seconds_per_char * len(text))
        t = np.arange(int(seconds * self.sample_rate), dtype=np.float32) / self.sample_rate
        return (0.3 * np.sin(2 * math.pi * 440.0 * t)).astype(np.float32)

    def synthesize_stream(self, text: str, reference_wav: str | None) -> Iterator[np.ndarray]:
        audio = self.synthesize(text, reference_wav)
        step = max(1, int(self.chunk_seconds * self.sample_rate))
        for start in range(0, audio.size, step):
            yield audio[start : start + step]
