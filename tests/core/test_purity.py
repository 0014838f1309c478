"""``fsm/`` is pure: no LiveKit, no asyncio, no clock; and its doctests pass.

Purity is checked twice: statically (every import statement of every ``fsm/*.py``) and
at run time (a subprocess records every import a ``turnfsm`` module performs while the
package is imported and used, including modules already loaded by someone else, and
which LiveKit modules end up loaded at all).

One door leads out, on purpose: ``turnfsm.testing`` hands out the simulated-call helpers
of ``turnfsm.adapters.sim.testing`` (which run LiveKit) by name, importing them on first
use (a PEP 562 module ``__getattr__``), so that users find every testing tool in one
place. Importing and using ``turnfsm`` still loads no LiveKit; only asking
``turnfsm.testing`` for one of those names does. The door is checked to be the only one:
no other source of ``fsm/`` names the adapters, and ``testing.py`` names them only in that
``__getattr__`` and in imports for type checkers (never run).

The doctests run here rather than through ``--doctest-modules``: pytest would import
``fsm/x.py`` as ``fsm.x``, a second copy of the package beside ``turnfsm.x``, and any
doctest mixing the two (``isinstance`` across copies) fails for no real reason.
"""

from __future__ import annotations

import ast
import doctest
import importlib
import json
import pkgutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import turnfsm

FSM = Path(__file__).resolve().parents[2] / "fsm"
FORBIDDEN = {"livekit", "asyncio", "time", "datetime"}
"""Roots of modules the pure core must not import: LiveKit, an event loop, a clock."""

SOURCES = sorted(FSM.rglob("*.py"))


def imported_roots(path: Path) -> set[str]:
    """The top-level modules a source file imports (absolute imports only)."""
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            # relative imports must stay inside fsm/ (tools/ one level down): never up into
            # the adapters
            depth = len(path.relative_to(FSM).parts) if path.is_relative_to(FSM) else 1
            assert node.level <= depth, f"{path.name}: relative import above the package"
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "__import__":
            raise AssertionError(f"{path.name}: dynamic __import__")
    return roots


def test_the_sources_are_found() -> None:
    names = {path.name for path in SOURCES}
    assert {"machine.py", "rules.py", "controller.py", "trace.py"} <= names


@pytest.mark.parametrize("path", SOURCES, ids=lambda path: path.name)
def test_no_forbidden_import_statement(path: Path) -> None:
    assert not imported_roots(path) & FORBIDDEN


def test_the_static_check_can_fail(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import time as clock\nfrom datetime import datetime\n"
        "def f():\n    from livekit import rtc\n    import asyncio.tasks\n",
        encoding="utf-8",
    )
    assert imported_roots(bad) & FORBIDDEN == FORBIDDEN


def adapter_references(path: Path) -> list[str]:
    """Where a source of ``fsm/`` names the adapters, outside imports for type checkers:
    an import of ``.adapters...`` or a string naming ``turnfsm.adapters``, with the
    function it is in."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            node.body = []  # runs only for type checkers: no reference
        elif isinstance(body := getattr(node, "body", None), list):  # docstrings are prose
            node.body = [
                statement
                for statement in body
                if not (
                    isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
                )
            ]
    found = []
    for scope in ast.walk(tree):
        if not isinstance(scope, ast.Module | ast.FunctionDef):
            continue
        where = getattr(scope, "name", "<module>")
        for node in ast.walk(scope):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("adapters"):
                found.append(f"{where}: import .{node.module}")
            elif isinstance(node, ast.Constant) and "turnfsm.adapters" in str(node.value):
                found.append(f"{where}: {node.value!r}")
    return sorted(set(found))


def test_the_only_door_to_the_adapters_is_testings_lazy_names() -> None:
    doors = {path.name: adapter_references(path) for path in SOURCES}
    doors = {name: found for name, found in doors.items() if found}
    # the module-level strings are what testing's lazy __getattr__ imports (SIMULATED_CALLS)
    # and what `turnfsm fuzz` runs, imported when the command runs (FUZZ_RUNNER)
    assert doors == {
        "testing.py": ["<module>: 'turnfsm.adapters.sim.testing'"],
        "cli.py": ["<module>: 'turnfsm.adapters.sim.fuzz.runner:main'"],
    }
    cli = (FSM / "tools" / "cli.py").read_text(encoding="utf-8")
    assert cli.count("FUZZ_RUNNER") == 2  # defined, and imported in _fuzz only
    testing = (FSM / "testing.py").read_text(encoding="utf-8")
    assert testing.count("importlib.import_module(") == 1
    assert "return getattr(importlib.import_module(SIMULATED_CALLS), name)" in testing


def test_the_door_check_can_fail(tmp_path: Path) -> None:
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from .adapters.livekit import attach\n"
        "def f():\n    'Uses turnfsm.adapters.sim.'\n    from .adapters.sim import testing\n"
        "PATH = 'turnfsm.adapters.livekit'\n",
        encoding="utf-8",
    )
    assert adapter_references(sneaky) == [
        "<module>: 'turnfsm.adapters.livekit'",
        "<module>: import .adapters.sim",
        "f: import .adapters.sim",
    ]


def test_the_door_opens_only_when_a_helper_is_asked_for() -> None:
    """``import turnfsm.testing`` loads no LiveKit; ``turnfsm.testing.CallerLine`` is the
    adapters' own class, and loading it loads LiveKit."""
    probe = (
        "import json, sys\n"
        "import turnfsm.testing as testing\n"
        "before = any(name.startswith('livekit') for name in sys.modules)\n"
        "line = testing.CallerLine\n"
        "from turnfsm.adapters.sim import testing as simulated\n"
        "print(json.dumps([before, 'livekit.agents' in sys.modules,"
        " line is simulated.CallerLine, sorted(testing.FORWARDED - set(dir(testing)))]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert json.loads(result.stdout.splitlines()[-1]) == [False, True, True, []]


PROBE = r"""
import builtins, json, pkgutil, sys

offences = []
real_import = builtins.__import__

def recording_import(name, globals=None, locals=None, fromlist=(), level=0):
    importer = (globals or {}).get("__name__", "")
    if importer.startswith("turnfsm") and level == 0:
        if name.split(".")[0] in %(forbidden)r:
            offences.append([importer, name])
    return real_import(name, globals, locals, fromlist, level)

builtins.__import__ = recording_import
import turnfsm
for module in pkgutil.iter_modules(turnfsm.__path__, "turnfsm."):
    if not module.ispkg and not module.name.endswith("__main__"):
        __import__(module.name)

# exercise the code paths too: imports inside functions run only when called
from turnfsm import Trace, TurnController, TurnPolicy, events, replay
controller = TurnController(TurnPolicy(direction="outbound", greeting="Hi"), strict=True)
for event in (events.CallAnswered(at=0.0), events.UserTurnCommitted(at=1.0, text="Hi"),
              events.AgentSpeechCreated(at=1.1, speech_id="g"), events.CallEnded(at=2.0)):
    controller.handle(event)
replay(Trace.parse(controller.trace.to_jsonl().splitlines()))

livekit = sorted(name for name in sys.modules if name.split(".")[0] == "livekit")
print(json.dumps({"offences": offences, "livekit": livekit}))
"""


def test_importing_and_running_turnfsm_imports_nothing_forbidden() -> None:
    probe = PROBE % {"forbidden": sorted(FORBIDDEN)}
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    report = json.loads(result.stdout.splitlines()[-1])
    assert report == {"offences": [], "livekit": []}


def test_the_runtime_check_can_fail() -> None:
    """The probe sees an import made by a turnfsm module even if already loaded."""
    probe = PROBE % {"forbidden": ["json"]}  # json is loaded, and trace.py imports it
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    offences = json.loads(result.stdout.splitlines()[-1])["offences"]
    assert ["turnfsm.trace", "json"] in offences


# -- doctests ------------------------------------------------------------------------------


def turnfsm_modules() -> list[ModuleType]:
    names = [
        module.name
        for module in pkgutil.iter_modules(turnfsm.__path__, "turnfsm.")
        if not module.ispkg and not module.name.endswith("__main__")
    ]
    return [turnfsm, *(importlib.import_module(name) for name in sorted(names))]


def doctests(module: ModuleType) -> list[doctest.DocTest]:
    return [test for test in doctest.DocTestFinder().find(module) if test.examples]


WITH_DOCTESTS = [module for module in turnfsm_modules() if doctests(module)]


def test_the_documented_modules_have_doctests() -> None:
    names = {module.__name__ for module in WITH_DOCTESTS}
    assert {"turnfsm.controller", "turnfsm.policy", "turnfsm.testing"} <= names


@pytest.mark.parametrize("module", WITH_DOCTESTS, ids=lambda module: module.__name__)
def test_doctests_pass(module: ModuleType) -> None:
    output: list[str] = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in doctests(module):
        runner.run(test, out=output.append)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, "".join(output)
    assert result.attempted > 0
