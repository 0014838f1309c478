"""Diagrams of the turn machine, drawn from the live class: Mermaid and Graphviz DOT.

Nothing here is a second copy of the machine: :func:`machine_edges` reads the states
and transitions of :class:`~turnfsm.machine.TurnMachine` (or a subclass), with their
guard and action names, and :func:`build_diagram` turns them into a :class:`Diagram`
that :func:`to_mermaid` and :func:`to_dot` print. Both outputs are deterministic:
states keep their declaration order, edges follow it, and no ``id()`` is used.

An edge is labelled ``event [guard, !unless_guard] / action, action``. Transitions
between the same two states are merged into one edge with a line per transition, in
priority order. A transition drawn identically from many states into one (``call_ended``
into ``ended``) shows its event only, and is spelt out once in the target's note.
Internal transitions, which never leave their state, are listed in a note beside it
with the state's ``entry`` and ``exit`` actions.

Given a policy, the diagram starts where that policy's calls start, and omits the
transitions that can never fire under it (a guard that reads only the policy is false,
a timer is not configured, an earlier transition always wins, or the source state is
unreachable). Given a trace, it highlights the states the call visited and counts how
often each transition was taken (``×N``), replaying the trace's events through the
machine to know exactly which transition fired.

>>> print(to_mermaid(build_diagram()).splitlines()[4])
stateDiagram-v2
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping

import attrs
from statemachine import State
from statemachine.callbacks import CallbackSpec
from statemachine.transition import Transition

from .controller import TurnController, initial_state
from .escape import mermaid_text, printable
from .machine import LOCKED_STATES, TurnChart, TurnMachine, leaf_states, leaf_transitions
from .policy import TurnPolicy
from .rules import POLICY_GUARDS, TIMER_GUARDS, TurnRules
from .trace import Trace


@attrs.frozen
class Edge:
    """One declared transition, with the names of its guards and actions.

    Attributes:
        source: the state it leaves.
        target: the state it enters (``source`` for a self transition).
        event: the event that triggers it.
        guards: guard names in order; an ``unless`` guard is written ``!name``.
        actions: the ``before`` then ``on`` action names, in the order they run.
        internal: whether it stays in the state without exit and enter actions.
    """

    source: str
    target: str
    event: str
    guards: tuple[str, ...]
    actions: tuple[str, ...]
    internal: bool

    @property
    def condition(self) -> str:
        """``[guard, ...] / action, ...`` without the event; empty when it has neither."""
        parts = []
        if self.guards:
            parts.append(f"[{', '.join(self.guards)}]")
        if self.actions:
            parts.append(f"/ {', '.join(self.actions)}")
        return " ".join(parts)


@attrs.frozen
class Diagram:
    """What to draw: the states, the start, the edges and any trace overlay.

    Attributes:
        title: a one-line title.
        states: state ids in declaration order (unreachable ones left out).
        start: the state a call starts in.
        finals: the final states.
        locked: the states drawn as locked.
        entry_exit: per state, its ``entry / ...`` and ``exit / ...`` lines.
        edges: the transitions that can fire, in declaration order.
        omitted: the transitions left out because they can never fire.
        visited: states a traced call was in (empty without a trace).
        taken: how many times a traced call took each transition.
        warnings: where the trace and the drawing disagree (a transition taken but not
            drawn, a step the machine now takes differently).
    """

    title: str
    states: tuple[str, ...]
    start: str
    finals: frozenset[str]
    locked: frozenset[str]
    entry_exit: Mapping[str, tuple[str, ...]]
    edges: tuple[Edge, ...]
    omitted: tuple[Edge, ...] = ()
    visited: frozenset[str] = frozenset()
    taken: Mapping[Edge, int] = attrs.field(factory=dict)
    warnings: tuple[str, ...] = ()


def machine_edges(machine_class: type[TurnChart] = TurnMachine) -> tuple[Edge, ...]:
    """Every declared transition of ``machine_class``, by source state then priority."""
    return tuple(
        _edge(state, transition)
        for state in leaf_states(machine_class)
        for transition in leaf_transitions(state)
    )


def build_diagram(
    machine_class: type[TurnChart] = TurnMachine,
    *,
    policy: TurnPolicy | None = None,
    trace: Trace | None = None,
) -> Diagram:
    """Collect what to draw for a machine, optionally under a policy and with a trace.

    Args:
        machine_class: the machine to draw.
        policy: draw only what can happen under this policy, from its start state;
            ``None`` draws every declared transition from the class's initial state.
        trace: overlay this call: visited states and per-transition counts.
    """
    edges = machine_edges(machine_class)
    kept: tuple[Edge, ...] = edges
    omitted: tuple[Edge, ...] = ()
    if policy is None:
        start = leaf_states(machine_class)[0].id
    else:
        start = initial_state(policy, machine_class)
        kept, omitted = _prune(edges, policy, start)
    reachable = {start} | {edge.target for edge in kept}
    leaves = leaf_states(machine_class)
    states = tuple(state.id for state in leaves if state.id in reachable)
    entry_exit = {
        state.id: _state_actions(state.enter, state.exit)
        for state in leaves
        if state.id in reachable
    }
    title = f"{machine_class.__name__} - {_describe(policy)}"
    diagram = Diagram(
        title=title,
        states=states,
        start=start,
        finals=frozenset(state.id for state in leaves if state.final),
        locked=LOCKED_STATES & reachable,
        entry_exit=entry_exit,
        edges=kept,
        omitted=omitted,
    )
    return diagram if trace is None else _overlay(diagram, trace, machine_class)


def _edge(state: State, transition: Transition) -> Edge:
    events = sorted({str(event) for event in transition.events})
    if len(events) != 1:
        raise ValueError(f"expected one event per transition, got {events}")
    return Edge(
        source=state.id,
        target=(transition.target or state).id,
        event=events[0],
        guards=tuple(str(spec) for spec in _declared(transition.cond)),
        actions=tuple(
            str(spec) for spec in (*_declared(transition.before), *_declared(transition.on))
        ),
        internal=bool(transition.internal) or transition.target is None,
    )


def _declared(specs: Iterable[CallbackSpec]) -> Iterator[CallbackSpec]:
    """The callbacks the class names, without the ``on_<event>`` naming conventions."""
    return (spec for spec in specs if not spec.is_convention)


def _state_actions(
    enter: Iterable[CallbackSpec], exit_: Iterable[CallbackSpec]
) -> tuple[str, ...]:
    lines = []
    for kind, specs in (("entry", enter), ("exit", exit_)):
        names = [str(spec) for spec in _declared(specs)]
        if names:
            lines.append(f"{kind} / {', '.join(names)}")
    return tuple(lines)


def _describe(policy: TurnPolicy | None) -> str:
    if policy is None:
        return "every declared transition"
    return f"{policy.direction} call, {policy.first_speaker} speaks first"


# -- what a policy makes impossible ------------------------------------------------------


def _prune(
    edges: tuple[Edge, ...], policy: TurnPolicy, start: str
) -> tuple[tuple[Edge, ...], tuple[Edge, ...]]:
    """Split ``edges`` into those that can fire under ``policy`` and those that never do."""
    rules = TurnRules(policy=policy)
    decided = {name: bool(getattr(rules, name)()) for name in POLICY_GUARDS}
    unset_timers = {
        guard for guard, field in TIMER_GUARDS.items() if getattr(policy, field) is None
    }

    def open_guards(edge: Edge) -> frozenset[str] | None:
        """The guards left to check at run time; ``None`` if the policy rules it out."""
        left = set()
        for guard in edge.guards:
            name, wanted = guard.removeprefix("!"), not guard.startswith("!")
            if name in decided:
                if decided[name] != wanted:
                    return None
            elif wanted and name in unset_timers:
                return None
            else:
                left.add(guard)
        return frozenset(left)

    possible: list[Edge] = []
    for edge in edges:
        guards = open_guards(edge)
        # An earlier transition of the same event whose open guards are all among this
        # one's guards fires whenever this one could: this one never does.
        shadowed = guards is not None and any(
            earlier.source == edge.source
            and earlier.event == edge.event
            and (earlier_guards := open_guards(earlier)) is not None
            and earlier_guards <= guards
            for earlier in possible
        )
        if guards is not None and not shadowed:
            possible.append(edge)

    reachable = {start}
    frontier = [start]
    while frontier:
        state = frontier.pop()
        for edge in possible:
            if edge.source == state and edge.target not in reachable:
                reachable.add(edge.target)
                frontier.append(edge.target)
    kept = tuple(edge for edge in possible if edge.source in reachable)
    return kept, tuple(edge for edge in edges if edge not in kept)


# -- trace overlay --------------------------------------------------------------------------


def _overlay(diagram: Diagram, trace: Trace, machine_class: type[TurnChart]) -> Diagram:
    """``diagram`` with the states ``trace`` visited and how often it took each transition.

    The trace's events are replayed through ``machine_class`` under the trace's policy,
    recording every transition that fires: an internal transition is told from an
    ignored event, and of two transitions on one event, the one whose guards held.
    """
    fired: list[Transition] = []

    class Recording(TurnRules):
        def after_transition(self, transition: Transition) -> None:
            fired.append(transition)

    controller = TurnController(
        trace.policy, record=False, machine_class=machine_class, rules_class=Recording
    )
    taken: Counter[Edge] = Counter()
    warnings: list[str] = []
    leaves = {state.id: state for state in leaf_states(machine_class)}
    for number, step in enumerate(trace, start=1):
        fired.clear()
        source = leaves[controller.state]  # a parent's transition is drawn from its child
        controller.handle(step.event)
        taken.update(_edge(source, transition) for transition in fired)
        if controller.state != step.after:
            warnings.append(
                f"step {number} ({step.event.name}) went {step.before} -> {step.after} in the "
                f"trace but {step.before} -> {controller.state} in the machine"
            )
            try:
                controller.restore(step.after, controller.context)
            except ValueError as error:  # the machine's context cannot be in that state
                warnings.append(f"the overlay stops at step {number}: {error}")
                break
    drawn = set(diagram.edges)
    warnings += [
        f"taken {count}x but not drawn: {_edge_text(edge)}"
        for edge, count in taken.items()
        if edge not in drawn
    ]
    visited = frozenset(state for step in trace for state in (step.before, step.after))
    steps = f"{len(trace)} step" + ("" if len(trace) == 1 else "s")
    return attrs.evolve(
        diagram,
        title=f"{diagram.title}, trace of {steps}",
        visited=visited,
        taken={edge: count for edge, count in taken.items() if edge in drawn},
        warnings=tuple(warnings),
    )


# -- labels shared by both formats ----------------------------------------------------------

SHARED_MIN_SOURCES = 3
"""A transition drawn identically from at least this many states into the same target
(``call_ended``, ``session_error``...) is spelt out once, in the target's note; the
edges show its event only."""

Signature = tuple[str, str, str]
"""``(target, event, condition)``: what makes two transitions draw the same."""


def edge_groups(diagram: Diagram) -> list[tuple[str, str, list[str]]]:
    """The external edges merged per ``(source, target)``, with their label lines.

    Groups follow the declaration order of their source, then target state; lines keep
    the transitions' priority order (of two lines with the same event, the first whose
    guards hold fires). Transitions shared by many sources are reduced to their event
    names on a first line (see :data:`SHARED_MIN_SOURCES`).
    """
    order = {state: index for index, state in enumerate(diagram.states)}
    pairs: dict[tuple[str, str], list[Edge]] = {}
    for edge in diagram.edges:
        if not edge.internal:
            pairs.setdefault((edge.source, edge.target), []).append(edge)
    shared = _shared(diagram)
    ordered = sorted(pairs.items(), key=lambda item: (order[item[0][0]], order[item[0][1]]))
    return [
        (source, target, _lines(edges, diagram.taken, shared))
        for (source, target), edges in ordered
    ]


def state_notes(diagram: Diagram, state: str) -> list[str]:
    """A state's note: ``entry``/``exit`` actions, internal transitions, then in full the
    shared transitions into it that its incoming edges show by event only."""
    internal = [edge for edge in diagram.edges if edge.internal and edge.source == state]
    notes = [*diagram.entry_exit.get(state, ()), *_lines(internal, diagram.taken, set())]
    incoming = [
        f"{event} {condition}".rstrip()
        for target, event, condition in _shared(diagram)
        if target == state
    ]
    if incoming:
        notes += ["on edges showing only the event", *incoming]
    return notes


def state_label(diagram: Diagram, state: str, mark: str = "🔒 locked") -> str:
    """The state id, followed by ``mark`` when the state is locked."""
    return f"{state} {mark}" if state in diagram.locked else state


def _signature(edge: Edge) -> Signature:
    return (edge.target, edge.event, edge.condition)


def _shared(diagram: Diagram) -> list[Signature]:
    """Signatures of external transitions drawn from many sources, in declaration order."""
    sources: dict[Signature, set[str]] = {}
    for edge in diagram.edges:
        if not edge.internal:
            sources.setdefault(_signature(edge), set()).add(edge.source)
    return [key for key, found in sources.items() if len(found) >= SHARED_MIN_SOURCES]


def _lines(edges: list[Edge], taken: Mapping[Edge, int], shared: Iterable[Signature]) -> list[str]:
    """One line ``event ×N [guards] / actions`` per edge, in priority order.

    ``×N`` is how many times a traced call took the transition. Edges with a ``shared``
    signature are reduced to their event names, together on the first line.
    """
    shared = set(shared)
    short: list[str] = []
    full: list[str] = []
    for edge in edges:
        count = taken.get(edge, 0)
        name = f"{edge.event} ×{count}" if count else edge.event
        if _signature(edge) not in shared:
            full.append(f"{name} {edge.condition}".rstrip())
        elif not any(token.split(" ")[0] == edge.event for token in short):
            short.append(name)
    return ([", ".join(short)] if short else []) + full


# -- Mermaid --------------------------------------------------------------------------------

_MERMAID_CLASSES = {
    "locked": "fill:#fdecea,stroke:#c62828,stroke-width:3px",
    "visited": "fill:#dbeafe,stroke:#1d4ed8,stroke-width:2px",
    "lockedVisited": "fill:#dbeafe,stroke:#c62828,stroke-width:3px",
}


def to_mermaid(diagram: Diagram) -> str:
    """The diagram as a Mermaid ``stateDiagram-v2`` (renders on GitHub)."""
    out = [
        "---",
        f"title: {_mermaid_text(diagram.title)}",
        "---",
        "%% Generated by turnfsm from the machine class: do not edit, run `make diagrams`.",
        "stateDiagram-v2",
    ]
    for state in diagram.states:
        label = state_label(diagram, state)
        if label != state:
            out.append(f'    state "{_mermaid_text(label)}" as {state}')
    out.append(f"    [*] --> {diagram.start}")
    for source, target, lines in edge_groups(diagram):
        label = "<br/>".join(_mermaid_text(line) for line in lines)
        out.append(f"    {source} --> {target} : {label}")
    for state in sorted(diagram.finals & set(diagram.states)):
        out.append(f"    {state} --> [*]")
    for state in diagram.states:
        notes = state_notes(diagram, state)
        if notes:
            out.append(f"    note right of {state}")
            out.extend(f"        {_mermaid_text(line)}" for line in notes)
            out.append("    end note")
    styled = _styled_states(diagram)
    for name, style in _MERMAID_CLASSES.items():
        if styled[name]:
            out.append(f"    classDef {name} {style}")
    for name in _MERMAID_CLASSES:
        if styled[name]:
            out.append(f"    class {','.join(styled[name])} {name}")
    out.extend(
        f"    %% never fires under this policy: {_edge_text(edge)}" for edge in diagram.omitted
    )
    out.extend(f"    %% trace overlay: {printable(warning)}" for warning in diagram.warnings)
    return "\n".join(out) + "\n"


def _styled_states(diagram: Diagram) -> dict[str, list[str]]:
    styled: dict[str, list[str]] = {name: [] for name in _MERMAID_CLASSES}
    for state in diagram.states:
        locked, visited = state in diagram.locked, state in diagram.visited
        if locked and visited:
            styled["lockedVisited"].append(state)
        elif locked:
            styled["locked"].append(state)
        elif visited:
            styled["visited"].append(state)
    return styled


def _mermaid_text(text: str) -> str:
    """Text safe inside a Mermaid label: one line, no separators Mermaid would read as
    syntax (see :func:`turnfsm.escape.mermaid_text`)."""
    return mermaid_text(text)


def _edge_text(edge: Edge) -> str:
    return f"{edge.source} --{edge.event}--> {edge.target} {edge.condition}".rstrip()


# -- Graphviz DOT ---------------------------------------------------------------------------


def to_dot(diagram: Diagram) -> str:
    """The diagram as Graphviz DOT text, for ``dot -Tsvg``."""
    out = [
        "digraph TurnMachine {",
        f'    label="{_dot_text(diagram.title)}";',
        "    labelloc=t;",
        '    fontname="Helvetica";',
        "    rankdir=TB;",
        '    node [shape=box, style="rounded,filled", fillcolor="#ffffff", fontname="Helvetica"];',
        '    edge [fontname="Helvetica", fontsize=10];',
        '    __start__ [shape=point, width=0.2, label=""];',
    ]
    for state in diagram.states:
        attributes = [f"label={_dot_node_label(diagram, state)}"]
        if state in diagram.locked:
            attributes += ['color="#c62828"', "penwidth=3", 'fillcolor="#fdecea"']
        if state in diagram.visited:
            attributes.append('fillcolor="#dbeafe"')
        if state in diagram.finals:
            attributes.append("peripheries=2")
        out.append(f"    {state} [{', '.join(attributes)}];")
    out.append(f"    __start__ -> {diagram.start};")
    for source, target, lines in edge_groups(diagram):
        label = "".join(_dot_text(line) + "\\l" for line in lines)
        attributes = [f'label="{label}"']
        if any((edge.source, edge.target) == (source, target) for edge in diagram.taken):
            attributes += ['color="#1d4ed8"', "penwidth=2.5", 'fontcolor="#1d4ed8"']
        out.append(f"    {source} -> {target} [{', '.join(attributes)}];")
    out.append("}")
    return "\n".join(out) + "\n"


def _dot_node_label(diagram: Diagram, state: str) -> str:
    """An HTML-like label: the state in bold, a rule, then its notes left-aligned.

    Graphviz fonts may lack the lock emoji, so the locked mark is spelt out.
    """
    title = f"<tr><td><b>{_html(state_label(diagram, state, '[locked]'))}</b></td></tr>"
    notes = "".join(
        f'<tr><td align="left"><font point-size="10">{_html(line)}</font></td></tr>'
        for line in state_notes(diagram, state)
    )
    rule = "<hr/>" if notes else ""
    return f'<<table border="0" cellspacing="1">{title}{rule}{notes}</table>>'


def _dot_text(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
