"""The callee lines only the tests play (the package ships the demo's): their recordings
live in ``audio/`` beside this file. ``tests/conftest.py`` makes them playable by name."""

from __future__ import annotations

from pathlib import Path

from turnfsm.adapters.sim.speech import SpeechLine

AUDIO = Path(__file__).resolve().with_name("audio")

TEST_LINES: tuple[SpeechLine, ...] = (
    SpeechLine(
        "who_is_this",
        "Hi, yes, who is this? I was not expecting a call today.",
        espeak_speed=175,
        folder=AUDIO,
    ),
    SpeechLine("yes", "Yes, that works for me.", folder=AUDIO),
    SpeechLine("uh_huh", "Uh-huh.", espeak_speed=100, folder=AUDIO),
)
