"""Per-call metrics on the text forms a trace can hold: kept, redacted with its length,
redacted without it (then the drop is counted, not measured)."""

from __future__ import annotations

from collections.abc import Callable

import attrs
import pytest

from turnfsm import TurnController, TurnPolicy
from turnfsm import events as ev
from turnfsm.metrics import metrics_of
from turnfsm.trace import TEXT_FIELDS, TraceStep

FULL = "Your appointment is on Tuesday at ten in the morning."
HEARD = "Your appointment is"


def _interrupted_reply(message_first: bool) -> tuple[TurnPolicy, list[TraceStep]]:
    policy = TurnPolicy(direction="inbound", first_speaker="user")
    controller = TurnController(policy, keep_text=True)
    message = ev.AssistantMessageCommitted(at=3.0, speech_id="s1", text=FULL, interrupted=True)
    end = ev.AgentSpeechEnded(
        at=3.0, speech_id="s1", interrupted=True, played_seconds=1.0, played_text=HEARD
    )
    for event in (
        ev.SessionStarted(at=0.0),
        ev.UserTurnCommitted(at=1.0, text="When is it?", item_id="u1"),
        ev.AgentSpeechCreated(at=1.5, speech_id="s1"),
        ev.AgentSpeechStarted(at=2.0, speech_id="s1"),
        ev.AgentSpeechInterrupted(at=2.9, speech_id="s1"),
        *((message, end) if message_first else (end, message)),
    ):
        controller.handle(event)
    assert controller.trace is not None
    return policy, list(controller.trace.steps)


def _texts(steps: list[TraceStep], form: Callable[[str], str]) -> list[TraceStep]:
    """The steps with every transcript text written in ``form``."""

    def rewrite(item: object) -> object:
        changes = {
            name: form(value)
            for name in TEXT_FIELDS.get(type(item), ())
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
    if form == "redacted":
        assert (metrics.dropped_chars, metrics.unmeasured_drops) == (0, 1)
    else:
        assert (metrics.dropped_chars, metrics.unmeasured_drops) == (len(FULL) - len(HEARD), 0)
