"""The engines that run a turn chart: compiled (the default) and python-statemachine's own.

python-statemachine is the chart's single declaration, the source of its diagrams and
its reference engine. Its engine is general: every ``send()`` builds trigger and event
data, walks the active states for the event's transitions, resolves each guard's and
action's arguments by dependency injection, and plans which states to exit and enter;
for the turn chart that is about 100-250 µs a step. All of that depends only on the
chart, the active configuration, the event's name and the guards' answers, so
:class:`CompiledChart` works it out once per class and keeps it:

- for each (configuration, event name), the candidate transitions of each active atomic
  state, in the order the reference tries them (the state's own, then its parents', in
  declaration order), each with its guards;
- for each set of transitions a step takes in a configuration (after the reference's
  rule for conflicts between regions), the callbacks in the order the reference runs
  them (``before``, exit actions, ``on``, the configuration update, enter actions and
  the default entries' initial ``on``, ``after``), the configuration after, and whether
  the step reaches the final state;
- each guard and action is a method of the rules class, called with a fixed calling
  convention: python-statemachine's argument injection is resolved once, by the
  method's parameter names (:data:`ARGUMENTS`).

:class:`CompiledEngine` then runs a step as the reference does (eventless transitions
before the event, the event, eventless transitions after it; the first candidate whose
guards hold, per region; errors propagate; the final state stops the machine) with a
few dictionary lookups and the rules' own calls (a handled step of the turn chart: about
5 µs of CPU, against about 200 µs; ``make bench``):

>>> from turnfsm import TurnController, TurnPolicy, events
>>> policy = TurnPolicy(direction="outbound", greeting="Hi, it's Ada.")
>>> compiled = TurnController(policy)  # engine="compiled", the default
>>> reference = TurnController(policy, engine="reference")
>>> answer = events.CallAnswered(at=0.0)
>>> compiled.handle(answer) == reference.handle(answer)
True
>>> compiled.configuration == reference.configuration
True
>>> compiled.configuration
('awaiting_user', 'caller_silent', 'tools_open', 'reply_free', 'agent_keeps_call', ...)

The compiled engine builds no python-statemachine machine per call (one per chart and
rules class, when the pair is first used, to read what it resolved). It calls private
methods of python-statemachine's engine to read that (``_prepare_entry_states``...) and
overrides none; a private name may change in any minor release, so ``pyproject.toml``
pins the minor version. A rules method that asks for an argument outside
:data:`ARGUMENTS`, a callback that is not a rules method (e.g. a method of the chart
class), coroutine callbacks, history states, final states inside compound ones,
invocations and engine settings other than :class:`~turnfsm.machine.TurnChart`'s are
refused with :class:`UnsupportedChart`, naming what; ``TurnController(...,
engine="reference")`` runs such a chart.

Regions are tried in document order (the turn, then each region beside it), as the
reference does after a restore. Mid-call, the reference tries them in the order it
entered them (its ``_select_transitions`` notes the sorting as a TODO); both engines
run exit and enter actions in document order, so the orders differ in outcome only
when regions take transitions that conflict or that both have actions of their own
(``before``, ``on``, ``after``), or that exit states of equal document order with exit
actions (python-statemachine 3.2 numbers a state by its place among its siblings plus
its parent's number, so states of different regions can share a number; those exit in
the order their transitions were taken), which the turn chart never does in one step
(``tests/core/test_engine.py`` checks every order of every set of candidates the
regions can take together, their guards not contradicting each other).
:func:`turnfsm.testing.explore` proves the two engines equal on every configuration it
reaches (``ExplorationReport.engine_checks``).
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from statemachine.callbacks import allways_true
from statemachine.orderedset import OrderedSet

from .machine import walk_states

if TYPE_CHECKING:
    from statemachine import State, StateChart
    from statemachine.transition import Transition

    from .events import Event
    from .machine import TurnChart
    from .rules import TurnRules

EngineName = Literal["compiled", "reference"]
"""``compiled``: :class:`CompiledEngine` (the default); ``reference``:
python-statemachine's own engine, on a machine built per controller."""

ENGINES: tuple[EngineName, ...] = ("compiled", "reference")

ARGUMENTS: tuple[str, ...] = (
    "ev",
    "machine",
    "event",
    "source",
    "target",
    "state",
    "transition",
)
"""The parameters a rules method may ask for, as python-statemachine names them: the
event object sent (``ev``, ``None`` for eventless transitions), the machine (a
:class:`MachineView`: its ``configuration`` and ``configuration_values``, as sets), the
event's name, the transition's source and target and the state being exited or entered
(the chart class's ``State`` objects), and the transition (as declared)."""

SETTINGS: dict[str, bool] = {
    "catch_errors_as_events": False,
    "allow_event_without_transition": True,
    "enable_self_transition_entries": False,
    "atomic_configuration_update": True,
}
"""The engine settings the compiled engine implements (:class:`~turnfsm.machine.TurnChart`'s)."""

Call = Callable[["TurnRules", "Event | None", "MachineView"], Any]
"""A guard or action with its arguments resolved: (rules, event, machine view)."""


class Site(NamedTuple):
    """Where a callback runs: what python-statemachine hands it besides the event."""

    state: State | None
    """The state exited or entered, else the transition's source."""
    source: State | None
    target: State | None
    transition: Transition | None


class UnsupportedChart(TypeError):
    """The compiled engine cannot run this chart or rules class exactly as the reference
    does; the message names why. Use ``TurnController(..., engine="reference")``."""


class MachineView:
    """What a rules method asking for ``machine`` sees under the compiled engine: the
    active states, as the reference's machine shows them at that point of the step (the
    configuration before the step until it is updated, after it from the enter actions
    on)."""

    __slots__ = ("_engine",)

    def __init__(self, engine: CompiledEngine) -> None:
        self._engine = engine

    @property
    def configuration(self) -> frozenset[State]:
        """The active states (the chart class's ``State`` objects)."""
        by_id = self._engine.chart.states
        return frozenset(by_id[state] for state in self._engine.active)

    @property
    def configuration_values(self) -> frozenset[Any]:
        """The active states' values (their ids unless the chart names values)."""
        return self._engine.chart.values_of(self._engine.active)


class CompiledTransition:
    """One declared transition: its guards and its place in the reference's tables."""

    __slots__ = ("index", "guards", "label")

    def __init__(self, index: int, guards: tuple[tuple[Call, bool], ...], label: str) -> None:
        self.index = index
        self.guards = guards
        """(guard, the answer it must give): ``cond`` names answer True, ``unless`` False."""
        self.label = label

    def __repr__(self) -> str:
        return f"CompiledTransition({self.label})"


class Plan:
    """What taking a set of transitions in a configuration does, in order."""

    __slots__ = (
        "before_update",
        "after_update",
        "leaves",
        "active",
        "terminates",
        "names",
        "transitions",
    )

    def __init__(
        self,
        before_update: tuple[Call, ...],
        after_update: tuple[Call, ...],
        leaves: tuple[str, ...],
        active: frozenset[str],
        terminates: bool,
        names: tuple[str, ...] = (),
        transitions: tuple[Transition, ...] = (),
    ) -> None:
        self.before_update = before_update
        """``before`` of each transition, the exit actions, ``on`` of each transition."""
        self.after_update = after_update
        """The enter actions (and default entries' initial ``on``), ``after`` of each."""
        self.leaves = leaves
        self.active = active
        self.terminates = terminates
        self.names = names
        """The callbacks' names in order, ``|`` where the configuration is updated."""
        self.transitions = transitions
        """The declared transitions taken (conflicts between regions resolved)."""


Decision = tuple[tuple[str, ...], "str | None", tuple["bool | str", ...]]
"""Where a step chose transitions: the configuration, the event's name (``None``: the
eventless ones) and the answers of every guard on it."""

Regions = tuple[tuple[CompiledTransition, ...], ...]
"""Per active atomic state, in document order, its candidates for one event."""


class CompiledChart:
    """A chart class and rules class, compiled: see the module's docs.

    Built once per pair (:func:`compiled_chart`), from one reference machine whose
    resolved callbacks and planning it reads; tables fill as configurations and events
    are met, and hold the chart's and rules class's own objects only, never a call's.
    """

    def __init__(self, machine_class: type[TurnChart], rules_class: type[TurnRules]) -> None:
        from .policy import TurnPolicy

        for setting, value in SETTINGS.items():
            if getattr(machine_class, setting) != value:
                raise UnsupportedChart(f"{machine_class.__name__}.{setting} must be {value}")
        sample_rules = rules_class(policy=TurnPolicy())
        sample = machine_class(listeners=[sample_rules])
        if sample._callbacks.has_async_callbacks:
            raise UnsupportedChart(f"{machine_class.__name__} has coroutine callbacks")
        self.name = machine_class.__name__
        self._sample = sample
        self._rules_key = f"@{id(sample_rules)}"
        self._rules_class = rules_class
        self._lock = threading.Lock()
        own = {state.id: state for state in walk_states(machine_class.states)}
        self._instance_states = {state.id: state for state in walk_states(sample.states)}
        self.states: dict[str, State] = own
        self.values: dict[str, Any] = {key: state.value for key, state in own.items()}
        for state in self._instance_states.values():
            if state.is_history or state.history:
                raise UnsupportedChart(f"{self.name}: history state in {state.id}")
            if state.final and state.parent is not None:
                raise UnsupportedChart(
                    f"{self.name}: final state {state.id} inside {state.parent.id} (its "
                    "done.state event is not compiled)"
                )
            if state.invoke.key in sample._callbacks:
                raise UnsupportedChart(f"{self.name}: {state.id} invokes")
        if sample.prepare.key in sample._callbacks:
            raise UnsupportedChart(f"{self.name}: prepare_event callbacks")
        self._transitions: list[Transition] = []
        self._compiled: dict[int, CompiledTransition] = {}
        for state in self._instance_states.values():
            # every callback bound once now: what cannot be is refused before any call
            for key in (state.enter.key, state.exit.key):
                self._callbacks(key, Site(state, state, state, None))
            for transition in state.transitions:
                for key in (transition.before.key, transition.on.key, transition.after.key):
                    self._callbacks(key, Site(state, state, state, transition))
                if not transition.initial:
                    self._compile(transition)
        self._candidates: dict[tuple[tuple[str, ...], str | None], Regions] = {}
        self._plans: dict[tuple[tuple[str, ...], tuple[int, ...]], Plan] = {}
        self._active: dict[tuple[str, ...], tuple[frozenset[str], bool]] = {}
        self._event_guards: dict[str | None, tuple[Call, ...]] = {}
        self._values_of: dict[frozenset[str], frozenset[Any]] = {}
        self.initial_leaves, self.initial_actions = self._initial(sample)

    # -- compiling ----------------------------------------------------------------------

    def _items(self) -> Iterator[tuple[str, State]]:
        return iter(self._instance_states.items())

    def _own(self, state: State | None) -> State | None:
        return None if state is None else self.states[state.id]

    def _compile(self, transition: Transition) -> CompiledTransition:
        found = self._compiled.get(id(transition))
        if found is not None:
            return found
        for key in (transition.validators.key,):
            if key in self._sample._callbacks and list(self._sample._callbacks[key]):
                raise UnsupportedChart(f"{self.name}: validators on {transition}")
        guards = tuple(
            (call, expected)
            for call, expected in self._wrappers(
                transition.cond.key,
                Site(transition.source, transition.source, transition.target, transition),
            )
        )
        compiled = CompiledTransition(len(self._transitions), guards, str(transition))
        self._transitions.append(transition)
        self._compiled[id(transition)] = compiled
        return compiled

    def _callbacks(self, key: str, site: Site) -> tuple[Call, ...]:
        return tuple(call for call, _ in self._wrappers(key, site))

    def _wrappers(self, key: str, site: Site) -> Iterator[tuple[Call, bool]]:
        """The callbacks the reference resolved for ``key``, in its order, each bound to
        its rules method with the arguments known at ``site`` fixed."""
        registry = self._sample._callbacks
        if key not in registry:
            return
        static: dict[str, Any] = {
            "source": self._own(site.source),
            "target": self._own(site.target),
            "state": self._own(site.state),
            "transition": site.transition,
        }
        for wrapper in registry[key]:
            name = wrapper.meta.func
            if (
                not isinstance(name, str)
                or wrapper.unique_key != f"{name}{self._rules_key}"
                or wrapper.condition is not allways_true
            ):
                raise UnsupportedChart(
                    f"{self.name}: callback {wrapper.meta} is not a plain "
                    f"{self._rules_class.__name__} method"
                )
            function = getattr(self._rules_class, name, None)
            if not inspect.isfunction(function):
                raise UnsupportedChart(
                    f"{self.name}: {self._rules_class.__name__}.{name} is not a method"
                )
            yield _bind(function, static), wrapper.expected_value is not False

    def _initial(self, sample: StateChart) -> tuple[tuple[str, ...], tuple[Call, ...]]:
        """The configuration a machine starts in and the enter actions that take it there
        (before the start's eventless transitions)."""
        engine = sample._engine
        transitions = engine._initial_transitions(None)
        entries, defaults, history, after = engine._prepare_entry_states(
            transitions, OrderedSet(), OrderedSet()
        )
        calls, _ = self._entering(entries, defaults, history)
        return self._leaves(after), calls

    def _entering(
        self, entries: Any, default_entries: Any, history: Any
    ) -> tuple[tuple[Call, ...], bool]:
        """The enter actions of the states a step enters (and their default entries'
        initial ``on``), in the reference's order; whether it reaches the final state."""
        if history:
            raise UnsupportedChart(f"{self.name}: history states")
        defaults = {info.state.id for info in default_entries if info.state}
        calls: list[Call] = []
        terminates = False
        for info in entries:
            state = info.state
            source = info.transition.source if info.transition.source.id in self.states else None
            calls += self._callbacks(state.enter.key, Site(state, source, state, info.transition))
            if state.id in defaults:
                initial = [t for t in state.transitions if t.initial]
                if len(initial) == 1:
                    on = initial[0].on.key
                    calls += self._callbacks(on, Site(state, source, state, info.transition))
            terminates = terminates or (state.final and state.parent is None)
        return tuple(calls), terminates

    def _leaves(self, configuration: OrderedSet[State]) -> tuple[str, ...]:
        """The active atomic states in document order, one per region (as the controller
        names a configuration)."""
        leaves = {state.id for state in configuration if not state.states}
        return tuple(leaf for leaf in self._document_order() if leaf in leaves)

    def _document_order(self) -> list[str]:
        return [key for key, state in self._items() if not state.states]

    def _path(self, leaves: tuple[str, ...]) -> OrderedSet[State]:
        """The sample's states for ``leaves``: each leaf's ancestors, outermost first."""
        ids: dict[str, None] = {}
        for leaf in leaves:
            chain = [leaf, *(state.id for state in self._instance_states[leaf].ancestors())]
            ids.update(dict.fromkeys(reversed(chain)))
        return OrderedSet(self._instance_states[key] for key in ids)

    # -- tables -------------------------------------------------------------------------

    def candidates(self, leaves: tuple[str, ...], event: str | None) -> Regions:
        """Per active atomic state that has any, the transitions it may take on ``event``
        (``None``: the eventless ones), before guards, in the order the reference tries
        them (empty: nothing can happen, the common case of eventless transitions)."""
        key = (leaves, event)
        found = self._candidates.get(key)
        if found is None:
            regions = (
                tuple(self._compile(t) for t in _matching(self._instance_states[leaf], event))
                for leaf in leaves
            )
            found = self._candidates[key] = tuple(region for region in regions if region)
        return found

    def plan(self, leaves: tuple[str, ...], enabled: tuple[int, ...]) -> Plan:
        """What the reference does when ``enabled`` (one per region, in region order) are
        the transitions its guards chose in ``leaves``: conflicts resolved its way."""
        key = (leaves, enabled)
        found = self._plans.get(key)
        if found is None:
            with self._lock:  # the sample machine is shared by every thread's controllers
                found = self._plans[key] = self._make_plan(leaves, enabled)
        return found

    def _make_plan(self, leaves: tuple[str, ...], enabled: tuple[int, ...]) -> Plan:
        engine, sample = self._sample._engine, self._sample
        previous = self._path(leaves)
        sample.configuration = previous
        chosen = OrderedSet(self._transitions[index] for index in enabled)
        transitions = list(engine._filter_conflicting_transitions(chosen))
        before: list[Call] = []
        for t in transitions:
            before += self._callbacks(t.before.key, Site(t.source, t.source, t.target, t))
        exits, to_exit = engine._prepare_exit_states(transitions)
        for info in exits:
            target = info.transition.target
            exit_key, state = info.state.exit.key, info.state
            before += self._callbacks(exit_key, Site(state, state, target, info.transition))
        for t in transitions:
            before += self._callbacks(t.on.key, Site(t.source, t.source, t.target, t))
        entries, default_entries, history, after = engine._prepare_entry_states(
            transitions, to_exit, previous
        )
        later, terminates = self._entering(entries, default_entries, history)
        for t in transitions:
            # the reference names the target as the state, when there is one
            state = t.target if t.target is not None else t.source
            later += self._callbacks(t.after.key, Site(state, t.source, t.target, t))
        return Plan(
            tuple(before),
            later,
            self._leaves(after),
            frozenset(state.id for state in after),
            terminates,
            (*(call.__name__ for call in before), "|", *(call.__name__ for call in later)),
            tuple(transitions),
        )

    def values_of(self, active: frozenset[str]) -> frozenset[Any]:
        """The values of the states ``active`` names (what ``configuration_values`` holds)."""
        found = self._values_of.get(active)
        if found is None:
            found = self._values_of[active] = frozenset(self.values[key] for key in active)
        return found

    def active(self, leaves: tuple[str, ...]) -> tuple[frozenset[str], bool]:
        """Every state active with ``leaves`` (the leaves and their ancestors), and
        whether the machine still runs there (not in a top-level final state)."""
        found = self._active.get(leaves)
        if found is None:
            path = self._path(leaves)
            ended = any(state.final and state.parent is None for state in path)
            found = self._active[leaves] = (frozenset(state.id for state in path), not ended)
        return found

    def event_guards(self, event: str | None) -> tuple[Call, ...]:
        """The guards of every transition of the chart on ``event``, from any state: what
        decides a step on it, whichever the configuration (see
        :attr:`CompiledEngine.decisions`)."""
        found = self._event_guards.get(event)
        if found is None:
            # a guard named by many transitions, asking for the same arguments, answers
            # the same: asked once
            distinct = {
                guard.key: guard  # type: ignore[attr-defined]
                for state in self._instance_states.values()
                for transition in _matching_own(state, event)
                for guard, _ in self._compile(transition).guards
            }
            found = self._event_guards[event] = tuple(distinct.values())
        return found


def _bind(function: Callable[..., Any], static: dict[str, Any]) -> Call:
    """``function`` (a rules method) as a :data:`Call`: its parameters filled by name, as
    python-statemachine fills them, with the states fixed now."""
    parameters = list(inspect.signature(function).parameters.values())[1:]
    names = []
    for parameter in parameters:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise UnsupportedChart(f"{function.__qualname__} takes *args or **kwargs")
        if parameter.name not in ARGUMENTS:
            if parameter.default is not parameter.empty:
                continue
            raise UnsupportedChart(
                f"{function.__qualname__} asks for {parameter.name!r}; the compiled engine "
                f"passes {', '.join(ARGUMENTS)}"
            )
        names.append(parameter.name)
    call = _shaped(function, tuple(names), static)
    call.__name__ = function.__name__
    # what it answers depends on: the method, and the states it is handed
    call.key = (function, *(id(static.get(name)) for name in names))  # type: ignore[attr-defined]
    return call


def _shaped(function: Callable[..., Any], shape: tuple[str, ...], static: dict[str, Any]) -> Call:
    if shape == ():
        return lambda rules, ev, machine: function(rules)
    if shape == ("ev",):
        return lambda rules, ev, machine: function(rules, ev)
    if shape == ("machine",):
        return lambda rules, ev, machine: function(rules, machine)
    fixed = {name: static[name] for name in shape if name in static}

    def call(rules: TurnRules, ev: Event | None, machine: MachineView) -> Any:
        given = {"ev": ev, "machine": machine, "event": None if ev is None else ev.name}
        return function(rules, **{name: fixed.get(name, given.get(name)) for name in shape})

    return call


def _matching_own(state: State, event: str | None) -> Iterator[Transition]:
    for transition in state.transitions:
        if transition.initial:
            continue
        if transition.is_eventless if event is None else transition.match(event):
            yield transition


def _matching(state: State, event: str | None) -> Iterator[Transition]:
    """The reference's candidates: the state's own transitions, then its ancestors'."""
    node: State | None = state
    while node is not None:
        yield from _matching_own(node, event)
        node = node.parent


_COMPILED: dict[tuple[type, type], CompiledChart] = {}
_COMPILING = threading.Lock()


def compiled_chart(machine_class: type[TurnChart], rules_class: type[TurnRules]) -> CompiledChart:
    """The pair compiled, once (kept on the chart class: it lives as long as the class)."""
    tables: dict[type, CompiledChart] = machine_class.__dict__.get("_turnfsm_compiled", {})
    found = tables.get(rules_class)
    if found is None:
        with _COMPILING:
            tables = machine_class.__dict__.get("_turnfsm_compiled", {})
            found = tables.get(rules_class)
            if found is None:
                found = CompiledChart(machine_class, rules_class)
                type.__setattr__(
                    machine_class, "_turnfsm_compiled", {**tables, rules_class: found}
                )
    return found


class CompiledEngine:
    """One call's machine on a :class:`CompiledChart`: its configuration and its rules."""

    __slots__ = (
        "chart",
        "rules",
        "leaves",
        "active",
        "running",
        "view",
        "decisions",
        "taken",
        "__weakref__",
    )

    def __init__(self, chart: CompiledChart, rules: TurnRules) -> None:
        self.chart = chart
        self.rules = rules
        self.view = MachineView(self)
        self.decisions: list[Decision] | None = None
        """Set to a list, every step appends to it the inputs its outcome depends on
        besides the rules' own results: at each point where transitions are chosen, the
        configuration, the event's name and the answer of every guard of every
        transition of the chart on that event (:meth:`CompiledChart.event_guards`).
        Guards only read, and the rules' actions only see their arguments: two steps with
        equal decisions from equal contexts end equal, in either engine, and a step of
        either engine is a function of its decisions and its context. The explorer
        compares the engines once per distinct decisions (:func:`turnfsm.testing.explore`)."""
        self.taken: set[Transition] | None = None
        """Set to a set, every step adds to it the declared transitions it takes: what
        the explorer reports as fired (:attr:`turnfsm.testing.ExplorationReport.fired`)."""
        self.leaves: tuple[str, ...] = chart.initial_leaves
        self.active, self.running = chart.active(self.leaves)
        for call in chart.initial_actions:
            call(rules, None, self.view)
        self._macrostep()

    def resume(self, leaves: tuple[str, ...]) -> None:
        """Put the machine in ``leaves`` (running unless that is the final state)."""
        self.leaves = leaves
        self.active, self.running = self.chart.active(leaves)

    def send(self, event: Event) -> None:
        """One external event, as the reference's processing loop takes it: the eventless
        transitions it enables first, then the event, then the eventless transitions
        that enables; reaching the final state stops the loop (what is left is dropped)."""
        if not self.running:
            return
        self._macrostep()
        if self.running and self._microstep(event.name, event) and self.running:
            self._macrostep()
        elif self.decisions is not None:
            # where this engine stopped short of another eventless choice, the answers a
            # different engine's choice there would read
            self._decide(None, None)

    def _macrostep(self) -> None:
        while self._microstep(None, None):
            pass

    def _microstep(self, name: str | None, ev: Event | None) -> bool:
        chart = self.chart
        if self.decisions is not None:
            self._decide(name, ev)
        regions = chart._candidates.get((self.leaves, name))
        if regions is None:
            regions = chart.candidates(self.leaves, name)
        if not regions:
            return False
        rules, view = self.rules, self.view
        enabled: list[CompiledTransition] = []
        for region in regions:
            for transition in region:
                for guard, expected in transition.guards:
                    if bool(guard(rules, ev, view)) is not expected:
                        break
                else:
                    if transition not in enabled:
                        enabled.append(transition)
                    break
        if not enabled:
            return False
        chosen = (self.leaves, tuple(t.index for t in enabled))
        plan = chart._plans.get(chosen) or chart.plan(*chosen)
        if self.taken is not None:
            self.taken.update(plan.transitions)
        for call in plan.before_update:
            call(rules, ev, view)
        self.leaves, self.active = plan.leaves, plan.active
        for call in plan.after_update:
            call(rules, ev, view)
        if plan.terminates:
            self.running = False
        return True

    def _decide(self, name: str | None, ev: Event | None) -> None:
        assert self.decisions is not None
        answers: list[bool | str] = []
        for guard in self.chart.event_guards(name):
            try:
                answers.append(bool(guard(self.rules, ev, self.view)))
            except Exception as error:  # noqa: BLE001 - an answer like any other
                answers.append(type(error).__name__)
        self.decisions.append((self.leaves, name, tuple(answers)))
