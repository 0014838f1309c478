"""Extending the machine is safe, and ``turnfsm check`` proves an extension or finds its bug.

A user's extension goes through :func:`turnfsm.machine.build_machine` (a fresh chart, new
``State`` objects) plus a :class:`~turnfsm.rules.TurnRules` subclass for its guards and
actions; ``TurnMachine`` itself must come out unchanged.
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
from pathlib import Path
from typing import Any, ClassVar

import attrs
import pytest

from turnfsm import TurnController, TurnPolicy
from turnfsm import effects as fx
from turnfsm import events as ev
from turnfsm.machine import (
    TurnChart,
    TurnMachine,
    after,
    build_machine,
    chart_states,
    declared_moves,
    handled_events,
    leaf_states,
    walk_states,
)
from turnfsm.rules import TurnRules
from turnfsm.tools.check import format_check, run_check
from turnfsm.tools.cli import main

# the tool-reply hold, on by default, doubles what a check explores; it is explored in
# tests/core/test_explorer.py, and has nothing to do with extending the machine
POLICY = TurnPolicy(direction="outbound", greeting="Hi", max_tool_steps=1, tool_reply_hold=None)


@attrs.frozen
class CallerSaidGoodbye(ev.Event):
    """A user's own event: their intent detector heard a goodbye."""

    name: ClassVar[str] = "caller_said_goodbye"


def say_goodbye_when_asked(chart: dict[str, Any]) -> None:
    """A user's extension: a new event ending the call from the conversation, and a
    transition added to an existing event."""
    conversation = chart_states(chart)["conversation"]
    chart["caller_said_goodbye"] = conversation.to(chart["ended"], on="end_call_goodbye")
    chart["session_error"] = chart["session_error"] | conversation.speaking.to(
        conversation.listening, on="note_recovered"
    )


class GoodbyeRules(TurnRules):
    def end_call_goodbye(self) -> None:
        self.emit(fx.EndCall(reason="goodbye"))

    def note_recovered(self) -> None:
        self.context.reprompts = 0


class LoudGoodbyeRules(GoodbyeRules):
    """A seeded bug: saying goodbye while hanging up breaks I5 (clean-up only)."""

    def end_call_goodbye(self) -> None:
        super().end_call_goodbye()
        self.emit(fx.Say(text="Bye!", reason="reprompt"))


GOODBYE = (CallerSaidGoodbye(at=1.0),)


def fingerprint(machine_class: type[TurnChart]) -> tuple[Any, ...]:
    """Every state, transition, guard and action of a machine, as plain data."""
    return tuple(
        (
            state.id,
            tuple(str(spec) for spec in state.enter),
            tuple(str(spec) for spec in state.exit),
            tuple(
                (
                    tuple(str(e) for e in transition.events),
                    transition.target.id if transition.target else None,
                    tuple(str(spec) for spec in transition.cond),
                    tuple(str(spec) for spec in transition.on),
                    transition.internal,
                )
                for transition in state.transitions
            ),
        )
        for state in leaf_states(machine_class)
    )


def test_an_extension_leaves_turn_machine_unchanged() -> None:
    before, moves = fingerprint(TurnMachine), declared_moves(TurnMachine)
    extended = build_machine(say_goodbye_when_asked, name="Extended")
    assert fingerprint(TurnMachine) == before
    assert declared_moves(TurnMachine) == moves
    assert "caller_said_goodbye" not in set().union(*handled_events(TurnMachine).values())
    assert ("speaking", "caller_said_goodbye", "ended") in declared_moves(extended)
    assert ("speaking", "session_error", "listening") in declared_moves(extended)
    assert fingerprint(build_machine(name="Plain")) == before  # builds are independent


@pytest.mark.parametrize(
    "state", ["call", "line", "connecting", "start", "ringing", "model_activity", "model_unlinked"]
)
def test_a_timer_cannot_start_on_entry_where_a_call_is_before_its_first_event(
    state: str,
) -> None:
    """The machine enters these as it is built (``ringing`` by the outbound start's
    eventless transition), when no ``StartTimer`` can be emitted: refused at once."""

    def time_it(chart: dict[str, Any]) -> None:
        found = {s.id: s for s in walk_states(chart["call"].states)} | {"call": chart["call"]}
        after(found[state], "max_duration", seconds="max_call_duration")

    with pytest.raises(ValueError, match=f"after\\({state}, 'max_duration'\\) starts on entry"):
        build_machine(time_it)


def test_an_extension_runs_with_its_rules() -> None:
    controller = TurnController(
        TurnPolicy(direction="inbound", first_speaker="user"),
        strict=True,
        machine_class=build_machine(say_goodbye_when_asked),
        rules_class=GoodbyeRules,
    )
    controller.handle(ev.SessionStarted(at=0.0))
    assert controller.handle(CallerSaidGoodbye(at=1.0)) == (fx.EndCall(reason="goodbye"),)
    assert controller.state == "ended"


def test_check_passes_a_sound_extension() -> None:
    report = run_check(
        POLICY,
        machine_class=build_machine(say_goodbye_when_asked),
        rules_class=GoodbyeRules,
        extra_events=GOODBYE,
        random_calls=50,
    )
    assert report.ok, format_check(report)
    assert ("listening", "caller_said_goodbye", "ended") in report.exploration.transitions


def test_check_finds_a_seeded_violation_with_its_shortest_path() -> None:
    report = run_check(
        POLICY,
        machine_class=build_machine(say_goodbye_when_asked),
        rules_class=LoudGoodbyeRules,
        extra_events=GOODBYE,
        random_calls=300,  # (200 missed the goodbye once hypothesis stopped drawing our literals)
    )
    assert not report.ok
    # breadth-first from the session's fact: the callee's "hello" greeted, the greeting's
    # speech created and ended (listening), then goodbye: no shorter way into the
    # conversation
    shortest = report.exploration.paths[0]
    assert [event.name for event in shortest] == [
        "interruption_settings",
        "user_turn_committed",
        "agent_speech_created",
        "agent_speech_ended",
        "caller_said_goodbye",
    ]
    assert report.random is not None
    assert report.random.path[-1] == GOODBYE[0]
    text = format_check(report)
    assert "VIOLATION I5 quiet_after_end" in text
    assert "  5. CallerSaidGoodbye(at=1.0)" in text
    assert text.endswith("FAILED")


USER_MODULE = """
import attrs
from typing import ClassVar
from turnfsm import effects as fx, events as ev
from turnfsm.machine import build_machine, chart_states
from turnfsm.rules import TurnRules

@attrs.frozen
class CallerSaidGoodbye(ev.Event):
    name: ClassVar[str] = "caller_said_goodbye"

def goodbye(chart):
    chart["caller_said_goodbye"] = chart_states(chart)["conversation"].to(chart["ended"], on="bye")

class Rules(TurnRules):
    def bye(self):
        self.emit(fx.Say(text="Bye!", reason="reprompt"))  # seeded: speech on the way out

MACHINE = build_machine(goodbye)
EVENTS = [CallerSaidGoodbye(at=1.0)]
"""


def test_turnfsm_check_cli_prints_the_violation_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "my_turns.py").write_text(textwrap.dedent(USER_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_turns", raising=False)
    policy = tmp_path / "policy.json"  # JSON, to turn the hold off (null): see POLICY
    policy.write_text(
        '{"direction": "outbound", "greeting": "Hi", "max_tool_steps": 1, "tool_reply_hold": null}'
    )
    args = ["check", str(policy), "--machine", "my_turns:MACHINE", "--rules", "my_turns:Rules"]
    assert main([*args, "--events", "my_turns:EVENTS", "--random-calls", "0"]) == 1
    out = capsys.readouterr().out
    assert "VIOLATION I5 quiet_after_end" in out
    assert "  5. CallerSaidGoodbye(at=1.0)" in out
    assert "random calls: skipped" in out
    # the user's rules run compiled, checked against python-statemachine's engine
    assert re.search(r"engines compared \(E1\): [1-9]\d* steps", out), out
    # the plain machine under the same policy: every invariant holds
    assert main(["check", str(policy), "--random-calls", "20"]) == 0
    out = capsys.readouterr().out
    assert "ok: no invariant broken" in out
    assert "random calls: 20" in out


def test_turnfsm_check_refuses_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "policy.yaml"]) == 1
    assert "POLICY must be a .json or .toml file or module:attr" in capsys.readouterr().err
    assert main(["check", "turnfsm.policy:TurnPolicy", "--rules", "json:loads"]) == 1
    assert "expected a TurnPolicy or a table" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("source", "flag", "message"),
    [
        (
            "import sys\nsys.exit(0)\n",
            "--rules",
            "--rules: importing 'user_module' exited (SystemExit: 0): nothing was checked",
        ),
        ("def broken(:\n", "--machine", "--machine: cannot import 'user_module:X': SyntaxError"),
        ("raise RuntimeError('no key')\n", "--events", "RuntimeError: no key"),
    ],
    ids=["exits on import", "syntax error", "raises on import"],
)
def test_check_fails_with_a_user_error_when_the_users_module_does_not_import(
    source: str,
    flag: str,
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 22: a module that exits on import made ``turnfsm check`` exit 0 having
    checked nothing; a SyntaxError was reported as "internal error ... please report it"."""
    (tmp_path / "user_module.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "user_module", raising=False)
    (tmp_path / "policy.json").write_text(json.dumps({"greeting": "Hi"}))
    assert main(["check", str(tmp_path / "policy.json"), flag, "user_module:X"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("turnfsm: error: ")
    assert message in captured.err
    assert "internal error" not in captured.err
    assert "please report it" not in captured.err
