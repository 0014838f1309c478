"""Issue 22: each extra installs what its code imports, and names nothing that code does not.

``pip install 'turnfsm[livekit]'`` is for embedding the adapter: it must not pull the
examples' model plugins (the OpenAI plugin, silero and its ONNX runtime). Read from the
source (every ``import`` an extra's code holds, but those under ``try ... except
ImportError``, which the code does without) and from the installed distributions' own
file lists and requirements, so an import nobody installs, or a requirement nobody
imports, is named.
"""

from __future__ import annotations

import ast
import importlib.metadata
import subprocess
import sys
from collections.abc import Iterable, Iterator
from functools import cache
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]

EXTRA_CODE = {
    "livekit": ROOT / "adapters" / "livekit",
    "sim": ROOT / "adapters" / "sim",
    "examples": ROOT / "examples",
    "test": ROOT / "tests",
}
"""The code each extra is for."""

MODULE_EXTRAS = ("livekit", "sim", "examples")
"""The extras whose every requirement is a library that code imports (the test extra also
names tools: pytest's plugins, ruff, mypy)."""


def project() -> dict[str, list[str]]:
    """The base dependencies (key ``""``) and each extra's, as pyproject.toml has them."""
    table = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return {"": table["dependencies"], **table["optional-dependencies"]}


def _catches_import_error(node: ast.Try) -> bool:
    names = {"ImportError", "ModuleNotFoundError"}
    return any(
        isinstance(handler.type, ast.Name) and handler.type.id in names
        for handler in node.handlers
    )


def _imports(tree: ast.AST, *, optional: bool = False) -> Iterator[tuple[str, bool]]:
    """(module, optional) for every import under ``tree``; ``optional`` under a ``try``
    that catches ImportError. ``from a import b`` yields ``a.b`` (b may be a module)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Import):
            yield from ((alias.name, optional) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield from ((f"{node.module}.{alias.name}", optional) for alias in node.names)
        if isinstance(node, ast.Try) and _catches_import_error(node):
            for child in node.body:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), optional=True)
            for part in (*node.handlers, *node.orelse, *node.finalbody):
                yield from _imports(part, optional=optional)
        else:
            yield from _imports(node, optional=optional)


OWN_PACKAGES = frozenset(path.parent.name for path in ROOT.glob("*/__init__.py"))
"""The repository's own top-level packages (``benchmarks``, whose code-reading helpers a
test shares): code of the project, never a requirement."""


def third_party_imports(folder: Path) -> dict[str, bool]:
    """Each module the code in ``folder`` imports from outside the standard library,
    turnfsm, the repository's own packages and the folder itself, and whether it is
    optional there."""
    files = list(folder.rglob("*.py"))
    folders = {path.name for path in folder.rglob("*") if path.is_dir()}
    local = {path.stem for path in files} | folders | OWN_PACKAGES
    found: dict[str, bool] = {}
    for path in files:
        for module, optional in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            top = module.split(".")[0]
            if top in sys.stdlib_module_names or top in local or top == "turnfsm":
                continue
            found[module] = found.get(module, True) and optional
    return found


@cache
def module_files() -> dict[str, tuple[str, ...]]:
    """Each installed distribution's files (posix paths relative to site-packages)."""
    files = {}
    for dist in importlib.metadata.distributions():
        name = canonicalize_name(dist.metadata["Name"])
        if name != "turnfsm":
            files[name] = tuple(str(file).replace("\\", "/") for file in dist.files or ())
    return files


def provider(module: str) -> str | None:
    """The distribution that installs ``module`` (or, for ``a.b`` where ``b`` is a name in
    module ``a``, the one that installs ``a``); None when none does (several installing
    under a name make it a namespace package, such as ``livekit.plugins``)."""
    parts = module.split(".")
    for length in range(len(parts), 0, -1):
        path = "/".join(parts[:length])
        owners = {
            name
            for name, files in module_files().items()
            if any(
                file == f"{path}.py"
                or file.startswith(f"{path}/")
                or (file.startswith(f"{path}.") and file.endswith((".so", ".pyd")))
                for file in files
            )
        }
        if owners:
            return owners.pop() if len(owners) == 1 else None
    return None


def applies(requirement: Requirement, extras: Iterable[str] = ("",)) -> bool:
    """Whether ``requirement`` is installed here, asked with ``extras``."""
    marker = requirement.marker
    return marker is None or any(marker.evaluate({"extra": extra}) for extra in extras)


def closure(requirements: Iterable[str], extras: dict[str, list[str]]) -> set[str]:
    """Every distribution ``requirements`` install, ``turnfsm[x]`` read from ``extras``."""
    installed: set[str] = set()
    todo = [Requirement(text) for text in requirements]
    todo = [requirement for requirement in todo if applies(requirement)]
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in installed:
            continue
        if name == "turnfsm":
            for extra in requirement.extras:
                own = (Requirement(text) for text in extras[extra])
                todo.extend(needed for needed in own if applies(needed))
            continue
        installed.add(name)
        wanted = {"", *requirement.extras}
        for text in importlib.metadata.distribution(name).requires or ():
            needed = Requirement(text)
            if applies(needed, wanted):
                todo.append(needed)
    return installed


@pytest.mark.parametrize("extra", MODULE_EXTRAS)
def test_an_extra_names_only_what_its_code_imports(extra: str) -> None:
    extras = project()
    imported = {provider(module) for module in third_party_imports(EXTRA_CODE[extra])}
    named = {
        canonicalize_name(Requirement(text).name)
        for text in extras[extra]
        if canonicalize_name(Requirement(text).name) != "turnfsm"
    }
    assert named - imported == set(), f"turnfsm[{extra}] names what its code never imports"


@pytest.mark.parametrize("extra", list(EXTRA_CODE))
def test_an_extra_installs_everything_its_code_imports(extra: str) -> None:
    extras = project()
    installs = closure([*extras[""], *extras[extra]], extras)
    needed = {
        module: provider(module)
        for module, optional in third_party_imports(EXTRA_CODE[extra]).items()
        if not optional
    }
    missing = {module: dist for module, dist in needed.items() if dist not in installs}
    assert missing == {}, f"turnfsm[{extra}] does not install what its code imports"


def test_the_livekit_extra_leaves_the_model_plugins_out() -> None:
    """The measured point of the split: embedding the adapter pulls no model plugin."""
    extras = project()
    installs = closure([*extras[""], *extras["livekit"]], extras)
    plugins = {"livekit-plugins-openai", "livekit-plugins-silero", "onnxruntime"}
    assert installs & plugins == set()
    assert plugins <= closure([*extras[""], *extras["examples"]], extras)


UNINSTALLED = """
import importlib.abc, sys

class Uninstalled(importlib.abc.MetaPathFinder):
    # what Python raises for a distribution that is not installed
    def find_spec(self, name, path=None, target=None):
        if name == {blocked!r} or name.startswith({blocked!r} + "."):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Uninstalled())
try:
    {statement}
except ImportError as error:
    print(type(error).__name__, error, sep=": ")
else:
    print("imported")
"""


def import_without(blocked: str, statement: str) -> str:
    """What ``statement`` prints in a fresh interpreter where ``blocked`` (and every module
    under it) is not installed: ``imported``, or the ImportError's type and message."""
    code = UNINSTALLED.format(blocked=blocked, statement=statement)
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return result.stdout.strip()


@pytest.mark.parametrize(
    "statement",
    ["import turnfsm.adapters.livekit", "from turnfsm.adapters.livekit.job import hang_up_room"],
)
def test_the_adapter_without_livekit_says_which_extra_to_install(statement: str) -> None:
    shown = import_without("livekit", statement)
    assert shown == (
        "ImportError: turnfsm.adapters.livekit needs LiveKit Agents (livekit.agents), which "
        "is not installed: pip install 'turnfsm[livekit]'"
    )


def test_the_simulated_call_without_silero_says_which_extra_to_install() -> None:
    shown = import_without("livekit.plugins.silero", "import turnfsm.adapters.sim")
    assert shown == (
        "ImportError: turnfsm.adapters.sim needs LiveKit's silero plugin "
        "(livekit.plugins.silero), which is not installed: pip install 'turnfsm[sim]'"
    )
    # the adapter itself does without it
    shown = import_without("livekit.plugins.silero", "import turnfsm.adapters.livekit")
    assert shown == "imported"


def test_the_core_imports_without_livekit() -> None:
    assert (
        import_without("livekit", "import turnfsm, turnfsm.tools.cli, turnfsm.tools.report")
        == "imported"
    )


def test_a_module_no_extra_installs_is_not_blamed_on_the_extra() -> None:
    """A broken LiveKit install (a dependency of its own missing) keeps Python's message."""
    shown = import_without("numpy", "import turnfsm.adapters.livekit")
    assert shown == "ModuleNotFoundError: No module named 'numpy'"
