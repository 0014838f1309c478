"""Issue 22: every value turnfsm accepts can be written to a trace and read back; any
other is refused at the door, naming the field.

The issue's reproducers were accepted and then broke later: ``max_call_duration=inf``
(also from a TOML file) made a ``TraceWriter`` raise when the controller was built;
``max_tool_steps=10**40``, a 1 MB greeting with ``keep_text`` and a speech id holding a
lone surrogate each wrote a trace the reader refuses.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import tomllib
from hardening_calls import call_events

from turnfsm import Trace, TraceWriter, TurnController, TurnPolicy
from turnfsm import events as ev
from turnfsm.policy import MAX_COUNT, MAX_TEXT_CHARS

GREETING = "Hi, this is Ada."


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_call_duration", math.inf, "max_call_duration must be a finite number"),
        ("idle_timeout", math.nan, "idle_timeout must be a finite number"),
        ("spill_over_window", 1e400, "spill_over_window must be a finite number"),
        ("max_tool_steps", 10**40, f"max_tool_steps must be an integer from 1 to {MAX_COUNT}"),
        ("idle_max_reprompts", MAX_COUNT + 1, "idle_max_reprompts must be an integer from 0"),
        ("greeting", "Hi " * 400_000, f"greeting must be at most {MAX_TEXT_CHARS} characters"),
        ("idle_message", "Still there?\ud800", "idle_message must be text: a lone surrogate"),
        ("tool_cap_fallback", "\udfff", "tool_cap_fallback must be text: a lone surrogate"),
    ],
)
def test_a_value_no_trace_could_hold_is_refused_naming_the_field(
    field: str, value: object, message: str
) -> None:
    with pytest.raises(ValueError, match=f"^{message}") as error:
        TurnPolicy(**{"greeting": GREETING, field: value})  # type: ignore[arg-type]
    assert len(str(error.value)) < 300  # a long text is not repeated in the message


def test_infinity_from_a_toml_file_is_refused_naming_the_field() -> None:
    table = tomllib.loads('greeting = "Hi"\nmax_call_duration = inf\n')
    with pytest.raises(ValueError, match="^max_call_duration must be a finite number"):
        TurnPolicy.from_dict(table)


def test_a_lone_surrogate_in_an_event_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"^AgentSpeechCreated\.speech_id must be text"):
        ev.AgentSpeechCreated(at=1.0, speech_id="s\ud800")
    with pytest.raises(ValueError, match=r"^UserTurnCommitted\.text must be text"):
        ev.UserTurnCommitted(at=1.0, text="\udc80 hello")


def _extreme_policy() -> TurnPolicy:
    """Every field at the far end of what is accepted: the largest counts, the longest
    texts (astral characters: the most bytes per character), huge but finite seconds."""
    longest = ("\U0001f600é\x00\u202e" * MAX_TEXT_CHARS)[:MAX_TEXT_CHARS]
    return TurnPolicy(
        direction="outbound",
        greeting=longest,
        tool_cap_fallback=longest,
        idle_message=longest,
        max_tool_steps=MAX_COUNT,
        idle_max_reprompts=MAX_COUNT,
        idle_timeout=1.7e308,
        max_call_duration=1.7e308,
        await_user_timeout=5e-324,
    )


def test_the_most_extreme_policy_accepted_is_written_and_read_back(tmp_path: Path) -> None:
    policy = _extreme_policy()
    path = tmp_path / "call.jsonl"
    with TraceWriter(path) as writer:
        controller = TurnController(policy, keep_text=True, trace_sink=writer)
        for event in call_events(2):
            controller.handle(event)
    read = Trace.read(path)
    assert read.policy == policy
    assert read == controller.trace
