"""The input gate keeps what it owes: speech held over the greeting and released for
replay is replayed in full, even when a tool step mutes the caller halfway through it."""

from __future__ import annotations

import asyncio

import numpy as np
from livekit import rtc
from livekit.agents.voice.io import AudioInput

from turnfsm.adapters.livekit.audio import InputGate

SAMPLES = 320  # 20 ms at 16 kHz


class _NumberedMicrophone(AudioInput):
    """Frames every 20 ms, each filled with its number (1, 2, ...)."""

    def __init__(self) -> None:
        super().__init__(label="numbered")
        self.produced = 0

    async def __anext__(self) -> rtc.AudioFrame:
        await asyncio.sleep(SAMPLES / 16000)
        self.produced += 1
        samples = np.full(SAMPLES, self.produced, dtype=np.int16)
        return rtc.AudioFrame(samples.tobytes(), 16000, 1, SAMPLES)


def _number(frame: rtc.AudioFrame) -> int:
    """The frame's number, 0 for the silence the shut gate hands on."""
    return int(np.frombuffer(frame.data, dtype=np.int16)[0])


async def _next(gate: InputGate, frames: int) -> list[int]:
    return [_number(await gate.__anext__()) for _ in range(frames)]


async def test_a_mute_halfway_through_a_replay_drops_none_of_it() -> None:
    gate = InputGate(_NumberedMicrophone())
    gate.mute(hold_audio=True)  # the greeting: the caller's speech held
    assert await _next(gate, 5) == [0] * 5
    gate.unmute(replay_held_audio=True)  # the greeting is over: replay it
    assert await _next(gate, 1) == [1]
    gate.mute(hold_audio=False)  # a tool step mutes the caller: what it says is dropped
    assert await _next(gate, 3) == [0] * 3
    gate.unmute(replay_held_audio=False)
    # was: [9, 10, ...], the rest of the held speech discarded with the tool step's
    assert await _next(gate, 5) == [2, 3, 4, 5, 9]


async def test_an_unmute_without_replay_drops_what_its_mute_held() -> None:
    gate = InputGate(_NumberedMicrophone())
    gate.mute(hold_audio=True)
    assert await _next(gate, 3) == [0] * 3
    gate.unmute(replay_held_audio=False)  # e.g. the call ended in the greeting
    assert gate.held_seconds == 0.0
    assert await _next(gate, 2) == [4, 5]
