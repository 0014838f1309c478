"""The input gate keeps the audio it promised to replay.

Under ``mute_input`` + ``answer_whole`` what the caller says over the greeting is held and
replayed on unmute, paced. A reply to the first held utterance can start a tool step
before the replay is over; with ``mute_input_during_tools`` that step mutes the input
(holding nothing) and unmutes it without replay. That must not discard the rest of the
greeting's held audio: the caller's later words, said over the greeting, were never
heard (fuzz seeds 20065, 21459 and eight more: the question asked over the greeting went
unanswered).
"""

from __future__ import annotations

import asyncio

import pytest
from livekit import rtc
from livekit.agents.voice.io import AudioInput

from turnfsm.adapters.livekit.audio import REPLAY_SPEED, InputGate

FRAME = 0.05
SAMPLES = 800  # FRAME at 16 kHz


class _Microphone(AudioInput):
    """One frame every ``FRAME`` seconds; frame ``n`` carries the sample value ``n``."""

    def __init__(self) -> None:
        super().__init__(label="test microphone")
        self.made = 0

    async def __anext__(self) -> rtc.AudioFrame:
        await asyncio.sleep(FRAME)
        self.made += 1
        return rtc.AudioFrame(
            data=self.made.to_bytes(2, "little") * SAMPLES,
            sample_rate=16000,
            num_channels=1,
            samples_per_channel=SAMPLES,
        )


def _number(frame: rtc.AudioFrame) -> int:
    """The microphone frame this is (0: silence from the shut gate)."""
    return int(frame.data[0])


async def _read(gate: InputGate, frames: int) -> list[int]:
    return [_number(await gate.__anext__()) for _ in range(frames)]


async def test_a_mute_for_tools_keeps_the_greetings_held_audio_for_replay() -> None:
    microphone = _Microphone()
    gate = InputGate(microphone)
    gate.mute(hold_audio=True)  # the greeting, answer_whole
    assert await _read(gate, 10) == [0] * 10  # the pipeline hears silence; 1-10 are held
    gate.unmute(replay_held_audio=True)  # the greeting ended
    replayed = await _read(gate, 3)
    assert replayed == [1, 2, 3]
    gate.mute(hold_audio=False)  # a tool step of the reply to what was replayed so far
    shut = await _read(gate, 4)
    assert shut == [0, 0, 0, 0]  # live frames 11-14 dropped: the caller is not heard now
    gate.unmute(replay_held_audio=False)
    assert gate.held_seconds > 0
    # the rest of what was held over the greeting, in order, then the live audio
    rest = await _read(gate, 7)
    assert rest == [4, 5, 6, 7, 8, 9, 10]
    live = await _read(gate, 10)
    assert live[0] > 14
    assert live == list(range(live[0], live[0] + 10))
    assert gate.held_seconds == 0


async def test_held_audio_is_replayed_paced_and_an_unreplayed_hold_can_be_discarded() -> None:
    microphone = _Microphone()
    gate = InputGate(microphone)
    gate.mute(hold_audio=True)
    await _read(gate, 8)
    loop = asyncio.get_running_loop()
    gate.unmute(replay_held_audio=True)
    began = loop.time()
    assert await _read(gate, 8) == list(range(1, 9))
    assert loop.time() - began == pytest.approx(8 * FRAME / REPLAY_SPEED)
    # a hold never released for replay (the call ended over the greeting) is dropped
    gate.mute(hold_audio=True)
    await _read(gate, 5)
    gate.unmute(replay_held_audio=False)
    assert gate.held_seconds == 0
    made = microphone.made
    assert await _read(gate, 3) == [made + 1, made + 2, made + 3]
