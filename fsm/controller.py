"""The controller: one pure step, ``handle(event) -> effects``.

>>> from turnfsm import TurnController, TurnPolicy, events
>>> controller = TurnController(TurnPolicy(direction="outbound", greeting="Hi, it's Ada."))
>>> controller.state
'ringing'
>>> [e.name for e in controller.handle(events.CallAnswered(at=0.0))]
['start_timer']
>>> controller.state
'awaiting_user'
>>> [e.name for e in controller.handle(events.UserTurnCommitted(at=2.1, text="Hello?"))]
['cancel_timer', 'hold_user_turns', 'start_greeting']
>>> controller.state
'greeting'
"""

from __future__ import annotations

import attrs
from statemachine import State
from statemachine.orderedset import OrderedSet

from . import effects as fx
from .context import TurnContext
from .events import Event
from .invariants import SafetyMonitor
from .machine import TurnChart, TurnMachine, handled_events, leaf_states
from .policy import TurnPolicy
from .rules import TurnRules
from .trace import Trace, TraceStep, redact


def initial_state(policy: TurnPolicy, machine_class: type[TurnChart] = TurnMachine) -> str:
    """Where a call under ``policy`` starts: the state the chart's eventless start picks."""
    return TurnController(policy, record=False, machine_class=machine_class).state


class TurnController:
    """Owns one call's turn machine and turns events into effects.

    Args:
        policy: the call's policy.
        strict: check every step against the safety invariants and raise
            :class:`~turnfsm.invariants.InvariantViolation` on a breach (tests, debugging).
        record: keep a :class:`~turnfsm.trace.Trace` of every step.
        keep_text: keep transcript text in the trace (redacted by default).
        machine_class: the machine to run: :data:`~turnfsm.machine.TurnMachine` or a
            class from :func:`~turnfsm.machine.build_machine`.
        rules_class: the guards and actions it runs; a subclass of
            :class:`~turnfsm.rules.TurnRules` (tests seed bugs this way).
    """

    def __init__(
        self,
        policy: TurnPolicy,
        *,
        strict: bool = False,
        record: bool = True,
        keep_text: bool = False,
        machine_class: type[TurnChart] = TurnMachine,
        rules_class: type[TurnRules] = TurnRules,
    ) -> None:
        self.policy = policy
        self._rules = rules_class(policy=policy)
        self._machine_class = machine_class
        self._machine = machine_class(listeners=[self._rules])
        # The chart's eventless start picks the first state; entering it emits nothing
        # before the call starts (call_answered, or session_started for inbound calls,
        # replays the enter actions). Effects here would be lost: refuse them.
        if self._rules.outbox:
            raise RuntimeError(f"the start emitted effects before any event: {self._rules.outbox}")
        self._handled = _HANDLED_CACHE.get(machine_class) or _HANDLED_CACHE.setdefault(
            machine_class, handled_events(machine_class)
        )
        self._state = _state_id(self._machine)
        self._monitor = SafetyMonitor(policy) if strict else None
        self._keep_text = keep_text
        self.trace: Trace | None = Trace(policy=policy) if record else None

    @property
    def state(self) -> str:
        """The current state id, e.g. ``"greeting"``."""
        return self._state

    @property
    def context(self) -> TurnContext:
        """The call's counters and flags (read them; do not change them)."""
        return self._rules.context

    @property
    def keep_text(self) -> bool:
        """Whether transcript text is kept (in the trace, and in the adapter's logs)."""
        return self._keep_text

    @property
    def is_ended(self) -> bool:
        """Whether the call reached the final ``ended`` state."""
        return self._state == "ended"

    def snapshot(self) -> tuple[str, TurnContext]:
        """The state and a copy of the context: enough to resume this call's machine."""
        return self._state, attrs.evolve(self._rules.context)

    def restore(self, state: str, context: TurnContext) -> None:
        """Resume from a :meth:`snapshot` (the trace and strict monitor are not rewound)."""
        if state not in self._handled:
            raise ValueError(f"state must be one of {sorted(self._handled)}, got {state!r}")
        if self._machine.is_terminated:
            # A machine that reached `ended` takes no events. Building a new one costs
            # milliseconds (callback resolution), so the explorer revives the engine,
            # which holds no other state between steps.
            self._machine._engine.running = True
        self._machine.model.state = OrderedSet(_path(self._machine_class, state))
        self._state = state
        self._rules.context = attrs.evolve(context)

    def handle(self, event: Event) -> tuple[fx.Effect, ...]:
        """Take one event; return the effects to execute, in order.

        Every well-formed event is accepted in every state: it either moves the
        machine or is ignored (see :data:`turnfsm.machine.IGNORED`).

        Raises:
            TypeError: ``event`` is not a :class:`turnfsm.events.Event`.
            InvariantViolation: only with ``strict=True``, when the step breaks one.
        """
        if not isinstance(event, Event):
            raise TypeError(f"event must be a turnfsm.events.Event, got {type(event).__name__}")
        before = self._state
        if event.name in self._handled[before]:
            outbox = self._rules.outbox
            try:
                self._machine.send(event.name, ev=event)
                effects = tuple(outbox)
            finally:
                outbox.clear()
            self._state = _state_id(self._machine)
        else:
            effects = ()
        if self.trace is not None:
            self._record(event, before, effects)
        if self._monitor is not None:
            self._monitor.check(before, event, self._state, effects)
        return effects

    def _record(self, event: Event, before: str, effects: tuple[fx.Effect, ...]) -> None:
        if not self._keep_text:
            event = redact(event)
            effects = tuple(redact(effect) for effect in effects)
        assert self.trace is not None
        self.trace.steps.append(TraceStep(event.at, event, before, self._state, effects))


_HANDLED_CACHE: dict[type[TurnChart], dict[str, frozenset[str]]] = {}


def _path(machine_class: type[TurnChart], state: str) -> list[str]:
    """The state's id and its parents', outermost first: a configuration in the chart."""
    node: State | None = next(leaf for leaf in leaf_states(machine_class) if leaf.id == state)
    ids = []
    while node is not None:
        ids.append(node.id)
        node = node.parent
    return ids[::-1]


def _state_id(machine: TurnChart) -> str:
    """The call's state: the one atomic state of the configuration."""
    (leaf,) = (state.id for state in machine.configuration if not state.states)
    return leaf


def replay(trace: Trace, **controller_options: object) -> Trace:
    """Run a trace's events through a fresh controller with the trace's policy.

    The returned trace has the same steps as ``trace`` when the machine is deterministic
    (compare them with ``==``). The trace's text is already as redacted as it will be, so
    it is kept as it is (``keep_text=True`` unless given).
    """
    options = {"keep_text": True, **controller_options}
    controller = TurnController(trace.policy, **options)  # type: ignore[arg-type]
    for step in trace:
        controller.handle(step.event)
    assert controller.trace is not None
    return controller.trace
