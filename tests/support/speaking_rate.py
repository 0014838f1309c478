"""LiveKit's speaking-rate detector with its STFT in one numpy call, for the tests.

The transcript synchronizer (in every RoomIO deployment, and in the tests that put it in
the output chain) estimates the agent's speaking rate from its audio ten times a second:
an STFT over the last second in 25 ms frames, one ``rfft`` per frame in a Python loop,
then the spectral flux frame by frame. In the realtime matrix that loop was half the CPU
of a cell with the synchronizer. `vectorized_speaking_rate` computes the same frames with
one ``rfft`` and the flux in one pass, summed in the same order: the same values, bit for
bit (``tests/sim/test_speaking_rate.py``), so the synchronizer behaves as LiveKit's own.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from livekit.agents.voice.transcription._speaking_rate import SpeakingRateStream

LIVEKIT_STFT = SpeakingRateStream._stft
LIVEKIT_SPECTRAL_FLUX = SpeakingRateStream._spectral_flux
"""LiveKit's own methods, to compare against."""


def stft(
    self: SpeakingRateStream, audio: np.ndarray[Any, Any], frame_length: int, hop_length: int
) -> np.ndarray[Any, Any]:
    """``SpeakingRateStream._stft``: frames as columns, every frame in one ``rfft``."""
    num_frames = (len(audio) - frame_length) // hop_length + 1
    if num_frames <= 0:  # as LiveKit's: empty, or an error for a negative count
        return np.zeros((frame_length // 2 + 1, num_frames), dtype=np.complex128)
    window = np.hanning(frame_length)
    scale_factor = 1.0 / np.sqrt(np.sum(window**2))
    frames = np.lib.stride_tricks.sliding_window_view(audio, frame_length)[::hop_length]
    return (np.fft.rfft(frames[:num_frames] * window, axis=1) * scale_factor).T


def spectral_flux(
    self: SpeakingRateStream, audio: np.ndarray[Any, Any], sample_rate: int
) -> float:
    """``SpeakingRateStream._spectral_flux``: each frame's change summed along a row
    (LiveKit sums each column on its own: the same order, the same rounding)."""
    frame_length = int(sample_rate * 0.025)  # 25 ms, half overlapping, as LiveKit's
    magnitudes = np.abs(self._stft(audio, frame_length, frame_length // 2))
    if magnitudes.shape[1] < 2:
        return 0.0
    changes = np.ascontiguousarray(np.abs(magnitudes[:, 1:] - magnitudes[:, :-1]).T)
    return float(np.mean(changes.sum(axis=1)))


@contextmanager
def vectorized_speaking_rate() -> Iterator[None]:
    """LiveKit's speaking-rate detector runs `stft` and `spectral_flux` meanwhile."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SpeakingRateStream, "_stft", stft)
        patch.setattr(SpeakingRateStream, "_spectral_flux", spectral_flux)
        yield
