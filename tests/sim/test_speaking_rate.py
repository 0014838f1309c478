"""The suite's speaking-rate detector (``support.speaking_rate``) gives LiveKit's values,
bit for bit: the transcript synchronizer paces its text the same either way."""

from __future__ import annotations

import numpy as np
import pytest
from livekit.agents.voice.transcription._speaking_rate import SpeakingRateStream

from support.speaking_rate import (
    LIVEKIT_SPECTRAL_FLUX,
    LIVEKIT_STFT,
    spectral_flux,
    stft,
)


def _audio(kind: str, seconds: float) -> np.ndarray:
    samples = int(24000 * seconds)
    if kind == "noise":
        rng = np.random.default_rng(7)
        return (rng.standard_normal(samples) * 0.3).astype(np.float32)
    # the realtime test server's voice: a 220 Hz tone
    return (0.3 * np.sin(2 * np.pi * 220 * np.arange(samples) / 24000)).astype(np.float32)


@pytest.mark.parametrize("kind", ["noise", "tone"])
@pytest.mark.parametrize("seconds", [0.02, 0.5, 1.0, 1.7])
def test_the_same_values_as_livekits_detector(kind: str, seconds: float) -> None:
    audio = _audio(kind, seconds)
    stream = SpeakingRateStream.__new__(SpeakingRateStream)  # the methods read no state
    assert np.array_equal(stft(stream, audio, 600, 300), LIVEKIT_STFT(stream, audio, 600, 300))
    # each with its own STFT, as LiveKit's calls its own
    stream._stft = LIVEKIT_STFT.__get__(stream)  # type: ignore[method-assign]
    livekit = LIVEKIT_SPECTRAL_FLUX(stream, audio, 24000)
    stream._stft = stft.__get__(stream)  # type: ignore[method-assign]
    assert spectral_flux(stream, audio, 24000) == livekit


def test_the_suite_runs_it() -> None:
    """Installed for the whole run by the root conftest."""
    assert SpeakingRateStream._stft is stft
    assert SpeakingRateStream._spectral_flux is spectral_flux
