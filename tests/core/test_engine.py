"""The tabled engine (:mod:`turnfsm.engine`) makes exactly the stock engine's moves.

The same guided random calls run through the turn chart on both engines: every step
must give the same state, effects and context, and the whole traces must be equal.
"""

from __future__ import annotations

import gc
import random
import weakref
from typing import Any

import pytest
from statemachine import HistoryState, State, StateChart
from statemachine.engines.sync import SyncEngine

from turnfsm import TurnController, TurnPolicy
from turnfsm import events as ev
from turnfsm.engine import _TABLES, TurnEngine
from turnfsm.machine import TurnChart, TurnMachine, declare_chart
from turnfsm.testing import event_alphabet


class _StockEngineChart(TurnChart):
    def _get_engine(self) -> Any:
        return SyncEngine(self)


StockTurnMachine = type(
    "StockTurnMachine", (_StockEngineChart,), {**declare_chart(), "__module__": __name__}
)
"""The turn chart, declared afresh, on python-statemachine's own sync engine."""

POLICIES = {
    "outbound-user-timers": TurnPolicy(
        direction="outbound",
        greeting="Hi, this is Ada.",
        greeting_lock="keep_listening",
        greeting_overlap="answer_whole",
        idle_timeout=5,
        idle_max_reprompts=1,
        max_call_duration=60,
        max_tool_steps=1,
    ),
    "outbound-agent-mute-drop": TurnPolicy(
        direction="outbound",
        first_speaker="agent",
        greeting_instructions="Introduce yourself",
        greeting_overlap="drop",
        interrupted_text="drop",
        mute_input_during_tools=True,
        max_tool_steps=2,
    ),
    "inbound-agent-mute": TurnPolicy(greeting="Hi", max_tool_steps=1, await_user_timeout=3),
    "inbound-user-no-greeting": TurnPolicy(
        first_speaker="user", idle_timeout=3, on_answering_machine="continue"
    ),
}
WALKS = 10
STEPS = 40
ENDINGS = frozenset({"call_ended", "session_error", "answering_machine_detected"})
"""Drawn only among any events, or the walks end too soon."""


def test_the_turn_machine_runs_on_the_tabled_engine() -> None:
    policy = POLICIES["inbound-agent-mute"]
    assert isinstance(TurnController(policy)._machine._engine, TurnEngine)
    stock = TurnController(policy, machine_class=StockTurnMachine)
    assert type(stock._machine._engine) is SyncEngine


@pytest.mark.parametrize("name", list(POLICIES))
def test_both_engines_make_the_same_moves(name: str) -> None:
    policy = POLICIES[name]
    alphabet = event_alphabet()
    rng = random.Random(name)
    moves = set()
    for _ in range(WALKS):
        tabled = TurnController(policy, strict=True, keep_text=True, machine_class=TurnMachine)
        stock = TurnController(policy, strict=True, keep_text=True, machine_class=StockTurnMachine)
        assert tabled.state == stock.state
        for _ in range(STEPS):
            handled = [
                e for e in alphabet if e.name in tabled.handled_events and e.name not in ENDINGS
            ]
            event = rng.choice(handled if handled and rng.random() < 0.85 else alphabet)
            before = tabled.state
            effects = tabled.handle(event)
            assert stock.handle(event) == effects, f"{before} on {event!r}"
            assert (stock.state, stock.context) == (tabled.state, tabled.context)
            moves.add((before, event.name, tabled.state))
        assert stock.trace == tabled.trace
    assert len({move for move in moves if move[0] != move[2]}) > 5  # the walks got going


def _history_chart() -> type[StateChart]:
    class Remembering(StateChart):
        def _get_engine(self) -> Any:
            return TurnEngine(self)

        class away(State.Compound):  # noqa: N801
            first = State(initial=True)
            second = State()
            h = HistoryState()
            onward = first.to(second)

        home = State(initial=True)
        leave = home.to(away)
        back = away.to(home)
        resume = home.to(away.h)

    return Remembering


def test_plans_are_not_reused_across_history_states() -> None:
    """Entering through a history state depends on what it remembers, not only on the
    transition and the configuration: such a chart is planned step by step."""
    machine = _history_chart()()
    assert isinstance(machine._engine, TurnEngine)
    visits = []
    for event in ("leave", "back", "resume", "onward", "back", "resume"):
        machine.send(event)
        visits.append(sorted(state.id for state in machine.configuration))
    assert visits[2] == ["away", "first"]
    assert visits[5] == ["away", "second"]


def _finished_call(policy: TurnPolicy) -> list[weakref.ref[Any]]:
    """Weak references to one finished call's controller, machine, rules, context and
    policy, after a walk that meets many (state, event) pairs for the first time."""
    controller = TurnController(policy, keep_text=True)
    rng = random.Random(7)
    for _ in range(STEPS):
        handled = [e for e in event_alphabet() if e.name in controller.handled_events]
        controller.handle(rng.choice(handled or event_alphabet()))
    controller.handle(ev.CallEnded(at=99.0))
    parts = (controller, controller._machine, controller._rules, controller.context, policy)
    return [weakref.ref(part) for part in parts]


def test_no_engine_cache_keeps_a_finished_call() -> None:
    """Issue 22: the chart's table of candidates, shared by every machine of a class,
    was keyed by the first machine's bound event, so that machine, its rules (the
    policy's greeting) and its context lived as long as the process."""
    policy = TurnPolicy(direction="outbound", greeting="Hi Mrs Jones, about your loan")
    refs = _finished_call(policy)
    del policy
    gc.collect()
    alive = [type(ref()).__name__ for ref in refs if ref() is not None]
    assert alive == [], f"still referenced after the call: {alive}"
    for state, event in _TABLES[TurnMachine]:
        assert type(state) is str, state
        assert event is None or type(event) is str, event
