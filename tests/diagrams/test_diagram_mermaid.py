"""Mermaid and DOT drawn from the live machine class."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys

from turnfsm.machine import (
    GREETING_STATES,
    LOCKED_STATES,
    MODEL_STATES,
    VOICE_STATES,
    TurnMachine,
    declared_moves,
)
from turnfsm.policy import TurnPolicy
from turnfsm.rules import POLICY_GUARDS, TurnRules
from turnfsm.tools.cli import PRESETS
from turnfsm.tools.diagram import (
    build_diagram,
    collapse_phases,
    left_to_the_caption,
    machine_edges,
    parallel_regions,
    to_dot,
    to_mermaid,
    to_overview,
    ways_to_end,
    whole_call_transitions,
)

from support.debian import debian_program


def _edge_lines(text: str, source: str, target: str) -> str:
    """The labels of every ``source --> target`` edge, one per line."""
    return "\n".join(
        line.split(" : ", 1)[1] if " : " in line else ""
        for line in text.splitlines()
        if line.split(" : ")[0].strip() == f"{source} --> {target}"
    )


def test_mermaid_is_the_same_bytes_in_fresh_interpreters() -> None:
    outputs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        result = subprocess.run(
            [sys.executable, "-m", "turnfsm", "diagram", "--policy", "outbound"],
            capture_output=True,
            env=env,
            timeout=60,
            check=True,
        )
        outputs.append(result.stdout)
    assert outputs[0] == outputs[1]
    assert outputs[0].decode().splitlines()[4] == "stateDiagram-v2"


def test_every_declared_event_is_drawn() -> None:
    text = to_mermaid(build_diagram())
    declared = {event for _, event, _ in declared_moves(TurnMachine)}
    assert declared == {edge.event for edge in machine_edges()} - {""}  # "": the start's
    missing = sorted(event for event in declared if not re.search(rf"\b{event}\b", text))
    assert not missing


def test_locked_state_is_marked() -> None:
    assert LOCKED_STATES == {"greeting"} | GREETING_STATES
    diagram = build_diagram(policy=PRESETS["outbound"])
    text = to_mermaid(diagram)
    assert '    state "greeting 🔒 locked" as greeting {' in text
    assert '    state "greeting_playing 🔒 locked" as greeting_playing' in text
    assert re.search(r"    class (\w+,)*greeting_playing(,\w+)* locked", text)
    assert "classDef locked " in text
    greeting = next(
        line
        for line in to_dot(diagram).splitlines()
        if line.strip().startswith("greeting_playing [")
    )
    assert "greeting_playing [locked]" in greeting
    assert 'color="#c62828"' in greeting
    assert "penwidth=3" in greeting


def test_edges_show_guards_and_actions() -> None:
    text = to_mermaid(build_diagram())
    lines = _edge_lines(text, "awaiting_user", "greeting").splitlines()
    assert lines == [
        "user_turn_committed / note_first_words, note_user_turn",
        "user_transcript [greets_on_final_transcript, has_final_words, !runs_realtime_model] / "
        "note_first_words_heard, note_user_turn",
        "await_user_timer_expired [greets_silent_callee]",
    ]
    # a compound state's transition is drawn once, from its box; unless-guards are negated
    assert (
        "    call --> ended : session_error [!error_is_recoverable] / end_call_session_error"
        in text
    )
    assert "listening --> ended : session_error" not in text
    # transitions that stay in a leaf keep their guards, listed in the state; a box's in
    # the note beside it
    leaf_label = "awaiting_user : user_speech_started / stop_silence_timers\n"
    assert f"{' ' * 20}{leaf_label}" in text
    assert (
        "    note right of greeting_pending\n"
        "        agent_speech_created [from_agent_code] / stop_agent_speech_before_greeting\n"
        "    end note\n" in text
    )
    assert (
        "        user_turn_committed [drops_overlap, !is_first_words] / reject_user_turn\n" in text
    )
    assert "entry / begin_greeting" in text
    assert "exit / unmute_after_greeting, resume_user_turns_on_hang_up, forget_greeting" in text


def test_policy_sets_the_start_and_omits_what_cannot_fire() -> None:
    outbound = to_mermaid(build_diagram(policy=PRESETS["outbound"]))
    # the policy picks the start: [*] arrows lead down to it, no choice is drawn
    assert "    [*] --> call\n" in outbound
    assert "        [*] --> connecting\n" in outbound
    assert "            [*] --> ringing\n" in outbound
    assert "<<choice>>" not in outbound
    assert "call_answered [agent_speaks_first]" not in _edge_lines(outbound, "ringing", "greeting")
    assert "never fires under this policy: ringing --call_answered--> greeting" in outbound
    # greets_silent_callee holds, so the earlier transition always wins over hanging up
    assert "end_call_no_answer" not in _edge_lines(outbound, "awaiting_user", "ended")

    # inbound calls wait in start for the session; the policy picks where they go live
    inbound = to_mermaid(build_diagram(policy=PRESETS["inbound"]))
    assert "        [*] --> connecting\n" in inbound
    assert "            [*] --> start\n" in inbound
    assert "start --> greeting : session_started [agent_speaks_first]\n" in inbound
    assert "ringing" not in inbound.split("%% never fires")[0]
    assert "never fires under this policy: start --session_started--> listening" in inbound

    # without a policy: an outbound call rings at once (the eventless, policy-guarded
    # move), an inbound one goes live on session_started
    whole = to_mermaid(build_diagram())
    assert "<<choice>>" not in whole
    assert "            start --> ringing : [is_outbound]\n" in whole
    assert "        start --> listening : session_started\n" in whole
    # beside the live states, the caller's voice: its own region, with its own moves
    assert "                --\n                state caller_voice {\n" in whole
    # beside the call's line, the realtime model's activity: a region of the call
    assert "        --\n        state model_activity {\n" in whole
    assert (
        "model_responding --> cancelling_active : model_cancel_sent / note_cancel_sent\n" in whole
    )
    assert "caller_speaking --> caller_silent : [input_is_muted]\n" in whole

    agent_first = TurnPolicy(direction="outbound", first_speaker="agent", greeting="Hi")
    text = to_mermaid(build_diagram(policy=agent_first))
    assert "call_answered [agent_speaks_first]\n" in text
    assert "idle_timer_expired" not in text.split("%% never fires")[0]  # no idle_timeout


def test_policy_guards_read_the_policy_only() -> None:
    for name in POLICY_GUARDS:
        assert list(inspect.signature(getattr(TurnRules, name)).parameters) == ["self"], name


def test_dot_text_is_valid_graphviz() -> None:
    result = subprocess.run(
        [debian_program("dot", "graphviz"), "-Tsvg"],
        input=to_dot(build_diagram(policy=PRESETS["outbound"])).encode(),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    assert b"<svg" in result.stdout


def test_overview_draws_states_and_state_changes_by_event_only() -> None:
    diagram = build_diagram()
    text = to_overview(diagram)
    hidden = left_to_the_caption(collapse_phases(diagram))
    # the tool cap, the tool reply's hold, the handoff, and beside the call's course the
    # model's activity: in the caption
    beside = {"tool_cap", "tools_open", "capped", "tool_reply", "reply_held", "reply_free"}
    beside |= {"handoff", "agent_keeps_call", "handing_off"}
    assert {*beside, "model_activity", *MODEL_STATES} <= hidden
    for state in set(collapse_phases(diagram).states) - set(diagram.parents.values()) - hidden:
        assert re.search(rf"\b{state}\b", text), state
    for state in hidden:
        assert not re.search(rf"\b{state}\b", text), state
    labels = [
        line.split(" : ", 1)[1] for line in text.splitlines() if " --> " in line and " : " in line
    ]
    assert labels, text
    for label in labels:
        for name in label.split("<br/>"):
            # an event, or the guards of an eventless move (the start's policy guard)
            assert re.fullmatch(r"!?[a-z_]+(, !?[a-z_]+)*", name), label
    # one edge per pair of states, its events merged
    assert (
        "    awaiting_user --> greeting : "
        "user_turn_committed<br/>user_transcript<br/>await_user_timer_expired\n" in text
    )
    # the compound state holding the start is no box: its moves are left to a caption
    assert "state call {" not in text
    assert whole_call_transitions(diagram) == [
        ("call_ended", "ended"),
        ("answering_machine_detected", "ended"),
        ("session_error", "ended"),
    ]
    # a compound state with moves of its own is a box, its moves drawn once
    assert "    state conversation {\n" in text
    # the ways into the final state are a caption's, not edges from nearly every state
    assert " --> ended :" not in text
    assert ("conversation", "ended", ["max_duration_timer_expired"]) in ways_to_end(diagram)
    assert ("greeting", "ended", ["max_duration_timer_expired", "effect_outcome"]) in ways_to_end(
        diagram
    )
    # the greeting's end leads into two of its states (listening, speaking): one edge to it
    assert "    greeting --> conversation : agent_speech_ended\n" in text
    assert "greeting --> listening" not in text
    assert "greeting --> speaking" not in text
    # internal and bookkeeping transitions are detail, not overview
    assert "note_user_turn" not in text
    assert "conversation --> conversation" not in text
    # the caller's voice: a region box with its initial state, beside the turn's states
    # (a caption names the parallel state); the edges into the turn keep their targets
    assert "    state caller_voice {\n        [*] --> caller_silent\n" in text
    assert "        caller_silent --> caller_speaking : user_speech_started\n" in text
    assert "    ringing --> awaiting_user : call_answered\n" in text
    assert " --> turn" not in text
    assert parallel_regions(diagram)[0] == (
        "call",
        [
            (
                "line",
                # the live call's leaves are listed with its own regions, below
                ["start", "ringing", "live"],
            ),
            ("model_activity", list(MODEL_STATES)),
            ("turn_replies", ["turn_replies_on_request", "auto_turn_replies"]),
            ("tool_output_replies", ["tool_replies_on_request", "auto_tool_replies"]),
        ],
    )
    assert parallel_regions(diagram)[1:] == [
        (
            "live",
            [
                (
                    "turn",
                    [
                        "awaiting_user",
                        "awaiting_agent",
                        "greeting",
                        "listening",
                        "speaking",
                        "tool_loop",
                    ],
                ),
                ("caller_voice", list(VOICE_STATES)),
                ("tool_cap", ["tools_open", "tool_loop_interrupted", "capped"]),
                ("tool_reply", ["reply_held", "reply_free"]),
                ("handoff", ["agent_keeps_call", "handing_off"]),
            ],
        )
    ]


def test_timers_are_drawn_as_declared() -> None:
    """Entry starts the timers a state declares (``after(...)``), its exit cancels them;
    the tool-reply hold's too, on its timed phase."""
    entry_exit = build_diagram(TurnMachine).entry_exit
    assert [line for line in entry_exit["listening"] if "timers" in line] == [
        "entry / start_timers(idle)",
        "exit / cancel_timers(idle)",
    ]
    assert [line for line in entry_exit["held_after_caller_stops"] if "timers" in line] == [
        "entry / start_timers(tool_reply_hold)",
        "exit / cancel_timers(tool_reply_hold)",
    ]
    assert not [line for line in entry_exit.get("conversation", ()) if "timers" in line]
