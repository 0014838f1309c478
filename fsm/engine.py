"""python-statemachine's sync engine, selecting transitions from a table built from the chart.

The stock engine finds a step's transition by walking the active state and its parents,
testing every declared transition against the event's name (``Events.match``) before
its guards; it does so three times per ``send()`` (the eventless transitions before and
after the event, then the event's). In the compound turn chart that walk was most of a
step's cost. The walk's outcome before guards depends only on the chart, the state and
the event's name, and a chart class never changes once declared, so :class:`TurnEngine`
makes it once per (state, event) pair and keeps the candidates, in the order the stock
engine tries them; a step then only evaluates their guards, first match wins, exactly as
before. A configuration without eventless transitions (every state but ``start``) thus
costs one dictionary lookup per eventless check.

The engine's planning of a microstep (which states to exit and enter, in which order, and
the configuration after) is pure computation over the transitions taken and the
configuration before, as long as the chart has no history states (the only planning
input that changes while a machine runs). Each machine keeps the plans it has made, by
(transitions, configuration), and reuses them; a chart with history states plans every
step, as the stock engine does.

Nothing else changes: entering, exiting, actions, error handling and queues are the stock
engine's. ``tests/core/test_engine.py`` checks that both engines make the same moves.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from statemachine.engines.sync import SyncEngine
from statemachine.graph import iterate_states
from statemachine.orderedset import OrderedSet

if TYPE_CHECKING:
    from statemachine import State, StateChart
    from statemachine.engines.base import StateTransition
    from statemachine.event_data import TriggerData
    from statemachine.transition import Transition

Candidates = tuple["Transition", ...]
"""The transitions a state may take on one event, in the order they are tried."""

_TABLES: weakref.WeakKeyDictionary[type, dict[tuple[str, str | None], Candidates]] = (
    weakref.WeakKeyDictionary()
)
"""One table per chart class, shared by its machines and filled as pairs are met: it holds
the class's transitions and plain names only, never a machine."""


def candidates(state: State, event: str | None) -> Candidates:
    """The transitions ``state`` may take on ``event`` (``None``: the eventless ones), before
    guards: its own, then its parents', in declaration order, as the stock engine tries
    them (``SyncEngine._first_transition_that_matches``)."""
    found: list[Transition] = []
    node: State | None = state
    while node is not None:
        found.extend(
            transition
            for transition in node.transitions
            if not transition.initial and transition.match(event)  # type: ignore[arg-type]
        )
        node = node.parent
    return tuple(found)


class TurnEngine(SyncEngine):
    """The sync engine, with transition selection read from the chart's table."""

    def __init__(self, sm: StateChart) -> None:
        super().__init__(sm)
        self._table = _TABLES.setdefault(type(sm), {})
        # Plans hold this machine's own state objects (callbacks receive them): kept per
        # machine, not per class.
        self._plans: dict[tuple[Any, ...], Any] | None = (
            None if any(state.history for state in iterate_states(sm.states)) else {}
        )

    def _run_macrostep(self) -> bool:
        # The stock macrostep builds a trigger and looks for eventless transitions before
        # it finds the internal queue empty; in a configuration without eventless
        # transitions and with no internal event queued (nearly every step), nothing
        # can be taken: say so without building anything.
        if self.internal_queue.is_empty() and not any(
            self._candidates(state, None) for state in self.sm.configuration if state.is_atomic
        ):
            return False
        return bool(super()._run_macrostep())

    def select_eventless_transitions(self, trigger_data: TriggerData) -> OrderedSet[Transition]:
        return self._select(trigger_data, None)

    def select_transitions(self, trigger_data: TriggerData) -> OrderedSet[Transition]:
        return self._select(trigger_data, trigger_data.event)

    def _select(self, trigger_data: TriggerData, event: str | None) -> OrderedSet[Transition]:
        """Per active atomic state, the first candidate whose guards hold (as the stock
        ``_select_transitions``); conflicts between regions resolved by the stock rule."""
        enabled: OrderedSet[Transition] = OrderedSet()
        for state in self.sm.configuration:
            if not state.is_atomic:
                continue
            for transition in self._candidates(state, event):
                if self._conditions_match(transition, trigger_data):
                    enabled.add(transition)
                    break
        if len(enabled) > 1:
            return self._filter_conflicting_transitions(enabled)
        return enabled

    def _candidates(self, state: State, event: str | None) -> Candidates:
        # The event arrives as this machine's BoundEvent (a str that holds the machine):
        # the shared table is keyed by its plain name, or it would keep the first machine
        # that met each pair (its rules, policy and context) for the life of the process.
        key = (state.id, None if event is None else str(event))
        found = self._table.get(key)
        if found is None:
            found = self._table[key] = candidates(state, event)
        return found

    def _prepare_exit_states(
        self, enabled_transitions: list[Transition]
    ) -> tuple[list[StateTransition], OrderedSet[State]]:
        plans = self._plans
        if plans is None:
            return super()._prepare_exit_states(enabled_transitions)
        key = ("exit", tuple(enabled_transitions), tuple(self.sm.configuration))
        plan = plans.get(key)
        if plan is None:
            plan = plans[key] = super()._prepare_exit_states(enabled_transitions)
        return plan  # type: ignore[no-any-return]

    def _prepare_entry_states(
        self,
        enabled_transitions: list[Transition],
        states_to_exit: OrderedSet[State],
        previous_configuration: OrderedSet[State],
    ) -> Any:
        # states_to_exit follows from the transitions and the configuration before
        plans = self._plans
        if plans is None:
            return super()._prepare_entry_states(
                enabled_transitions, states_to_exit, previous_configuration
            )
        key = ("enter", tuple(enabled_transitions), tuple(previous_configuration))
        plan = plans.get(key)
        if plan is None:
            plan = plans[key] = super()._prepare_entry_states(
                enabled_transitions, states_to_exit, previous_configuration
            )
        return plan
