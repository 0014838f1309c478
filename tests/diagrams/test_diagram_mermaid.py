"""Mermaid and DOT drawn from the live machine class."""

from __future__ import annotations

import inspect
import os
import re
import shutil
import subprocess
import sys

import pytest

from turnfsm.cli import PRESETS
from turnfsm.diagram import POLICY_GUARDS, build_diagram, machine_edges, to_dot, to_mermaid
from turnfsm.machine import LOCKED_STATES, TurnMachine, declared_moves
from turnfsm.policy import TurnPolicy
from turnfsm.rules import TurnRules


def _edge_line(text: str, source: str, target: str) -> str:
    lines = [line for line in text.splitlines() if line.strip().startswith(f"{source} --> ")]
    matching = [line for line in lines if line.split(" : ")[0].strip() == f"{source} --> {target}"]
    assert len(matching) == 1, f"expected one {source} --> {target} edge in:\n{text}"
    return matching[0]


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
    assert declared == {edge.event for edge in machine_edges()}
    missing = sorted(event for event in declared if not re.search(rf"\b{event}\b", text))
    assert not missing


def test_locked_state_is_marked() -> None:
    assert LOCKED_STATES == {"greeting"}
    diagram = build_diagram(policy=PRESETS["outbound"])
    text = to_mermaid(diagram)
    assert '    state "greeting 🔒 locked" as greeting' in text
    assert "    class greeting locked" in text
    assert "classDef locked " in text
    greeting = next(
        line for line in to_dot(diagram).splitlines() if line.startswith("    greeting [")
    )
    assert "greeting [locked]" in greeting
    assert 'color="#c62828"' in greeting
    assert "penwidth=3" in greeting


def test_edges_show_guards_and_actions() -> None:
    text = to_mermaid(build_diagram())
    line = _edge_line(text, "awaiting_user", "greeting")
    assert (
        "timer_fired [timer_is_running, is_await_timer, greets_silent_callee] / note_timer_fired"
        in line
    )
    assert "user_turn_committed / note_first_words, note_user_turn" in line
    # unless-guards are negated; internal transitions keep their guards, in the note
    assert "session_error [!error_is_recoverable] / note_session_error" in text
    assert "user_turn_committed [drops_overlap, !is_first_words] / reject_user_turn" in text
    assert "entry / begin_greeting" in text
    assert "exit / forget_greeting" in text


def test_policy_sets_the_start_and_omits_what_cannot_fire() -> None:
    outbound = to_mermaid(build_diagram(policy=PRESETS["outbound"]))
    assert "    [*] --> ringing" in outbound
    assert "call_answered [agent_speaks_first]" not in _edge_line(outbound, "ringing", "greeting")
    assert "never fires under this policy: ringing --call_answered--> greeting" in outbound
    # greets_silent_callee holds, so the earlier transition always wins over hanging up
    assert "note_no_answer" not in _edge_line(outbound, "awaiting_user", "ended")

    inbound = to_mermaid(build_diagram(policy=PRESETS["inbound"]))
    assert "    [*] --> greeting" in inbound
    assert "ringing" not in inbound.split("%% never fires")[0]

    agent_first = TurnPolicy(direction="outbound", first_speaker="agent", greeting="Hi")
    text = to_mermaid(build_diagram(policy=agent_first))
    assert "call_answered [agent_speaks_first] / begin_call" in text
    assert "is_idle_timer" not in text.split("%% never fires")[0]  # no idle_timeout


def test_policy_guards_read_the_policy_only() -> None:
    for name in POLICY_GUARDS:
        assert list(inspect.signature(getattr(TurnRules, name)).parameters) == ["self"], name


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz dot is not installed")
def test_dot_text_is_valid_graphviz() -> None:
    result = subprocess.run(
        ["dot", "-Tsvg"],
        input=to_dot(build_diagram(policy=PRESETS["outbound"])).encode(),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    assert b"<svg" in result.stdout
