"""Callee lines made from text and a duration (``spoken_line``): heard by the real silero
VAD as one stretch of speech over the line's span, and transcribed by the scripted STT
word for word as heard, with no WAV file."""

from __future__ import annotations

import subprocess
import sys
import zlib

import numpy as np
import pytest
from livekit import rtc
from livekit.agents import vad as agents_vad

from turnfsm.adapters.sim import (
    CallScript,
    SimulatedCall,
    UserLine,
    load_silero_vad,
    spoken_line,
)
from turnfsm.adapters.sim.speech import (
    MIN_SPOKEN_SECONDS,
    SAMPLE_RATE,
    SPOKEN_CHARS_PER_SECOND,
    VOICED_RMS,
)

START_TOLERANCE = 0.1
"""Seconds between the line's first sample and where silero puts the speech's start (its
decisions come per 32 ms window, after an exponential filter)."""
END_TOLERANCE = 0.2
"""Seconds between the line's last sample and where silero puts the speech's end."""

LEAD, TAIL = 0.5, 1.5
"""Seconds of a noise floor before and after the line."""


async def _silero_spans(samples: np.ndarray) -> list[tuple[float, float]]:
    """``(start, end)`` of each speech silero detects in ``samples`` (offsets, seconds)."""
    rng = np.random.default_rng(0)

    def noise(seconds: float) -> np.ndarray:
        return np.clip(rng.normal(0, 8, round(seconds * SAMPLE_RATE)), -99, 99).astype(np.int16)

    audio = np.concatenate([noise(LEAD), samples, noise(TAIL)])
    stream = load_silero_vad().stream()
    step = SAMPLE_RATE // 50
    for start in range(0, len(audio) - step + 1, step):
        stream.push_frame(
            rtc.AudioFrame(
                data=audio[start : start + step].tobytes(),
                sample_rate=SAMPLE_RATE,
                num_channels=1,
                samples_per_channel=step,
            )
        )
    stream.end_input()
    spans: list[tuple[float, float]] = []
    began: float | None = None
    async for event in stream:
        if event.type == agents_vad.VADEventType.START_OF_SPEECH:
            began = event.timestamp - event.speech_duration - LEAD
        elif event.type == agents_vad.VADEventType.END_OF_SPEECH:
            assert began is not None
            spans.append((began, event.timestamp - event.silence_duration - LEAD))
            began = None
    return spans


@pytest.mark.parametrize("duration", [MIN_SPOKEN_SECONDS, 0.5, 1.5, 4.0, 9.0])
async def test_silero_hears_one_speech_over_the_line(duration: float) -> None:
    for seed in range(4):
        line = spoken_line("I would like to move my appointment", duration=duration, seed=seed)
        assert line.duration == pytest.approx(duration, abs=1 / SAMPLE_RATE)
        spans = await _silero_spans(line.samples)
        assert len(spans) == 1, (seed, spans)
        ((start, end),) = spans
        assert abs(start) <= START_TOLERANCE, (seed, start)
        assert abs(end - line.duration) <= END_TOLERANCE, (seed, end, line.duration)


async def test_silero_hears_two_lines_with_a_pause_as_two_speeches() -> None:
    first, second = spoken_line("Hello?", seed=1), spoken_line("Hello?", seed=2)
    pause = np.full(round(1.2 * SAMPLE_RATE), 3, dtype=np.int16)
    spans = await _silero_spans(np.concatenate([first.samples, pause, second.samples]))
    second_start = first.duration + 1.2
    assert len(spans) == 2
    assert abs(spans[0][1] - first.duration) <= END_TOLERANCE
    assert abs(spans[1][0] - second_start) <= START_TOLERANCE


def test_every_frame_is_voiced_and_the_words_share_the_line() -> None:
    line = spoken_line("What time do you open tomorrow?", duration=2.5, seed=7)
    frame = SAMPLE_RATE // 50
    usable = len(line.samples) // frame * frame
    rms = np.sqrt((line.samples[:usable].astype(np.float64).reshape(-1, frame) ** 2).mean(axis=1))
    assert (rms > VOICED_RMS).all()  # the scripted STT's threshold: no pause inside a line
    assert line.samples.all()  # no digitally silent sample (that means "silenced")
    timings = line.word_timings
    assert [word.text for word in timings] == line.words == line.text.split()
    assert timings[0].start == 0
    assert timings[-1].end == pytest.approx(line.duration)
    assert all(a.end == b.start for a, b in zip(timings, timings[1:], strict=False))
    assert timings[4].end - timings[4].start > timings[2].end - timings[2].start  # open > do


def test_same_arguments_same_line_and_the_seed_draws_the_pieces() -> None:
    line = spoken_line("Yes, that works.", duration=1.4, seed=3)
    again = spoken_line("Yes, that works.", duration=1.4, seed=3)
    assert again == line
    assert np.array_equal(again.samples, line.samples)
    other = spoken_line("Yes, that works.", duration=1.4, seed=4)
    assert other.name != line.name
    assert not np.array_equal(other.samples, line.samples)
    rated = spoken_line("Yes, that works.", chars_per_second=8.0)
    assert rated.duration == pytest.approx(len("Yes, that works.") / 8.0, abs=1e-4)
    default = spoken_line("Yes, that works.")
    assert default.duration == pytest.approx(16 / SPOKEN_CHARS_PER_SECOND, abs=1e-4)
    assert spoken_line("Ok").duration == MIN_SPOKEN_SECONDS  # never too short to be heard


def test_same_line_in_another_process() -> None:
    code = (
        "import zlib; from turnfsm.adapters.sim import spoken_line; "
        "print(zlib.crc32(spoken_line('Sorry, who is this?', duration=1.7, seed=11)"
        ".samples.tobytes()))"
    )
    other = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout.strip()
    here = spoken_line("Sorry, who is this?", duration=1.7, seed=11)
    assert int(other) == zlib.crc32(here.samples.tobytes())


@pytest.mark.parametrize(
    ("arguments", "error", "named"),
    [
        ({"text": "  "}, ValueError, "text"),
        ({"text": "Hi", "duration": 0.1}, ValueError, "duration"),
        ({"text": "Hi", "duration": float("nan")}, ValueError, "duration"),
        ({"text": "Hi", "chars_per_second": 0}, ValueError, "chars_per_second"),
        ({"text": "Hi", "duration": 1.0, "chars_per_second": 9.0}, ValueError, "not both"),
        ({"text": "Hi", "name": ""}, ValueError, "name"),
        ({"text": "Hi", "seed": 1.5}, TypeError, "seed"),
    ],
)
def test_bad_arguments_are_refused_naming_the_field(
    arguments: dict[str, object], error: type[Exception], named: str
) -> None:
    with pytest.raises(error, match=named):
        spoken_line(**arguments)  # type: ignore[arg-type]


async def test_a_session_hears_and_transcribes_the_spoken_line() -> None:
    line = spoken_line("Could you call me back after lunch?", duration=2.2, seed=5)
    async with SimulatedCall(CallScript([UserLine(0.4, line)])) as call:
        speaking = await call.wait_for_event(
            "user_state_changed", lambda ev: ev.new_state == "speaking", timeout=3
        )
        committed = await call.wait_for_event(
            "conversation_item_added",
            lambda ev: ev.item.type == "message" and ev.item.role == "user",
            timeout=4,
        )
    assert 0.4 <= speaking.at <= 0.4 + START_TOLERANCE + 0.05  # LiveKit adds a window
    assert [t.text for t in call.stt.transcripts] == [line.text]
    assert committed.event.item.text_content == line.text
    assert call.ledger.utterances_of(line.name)[0].line is line


async def test_the_stt_transcribes_only_the_words_heard() -> None:
    line = spoken_line("one two three four five six seven eight", duration=4.0, seed=2)
    attach_at = 2.0  # the middle of "four" is at 1.65 s, of "five" at 2.15 s
    async with SimulatedCall(CallScript([UserLine(0.2, line)])) as call:
        call.session.input.set_audio_enabled(False)
        await call.sleep_until(0.2 + attach_at)
        call.session.input.set_audio_enabled(True)
        committed = await call.wait_for_event(
            "conversation_item_added",
            lambda ev: ev.item.type == "message" and ev.item.role == "user",
            timeout=4,
        )
    assert committed.event.item.text_content == "five six seven eight"


async def test_say_now_plays_a_spoken_line() -> None:
    line = spoken_line("Hello?", seed=9)
    async with SimulatedCall() as call:
        call.audio_input.say_now(line)
        transcribed = await call.wait_for_event(
            "user_input_transcribed", lambda ev: ev.is_final, timeout=3
        )
    assert transcribed.event.transcript == "Hello?"
