"""LiveKit's speaking-rate estimate of the agent's audio answers from memory in the
simulation: the very float LiveKit's own estimate gives, for every window."""

from __future__ import annotations

import numpy as np
from livekit.agents.voice.transcription._speaking_rate import (
    SpeakingRateDetector,
    SpeakingRateStream,
)

from turnfsm.adapters.sim import CallScript, ScriptedTTS, SimulatedCall
from turnfsm.adapters.sim.session import SpeakingRateMemo, remember_speaking_rates

RATE = 24000
WINDOW = RATE  # LiveKit's window: a second of audio


def _windows_of(samples: np.ndarray, step: int = RATE // 10) -> list[np.ndarray]:
    """The float windows LiveKit's stream estimates, one every 0.1 s (as it converts them)."""
    scaled = samples.astype(np.float32) / np.float32(np.iinfo(np.int16).max)
    return [scaled[i : i + WINDOW] for i in range(0, len(scaled) - WINDOW + 1, step)]


def _reply_windows(text: str) -> list[np.ndarray]:
    return _windows_of(ScriptedTTS(sample_rate=RATE).render(text))


async def test_every_estimate_is_livekits_own_and_repeated_windows_come_from_memory() -> None:
    estimate = remember_speaking_rates()._compute  # LiveKit's, as the memo found it
    memo = SpeakingRateMemo(estimate)
    stream = SpeakingRateDetector().stream()
    noise = np.random.default_rng(7).normal(0, 3000, 3 * RATE).astype(np.int16)
    try:
        short = _reply_windows("We open at nine on weekdays.")
        long = _reply_windows("We open at nine on weekdays, and at ten on Saturdays.")
        quiet = np.zeros(WINDOW, dtype=np.float32)
        windows = short + long + _windows_of(noise) + [long[3][: WINDOW // 2], quiet]
        expected = [estimate(stream, window, RATE) for window in windows]
        assert any(value > 0 for value in expected)
        assert 0.0 in expected  # the quiet window
        assert [memo.rate(stream, window, RATE) for window in windows] == expected
        # a reply's tone repeats every 0.1 s (22 periods of 220 Hz), so do its windows, but
        # those of its fade-out; the long reply's repeat the short one's
        repeated = len(windows) - len({window.tobytes() for window in windows})
        assert repeated >= len(short) + len(long) - 20
        assert (memo.hits, memo.runs) == (repeated, len(windows) - repeated)
        again = [memo.rate(stream, window.copy(), RATE) for window in windows]
        assert again == expected
        assert memo.hits == repeated + len(windows)
        # what else the estimate reads is in the key: another rate, another threshold
        assert memo.rate(stream, long[0], 16000) == estimate(stream, long[0], 16000)
        stream._opts._silence_threshold = 0.5
        assert memo.rate(stream, long[0], RATE) == estimate(stream, long[0], RATE) == 0.0
        assert memo.hits == repeated + len(windows)
    finally:
        await stream.aclose()


async def test_the_memo_keeps_at_most_its_limit() -> None:
    stream = SpeakingRateDetector().stream()
    memo = SpeakingRateMemo(remember_speaking_rates()._compute, limit_bytes=3 * WINDOW * 4)
    noise = np.random.default_rng(3).normal(0, 3000, 2 * RATE).astype(np.int16)
    windows = _windows_of(noise)[:5]  # five different windows
    try:
        for _ in range(2):
            for window in windows:
                memo.rate(stream, window, RATE)
        assert memo.kept_bytes == 3 * WINDOW * 4
        assert (memo.hits, memo.runs) == (3, 7)
    finally:
        await stream.aclose()


async def test_a_call_with_a_transcript_synchronizer_estimates_through_the_memo() -> None:
    # LiveKit's estimate as it ships, and no memo yet, as in a fresh process
    SpeakingRateStream._compute_speaking_rate = remember_speaking_rates()._compute  # type: ignore[method-assign]
    remember_speaking_rates.cache_clear()
    async with SimulatedCall(CallScript(), transcript_sync=True) as call:
        for _ in range(2):  # the same reply twice: the second is estimated from memory
            handle = call.session.say("We open at nine on weekdays, and at ten on Saturdays.")
            await handle.wait_for_playout()
    memo = remember_speaking_rates()  # the one the call made
    assert memo.runs > 0
    assert memo.hits >= 30
