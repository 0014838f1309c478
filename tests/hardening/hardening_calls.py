"""Whole calls as event sequences, for the hardening tests: no LiveKit, no clock.

:func:`call_events` scripts an outbound call of any length: ring, answer, the callee's
"Hello?", the locked greeting, then ``exchanges`` user turns answered by the agent, every
third through a tool step, every fifth cut by a barge-in, then a hang-up. Times are
seconds on a simulated clock (:data:`EXCHANGE_SECONDS` per exchange), so a two-hour call
is a loop, not two hours.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from turnfsm import Trace, TurnController, TurnPolicy
from turnfsm import events as ev

GREETING = "Hi, this is Ada from Acme Dental, calling about your appointment with Dr Chen."
IDLE = "Are you still with me, Mrs Jones?"
FALLBACK = "Sorry Mrs Jones, I could not look up your records."
SAID = "My date of birth is the fourth of May 1961"
REPLY = "Thank you, your appointment is on Tuesday at nine thirty."

POLICY = TurnPolicy(
    direction="outbound",
    greeting=GREETING,
    idle_timeout=20.0,
    idle_message=IDLE,
    tool_cap_fallback=FALLBACK,
    max_tool_steps=1,
    max_call_duration=4 * 3600.0,
)
"""A policy whose every text is private: the greeting names the callee's dentist."""

EXCHANGE_SECONDS = 6.0


def call_events(exchanges: int) -> Iterator[ev.Event]:
    """An outbound call with ``exchanges`` user turns after the greeting."""
    yield ev.CallRinging(at=0.0)
    yield ev.CallAnswered(at=1.0)
    yield ev.UserSpeechStarted(at=1.5)
    yield ev.UserTranscript(at=1.9, text="Hello?", is_final=True)
    yield ev.UserSpeechEnded(at=2.0)
    yield ev.UserTurnCommitted(at=2.1, text="Hello?", item_id="u0")
    yield ev.AgentSpeechCreated(at=2.2, speech_id="greeting", source="say")
    yield ev.AgentSpeechStarted(at=2.4, speech_id="greeting")
    yield ev.AgentSpeechEnded(at=6.0, speech_id="greeting", played_seconds=3.6)
    for k in range(1, exchanges + 1):
        yield from exchange(k, 6.0 + (k - 1) * EXCHANGE_SECONDS)
    yield ev.CallEnded(at=6.0 + exchanges * EXCHANGE_SECONDS, reason="hangup")


def exchange(k: int, t: float) -> Iterator[ev.Event]:
    """One user turn and the agent's reply, starting at ``t``."""
    yield ev.UserSpeechStarted(at=t + 0.2)
    for partial in range(3):
        yield ev.UserTranscript(at=t + 0.4 + 0.2 * partial, text=SAID[: 10 * (partial + 1)])
    yield ev.UserTranscript(at=t + 1.1, text=SAID, is_final=True)
    yield ev.UserSpeechEnded(at=t + 1.2)
    yield ev.UserTurnCommitted(at=t + 1.3, text=SAID, item_id=f"u{k}")
    speech = f"s{k}"
    yield ev.AgentSpeechCreated(at=t + 1.4, speech_id=speech)
    if k % 3 == 0:
        yield ev.ToolStepStarted(at=t + 1.5, speech_id=speech, calls=2)
        yield ev.ToolStepFinished(at=t + 2.0, speech_id=speech, calls=2)
        yield ev.AgentSpeechEnded(at=t + 2.05, speech_id=speech)
        speech = f"s{k}-tools"
        yield ev.AgentSpeechCreated(at=t + 2.1, speech_id=speech, source="tool_reply")
    yield ev.AgentSpeechStarted(at=t + 2.4, speech_id=speech)
    if k % 5 == 0:  # the callee barges in
        yield ev.UserSpeechStarted(at=t + 3.0)
        yield ev.AgentSpeechEnded(
            at=t + 3.2, speech_id=speech, interrupted=True, played_seconds=0.8
        )
        yield ev.AssistantMessageCommitted(
            at=t + 3.3, item_id=f"a{k}", speech_id=speech, text=REPLY, interrupted=True
        )
        yield ev.UserSpeechEnded(at=t + 3.6)
        yield ev.UserTurnCommitted(at=t + 3.7, text="sorry?", item_id=f"u{k}b")
        yield ev.AgentSpeechCreated(at=t + 3.8, speech_id=f"{speech}b")
        yield ev.AgentSpeechStarted(at=t + 4.0, speech_id=f"{speech}b")
        yield ev.AgentSpeechEnded(at=t + 5.5, speech_id=f"{speech}b", played_seconds=1.5)
    else:
        yield ev.AgentSpeechEnded(at=t + 5.4, speech_id=speech, played_seconds=3.0)
        yield ev.AssistantMessageCommitted(
            at=t + 5.5, item_id=f"a{k}", speech_id=speech, text=REPLY
        )


def recorded(exchanges: int = 12, **options: object) -> Trace:
    """The trace of a scripted call (strict: the invariants hold at every step)."""
    controller = TurnController(POLICY, strict=True, **options)  # type: ignore[arg-type]
    for event in call_events(exchanges):
        controller.handle(event)
    assert controller.trace is not None
    return controller.trace


MERMAID_LINE = re.compile(
    r"^(---|title: .*|%%.*|stateDiagram-v2|(    )+(direction (TB|LR)"
    r"|state \"[^\"\n]*\" as \w+( \{)?|state \w+ \{|state \w+ <<choice>>|\}|--|\[\*\] --> \w+"
    r"|\w+ --> (\w+|\[\*\])( : [^\n]*)?|\w+ : [^\n]*"
    r"|classDef \w+ [^\n]*|class [\w,]+ \w+|%% [^\n]*))$"
)
"""Every line ``to_mermaid`` writes has one of these forms."""

UNPRINTABLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")


NOTE_START = re.compile(r"^    note right of \w+$")
NOTE_LINE = re.compile(r"^        \S[^\n]*$")
NOTE_END = "    end note"


def assert_safe_mermaid(mermaid: str) -> None:
    """No line Mermaid would read as anything but what the generator writes: outside a
    note, a line of :data:`MERMAID_LINE`'s forms; inside one, text lines, the note ending
    only where the generator ends it."""
    in_note = False
    for line in mermaid.splitlines():
        if in_note:
            in_note = line != NOTE_END
            assert not in_note or NOTE_LINE.match(line), f"unexpected note line {line!r}"
            assert line.strip() != "end note" or line == NOTE_END, line
        elif NOTE_START.match(line):
            in_note = True
        else:
            assert MERMAID_LINE.match(line), f"unexpected Mermaid line {line!r}"
    assert not in_note, "a note is never ended"
    assert not UNPRINTABLE.search(mermaid)
