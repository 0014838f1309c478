"""A microphone of exact energy and timing, for the realtime tests."""

from __future__ import annotations

import asyncio
import time

import numpy as np
from livekit import rtc
from livekit.agents.voice.io import AudioInput


class ToneMicrophone(AudioInput):
    """A microphone at real-time pace that gives silence, or a loud tone while "speaking".

    For tests that need exact control of input energy and timing (a realtime server's
    energy VAD) rather than recorded speech.

    Args:
        sample_rate: Samples per second of the frames (24 kHz suits OpenAI Realtime).
        frame_duration: Seconds per frame.
    """

    def __init__(self, *, sample_rate: int = 24000, frame_duration: float = 0.02) -> None:
        super().__init__(label="ToneMicrophone")
        self._sample_rate = sample_rate
        self._frame_duration = frame_duration
        self._frame_samples = int(sample_rate * frame_duration)
        self._next_frame_at: float | None = None
        self._speech_frames_left = 0
        self._sample_index = 0

    def speak(self, seconds: float) -> None:
        """Speaks (a 300 Hz tone at 0.3 of full scale) for ``seconds`` from the next frame."""
        self._speech_frames_left = round(seconds / self._frame_duration)

    async def __anext__(self) -> rtc.AudioFrame:
        now = time.monotonic()
        self._next_frame_at = (self._next_frame_at or now) + self._frame_duration
        await asyncio.sleep(max(0.0, self._next_frame_at - now))
        samples = np.zeros(self._frame_samples, dtype=np.int16)
        if self._speech_frames_left > 0:
            self._speech_frames_left -= 1
            start = self._sample_index
            t = np.arange(start, start + self._frame_samples) / self._sample_rate
            samples = (0.3 * 32767 * np.sin(2 * np.pi * 300 * t)).astype(np.int16)
        self._sample_index += self._frame_samples
        return rtc.AudioFrame(samples.tobytes(), self._sample_rate, 1, self._frame_samples)
