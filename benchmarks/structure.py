"""The shape of the code, counted: issue 21's before/after table.

``python -m benchmarks.structure [--at REV]`` prints, for the working tree (or a commit,
read with ``git show``):

- the chart's declared transitions and how many are targetless (bookkeeping that
  stays in its state);
- the machine's context fields (``TurnContext``);
- the fields ``TurnAdapter`` and ``RealtimeLink`` set on themselves (``self.x = ...`` in
  their classes), and those of the dispatcher, the levers' port and the realtime levers
  where they exist;
- the groups of ``adapters/livekit``'s modules that import each other (around a
  circle), counting imports under ``TYPE_CHECKING`` and inside functions too.

Counted from the source text (``ast``), so a commit is measured without installing it;
the chart's counts come from importing it, so they are the working tree's only.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def source(path: str, at: str | None) -> str:
    if at is None:
        return (ROOT / path).read_text(encoding="utf-8")
    return subprocess.run(
        ["git", "show", f"{at}:{path}"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout


def files(folder: str, at: str | None) -> list[str]:
    if at is None:
        return sorted(str(p.relative_to(ROOT)) for p in (ROOT / folder).glob("*.py"))
    listed = subprocess.run(
        ["git", "ls-tree", "--name-only", f"{at}:{folder}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [f"{folder}/{name}" for name in listed if name.endswith(".py")]


def self_fields(text: str, class_name: str) -> set[str]:
    """Attributes a class assigns on ``self`` anywhere in its methods."""
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            return {
                target.attr
                for sub in ast.walk(node)
                for target in assignment_targets(sub)
                if isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
            }
    return set()


def assignment_targets(node: ast.AST) -> list[ast.expr]:
    """What the statement ``node`` assigns to (``x = ``, ``x: int = ``, ``x += ``); none
    for any other node. The lever check (``tests/test_levers_only_act.py``) reads it too."""
    if isinstance(node, ast.Assign):
        return list(node.targets)
    if isinstance(node, ast.AnnAssign | ast.AugAssign):
        return [node.target]
    return []


def sibling_imports(text: str) -> set[str]:
    """The sibling modules a module imports, anywhere (type-only and local imports too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
    return found


def tangles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The groups of modules that import each other, directly or around a circle (the
    graph's strongly connected components of two modules or more)."""
    reaches = {module: _reached(graph, module) for module in graph}
    groups: list[set[str]] = []
    for module in sorted(graph):
        group = {other for other in reaches[module] if module in reaches.get(other, set())}
        if len(group) > 1 and group not in groups:
            groups.append(group)
    return groups


def _reached(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, frontier = {start}, [start]
    while frontier:
        for target in graph.get(frontier.pop(), ()):
            if target in graph and target not in seen:
                seen.add(target)
                frontier.append(target)
    return seen


def chart_counts() -> tuple[int, int, int]:
    import attrs

    from turnfsm.context import TurnContext
    from turnfsm.tools.diagram import declared_transitions

    transitions = [transition for transition, _ in declared_transitions()]
    targetless = sum(1 for t in transitions if t.target is None)
    return len(transitions), targetless, len(attrs.fields(TurnContext))


CLASSES = (
    ("adapter", "TurnAdapter"),
    ("realtime", "RealtimeLink"),
    ("dispatch", "Dispatcher"),
    ("port", "LeverPort"),
    ("realtime_levers", "RealtimeLevers"),
)
"""The classes whose fields are counted, by module: the adapter and the realtime link,
and, where they exist, the rooms their fields moved to (issue 21, point 3)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--at", help="a commit to count (default: the working tree)")
    at = parser.parse_args().at
    rows: list[tuple[str, str]] = []
    if at is None:
        transitions, targetless, fields = chart_counts()
        rows += [
            ("transitions (declared)", str(transitions)),
            ("targetless", f"{targetless} ({100 * targetless / transitions:.0f} %)"),
            ("context fields", str(fields)),
        ]
    livekit = {Path(path).stem: source(path, at) for path in files("adapters/livekit", at)}
    for module, class_name in CLASSES:
        if module in livekit:
            fields = self_fields(livekit[module], class_name)
            rows.append((f"{class_name} fields", str(len(fields))))
    graph = {module: sibling_imports(text) for module, text in livekit.items()}
    groups = tangles(graph)
    described = "; ".join(", ".join(sorted(group)) for group in groups) or "none"
    rows.append(("modules importing each other (livekit)", described))
    for name, value in rows:
        print(f"{name:40} {value}")


if __name__ == "__main__":
    main()
