"""What the simulated realtime model says for turnfsm, and which of its words were heard:
shared by the realtime tests and the realtime fuzz world (``turnfsm fuzz --realtime``)."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable
from typing import Protocol

from ...livekit.realtime import say_exactly
from .script import ResponseRequest

__all__ = ["SpeechTimeline", "said_exactly", "scripted_model", "words_heard"]

_SAY_EXACTLY = re.compile("(.*)".join(map(re.escape, say_exactly("\x00").split("\x00"))), re.S)


class SpeechTimeline(Protocol):
    """Whatever knows when each word of a reply is spoken (`RealtimeTestServer`)."""

    def speech_timeline(self, text: str) -> tuple[list[tuple[float, str]], float]: ...


def said_exactly(instructions: str | None) -> str | None:
    """The text that turnfsm's ``say_exactly`` instructions ask for, if they are such."""
    match = _SAY_EXACTLY.search(instructions or "")
    return match.group(1) if match else None


def scripted_model(answers: list[str]) -> Callable[[ResponseRequest], str]:
    """The simulated model: says what it was told to say exactly, else the next answer."""
    queue = deque(answers)

    def decide(request: ResponseRequest) -> str:
        exact = said_exactly(request.instructions)
        if exact is not None:
            return exact
        return queue.popleft() if queue else "Okay."

    return decide


def words_heard(server: SpeechTimeline, text: str, played_seconds: float) -> list[str]:
    """The words of a reply whose whole audio played, on the server's speech timeline."""
    timeline, total_ms = server.speech_timeline(text)
    ends = [start for start, _ in timeline[1:]] + [total_ms]
    return [
        word.strip()
        for (_, word), end in zip(timeline, ends, strict=True)
        if end <= played_seconds * 1000
    ]
