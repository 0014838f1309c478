"""Issue 11.6: no text of the call, and no text of the policy, leaves unless kept.

Before, redaction kept each text's length (``yes``/``no`` became 3 and 2 chars) and the
policy's greeting (often the callee's name and the reason for the call) was stored
verbatim in every trace header, every ``StartGreeting`` effect and every timeline
tooltip. Here a call whose every text is private (:mod:`hardening_calls`) goes through
everything that writes or draws it: the trace file (header and steps), a streamed trace,
the timeline SVG, the Mermaid and DOT overlays, and every log record at DEBUG. Nothing
private is found by default; everything is with ``keep_text=True`` (so the search can
fail). The adapter's own logs are covered by tests/fault/test_privacy.py on real calls.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from hardening_calls import FALLBACK, GREETING, IDLE, POLICY, REPLY, SAID, call_events

from turnfsm import Trace, TraceWriter, TurnController, TurnPolicy
from turnfsm import effects as fx
from turnfsm import events as ev
from turnfsm.tools.diagram import build_diagram, to_dot, to_mermaid
from turnfsm.tools.timeline import render_timeline
from turnfsm.trace import REDACTED

PRIVATE = [GREETING, "Dr Chen", IDLE, "Mrs Jones", FALLBACK, SAID, "fourth of May", REPLY]


def idle_and_capped_call() -> list[ev.Event]:
    """A call that also re-prompts a silent callee and hits the tool cap, so that every
    policy text is emitted in an effect."""
    events = list(call_events(3))[:-1]
    end = events[-1].at
    events += [
        ev.IdleTimerExpired(at=end + 20),  # re-prompt: Say(IDLE)
        ev.UserTurnCommitted(at=end + 22, text=SAID, item_id="ux"),
        ev.AgentSpeechCreated(at=end + 23, speech_id="t1"),
        ev.ToolStepStarted(at=end + 24, speech_id="t1"),
        ev.ToolStepFinished(at=end + 25, speech_id="t1"),  # capped: final reply, fallback
        ev.AgentSpeechEnded(at=end + 25.1, speech_id="t1"),
        ev.AgentSpeechCreated(at=end + 26, speech_id="t2", source="tool_reply"),
        ev.AgentSpeechEnded(at=end + 27, speech_id="t2"),  # nothing played: Say(FALLBACK)
        ev.CallEnded(at=end + 30),
    ]
    return events


def everything_written(keep_text: bool, tmp_path: Path) -> str:
    """Every output of one call, concatenated: files, pictures, log records."""
    path = tmp_path / f"streamed-{keep_text}.jsonl"
    with TraceWriter(path) as writer:
        controller = TurnController(POLICY, keep_text=keep_text, strict=True, trace_sink=writer)
        effects = [e for event in idle_and_capped_call() for e in controller.handle(event)]
    # the effects the adapter executes carry the texts: redaction is for what is kept
    said = {e.text for e in effects if isinstance(e, fx.Say)}
    assert said == {IDLE, FALLBACK}
    assert fx.StartGreeting(text=GREETING, first_words="Hello?") in effects
    trace = controller.trace
    assert trace is not None
    trace.write(tmp_path / f"call-{keep_text}.jsonl")
    read_back = Trace.read(tmp_path / f"call-{keep_text}.jsonl")
    diagram = build_diagram(trace=read_back)
    return "\n".join(
        [
            (tmp_path / f"call-{keep_text}.jsonl").read_text(encoding="utf-8"),
            path.read_text(encoding="utf-8"),
            render_timeline(read_back),
            to_mermaid(diagram),
            to_dot(diagram),
            repr(read_back),
        ]
    )


def test_nothing_private_is_written_drawn_or_logged_by_default(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    # python-statemachine's engine log is quiet by default; switched on, it logs every step
    caplog.set_level(logging.DEBUG, logger="statemachine")
    written = everything_written(False, tmp_path)
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert caplog.records
    for text in PRIVATE:
        assert text not in written, text
        assert text not in logged, text
    assert "chars]" not in written  # no length either
    assert written.count(REDACTED) > 20


def test_every_text_is_there_with_keep_text(tmp_path: Path) -> None:
    written = everything_written(True, tmp_path)
    for text in PRIVATE:
        assert text in written, text
    assert REDACTED not in written


@pytest.mark.parametrize(("value", "other"), [("yes", "no"), ("", "a much longer answer")])
def test_redaction_hides_the_length(value: str, other: str) -> None:
    traces = []
    for text in (value, other):
        controller = TurnController(POLICY)
        controller.handle(ev.UserTranscript(at=1.0, text=text, is_final=True))
        assert controller.trace is not None
        traces.append(controller.trace.to_jsonl())
    assert traces[0] == traces[1]


def test_greeting_instructions_are_redacted_too() -> None:
    policy = TurnPolicy(greeting_instructions="Greet Mrs Jones and mention her bill of $412.")
    controller = TurnController(policy)
    effects = controller.handle(ev.SessionStarted(at=0.0))
    assert any(isinstance(e, fx.StartGreeting) and e.instructions for e in effects)
    assert controller.trace is not None
    text = controller.trace.to_jsonl()
    assert "Mrs Jones" not in text
    assert "$412" not in text
    assert Trace.parse(text.splitlines()).policy.greeting_instructions == REDACTED
