"""What a policy's calls can reach: the chart pruned by the policy, without running a call.

A policy decides some guards once for the whole call (:data:`~turnfsm.rules.POLICY_GUARDS`:
``is_outbound``, ``agent_speaks_first``...) and leaves some timers unset, so a
transition needing the other answer, or an unset timer, never fires under it; and a
transition behind an earlier one of the same event whose remaining guards hold whenever
its own do never fires either. :func:`reach` walks the chart from the policy's start over
the rest: the transitions that can fire, and the states a call can be in (a move inside
one region of a parallel state enters nothing in the others). Diagrams draw only that
(:mod:`turnfsm.tools.diagram`); the LiveKit adapter reads from it the ways a policy ends a call
on its own (:func:`ends_of_its_own`).

It reads the policy, not the call's context, so it may keep a transition that no call
takes (the explorer fires fewer, :attr:`turnfsm.testing.ExplorationReport.fired`), never
leave out one that a call takes: the explorer's tests check that for every policy they
explore.

>>> from turnfsm import TurnPolicy
>>> inbound = TurnPolicy(greeting="Hi.", idle_timeout=10.0)
>>> from turnfsm.machine import STATES, public_state
>>> turn = {public_state(state) for state in reach(inbound).states} & set(STATES)
>>> sorted(turn)  # nobody rings
['ended', 'greeting', 'listening', 'speaking', 'start', 'tool_loop']
>>> sorted(state for state in reach(inbound).states if state.startswith("retry_"))
['retry_awaiting_model', 'retry_playing', 'retry_requested']
>>> ends_of_its_own(inbound)
('greeting_failed', 'idle')
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator

import attrs
from statemachine import State
from statemachine.transition import Transition

from . import effects as fx
from .machine import (
    TIMERS,
    TurnChart,
    TurnMachine,
    atomic_states,
    entry_leaves,
    leaf_transitions,
    walk_states,
)
from .policy import TurnPolicy
from .rules import POLICY_GUARDS, TurnRules

NOT_OF_ITS_OWN = frozenset({"call_ended", "session_error"})
"""Events that end a call without the machine deciding it: the caller's hang-up (or the
session's close), and an error LiveKit cannot recover from."""


@attrs.frozen
class Reach:
    """What calls under one policy can reach.

    Attributes:
        start: the state a call starts in.
        transitions: the declared transitions that can fire, in declaration order
            (the start's eventless choice included).
        states: the atomic states a call can be in (the regions' beside the turn too).
    """

    start: str
    transitions: tuple[Transition, ...]
    states: frozenset[str]


def reach(policy: TurnPolicy, machine_class: type[TurnChart] = TurnMachine) -> Reach:
    """The transitions and states calls under ``policy`` can reach.

    A transition is looked at from every leaf state it can fire in (its own state's
    transitions first, then its parents', as the engine tries them); it is kept if it
    can fire in at least one leaf the call reaches from the start.
    """
    from .controller import TurnController  # the controller's module imports this one

    started = TurnController(policy, record=False, machine_class=machine_class)
    start = started.state
    rules = TurnRules(policy=policy)
    decided = {name: bool(getattr(rules, name)()) for name in POLICY_GUARDS}
    # the expiries of timers the policy never starts (their seconds unset)
    never_expire = {
        timer.event for timer in TIMERS.values() if getattr(policy, timer.seconds) is None
    }

    def open_guards(transition: Transition) -> frozenset[str] | None:
        """The guards left to check at run time; ``None`` if the policy rules it out."""
        events = {str(event) for event in transition.events}
        if events and events <= never_expire:
            return None
        left = set()
        for spec in transition.cond:
            if spec.is_convention:
                continue
            guard = str(spec)
            name, wanted = guard.removeprefix("!"), not guard.startswith("!")
            if name in decided:
                if decided[name] != wanted:
                    return None
            else:
                left.add(guard)
        return frozenset(left)

    def possible_in(leaf: State) -> list[Transition]:
        possible: list[tuple[Transition, frozenset[str], frozenset[str]]] = []
        eventless = (t for t in leaf.transitions if not list(t.events) and not t.initial)
        for transition in (*eventless, *leaf_transitions(leaf)):
            guards = open_guards(transition)
            events = frozenset(str(event) for event in transition.events)
            # an earlier transition of the same event whose open guards are all among
            # this one's fires whenever this one could: this one never does
            if guards is not None and not any(
                earlier_events == events and earlier_guards <= guards
                for _, earlier_events, earlier_guards in possible
            ):
                possible.append((transition, events, guards))
        return [transition for transition, _, _ in possible]

    leaves = {state.id: state for state in atomic_states(machine_class)}
    # the start's configuration: its state, and the regions beside it in their first states
    reachable, kept = set(started.configuration), set()
    frontier = list(started.configuration)
    while frontier:
        leaf = frontier.pop()
        for transition in possible_in(leaves[leaf]):
            kept.add(id(transition))
            into = transition.target
            for target in _entered_leaves(into, leaves[leaf]) if into else []:
                if target not in reachable:
                    reachable.add(target)
                    frontier.append(target)
    # the chart's first state's eventless choice under this policy (none: inbound calls
    # wait there), which led to ``start``
    first = atomic_states(machine_class)[0]
    if first.id != started.configuration[0]:
        kept.update(id(t) for t in possible_in(first) if not list(t.events))
    declared = [t for state in walk_states(machine_class.states) for t in state.transitions]
    return Reach(
        start=start,
        transitions=tuple(t for t in declared if id(t) in kept),
        states=frozenset(reachable),
    )


def ends_of_its_own(
    policy: TurnPolicy, machine_class: type[TurnChart] = TurnMachine
) -> tuple[str, ...]:
    """The end reasons with which a call under ``policy`` can end by the machine's own
    decision (a timer, an answering machine, a greeting that failed twice): every
    transition into a final state that can fire, but the caller's hang-up and a fatal
    session error. Each reason is the EndCall its transition's actions emit, read by running
    them. Empty: only the caller (or LiveKit) ends the call."""
    reasons: dict[str, None] = {}
    for transition in reach(policy, machine_class).transitions:
        events = {str(event) for event in transition.events}
        if transition.target is None or not transition.target.final or events & NOT_OF_ITS_OWN:
            continue
        rules = TurnRules(policy=policy)
        for spec in (*transition.before, *transition.on):
            if spec.is_convention:
                continue
            action = getattr(rules, str(spec))
            # the reason is said by an action of the transition that reads nothing of
            # the event (end_call_idle, end_call_greeting_failed...)
            if not inspect.signature(action).parameters:
                action()
        for effect in rules.outbox:
            if isinstance(effect, fx.EndCall):
                reasons[effect.reason] = None
    return tuple(reasons)


def _entered_leaves(state: State, source: State) -> list[str]:
    """The atomic states active once a transition from ``source`` enters ``state``: its
    own (down the initial children) and, where it enters a parallel state from outside,
    those of the regions beside it. A move within one region (the caller's voice falling
    silent) enters nothing beside it."""
    entered = entry_leaves(state)
    inside = set(_ancestors(source))
    node = state
    while node.parent is not None:
        if node.parent.parallel and node.parent not in inside:
            for region in node.parent.states:
                if region is not node:
                    entered += entry_leaves(region)
        node = node.parent
    return entered


def _ancestors(state: State) -> Iterator[State]:
    node: State | None = state
    while node is not None:
        yield node
        node = node.parent
