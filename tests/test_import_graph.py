"""Issue 12, point 3: the LiveKit adapter's modules import each other without a circle.

Read from the source (module-level ``from .x import`` lines; imports inside functions or
under ``TYPE_CHECKING`` are not edges), so a circle is named even where Python's import
order happens to tolerate it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ADAPTER = Path(__file__).resolve().parents[1] / "adapters" / "livekit"


def module_imports(path: Path) -> set[str]:
    """The sibling modules ``path`` imports at module level."""
    imported: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                imported.add(node.module.split(".")[0])
            else:
                imported.update(alias.name for alias in node.names)
    return imported


def circles(graph: dict[str, set[str]]) -> set[tuple[str, ...]]:
    """Every import circle, as the path that closes it."""
    found: set[tuple[str, ...]] = set()

    def walk(path: list[str]) -> None:
        for target in sorted(graph.get(path[-1], ())):
            if target in path:
                found.add((*path[path.index(target) :], target))
            elif target in graph:
                walk([*path, target])

    for module in graph:
        walk([module])
    return found


def test_the_adapter_modules_import_without_a_circle() -> None:
    graph = {path.stem: module_imports(path) for path in ADAPTER.glob("*.py")}
    assert {"adapter", "levers", "realtime", "outcomes"} <= set(graph)
    assert circles(graph) == set()


def test_a_circle_is_found() -> None:
    assert circles({"adapter": {"levers"}, "levers": {"adapter"}}) == {
        ("adapter", "levers", "adapter"),
        ("levers", "adapter", "levers"),
    }
