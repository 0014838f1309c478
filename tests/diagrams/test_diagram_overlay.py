"""A recorded call drawn on the machine: visited states and per-edge counts."""

from __future__ import annotations

import attrs

from turnfsm import Trace, TurnController, TurnPolicy
from turnfsm import events as ev
from turnfsm.tools.diagram import build_diagram, to_dot, to_mermaid

LOCKED_ONCE = "greeting_pending --> greeting_playing : agent_speech_created ×1 / lock_greeting\n"
"""The greeting's speech, locked once (the label of the overlay)."""


def _short_call() -> Trace:
    controller = TurnController(TurnPolicy(direction="outbound", greeting="Hi, it's Ada."))
    for event in (
        ev.CallAnswered(at=1.0),
        ev.UserTurnCommitted(at=2.0, text="Hello?", item_id="u1"),
        ev.AgentSpeechCreated(at=2.1, speech_id="g", source="say"),
        ev.AgentSpeechEnded(at=4.0, speech_id="g", played_seconds=1.9),
        ev.UserTurnCommitted(at=5.0, text="Who is this?", item_id="u2"),
        ev.UserTurnCommitted(at=6.0, text="Hello?", item_id="u3"),
        ev.CallEnded(at=7.0),
    ):
        controller.handle(event)
    assert controller.trace is not None
    return controller.trace


def test_overlay_counts_each_transition_taken() -> None:
    trace = _short_call()
    diagram = build_diagram(policy=trace.policy, trace=trace)
    taken = {(edge.source, edge.target, edge.event): n for edge, n in diagram.taken.items()}
    assert taken == {
        ("ringing", "awaiting_user", "call_answered"): 1,
        ("awaiting_user", "greeting", "user_turn_committed"): 1,
        # the greeting asked for at once (the wait for a busy model ends in the same step),
        # then its speech locked
        ("greeting_awaiting_model", "greeting_requested", ""): 1,
        ("greeting_pending", "greeting_playing", "agent_speech_created"): 1,
        ("greeting", "listening", "agent_speech_ended"): 1,
        # taken from listening, declared once on a compound state holding it
        ("conversation", "conversation", "user_turn_committed"): 2,
        ("call", "ended", "call_ended"): 1,
    }
    assert diagram.visited == {
        "ringing",
        "awaiting_user",
        "greeting",
        "greeting_requested",
        "greeting_playing",
        "listening",
        "listening_open",
        "ended",
    }
    assert diagram.warnings == ()


def test_overlay_tells_alternatives_and_ignored_events_apart() -> None:
    policy = TurnPolicy(
        direction="outbound", greeting="Hi", greeting_lock="mute_input", greeting_overlap="drop"
    )
    controller = TurnController(policy)
    for event in (
        ev.CallAnswered(at=1.0),
        ev.UserTurnCommitted(at=2.0, text="Hello?", item_id="u1"),
        ev.AgentSpeechCreated(at=2.1, speech_id="g", source="say"),
        ev.AgentSpeechCreated(at=2.2, speech_id="x"),  # plays after the greeting
        ev.AgentSpeechEnded(at=4.0, speech_id="g"),
        ev.AgentSpeechEnded(at=4.5, speech_id="x", played_seconds=0.5),
        ev.UserSpeechStarted(at=5.0),
        ev.UserSpeechEnded(at=6.0),
    ):
        controller.handle(event)
    assert controller.trace is not None
    text = to_mermaid(build_diagram(policy=controller.trace.policy, trace=controller.trace))
    assert LOCKED_ONCE in text
    # the spill-over's transition is drawn, not taken (the agent's turn came between the
    # greeting and the speech: no window); the one that fired, listening's, is in its note
    spill_over = "user_speech_started / stop_silence_timers, hold_spill_over\n"
    assert f"spill_over_window --> discarding_overlap : {spill_over}" in text
    note = text[text.index("    note right of listening\n") :]
    assert "user_speech_started ×1 / stop_silence_timers\n" in note[: note.index("end note")]


def test_overlay_labels_and_highlights_in_mermaid() -> None:
    trace = _short_call()
    text = to_mermaid(build_diagram(policy=trace.policy, trace=trace))
    assert "    ringing --> awaiting_user : call_answered ×1\n" in text
    assert "awaiting_user --> greeting : user_turn_committed ×1 / note_first_words" in text
    assert (
        "greeting --> listening : agent_speech_ended ×1 "
        "[is_greeting_speech, answers_whole_overlap]" in text
    )
    assert "    call --> ended : call_ended ×1 / end_call\n" in text
    # bookkeeping of a compound state: a line in the note beside its box, never a loop
    note = text[text.index("    note right of conversation\n") :]
    turns = "user_turn_committed ×2 / note_user_turn\n"
    assert note[: note.index("    end note\n")].count(turns)
    assert "conversation --> conversation" not in text
    assert LOCKED_ONCE in text
    # edges never taken stay as they are
    assert "    listening --> speaking : agent_speech_created / note_speech\n" in text
    assert "    class ringing,awaiting_user,listening_open,ended visited\n" in text
    assert "    class greeting_requested,greeting_playing lockedVisited\n" in text
    assert "trace of 7 steps" in text.splitlines()[1]


def test_overlay_in_dot_colours_taken_edges() -> None:
    trace = _short_call()
    dot = to_dot(build_diagram(policy=trace.policy, trace=trace))
    taken = next(line for line in dot.splitlines() if "ringing -> awaiting_user" in line)
    assert "penwidth=2.5" in taken
    untaken = next(line for line in dot.splitlines() if "listening_open -> speaking" in line)
    assert "penwidth" not in untaken


def test_disagreements_with_the_drawing_are_reported() -> None:
    trace = _short_call()
    inbound = TurnPolicy(direction="inbound", greeting="Hi")
    diagram = build_diagram(policy=inbound, trace=trace)  # ringing is unreachable inbound
    warning = "taken 1x but not drawn: ringing --call_answered--> awaiting_user"
    assert warning in diagram.warnings
    assert f"    %% trace overlay: {warning}\n" in to_mermaid(diagram)

    trace.steps[-1] = attrs.evolve(trace.steps[-1], after="speaking")  # not what happened
    diagram = build_diagram(policy=trace.policy, trace=trace)
    assert diagram.warnings == (
        "step 7 (call_ended) went listening -> speaking in the trace "
        "but listening -> ended in the machine",
    )
