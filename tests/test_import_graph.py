"""Issue 12, point 3 and issue 21, point 3: the LiveKit adapter's modules import each
other without a circle, and none imports the adapter back.

Read from the source, every ``from .x import`` line anywhere in a module: at module level,
under ``TYPE_CHECKING`` and inside functions alike (a type-only import is an edge too), so
a circle is named even where Python's import order happens to tolerate it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ADAPTER = Path(__file__).resolve().parents[1] / "adapters" / "livekit"


def module_imports(path: Path) -> set[str]:
    """The sibling modules ``path`` imports, anywhere (type-only and local imports too)."""
    imported: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
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


EMBEDDING = {"agent", "job", "sip", "__init__"}
"""The modules above the adapter: the embedding's entry points, which the adapter never
imports (they may import it)."""


def test_only_the_embedding_imports_the_adapter() -> None:
    graph = {path.stem: module_imports(path) for path in ADAPTER.glob("*.py")}
    importers = {module for module, imported in graph.items() if "adapter" in imported}
    assert importers <= EMBEDDING
    assert not graph["adapter"] & EMBEDDING


def test_a_type_only_import_is_an_edge(tmp_path: Path) -> None:
    module = tmp_path / "levers.py"
    module.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .adapter import X\n"
        "def f():\n    from . import realtime\n",
        encoding="utf-8",
    )
    assert module_imports(module) == {"adapter", "realtime"}


def test_a_circle_is_found() -> None:
    assert circles({"adapter": {"levers"}, "levers": {"adapter"}}) == {
        ("adapter", "levers", "adapter"),
        ("levers", "adapter", "levers"),
    }
