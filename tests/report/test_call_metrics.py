"""Per-call metrics on the text forms a trace can hold: kept, redacted with its length,
redacted without it. A drop is measured by its lever's outcome (the message's length and
what it kept, issue 21), lengths only: every text form gives the same figures; a drop
without that outcome is counted, not measured.

Issue 22: a speech stopped before any of its audio played (a reply LiveKit prepared
early and threw away: preemptive generation, on by default) is a discarded speech, not a
barge-in, a drop or a refused lever. The sequences below are the ones the
``interrupt_mid_answer`` demo recorded under LiveKit's defaults, whose one real barge-in
was counted as ``barge_ins 2, drops 3, drop_unspoken_text:refused 2``.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import pytest

from turnfsm import TurnController, TurnPolicy
from turnfsm import effects as fx
from turnfsm import events as ev
from turnfsm.fields import text_fields
from turnfsm.tools.metrics import CallMetrics, metrics_of
from turnfsm.trace import TraceStep

FULL = "Your appointment is on Tuesday at ten in the morning."
HEARD = "Your appointment is"


def _drop_done(speech_id: str, full: str, heard: str, at: float = 3.1) -> ev.EffectOutcome:
    """A drop's outcome as the adapter's lever reports it: the lengths it measured."""
    return ev.EffectOutcome(
        at=at,
        effect="drop_unspoken_text",
        outcome="done",
        speech_id=speech_id,
        text_chars=len(full),
        heard_chars=len(heard),
    )


def _interrupted_reply(
    message_first: bool, *, measured: bool = True
) -> tuple[TurnPolicy, list[TraceStep]]:
    policy = TurnPolicy(direction="inbound", first_speaker="user")
    controller = TurnController(policy, keep_text=True)
    message = ev.AssistantMessageCommitted(at=3.0, speech_id="s1", text=FULL, interrupted=True)
    end = ev.AgentSpeechEnded(at=3.0, speech_id="s1", interrupted=True, played_seconds=1.0)
    for event in (
        ev.SessionStarted(at=0.0),
        ev.UserTurnCommitted(at=1.0, text="When is it?", item_id="u1"),
        ev.AgentSpeechCreated(at=1.5, speech_id="s1"),
        ev.AgentSpeechStarted(at=2.0, speech_id="s1"),
        ev.AgentSpeechInterrupted(at=2.9, speech_id="s1"),
        *((message, end) if message_first else (end, message)),
        *((_drop_done("s1", FULL, HEARD),) if measured else ()),
    ):
        controller.handle(event)
    assert controller.trace is not None
    return policy, list(controller.trace.steps)


def _texts(steps: list[TraceStep], form: Callable[[str], str]) -> list[TraceStep]:
    """The steps with every transcript text written in ``form``."""

    def rewrite(item: object) -> object:
        changes = {
            name: form(value)
            for name in text_fields(type(item))
            if (value := getattr(item, name)) is not None
        }
        return attrs.evolve(item, **changes) if changes else item

    return [
        attrs.evolve(
            step,
            event=rewrite(step.event),
            effects=tuple(rewrite(e) for e in step.effects),  # type: ignore[misc]
        )
        for step in steps
    ]


FORMS: dict[str, Callable[[str], str]] = {
    "kept": lambda text: text,
    "redacted with length": lambda text: f"[redacted {len(text)} chars]",
    "redacted": lambda text: "[redacted]",
}


@pytest.mark.parametrize("message_first", [True, False], ids=["message-first", "end-first"])
@pytest.mark.parametrize("form", FORMS)
def test_dropped_characters_per_text_form(form: str, message_first: bool) -> None:
    policy, steps = _interrupted_reply(message_first)
    metrics = metrics_of(policy, _texts(steps, FORMS[form]))
    assert metrics.drops == 1
    assert metrics.barge_ins == 1
    assert (metrics.dropped_chars, metrics.unmeasured_drops) == (len(FULL) - len(HEARD), 0)


@pytest.mark.parametrize("form", FORMS)
def test_a_drop_without_its_measured_outcome_is_counted_not_measured(form: str) -> None:
    """No outcome measured it (the lever failed, the trace predates format 4): the text
    committed is no measure of the cut, whatever its form."""
    policy, steps = _interrupted_reply(True, measured=False)
    metrics = metrics_of(policy, _texts(steps, FORMS[form]))
    assert (metrics.drops, metrics.dropped_chars, metrics.unmeasured_drops) == (1, 0, 1)


CUTS = {
    "answer": ("We open at nine. On Tuesdays we stay open late.", "We open at nine."),
    "s1": (FULL, ""),
}
"""Speech -> (its message, what its drop's lever measures as heard)."""


def _outcomes(controller: TurnController, effects: tuple[fx.Effect, ...], at: float) -> None:
    """Report each effect's outcome as the adapter does (a drop with no message to trim is
    refused: LiveKit committed none; a done one tells the lengths it measured)."""
    for effect in effects:
        speech_id = getattr(effect, "speech_id", None)
        if isinstance(effect, fx.DropUnspokenText) and speech_id in CUTS:
            controller.handle(_drop_done(speech_id, *CUTS[speech_id], at=at))
            continue
        refused = isinstance(effect, fx.DropUnspokenText) and speech_id in ("pre", "early")
        # as the adapter's lever: LiveKit committed no message for these
        controller.handle(
            ev.EffectOutcome(
                at=at,
                effect=effect.name,
                outcome="refused" if refused else "done",
                speech_id=speech_id,
                detail="no assistant message committed for this speech" if refused else "",
            )
        )


def test_speeches_discarded_before_any_audio_are_their_own_category() -> None:
    policy = TurnPolicy(direction="outbound", greeting="Hi, this is Ada.")
    controller = TurnController(policy, strict=True, keep_text=True)
    full, heard = CUTS["answer"]
    for event in (
        ev.CallAnswered(at=0.0),
        ev.UserSpeechStarted(at=1.1),
        ev.UserTranscript(at=1.5, text="Hello?", is_final=True),
        # LiveKit's preemptive reply to "Hello?": the machine stops it before the greeting
        ev.AgentSpeechCreated(at=1.6, speech_id="pre"),
        ev.AgentSpeechInterrupted(at=1.6, speech_id="pre"),
        ev.AgentSpeechEnded(at=1.6, speech_id="pre", interrupted=True),
        ev.UserSpeechEnded(at=2.0),
        ev.UserTurnCommitted(at=2.1, text="Hello?", item_id="u1"),
        ev.AgentSpeechCreated(at=2.1, speech_id="greeting"),
        ev.AgentSpeechStarted(at=2.2, speech_id="greeting"),
        ev.AgentSpeechEnded(at=4.3, speech_id="greeting", played_seconds=2.1),
        # the question's answer, cut by the caller one second in: the one barge-in
        ev.AgentSpeechCreated(at=10.3, speech_id="answer"),
        ev.AgentSpeechStarted(at=11.9, speech_id="answer"),
        ev.AgentSpeechInterrupted(at=13.0, speech_id="answer"),
        ev.AssistantMessageCommitted(at=13.0, speech_id="answer", text=full, interrupted=True),
        ev.AgentSpeechEnded(at=13.0, speech_id="answer", interrupted=True, played_seconds=1.05),
        # a preemptive reply to "Wait, stop", replaced by LiveKit before it played
        ev.AgentSpeechCreated(at=13.6, speech_id="early"),
        ev.AgentSpeechCreated(at=14.3, speech_id="reply"),
        ev.AgentSpeechInterrupted(at=14.3, speech_id="early"),
        ev.AgentSpeechEnded(at=14.3, speech_id="early", interrupted=True),
        ev.AgentSpeechStarted(at=14.8, speech_id="reply"),
        ev.AssistantMessageCommitted(at=15.2, speech_id="reply", text="Okay."),
        ev.AgentSpeechEnded(at=15.2, speech_id="reply", played_seconds=0.35),
        ev.CallEnded(at=17.0, reason="hangup"),
    ):
        _outcomes(controller, controller.handle(event), event.at)
    assert controller.trace is not None
    steps = controller.trace.steps
    drops = [e for s in steps for e in s.effects if isinstance(e, fx.DropUnspokenText)]
    assert len(drops) == 3  # the machine asks for each cut speech's text to be trimmed
    metrics = metrics_of(policy, controller.trace.steps)
    assert metrics.barge_ins == 1
    assert metrics.discarded_speeches == 2
    assert metrics.drops == 1
    assert metrics.dropped_chars == len(full) - len(heard)
    assert metrics.unmeasured_drops == 0
    assert metrics.lever_outcomes == {}
    assert metrics.agent_speeches == 3


def _reply_metrics(*events: ev.Event) -> CallMetrics:
    """The metrics of an inbound call whose first turn is answered by ``events``, each
    effect's outcome reported as the adapter does."""
    policy = TurnPolicy(direction="inbound", first_speaker="user")
    controller = TurnController(policy, strict=True, keep_text=True)
    start = (ev.SessionStarted(at=0.0), ev.UserTurnCommitted(at=1.0, text="Hm?", item_id="u1"))
    for event in (*start, *events):
        _outcomes(controller, controller.handle(event), event.at)
    assert controller.trace is not None
    return metrics_of(policy, controller.trace.steps)


def test_a_discarded_speech_whose_text_was_committed_is_a_drop() -> None:
    """LiveKit committed text of a speech nobody heard: trimming it from the history is a
    real drop (the whole text), though the speech was no barge-in."""
    metrics = _reply_metrics(
        ev.AgentSpeechCreated(at=1.5, speech_id="s1"),
        ev.UserSpeechStarted(at=1.7),
        ev.AgentSpeechInterrupted(at=1.8, speech_id="s1"),
        ev.AssistantMessageCommitted(at=1.8, speech_id="s1", text=FULL, interrupted=True),
        ev.AgentSpeechEnded(at=1.8, speech_id="s1", interrupted=True),
    )
    assert (metrics.barge_ins, metrics.discarded_speeches) == (0, 1)
    assert (metrics.drops, metrics.dropped_chars) == (1, len(FULL))
    assert metrics.lever_outcomes == {}


def test_a_reply_cut_before_livekit_committed_text_left_nothing_to_drop() -> None:
    """A reply cut within its first syllable (seen under load: 50 ms played) is a barge-in,
    but LiveKit committed no text for it: the drop the machine asks for is refused (no
    message) and neither counts."""
    metrics = _reply_metrics(
        ev.AgentSpeechCreated(at=1.2, speech_id="early"),
        ev.AgentSpeechStarted(at=1.5, speech_id="early"),
        ev.AgentSpeechInterrupted(at=1.55, speech_id="early"),
        ev.AgentSpeechEnded(at=1.6, speech_id="early", interrupted=True, played_seconds=0.05),
    )
    assert (metrics.barge_ins, metrics.discarded_speeches) == (1, 0)
    assert (metrics.drops, metrics.unmeasured_drops) == (0, 0)
    assert metrics.lever_outcomes == {}
