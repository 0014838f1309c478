"""Issue 21, point 6: the drawn diagrams are the machine, edge by edge, per policy.

Every transition the chart declares appears in a policy's Mermaid diagram exactly once:
as an arrow when it changes state, as a line of its state when it stays (a leaf lists
it under its name, a box in the note beside it: never a loop, which would mean exit and
re-enter), or as a ``never fires under this policy`` comment. The expected lines are
written here from python-statemachine's own transition objects, not from the diagram
module's model. That what a policy leaves out really never fires is the explorer's
check (``tests/core/test_explorer.py``).
"""

from __future__ import annotations

import re
from collections import Counter

import pytest
from statemachine.transition import Transition

from turnfsm.tools.cli import PRESETS
from turnfsm.tools.diagram import build_diagram, declared_transitions, to_mermaid
from turnfsm.tools.escape import mermaid_text

POLICIES = {"every transition": None, **PRESETS}
NEVER_FIRES = r"%% never fires under this policy: (\w+) --(\w*)--> (\w+) ?(.*)"


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


def drawn_lines(text: str) -> Counter[tuple[str, str, str]]:
    """(source, target, label) of every transition line in a Mermaid text: arrows, a
    leaf's lines, the lines of the note beside a box (entry and exit actions left out),
    and the commented transitions that never fire."""
    found: Counter[tuple[str, str, str]] = Counter()
    note: str | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if note is not None:
            if stripped == "end note":
                note = None
            elif not stripped.startswith(("entry / ", "exit / ")):
                found[(note, note, stripped)] += 1
        elif match := re.fullmatch(r"note right of (\w+)", stripped):
            note = match.group(1)
        elif match := re.fullmatch(NEVER_FIRES, stripped):
            source, event, target, rest = match.groups()
            found[(source, target, f"{event} {rest}".strip())] += 1
        elif match := re.fullmatch(r"(\w+) --> (\w+) : (.*)", stripped):
            found[match.groups()] += 1  # type: ignore[index]
        elif match := re.fullmatch(r"(\w+) : (.*)", stripped):
            if not match.group(2).startswith(("entry / ", "exit / ")):
                found[(match.group(1), match.group(1), match.group(2))] += 1
    return found


@pytest.mark.parametrize("name", POLICIES)
def test_every_declared_transition_is_drawn_once_or_said_never_to_fire(name: str) -> None:
    diagram = build_diagram(policy=POLICIES[name])
    text = to_mermaid(diagram)
    expected = Counter(
        (t.source.id, (t.target or t.source).id, mermaid_text(label(t))) for t in declared()
    )
    if diagram.start != "start":  # the policy's calls start there: `[*] --> ringing`
        (choice,) = [key for key in expected if key[:2] == ("start", diagram.start)]
        del expected[choice]
        assert f"    [*] --> {diagram.start}\n" in text
    assert drawn_lines(text) == expected
    assert not re.search(r"^\s*(\w+) --> \1 ", text, flags=re.M), "a loop is drawn"


def test_a_policy_draws_only_the_states_its_calls_reach() -> None:
    inbound = build_diagram(policy=PRESETS["inbound"])
    assert "awaiting_user" not in inbound.states  # no inbound call waits for the caller
    assert "ringing" not in inbound.states
    outbound = build_diagram(policy=PRESETS["outbound"])
    assert {"ringing", "awaiting_user"} <= set(outbound.states)
    assert "start" not in outbound.states


def test_region_scope_transitions_are_drawn() -> None:
    """The bookkeeping declared on the turn region (every state of the live turn) is in
    the note beside its box."""
    text = to_mermaid(build_diagram(policy=PRESETS["outbound"]))
    note = text[text.index("note right of turn\n") :]
    note = note[: note.index("end note")]
    assert "model_response_done / note_model_free" in note
    assert "realtime_model_linked / note_model_link" in note
