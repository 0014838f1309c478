"""The controller: one pure step, ``handle(event) -> effects``.

>>> from turnfsm import TurnController, TurnPolicy, events
>>> controller = TurnController(TurnPolicy(direction="outbound", greeting="Hi, it's Ada."))
>>> controller.state
'ringing'
>>> [e.name for e in controller.handle(events.CallAnswered(at=0.0))]
['start_timer']
>>> controller.state
'awaiting_user'
>>> sorted(controller.running_timers)
['await_user']
>>> [e.name for e in controller.handle(events.UserTurnCommitted(at=2.1, text="Hello?"))]
['cancel_timer', 'hold_user_turns', 'start_greeting']
>>> controller.state
'greeting'

A controller belongs to one call and one thread. :meth:`TurnController.handle` is a
step that either returns its effects or raises with nothing changed (state, context,
trace, sink). The first thread that uses it owns the controller: a step, a restore or a
read of what a step changes (``state``, ``configuration``, ``running_timers``,
``context``, ``snapshot()``, ``handled_events``, ``is_ended``, ``trace``) from any other
thread raises :class:`ConcurrentUseError` instead of interleaving with a step or seeing
half of one (the LiveKit adapter drives it from the session's event loop; from another
thread, hand events over with ``loop.call_soon_threadsafe(adapter.dispatch, event)``).
So does any of them from within a step (a trace sink, a rule), whose outcome is not
decided yet. The settings (``policy``, ``call``, ``keep_text``, ``strict``) are read
from anywhere.

A controller is not pickled (its machine holds the rules' callbacks): to carry a call
elsewhere, take its :meth:`~TurnController.snapshot` and
:meth:`~TurnController.restore` it into a controller built with the same policy.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from statemachine import State
from statemachine.orderedset import OrderedSet

from . import effects as fx
from .context import TurnContext
from .context_rules import check_context, state_rules_apply
from .engine import ENGINES, CompiledEngine, EngineName, compiled_chart
from .events import Event, TimerExpired
from .invariants import SafetyMonitor
from .machine import (
    PHASED_STATES,
    TurnChart,
    TurnMachine,
    atomic_states,
    configurations,
    entry_leaves,
    handled_events,
    public_states,
    region_states,
    side_regions,
    walk_states,
)
from .policy import TurnPolicy
from .rules import TurnRules, running_timers
from .trace import CallInfo, Trace, TraceSink, TraceStep, redact, turnfsm_version

DEFAULT_MAX_TRACE_STEPS = 1_000
"""Steps a controller's trace keeps by default: about 150 KiB, the last ten minutes of a
busy call (issue 23: a default ring of at most 256 KiB, so a thousand concurrent calls
hold a few hundred MB, not gigabytes). A :class:`~turnfsm.trace.TraceWriter` keeps every
step of any call, on disk."""


class ConcurrentUseError(RuntimeError):
    """A controller was used from a second thread, or re-entered during a step."""


def initial_state(
    policy: TurnPolicy,
    machine_class: type[TurnChart] = TurnMachine,
    engine: EngineName = "compiled",
) -> str:
    """Where a call under ``policy`` starts: the state the chart's eventless start picks."""
    return TurnController(policy, record=False, machine_class=machine_class, engine=engine).state


class TurnController:
    """Owns one call's turn machine and turns events into effects.

    Args:
        policy: the call's policy.
        strict: check every step against the safety invariants and raise
            :class:`~turnfsm.invariants.InvariantViolation` on a breach (tests, debugging).
        record: keep a :class:`~turnfsm.trace.Trace` of the call's steps.
        keep_text: keep transcript and policy text in the trace and sink, and in what
            the LiveKit adapter logs and puts on spans, errors included (all redacted by
            default, by :func:`turnfsm.trace.redact`).
        max_trace_steps: the trace keeps this many last steps (``None``: all of them), so
            a long call holds bounded memory; ``trace.dropped`` counts the others.
        trace_sink: also send every step, as it happens, here (e.g. a
            :class:`~turnfsm.trace.TraceWriter` appending to a JSON lines file); it works
            with ``record=False`` too.
        call: which call this is (its id, start time, agent), written in the trace's
            header so a report can name and group it.
        machine_class: the machine to run: :data:`~turnfsm.machine.TurnMachine` or a
            class from :func:`~turnfsm.machine.build_machine`.
        rules_class: the guards and actions it runs; a subclass of
            :class:`~turnfsm.rules.TurnRules` (tests seed bugs this way).
        engine: ``"compiled"`` (the default) runs the chart compiled into tables
            (:mod:`turnfsm.engine`); ``"reference"`` runs it on python-statemachine's own
            engine, a machine built per controller (slower; for charts or rules the
            compiled engine refuses, and as the reference the explorer checks it against).
    """

    def __init__(
        self,
        policy: TurnPolicy,
        *,
        strict: bool = False,
        record: bool = True,
        keep_text: bool = False,
        max_trace_steps: int | None = DEFAULT_MAX_TRACE_STEPS,
        trace_sink: TraceSink | None = None,
        call: CallInfo | None = None,
        machine_class: type[TurnChart] = TurnMachine,
        rules_class: type[TurnRules] = TurnRules,
        engine: EngineName = "compiled",
    ) -> None:
        if call is not None and not isinstance(call, CallInfo):
            raise TypeError(f"call must be a turnfsm.trace.CallInfo, got {type(call).__name__}")
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
        self.policy = policy
        self.call = call or CallInfo()
        self._rules = rules_class(policy=policy)
        self._machine_class = machine_class
        self._public = public_states(machine_class)
        self._engine: CompiledEngine | None = None
        self._machine: TurnChart | None = None
        if engine == "compiled":
            chart = compiled_chart(machine_class, rules_class)
            self._engine = CompiledEngine(chart, self._rules)
            self._configuration = self._engine.leaves
        else:
            self._machine = machine_class(listeners=[self._rules])
            self._configuration = _configuration_of(self._machine)
        # The chart's eventless start picks the first state; entering it emits nothing
        # before the call starts (call_answered, or session_started for inbound calls,
        # replays the enter actions). Effects here would be lost: refuse them.
        if self._rules.outbox:
            raise RuntimeError(f"the start emitted effects before any event: {self._rules.outbox}")
        self._handled = _handled(machine_class, self._configuration)
        self._monitor = SafetyMonitor(policy) if strict else None
        self._keep_text = keep_text
        traced_policy = redact(policy, keep_text=keep_text)
        self._trace: Trace | None = None
        if record:
            version = turnfsm_version()
            self._trace = (
                Trace(policy=traced_policy, call=self.call, turnfsm_version=version)
                if max_trace_steps is None
                else Trace.bounded(
                    traced_policy, max_trace_steps, call=self.call, turnfsm_version=version
                )
            )
        self.trace_sink = trace_sink
        if trace_sink is not None:
            trace_sink.start(traced_policy, self.call)
        self._owner: int | None = None
        self._busy = False

    @property
    def state(self) -> str:
        """The current state id, e.g. ``"greeting"`` (in each of the greeting's phases,
        which :attr:`configuration` names)."""
        self._claim()
        return self._public[self._configuration[0]]

    @property
    def configuration(self) -> tuple[str, ...]:
        """The active atomic states, one per active region in document order: the turn's
        (which :attr:`state` reports), then one of each region beside it (the caller's
        voice while the call is live, the realtime model's activity and what it answers on
        its own until it ends), e.g. ``("greeting_playing", "caller_speaking", "tools_open",
        "reply_free", "agent_keeps_call", "model_unlinked", "turn_replies_on_request",
        "tool_replies_on_request")``."""
        self._claim()
        return self._configuration

    @property
    def running_timers(self) -> frozenset[fx.TimerName]:
        """The timers running in the :attr:`configuration`
        (:func:`~turnfsm.rules.running_timers`): those its effects started and neither
        cancelled nor saw expire. Only their expiries are taken; any other is stale."""
        self._claim()
        return running_timers(self.policy, active_states(self._machine_class, self._configuration))

    @property
    def handled_events(self) -> frozenset[str]:
        """The events some transition takes in the current configuration (guards aside);
        any other event is ignored here (see :data:`turnfsm.machine.IGNORED`)."""
        self._claim()
        return self._handled

    @property
    def context(self) -> TurnContext:
        """The call's counters and flags (read them; do not change them)."""
        self._claim()
        return self._rules.context

    @property
    def trace(self) -> Trace | None:
        """The call's recorded steps (``None`` with ``record=False``)."""
        self._claim()
        return self._trace

    @property
    def keep_text(self) -> bool:
        """Whether transcript and policy text is kept (in the trace, and in the adapter's
        logs, errors and spans)."""
        return self._keep_text

    @property
    def engine(self) -> EngineName:
        """Which engine runs the chart: ``"compiled"`` or ``"reference"``."""
        return "compiled" if self._engine is not None else "reference"

    @property
    def strict(self) -> bool:
        """Whether every step is checked against the safety invariants."""
        return self._monitor is not None

    @property
    def is_ended(self) -> bool:
        """Whether the call reached the final ``ended`` state."""
        self._claim()
        return self._configuration[0] == "ended"

    def snapshot(self) -> tuple[tuple[str, ...], TurnContext]:
        """The :attr:`configuration` and a copy of the context: enough to resume this
        call's machine (:meth:`restore`), here or in another process (both pickle)."""
        self._claim()
        return self._configuration, self._rules.context.copy()

    def __reduce__(self) -> Any:
        raise TypeError(
            "a TurnController cannot be pickled (its machine holds the rules' callbacks): "
            "take controller.snapshot() and, elsewhere, TurnController(policy).restore("
            "configuration, context)"
        )

    def restore(self, configuration: str | tuple[str, ...], context: TurnContext) -> None:
        """Resume from a :meth:`snapshot` (the trace and strict monitor are not rewound).
        A state alone (``"speaking"``) is that state with the regions beside it in their
        initial states (the caller silent); a phased one (``"listening"``) names its first
        phase (``listening_open``). A configuration that leaves out a region beside the
        turn has it in its initial state too: ``("speaking", "caller_speaking")``.

        Raises:
            ValueError, TypeError: the configuration is not one of the machine's, or the
                pair is not one this policy's calls can be in (see
                :mod:`turnfsm.context_rules`); nothing changed.
        """
        self._claim()
        by_state = _configurations(self._machine_class)
        if isinstance(configuration, str):
            configuration = _named(self._machine_class).get(configuration, (configuration,))
        completed = _completed(self._machine_class, configuration)
        if completed is None:
            raise ValueError(
                f"configuration must be one of {sorted(by_state.values())} or a live one with"
                f" other states of the regions beside the turn, got {configuration!r}"
            )
        standard = state_rules_apply(self._machine_class, type(self._rules))
        check_context(context, self.policy, completed if standard else None)
        self._resume(completed, context.copy())

    def _resume(self, configuration: tuple[str, ...], context: TurnContext) -> None:
        """Put the machine in ``configuration`` with ``context`` (taken, not copied),
        unchecked: for a step's rollback and the explorer, whose configurations this
        controller made itself; anything from outside goes through :meth:`restore`."""
        if self._engine is not None:
            self._engine.resume(configuration)
        else:
            machine = self._machine
            assert machine is not None
            if machine.is_terminated and configuration[0] != "ended":
                # A machine that reached `ended` takes no events. Building a new one costs
                # milliseconds (callback resolution), so the explorer revives the engine,
                # which holds no other state between steps.
                machine._engine.running = True
            machine.model.state = OrderedSet(_path(self._machine_class, configuration))
        self._configuration = configuration
        self._handled = _handled(self._machine_class, configuration)
        self._rules.context = context

    def handle(self, event: Event) -> tuple[fx.Effect, ...]:
        """Take one event; return the effects to execute, in order.

        Every well-formed event is accepted in every state: it either moves the
        machine or is ignored (see :data:`turnfsm.machine.IGNORED`). The step is atomic:
        when it raises, the state, the context, the trace and the sink are as before.

        Raises:
            TypeError: ``event`` is not a :class:`turnfsm.events.Event`.
            ConcurrentUseError: called from a second thread, or from within a step.
            InvariantViolation: only with ``strict=True``, when the step breaks one.
        """
        if not isinstance(event, Event):
            raise TypeError(f"event must be a turnfsm.events.Event, got {type(event).__name__}")
        self._claim()
        if self._monitor is None and event.name not in self._handled:
            # Ignored: only the recording changes anything, and it changes last.
            if self._trace is not None or self.trace_sink is not None:
                self._busy = True
                try:
                    self._record(event, self._public[self._configuration[0]], ())
                finally:
                    self._busy = False
            return ()
        saved = self._checkpoint()
        self._busy = True
        try:
            return self._step(event)
        except BaseException:
            self._roll_back(saved)
            raise
        finally:
            self._busy = False

    def _step(self, event: Event) -> tuple[fx.Effect, ...]:
        public = self._public
        before = public[self._configuration[0]]
        # a timer's expiry is taken only while it runs: a stale one (cancelled as its
        # state was left, its expiry already on its way) is ignored, as XState's ``after``
        # never delivers a cancelled one
        if event.name in self._handled and (
            not isinstance(event, TimerExpired)
            or self._rules.take_expiry(
                event, active_states(self._machine_class, self._configuration)
            )
        ):
            outbox = self._rules.outbox
            try:
                if self._engine is not None:
                    self._engine.send(event)
                else:
                    assert self._machine is not None
                    self._machine.send(event.name, ev=event)
                effects = tuple(outbox)
            finally:
                outbox.clear()
            self._configuration = (
                self._engine.leaves
                if self._engine is not None
                else _configuration_of(self._machine)  # type: ignore[arg-type]
            )
            self._handled = _handled(self._machine_class, self._configuration)
        else:
            effects = ()
        if self._monitor is not None:
            self._monitor.check(before, event, public[self._configuration[0]], effects)
        if self._trace is not None or self.trace_sink is not None:
            self._record(event, before, effects)
        return effects

    def _claim(self) -> None:
        """Make the calling thread the owner, or refuse it (see the module's docs)."""
        caller = threading.get_ident()
        if self._owner != caller:
            with _CLAIM:
                if self._owner is None:
                    self._owner = caller
            if self._owner != caller:
                raise ConcurrentUseError(
                    f"TurnController used from thread {caller}, but it belongs to thread "
                    f"{self._owner} (the first to use it): one controller is driven by one "
                    "thread; from another, hand the event over (loop.call_soon_threadsafe)"
                )
        if self._busy:
            raise ConcurrentUseError(
                "TurnController used during a step of handle() (from a trace sink or a rule): "
                "its outcome is not decided yet"
            )

    def _checkpoint(self) -> tuple[Any, ...]:
        """What a failing step must put back: configuration, context, the strict monitor's
        shadow (the trace and sink change last, when nothing can fail any more)."""
        return (
            self._configuration,
            self._rules.context.copy(),
            self._monitor.copy() if self._monitor is not None else None,
        )

    def _roll_back(self, saved: tuple[Any, ...]) -> None:
        configuration, context, monitor = saved
        self._resume(configuration, context)
        self._rules.outbox.clear()
        self._monitor = monitor

    def _record(self, event: Event, before: str, effects: tuple[fx.Effect, ...]) -> None:
        keep_text = self._keep_text
        event = redact(event, keep_text=keep_text)
        effects = tuple(redact(effect, keep_text=keep_text) for effect in effects)
        step = TraceStep(event.at, event, before, self._public[self._configuration[0]], effects)
        if self.trace_sink is not None:
            self.trace_sink.append(step)  # first: if it raises, the step never happened
        if self._trace is not None:
            self._trace.append(step)


_CLAIM = threading.Lock()
"""Serialises the first claim of a controller by a thread (cheap, taken once per call)."""


@functools.cache
def _handled(machine_class: type[TurnChart], configuration: tuple[str, ...]) -> frozenset[str]:
    """The events some transition takes in this configuration (before guards)."""
    by_state = handled_events(machine_class)
    return frozenset().union(*(by_state[state] for state in configuration))


@functools.cache
def _configurations(machine_class: type[TurnChart]) -> dict[str, tuple[str, ...]]:
    """Each state's configuration with the regions beside it in their initial states
    (the caller silent)."""
    initial = {leaf for region in side_regions(machine_class) for leaf in entry_leaves(region)}
    defaults: dict[str, tuple[str, ...]] = {}
    for configuration in configurations(machine_class):
        if all(leaf in initial for leaf in configuration[1:]):
            defaults.setdefault(configuration[0], configuration)
    return defaults


@functools.cache
def _named(machine_class: type[TurnChart]) -> dict[str, tuple[str, ...]]:
    """The configuration a state alone names in :meth:`TurnController.restore`: each
    atomic state's, and each phased state's first phase's (the regions beside it in their
    initial states)."""
    named = dict(_configurations(machine_class))
    for state in walk_states(machine_class.states):
        if state.id in PHASED_STATES and entry_leaves(state)[0] in named:  # the turn's
            named[state.id] = named[entry_leaves(state)[0]]
    return named


@functools.cache
def _regions_of(machine_class: type[TurnChart]) -> dict[str, str]:
    """The region beside the turn of each of its atomic states, by id."""
    return {
        leaf.id: region
        for region, leaves in region_states(machine_class).items()
        for leaf in leaves
    }


@functools.cache
def _all_configurations(machine_class: type[TurnChart]) -> frozenset[tuple[str, ...]]:
    return frozenset(configurations(machine_class))


def _completed(machine_class: type[TurnChart], configuration: object) -> tuple[str, ...] | None:
    """``configuration`` (a state of the turn, then at most one state of each region
    beside it) with the regions it leaves out in their initial states; ``None`` if it is
    not one of the chart's."""
    if not isinstance(configuration, tuple) or not configuration:
        return None
    turn, *beside = configuration
    default = _configurations(machine_class).get(turn)  # type: ignore[call-overload]
    regions = _regions_of(machine_class)
    if default is None or not all(isinstance(leaf, str) for leaf in beside):
        return None
    given = {regions.get(leaf): leaf for leaf in beside}
    if None in given or len(given) != len(beside):
        return None
    completed = tuple(given.pop(regions.get(leaf), leaf) for leaf in default)
    if given or completed not in _all_configurations(machine_class):
        return None
    return completed


@functools.cache
def _path(machine_class: type[TurnChart], configuration: tuple[str, ...]) -> tuple[str, ...]:
    """The configuration's atomic states and all their parents, outermost first, each
    once: the engine's configuration in the chart."""
    by_id = {state.id: state for state in atomic_states(machine_class)}
    ids: dict[str, None] = {}
    for leaf in configuration:
        chain = []
        node: State | None = by_id[leaf]
        while node is not None:
            chain.append(node.id)
            node = node.parent
        ids.update(dict.fromkeys(reversed(chain)))
    return tuple(ids)


@functools.cache
def active_states(
    machine_class: type[TurnChart], configuration: tuple[str, ...]
) -> tuple[State, ...]:
    """The states active in a :attr:`~TurnController.configuration`, compound ones
    included (the chart class's ``State`` objects)."""
    by_id = {state.id: state for state in walk_states(machine_class.states)}
    return tuple(by_id[state] for state in _path(machine_class, configuration))


def _configuration_of(machine: TurnChart) -> tuple[str, ...]:
    """The reference machine's active atomic states, in document order."""
    order = _document_order(type(machine))
    return tuple(
        sorted((s.id for s in machine.configuration if not s.states), key=order.__getitem__)
    )


@functools.cache
def _document_order(machine_class: type[TurnChart]) -> dict[str, int]:
    return {state.id: index for index, state in enumerate(walk_states(machine_class.states))}


def replay(trace: Trace, **controller_options: object) -> Trace:
    """Run a trace's events through a fresh controller with the trace's policy.

    The returned trace has the same steps as ``trace`` when the machine is deterministic
    (compare them with ``==``). The trace's text is already as redacted as it will be, so
    it is kept as it is (``keep_text=True`` unless given).
    """
    if trace.dropped:
        raise ValueError(
            f"the trace lost its first {trace.dropped} steps (max_trace_steps): a replay "
            "needs the whole call; record it with a trace_sink (TraceWriter)"
        )
    options = {
        "keep_text": True,
        "max_trace_steps": None,
        "call": trace.call,
        **controller_options,
    }
    controller = TurnController(trace.policy, **options)  # type: ignore[arg-type]
    for step in trace:
        controller.handle(step.event)
    assert controller.trace is not None
    return controller.trace
