"""Issue 21, points 1 and 3: a lever reads only its effect, the port and its site.

Read from the source of the lever modules (:mod:`.levers`, :mod:`.realtime_levers`) and of
the port they receive: none imports the adapter, the dispatcher or the controller, none
reaches for a ``controller``, ``adapter`` or ``dispatcher`` attribute, and no annotation
there names them; every lever the dispatcher runs takes ``(port, effect, site)``. Across
the adapter's modules, no private name one module defines is used from another.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

pytest.importorskip("livekit.agents")

from turnfsm import effects as fx  # noqa: E402
from turnfsm.adapters.livekit.levers import LEVERS  # noqa: E402
from turnfsm.adapters.livekit.port import LeverPort, Site  # noqa: E402
from turnfsm.adapters.livekit.realtime_levers import RealtimeLevers  # noqa: E402

ADAPTER = Path(__file__).resolve().parents[1] / "adapters" / "livekit"
LEVER_MODULES = ("levers", "realtime_levers", "port")
FORBIDDEN = {"controller", "adapter", "dispatcher", "TurnAdapter", "TurnController", "Dispatcher"}
FORBIDDEN_MODULES = {"adapter", "dispatch", "controller", "turnfsm.controller"}


def reaches(source: str) -> list[str]:
    """Where ``source`` reaches for the controller, the adapter or the dispatcher."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            names = {alias.name for alias in node.names}
            if module.split(".")[-1] in FORBIDDEN_MODULES or names & FORBIDDEN:
                found.append(f"line {node.lineno}: imports {module or names}")
        elif isinstance(node, ast.Attribute) and node.attr in FORBIDDEN:
            found.append(f"line {node.lineno}: .{node.attr}")
        elif isinstance(node, ast.arg) and node.annotation is not None:
            named = {n.id for n in ast.walk(node.annotation) if isinstance(n, ast.Name)}
            text = ast.unparse(node.annotation)
            if named & FORBIDDEN or any(word in text for word in FORBIDDEN if word[0].isupper()):
                found.append(f"line {node.lineno}: {node.arg}: {text}")
    return found


@pytest.mark.parametrize("module", LEVER_MODULES)
def test_a_lever_never_reaches_for_the_controller_or_the_adapter(module: str) -> None:
    assert reaches((ADAPTER / f"{module}.py").read_text(encoding="utf-8")) == []


def test_the_check_finds_a_lever_that_reads_the_controller() -> None:
    source = (
        "from .adapter import TurnAdapter\n"
        "def hold(port: TurnAdapter, effect, site):\n"
        "    return port.controller.state\n"
    )
    assert len(reaches(source)) == 3


def _takes_port_effect_site(lever: object) -> bool:
    parameters = list(inspect.signature(lever).parameters.values())  # type: ignore[arg-type]
    return [p.name for p in parameters] == ["port", "effect", "site"]


def test_every_lever_takes_the_port_its_effect_and_its_site() -> None:
    assert {
        kind: lever for kind, lever in LEVERS.items() if not _takes_port_effect_site(lever)
    } == {}
    realtime = RealtimeLevers(None, None)  # type: ignore[arg-type]  # (only its table)
    assert set(realtime.levers) <= set(fx.EFFECT_TYPES)
    assert [
        lever for lever in realtime.levers.values() if not _takes_port_effect_site(lever)
    ] == []
    assert inspect.signature(LEVERS[fx.Say]).parameters["port"].annotation in (
        "LeverPort",
        LeverPort,
    )
    assert inspect.signature(LEVERS[fx.Say]).parameters["site"].annotation in ("Site", Site)


def private_definitions(tree: ast.AST) -> set[str]:
    """The private names a module defines: its functions, methods, classes and the
    attributes its classes set on ``self``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
            and isinstance(node.ctx, ast.Store)
        ):
            names.add(node.attr)
    return {name for name in names if name.startswith("_") and not name.startswith("__")}


def private_uses(tree: ast.AST) -> dict[str, int]:
    """The private attributes a module reads on anything but ``self``, with a line."""
    return {
        node.attr: node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
    }


def test_no_module_uses_another_modules_private_names() -> None:
    trees = {
        path.stem: ast.parse(path.read_text(encoding="utf-8")) for path in ADAPTER.glob("*.py")
    }
    defined = {module: private_definitions(tree) for module, tree in trees.items()}
    crossings = [
        f"{module}:{line} uses {name} of {owner}"
        for module, tree in trees.items()
        for name, line in private_uses(tree).items()
        if name not in defined[module]
        for owner, names in defined.items()
        if owner != module and name in names
    ]
    assert crossings == []
