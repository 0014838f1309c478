"""Issue 21, point 6: the drawn diagrams are the machine, edge by edge, per policy.

Under a policy, every transition its calls can take (:func:`turnfsm.reach.reach`) is
drawn exactly once, in the Mermaid and in the DOT: as an arrow when it changes state, as
a line of its state when it stays (a leaf lists it under its name, a box in the note
beside it, DOT in its cluster's label: never a loop, which would mean exit and re-enter).
Every other declared transition is drawn nowhere: the Mermaid lists it in a ``never
fires under this policy`` comment. The expected lines are written here from
python-statemachine's own transition objects, not from the diagram module's model, and
the comparison is shown to fail on an edge dropped, moved into that comment, or doubled.
That :func:`~turnfsm.reach.reach` keeps every transition a call takes is the explorer's
check (``tests/core/test_explorer.py``, the diagram test there).

Nothing here names a state: the checks read the chart, so they hold as it is reshaped.
"""

from __future__ import annotations

import html
import re
from collections import Counter

import pytest
from statemachine import State
from statemachine.transition import Transition

from turnfsm.machine import TurnMachine, atomic_states, walk_states
from turnfsm.policy import TurnPolicy
from turnfsm.reach import reach
from turnfsm.tools.cli import PRESETS
from turnfsm.tools.diagram import build_diagram, declared_transitions, to_dot, to_mermaid
from turnfsm.tools.escape import mermaid_text

POLICIES: dict[str, TurnPolicy | None] = {"every transition": None, **PRESETS}
NEVER_FIRES = r"%% never fires under this policy: (\w+) --(\w*)--> (\w+) ?(.*)"

Line = tuple[str, str, str]
"""(source, target, label) of one drawn transition; a transition that stays: its state
twice."""


def declared() -> list[Transition]:
    """The chart's transitions but the compound states' moves to their initial child."""
    return [transition for transition, _ in declared_transitions()]


def label(transition: Transition) -> str:
    """``event [guard, !unless] / before and on actions``, as the machine declares it."""
    names = lambda specs: [str(spec) for spec in specs if not spec.is_convention]  # noqa: E731
    (event,) = {str(e) for e in transition.events} or {""}
    guards = names(transition.cond)
    actions = names(transition.before) + names(transition.on)
    text = event
    if guards:
        text += f" [{', '.join(guards)}]"
    if actions:
        text += f" / {', '.join(actions)}"
    return text.strip()


def line(transition: Transition) -> Line:
    return (transition.source.id, (transition.target or transition.source).id, label(transition))


def expected(policy: TurnPolicy | None) -> tuple[Counter[Line], Counter[Line], list[str]]:
    """What a policy's diagram must draw, what it must say never fires, and where the
    policy's start's eventless choice leads (drawn as the initial arrow ``[*] -->``, not
    as an edge: the state it leaves is not drawn)."""
    fires = declared() if policy is None else list(reach(policy).transitions)
    drawn_states = (
        {state.id for state in walk_states(TurnMachine.states)}
        if policy is None
        else _with_parents(reach(policy).states)
    )
    choices = [t for t in fires if t.source.id not in drawn_states]
    assert all(not list(t.events) for t in choices)  # only the start's choice
    firing, chosen = {id(t) for t in fires}, {id(t) for t in choices}
    drawn = Counter(line(t) for t in fires if id(t) not in chosen)
    never = Counter(line(t) for t in declared() if id(t) not in firing)
    return drawn, never, [t.target.id for t in choices if t.target is not None]


def _with_parents(leaves: frozenset[str]) -> set[str]:
    by_id = {state.id: state for state in walk_states(TurnMachine.states)}
    found: set[str] = set()
    for leaf in leaves:
        node: State | None = by_id[leaf]
        while node is not None:
            found.add(node.id)
            node = node.parent
    return found


def mermaid_lines(text: str) -> tuple[Counter[Line], Counter[Line]]:
    """The transition lines of a Mermaid text: those drawn (arrows, a leaf's lines, the
    lines of the note beside a box; entry and exit actions left out), and those of the
    ``never fires`` comments. Labels as written (Mermaid-escaped)."""
    drawn: Counter[Line] = Counter()
    never: Counter[Line] = Counter()
    note: str | None = None
    for row in text.splitlines():
        stripped = row.strip()
        if note is not None:
            if stripped == "end note":
                note = None
            elif not stripped.startswith(("entry / ", "exit / ")):
                drawn[(note, note, stripped)] += 1
        elif match := re.fullmatch(r"note right of (\w+)", stripped):
            note = match.group(1)
        elif match := re.fullmatch(NEVER_FIRES, stripped):
            source, event, target, rest = match.groups()
            never[(source, target, f"{event} {rest}".strip())] += 1
        elif match := re.fullmatch(r"(\w+) --> (\w+) : (.*)", stripped):
            source, target, text_ = match.groups()
            drawn[(source, target, text_)] += 1
        elif match := re.fullmatch(r"(\w+) : (.*)", stripped):
            if not match.group(2).startswith(("entry / ", "exit / ")):
                drawn[(match.group(1), match.group(1), match.group(2))] += 1
    return drawn, never


def mermaid_differences(text: str, policy: TurnPolicy | None) -> list[str]:
    """How a policy's Mermaid text differs from its machine, transition by transition."""
    drawn, never, choices = expected(policy)
    found_drawn, found_never = mermaid_lines(text)
    problems = _compare("drawn", _escaped(drawn), found_drawn)
    problems += _compare("said never to fire", _escaped(never), found_never)
    problems += [f"no initial arrow to {t}" for t in choices if f"[*] --> {t}\n" not in text]
    problems += [f"a loop: {m.group(0)}" for m in re.finditer(r"^\s*(\w+) --> \1 .*", text, re.M)]
    return problems


def _escaped(lines: Counter[Line]) -> Counter[Line]:
    """The labels as Mermaid text writes them."""
    return Counter({(s, t, mermaid_text(label)): n for (s, t, label), n in lines.items()})


def dot_lines(text: str) -> Counter[Line]:
    """The transition lines of a DOT text: its labelled edges (one per label line, the
    ends read from ``ltail``/``lhead`` where an edge leaves or enters a cluster), and the
    lines of a leaf's or a cluster's label (entry and exit actions left out)."""
    found: Counter[Line] = Counter()
    for match in re.finditer(r"^\s*(\w+) -> (\w+) \[(.*)\];$", text, re.M):
        tail, head, attributes = match.groups()
        source = re.search(r"ltail=cluster_(\w+)", attributes)
        target = re.search(r"lhead=cluster_(\w+)", attributes)
        written = re.search(r'label="((?:[^"\\]|\\.)*)"', attributes)
        if written is None:
            continue  # an initial arrow: structure, not a transition
        text_ = written.group(1).replace('\\"', '"').replace("\\\\", "\\")
        for row in text_.removesuffix("\\l").split("\\l"):
            ends = (source.group(1) if source else tail, target.group(1) if target else head)
            found[(*ends, row)] += 1
    owners = [
        *re.finditer(r"^\s*subgraph cluster_(\w+) \{\n\s*label=<(.*)>;$", text, re.M),
        *re.finditer(r"^\s*(\w+) \[label=<(.*)>(?:, [^\]]*)?\];$", text, re.M),
    ]
    for owner in owners:
        for row in re.findall(r'<font point-size="10">(.*?)</font>', owner.group(2)):
            row = html.unescape(row)
            if not row.startswith(("entry / ", "exit / ")):
                found[(owner.group(1), owner.group(1), row)] += 1
    return found


def dot_differences(text: str, policy: TurnPolicy | None) -> list[str]:
    """How a policy's DOT text differs from its machine, transition by transition."""
    drawn, _, _ = expected(policy)
    problems = _compare("drawn", drawn, dot_lines(text))
    problems += [f"a loop: {m.group(0)}" for m in re.finditer(r"^\s*(\w+) -> \1\b.*", text, re.M)]
    return problems


def _compare(what: str, wanted: Counter[Line], found: Counter[Line]) -> list[str]:
    return [f"not {what}: {key}" for key in sorted((wanted - found).elements())] + [
        f"{what} but not the machine's: {key}" for key in sorted((found - wanted).elements())
    ]


@pytest.mark.parametrize("name", POLICIES)
def test_each_transition_a_policy_can_take_is_drawn_once_and_no_other(name: str) -> None:
    diagram = build_diagram(policy=POLICIES[name])
    drawn, never, _ = expected(POLICIES[name])
    assert sum(drawn.values()) > 50
    assert (name == "every transition") == (not never)
    assert mermaid_differences(to_mermaid(diagram), POLICIES[name]) == []
    assert dot_differences(to_dot(diagram), POLICIES[name]) == []


def _first(pattern: str, text: str, after: str = "") -> re.Match[str]:
    match = re.compile(pattern, re.M).search(text, text.index(after) if after else 0)
    assert match is not None, pattern
    return match


def _replaced(text: str, match: re.Match[str], by: str) -> str:
    return text[: match.start()] + by + text[match.end() :]


ARROW = r"^\s*(\w+) --> (\w+) : (\w+)(.*)\n"
"""An arrow with an event: source, target, event, the rest of its label."""


def mutated(text: str, mutation: str) -> str:
    """A policy's Mermaid text with one transition drawn wrong."""
    arrow = _first(ARROW, text)
    source, target, event, rest = arrow.groups()
    if mutation == "an arrow dropped":
        return _replaced(text, arrow, "")
    if mutation == "an arrow said never to fire":
        comment = f"    %% never fires under this policy: {source} --{event}--> {target}{rest}\n"
        return _replaced(text, arrow, comment)
    if mutation == "an arrow drawn twice":
        return _replaced(text, arrow, arrow[0] * 2)
    if mutation == "an arrow turned into a loop":
        return _replaced(text, arrow, arrow[0].replace(f"> {target} :", f"> {source} :"))
    if mutation == "a leaf's line dropped":
        return _replaced(text, _first(r"^\s*\w+ : (?!entry / |exit / ).*\n", text), "")
    assert mutation == "a note's line dropped"
    note_line = r"^ +(?!entry / |exit / |note |end note)\w.*\n"
    return _replaced(text, _first(note_line, text, after="    note right of "), "")


@pytest.mark.parametrize(
    "mutation",
    [
        "an arrow dropped",
        "an arrow said never to fire",
        "an arrow drawn twice",
        "an arrow turned into a loop",
        "a leaf's line dropped",
        "a note's line dropped",
    ],
)
def test_the_mermaid_check_fails_on_a_wrong_edge(mutation: str) -> None:
    policy = PRESETS["outbound"]
    text = to_mermaid(build_diagram(policy=policy))
    changed = mutated(text, mutation)
    assert changed != text
    assert mermaid_differences(changed, policy) != []


def test_the_dot_check_fails_on_a_dropped_edge_or_line() -> None:
    policy = PRESETS["inbound"]
    text = to_dot(build_diagram(policy=policy))
    # an edge of two label lines or more, its last line dropped
    edge = _first(r'^\s*\w+ -> \w+ \[label="((?:[^"\\]|\\.)*\\l(?:[^"\\]|\\.)*\\l)"', text)
    kept = edge[1].removesuffix("\\l").split("\\l")[:-1]
    one_less = text[: edge.start(1)] + "".join(f"{row}\\l" for row in kept) + text[edge.end(1) :]
    removed = dot_lines(text) - dot_lines(one_less)
    assert sum(removed.values()) == 1
    assert dot_differences(one_less, policy) == [f"not drawn: {next(iter(removed))}"]
    row = r'<tr><td align="left"><font point-size="10">(?!entry / |exit / )[^<]*</font></td></tr>'
    assert dot_differences(_replaced(text, _first(row, text), ""), policy) != []


@pytest.mark.parametrize("name", PRESETS)
def test_a_policys_diagram_draws_only_the_states_its_calls_reach(name: str) -> None:
    """No state a policy's calls never reach is drawn, nor named outside the comment that
    lists what never fires; each one they reach is."""
    reached = reach(PRESETS[name]).states
    diagram = build_diagram(policy=PRESETS[name])
    body = to_mermaid(diagram).split("stateDiagram-v2\n", 1)[1]
    drawn = "\n".join(row for row in body.splitlines() if not row.lstrip().startswith("%%"))
    dot = to_dot(diagram)
    for leaf in atomic_states():
        assert (leaf.id in diagram.states) == (leaf.id in reached), leaf.id
        assert bool(re.search(rf"\b{leaf.id}\b", drawn)) == (leaf.id in reached), leaf.id
        assert bool(re.search(rf"\b{leaf.id}\b", dot)) == (leaf.id in reached), leaf.id
    # the example: no inbound call waits for the callee's first words
    assert "awaiting_user" not in reach(PRESETS["inbound"]).states


def _compound(state: State) -> bool:
    return bool(state.states) and not state.parallel


@pytest.mark.parametrize("name", POLICIES)
def test_regions_and_compound_states_are_drawn_with_their_initial_states(name: str) -> None:
    """A parallel state's regions are drawn side by side in it (Mermaid's ``--``, DOT's
    dashed clusters), and each drawn compound state, region or not, is drawn with its
    initial state: the chart's, or where the policy starts the call."""
    diagram = build_diagram(policy=POLICIES[name])
    mermaid, dot = to_mermaid(diagram), to_dot(diagram)
    holding_start = _with_parents(frozenset({diagram.start}))
    checked = 0
    for state in walk_states(TurnMachine.states):
        if state.id not in diagram.states:
            continue
        if state.parallel:
            regions = [region.id for region in state.states if region.id in diagram.states]
            opening = _first(rf'^( *)state "[^"]*" as {state.id} {{\n', mermaid)
            pad = opening[1]
            block = mermaid[opening.end() : mermaid.index(f"\n{pad}}}\n", opening.end())]
            assert block.count(f"\n{pad}    --\n") == len(regions) - 1
            for region in regions:
                assert re.search(rf'^{pad}    state ("[^"]*" as )?{region} {{$', block, re.M)
                cluster = rf'subgraph cluster_{region} {{\n.*\n\s*style="rounded,dashed";'
                assert re.search(cluster, dot), region
        if not _compound(state):
            continue
        # the child holding the start, else the declared initial one (else the first)
        initial = next((c for c in state.states if c.id in holding_start), None) or next(
            (c for c in state.states if c.initial), state.states[0]
        )
        if initial.id not in diagram.states:
            continue  # no call under the policy enters it by default
        opening = rf'state ("[^"]*" as )?{state.id} {{\n\s*\[\*\] --> {initial.id}\n'
        assert re.search(opening, mermaid), state.id
        arrow = re.search(rf"__initial_{state.id}__ -> (\w+)(?: \[lhead=cluster_(\w+)\])?;", dot)
        assert arrow is not None, state.id
        assert initial.id in arrow.groups(), state.id
        checked += 1
    assert checked >= 3


def test_region_scope_transitions_are_drawn_on_their_box() -> None:
    """A transition declared on a compound state or a region (``call.to(...)``, the
    region-wide bookkeeping) is drawn once, on that state's box: an arrow from it, or a
    line of the note beside it, never once per state inside it."""
    scoped = [t for t in declared() if t.source.states]
    assert any(t.source.parent is not None and t.source.parent.parallel for t in scoped)
    assert any(t.target is None for t in scoped)
    assert any(t.target for t in scoped)
    drawn, _ = mermaid_lines(to_mermaid(build_diagram()))
    wanted = Counter(line(transition) for transition in scoped)
    for (source, target, text), count in wanted.items():
        assert drawn[(source, target, mermaid_text(text))] == count, (source, text)
