"""The compiled engine (:mod:`turnfsm.engine`) makes exactly python-statemachine's moves.

The explorer proves it on every configuration it reaches (``E1``, in
``tests/core/test_explorer.py``); here a seeded engine bug shows that proof can fail,
guided random calls compare whole traces, and the compiled engine refuses, naming why,
what it cannot run as the reference does.
"""

from __future__ import annotations

import gc
import itertools
import random
import weakref
from collections.abc import Iterable
from typing import Any

import pytest
from statemachine.transition import Transition

from turnfsm import TurnController, TurnPolicy
from turnfsm import events as ev
from turnfsm.context_rules import regions_possible
from turnfsm.engine import CompiledChart, CompiledEngine, Plan, UnsupportedChart, compiled_chart
from turnfsm.events import EVENTS_BY_NAME
from turnfsm.machine import REGION_STATES, TurnMachine, build_machine, configurations, walk_states
from turnfsm.rules import TurnRules
from turnfsm.testing import event_alphabet, explore, realtime_alphabet

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


def test_the_controller_runs_the_compiled_engine_unless_asked_for_the_reference() -> None:
    policy = POLICIES["inbound-agent-mute"]
    compiled = TurnController(policy)
    assert compiled.engine == "compiled"
    assert isinstance(compiled._engine, CompiledEngine)
    assert compiled._machine is None  # no python-statemachine machine per call
    reference = TurnController(policy, engine="reference")
    assert reference.engine == "reference"
    assert reference._engine is None
    assert reference._machine is not None


def test_an_unknown_engine_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="engine must be one of .*'fast'"):
        TurnController(TurnPolicy(), engine="fast")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", list(POLICIES))
def test_both_engines_make_the_same_moves(name: str) -> None:
    policy = POLICIES[name]
    alphabet = (*event_alphabet(), *realtime_alphabet())
    rng = random.Random(name)
    moves = set()
    for _ in range(WALKS):
        compiled = TurnController(policy, strict=True, keep_text=True)
        reference = TurnController(policy, strict=True, keep_text=True, engine="reference")
        assert compiled.configuration == reference.configuration
        for _ in range(STEPS):
            handled = [
                e for e in alphabet if e.name in compiled.handled_events and e.name not in ENDINGS
            ]
            event = rng.choice(handled if handled and rng.random() < 0.85 else alphabet)
            before = compiled.configuration
            effects = compiled.handle(event)
            assert reference.handle(event) == effects, f"{before} on {event!r}"
            assert reference.configuration == compiled.configuration
            assert reference.context == compiled.context
            moves.add((before, event.name, compiled.configuration))
        assert reference.trace == compiled.trace
    assert len({move for move in moves if move[0] != move[2]}) > 5  # the walks got going


def _contradict(transitions: Iterable[Transition]) -> bool:
    """Whether some guard must hold for one of ``transitions`` and fail for another."""
    wanted: dict[str, bool] = {}
    for transition in transitions:
        for spec in transition.cond:
            if spec.is_convention:
                continue
            guard = str(spec)
            name, value = guard.removeprefix("!"), not guard.startswith("!")
            if wanted.setdefault(name, value) != value:
                return True
    return False


def _quiet_region_of() -> dict[str, str]:
    """The region of each atomic state of the regions beside the turn none of whose
    states runs an action as it is left (the caller's voice, the handoff, what a realtime
    model answers on its own). Left by a transition of another region, which state such a
    region was in changes no callback of the step, in any order."""
    quiet = {}
    for region in walk_states(TurnMachine.states):
        if region.id in REGION_STATES and not any(
            not spec.is_convention for state in walk_states([region]) for spec in state.exit
        ):
            quiet.update(dict.fromkeys(REGION_STATES[region.id], region.id))
    return quiet


_DOCUMENT = [state.id for state in walk_states(TurnMachine.states)]


def _document_order(leaf: str) -> int:
    return _DOCUMENT.index(leaf)


def test_the_order_of_the_regions_never_changes_a_step_of_the_turn_chart() -> None:
    """The compiled engine tries the regions in document order (the turn first); mid-call
    the reference tries them in the order it entered them. In every configuration of the
    chart, for every event, taking one candidate of each of several regions together
    gives the same step in every order (the same callbacks, in the same order, and the
    same configuration after), unless their guards contradict: one needs a guard the
    other needs false, asked in the same step, so they are never taken together."""
    chart = compiled_chart(TurnMachine, TurnRules)
    names = [*EVENTS_BY_NAME, None]
    compared = 0
    possible = list(filter(regions_possible, configurations()))  # (the cap, the hold...)
    quiet = _quiet_region_of()
    for name in names:
        # a quiet region's states that take no transition on the event all give the same
        # steps (their exits run nothing): one stands for them
        idle = {leaf for leaf in quiet if not chart.candidates((leaf,), name)}
        standing: dict[str, str] = {}
        for leaf in sorted(idle, key=_document_order):
            standing.setdefault(quiet[leaf], leaf)
        for leaves in possible:
            if any(leaf in idle and standing[quiet[leaf]] != leaf for leaf in leaves):
                continue
            regions = chart.candidates(leaves, name)
            for chosen in itertools.product(*regions):
                # (a transition of the call is a candidate of every region: taken once)
                taken = tuple(dict.fromkeys(t.index for t in chosen))
                if len(taken) < 2 or _contradict(chart._transitions[i] for i in taken):
                    continue
                plans = {
                    (plan.names, plan.leaves)
                    for order in itertools.permutations(taken)
                    for plan in [chart.plan(leaves, order)]
                }
                assert len(plans) == 1, (leaves, name, chosen, plans)
                compared += 1
    assert compared >= 7  # the caller's voice beside each turn transition on its events


def _ends_before_the_states_are_left(original: Any) -> Any:
    """A seeded engine bug: a step into the final state runs the transition's own actions
    (``end_call``, which says why the call ends) before the exit actions of the states it
    leaves (which cancel their timers): the call is ended, then its timers stopped."""

    def plan(self: CompiledChart, leaves: tuple[str, ...], enabled: tuple[int, ...]) -> Plan:
        right = original(self, leaves, enabled)
        if not right.terminates:
            return right
        return Plan(
            tuple(reversed(right.before_update)),
            right.after_update,
            right.leaves,
            right.active,
            right.terminates,
        )

    return plan


def test_the_explorer_catches_a_compiled_engine_that_differs_from_the_reference(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a chart class of its own: its tables are compiled afresh, with the bug
    seeded = build_machine(name="SeededEngineBug")
    monkeypatch.setattr(
        CompiledChart, "_make_plan", _ends_before_the_states_are_left(CompiledChart._make_plan)
    )
    # the hold of a tool reply and the unspoken text left out: 1,480 configurations, not 7,532
    policy = TurnPolicy(
        first_speaker="user",
        max_tool_steps=1,
        tool_reply_hold=None,
        interrupted_text="keep",
        max_call_duration=600,  # a timer that the end cancels, before or after it ends
    )
    report = explore(policy, machine_class=seeded)
    engines = [v for v in report.violations if v.startswith("E1 engines differ")]
    assert engines, report.violations[:3]
    ended_first = "effects (EndCall(reason='hangup'), CancelTimer(timer='max_duration')), "
    reference = "the reference's (CancelTimer(timer='max_duration'), EndCall"
    assert ended_first + reference in engines[0]
    assert report.paths[report.violations.index(engines[0])]  # a path that shows it


class _AsksForTheModel(TurnRules):
    def note_first_words(self, ev: ev.UserTurnCommitted, model: object) -> None:  # type: ignore[override]
        super().note_first_words(ev)


def test_what_the_compiled_engine_cannot_run_exactly_is_refused_by_name() -> None:
    policy = TurnPolicy(direction="outbound", greeting="Hi")
    with pytest.raises(UnsupportedChart, match=r"note_first_words asks for 'model'"):
        TurnController(policy, rules_class=_AsksForTheModel)
    # the reference engine runs it
    reference = TurnController(policy, rules_class=_AsksForTheModel, engine="reference")
    assert reference.handle(ev.CallAnswered(at=0.0))
    # the explorer explores such a chart on the reference engine alone (cut short here:
    # it went past the start instead of refusing)
    with pytest.raises(RuntimeError, match="more than 50 configurations"):
        explore(policy, rules_class=_AsksForTheModel, max_configurations=50)
    not_atomic = type("NotAtomic", (TurnMachine,), {"atomic_configuration_update": False})
    with pytest.raises(UnsupportedChart, match="atomic_configuration_update must be True"):
        TurnController(policy, machine_class=not_atomic)


def _finished_call(policy: TurnPolicy) -> list[weakref.ref[Any]]:
    """Weak references to one finished call's controller, engine, rules, context and
    policy, after a walk that meets many (state, event) pairs for the first time."""
    controller = TurnController(policy, keep_text=True)
    rng = random.Random(7)
    for _ in range(STEPS):
        handled = [e for e in event_alphabet() if e.name in controller.handled_events]
        controller.handle(rng.choice(handled or event_alphabet()))
    controller.handle(ev.CallEnded(at=99.0))
    parts = (controller, controller._engine, controller._rules, controller.context, policy)
    return [weakref.ref(part) for part in parts]


def test_no_engine_table_keeps_a_finished_call() -> None:
    """Issue 22: the chart's tables, shared by every call of a class, must hold the chart's
    and rules class's own objects only, never a call's rules, policy or context."""
    policy = TurnPolicy(direction="outbound", greeting="Hi Mrs Jones, about your loan")
    refs = _finished_call(policy)
    del policy
    gc.collect()
    alive = [type(ref()).__name__ for ref in refs if ref() is not None]
    assert alive == [], f"still referenced after the call: {alive}"
