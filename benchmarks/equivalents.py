"""The turn machine rebuilt, by introspection, for the ``transitions`` package and as a
plain dict table: same states, same (source, event, target) moves, same order.

Guards are what make a machine's move depend on more than (state, event). Neither
rebuild runs the real rules, so each takes the branch the real machine took, as
recorded in :class:`~benchmarks.callscript.Step`:

- ``transitions``: every guarded transition gets one condition, an oracle that is true
  for the recorded branch; every named action, enter and exit gets a no-op callback of
  the same name (so the engine makes the same calls, which do nothing).
- the dict table: the branch is part of the key, ``(state, event, branch) -> target``,
  so one step is one dict lookup: the floor for any table-driven machine.
"""

from __future__ import annotations

from typing import Any

from transitions import Machine

from turnfsm import TurnMachine
from turnfsm.machine import (
    TurnChart,
    handled_events,
    leaf_states,
    leaf_transitions,
    states_beside,
)

from .callscript import Step, transitions_on


def settled(target: Any) -> str:
    """Where a move into ``target`` comes to rest in the scripted (pipeline) call: a
    compound state's initial leaf, then that leaf's eventless moves (the greeting's wait
    for a free model ends in the step that enters it: a pipeline's model is always free)."""
    while target.states:
        target = next(state for state in target.states if state.initial)
    eventless = [t for t in target.transitions if t.is_eventless]
    return settled(eventless[0].target) if eventless else target.id


def _names(callbacks: Any) -> list[str]:
    """The callbacks a declaration names (python-statemachine's conventions left out)."""
    return [str(spec.func) for spec in callbacks if not spec.is_convention]


def state_ids(machine_class: type[TurnChart] = TurnMachine) -> list[str]:
    return [state.id for state in leaf_states(machine_class)]


def moves(machine_class: type[TurnChart] = TurnMachine) -> list[tuple[str, str, int, Any]]:
    """Every transition as ``(source, event, branch, transition)``, in the engine's order."""
    found = []
    for state in leaf_states(machine_class):
        events = dict.fromkeys(str(e) for t in leaf_transitions(state) for e in t.events)
        for event in events:
            for branch, transition in enumerate(transitions_on(state.id, event)):
                found.append((state.id, event, branch, transition))
    return found


class _Oracle:
    """A ``transitions`` condition: true when the step's recorded branch is this one."""

    __slots__ = ("branch",)

    def __init__(self, branch: int) -> None:
        self.branch = branch

    def __call__(self, *args: object, branch: int, **kwargs: object) -> bool:
        return branch == self.branch

    def __repr__(self) -> str:  # transitions logs conditions by name
        return f"oracle({self.branch})"


def _noop(self: object, *args: object, **kwargs: object) -> None:
    return None


def transitions_model_class(machine_class: type[TurnChart] = TurnMachine) -> type:
    """A model class with a no-op method for every action the machine names."""
    names: set[str] = set()
    for state in leaf_states(machine_class):
        names.update(_names(state.enter) + _names(state.exit))
        for transition in leaf_transitions(state):
            names.update(_names(transition.before) + _names(transition.on))
            names.update(_names(transition.after))
    return type("TransitionsTurnModel", (), dict.fromkeys(sorted(names), _noop))


def transitions_spec(machine_class: type[TurnChart] = TurnMachine) -> dict[str, Any]:
    """Keyword arguments for ``transitions.Machine``, equivalent to ``machine_class``."""
    states = [
        {"name": state.id, "on_enter": _names(state.enter), "on_exit": _names(state.exit)}
        for state in leaf_states(machine_class)
    ]
    table = []
    for source, event, branch, transition in moves(machine_class):
        guarded = bool(list(transition.cond))
        table.append(
            {
                "trigger": event,
                "source": source,
                # dest=None is an internal transition: no exit or enter, like internal=True
                "dest": None
                if transition.internal or not transition.target
                else settled(transition.target),
                "conditions": [_Oracle(branch)] if guarded else [],
                "before": _names(transition.before),
                "after": _names(transition.on) + _names(transition.after),
            }
        )
    return {
        "states": states,
        "transitions": table,
        "auto_transitions": False,
        "ignore_invalid_triggers": True,
        "send_event": False,
    }


class TransitionsTurnMachine:
    """The turn machine on ``transitions``: ``model.trigger(event, branch=...)``."""

    def __init__(self, start: str, machine_class: type[TurnChart] = TurnMachine) -> None:
        self.model = transitions_model_class(machine_class)()
        self.machine = Machine(model=self.model, initial=start, **transitions_spec(machine_class))


def dict_table(machine_class: type[TurnChart] = TurnMachine) -> dict[tuple[str, str, int], str]:
    """``(state, event, branch) -> next state`` for every transition; branch -1 stays
    (also for the events only a region beside the state takes: the caller's voice, the
    realtime model's activity)."""
    table: dict[tuple[str, str, int], str] = {}
    for source, event, branch, transition in moves(machine_class):
        table[source, event, branch] = settled(transition.target) if transition.target else source
        table[source, event, -1] = source
    handled = handled_events(machine_class)
    for state, beside in states_beside(machine_class).items():
        for event in frozenset().union(*(handled[leaf] for leaf in beside)):
            table.setdefault((state, event, -1), state)
    return table


def check_equivalent(steps: list[Step], start: str) -> None:
    """Both rebuilds make exactly the recorded moves (raises AssertionError if not)."""
    rebuilt = TransitionsTurnMachine(start)
    table = dict_table()
    state = start
    for step in steps:
        if rebuilt.model.state != step.before or state != step.before:
            raise AssertionError(f"out of step before {step}")
        rebuilt.model.trigger(step.event.name, branch=step.branch)
        state = table[state, step.event.name, step.branch]
        if rebuilt.model.state != step.after or state != step.after:
            raise AssertionError(
                f"{step}: transitions went to {rebuilt.model.state}, the table to {state}"
            )
