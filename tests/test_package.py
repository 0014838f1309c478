"""The distribution is the library: a wheel built from the tree installs into a clean venv
and imports, and it carries the license, the type marker and what ``make demo`` needs,
not the test world. The sdist is the repository (issue 22: examples, tests, the Makefile),
and builds the same wheel. The metadata says the version, links and Pythons truly.

Offline: the wheel is built without build isolation, installed with ``--no-deps`` and the
clean venv borrows this venv's site-packages for turnfsm's dependencies (only a plain
path: this venv's own ``.pth`` files, among them turnfsm's editable install, are not read
from there). About 8 s.
"""

from __future__ import annotations

import ast
import email.message
import email.parser
import importlib.util
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest
import tomllib
from packaging.specifiers import SpecifierSet
from packaging.version import Version

import turnfsm

ROOT = Path(__file__).resolve().parents[1]

DEMO_LINES = {"hello", "long_overlap", "question", "stop"}
"""The recorded callee lines ``make demo`` plays."""


def run(*command: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(part) for part in command],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=cwd,
    )
    assert result.returncode == 0, f"{command}:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A wheel built from a copy of the tree (the build writes beside its sources), and
    the build's output."""
    tree = tmp_path_factory.mktemp("tree")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, tree / name)
    for folder in ("fsm", "adapters"):
        shutil.copytree(ROOT / folder, tree / folder, ignore=shutil.ignore_patterns("__pycache__"))
    return build_wheel(tree, tmp_path_factory.mktemp("dist"))


def build_wheel(tree: Path, dist: Path) -> tuple[Path, str]:
    """The wheel pip builds from the sources in ``tree``, offline, and the build's output."""
    build = run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-index",
        "--no-build-isolation",
        "--wheel-dir",
        dist,
        tree,
    )
    (built,) = dist.glob("turnfsm-*.whl")
    return built, build.stdout + build.stderr


def wheel_files(built: Path) -> set[str]:
    with zipfile.ZipFile(built) as archive:
        return {name for name in archive.namelist() if ".dist-info/" not in name}


NOT_SHIPPED = {".ci/run", ".gitignore"}
"""Repository files the sdist leaves out: the CI entry and git's own."""

GENERATED = re.compile(r"PKG-INFO|setup\.cfg|turnfsm\.egg-info/.*")
"""What the sdist build adds."""


def repository_files() -> set[str]:
    """The files git tracks (the sdist is compared with the repository it came from)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if listed.returncode != 0:
        pytest.skip("not a git checkout: the sdist is compared with the repository's files")
    return set(filter(None, listed.stdout.split("\0")))


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist built from a copy of the repository's files, unpacked. The copy also
    holds what a developer's tree may: a ``.env`` with keys, bytecode."""
    tree = tmp_path_factory.mktemp("checkout")
    for name in repository_files():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tree / name)
    (tree / ".env").write_text("LIVEKIT_API_SECRET=not-for-the-sdist\n")
    (tree / "examples" / ".env").write_text("OPENAI_API_KEY=not-for-the-sdist\n")
    (tree / "tests" / "__pycache__").mkdir(exist_ok=True)
    (tree / "tests" / "__pycache__" / "conftest.cpython-311.pyc").write_bytes(b"")
    dist = tmp_path_factory.mktemp("sdist")
    build = "from setuptools import build_meta; print(build_meta.build_sdist({!r}))"
    name = run(sys.executable, "-c", build.format(str(dist)), cwd=tree).stdout.split()[-1]
    unpacked = tmp_path_factory.mktemp("unpacked")
    with tarfile.open(dist / name) as archive:
        archive.extractall(unpacked, filter="data")
    (top,) = unpacked.iterdir()
    return top


def test_the_sdist_is_the_repository(sdist: Path) -> None:
    """Examples, tests, benchmarks, diagrams, the Makefile and the changelog: what
    ``make demo``, ``make test`` and the README's links need; never a ``.env``."""
    shipped = {path.relative_to(sdist).as_posix() for path in sdist.rglob("*") if path.is_file()}
    assert {name for name in shipped if not GENERATED.fullmatch(name)} == (
        repository_files() - NOT_SHIPPED
    )
    assert {"examples/.env.example", "Makefile", "CHANGELOG.md"} <= shipped


def test_the_sdist_builds_the_same_wheel(
    sdist: Path, wheel: tuple[Path, str], tmp_path: Path
) -> None:
    """What pip installs from the sdist is what it installs from the tree."""
    from_sdist, _ = build_wheel(sdist, tmp_path)
    assert wheel_files(from_sdist) == wheel_files(wheel[0])


def test_the_build_prints_no_warning(wheel: tuple[Path, str]) -> None:
    _, output = wheel
    assert "warning" not in output.lower(), output


def test_the_wheel_holds_the_library_license_and_type_marker_not_the_test_world(
    wheel: tuple[Path, str],
) -> None:
    built, _ = wheel
    with zipfile.ZipFile(built) as archive:
        names = set(archive.namelist())
        metadata = archive.read("turnfsm-0.1.0.dist-info/METADATA").decode()
    assert "License-Expression: Apache-2.0" in metadata
    assert "turnfsm-0.1.0.dist-info/licenses/LICENSE" in names
    assert {"turnfsm/py.typed", "turnfsm/adapters/py.typed"} <= names
    assert "turnfsm/adapters/livekit/__init__.py" in names
    assert "turnfsm/adapters/sim/demo.py" in names
    wavs = {Path(name).stem for name in names if name.endswith(".wav")}
    assert wavs == DEMO_LINES  # the demo's lines, not the ones only tests play
    assert not [name for name in names if "make_audio" in name or name.startswith("tests/")]


def test_the_wheel_installs_and_imports_in_a_clean_venv(
    wheel: tuple[Path, str], tmp_path: Path
) -> None:
    built, _ = wheel
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    run(sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", built)
    clean_site = run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    # turnfsm's dependencies, from this venv's site-packages, after the clean venv's own
    Path(clean_site.stdout.strip(), "dependencies.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n"
    )
    probe = (
        "import turnfsm, turnfsm.adapters.livekit, turnfsm.adapters.sim.demo\n"
        "from turnfsm.adapters.sim.speech import LINES\n"
        "print(turnfsm.__file__)\n"
        "print(all(line.path.exists() for line in LINES.values()))\n"
        "print(turnfsm.__version__)\n"
    )
    shown = run(python, "-c", probe, cwd=tmp_path).stdout.splitlines()
    assert shown[0].startswith(str(venv)), shown  # the installed copy, not the tree's
    assert shown[1] == "True"  # the demo's recordings came along
    version = wheel_metadata(built)["Version"]
    assert shown[2] == version  # turnfsm.__version__ is the distribution's
    cli = run(python, "-m", "turnfsm", "--version", cwd=tmp_path).stdout
    assert cli == f"turnfsm {version}\n"


def wheel_metadata(built: Path) -> email.message.Message:
    with zipfile.ZipFile(built) as archive:
        (name,) = [name for name in archive.namelist() if name.endswith(".dist-info/METADATA")]
        return email.parser.Parser().parsestr(archive.read(name).decode())


def oldest_python(requires: SpecifierSet) -> Version:
    return next(Version(f"3.{minor}") for minor in range(40) if f"3.{minor}" in requires)


def test_the_wheel_names_its_links_and_classifiers(wheel: tuple[Path, str]) -> None:
    """What an index shows beside the name: where the source, issues and changes are, and
    which Pythons it runs on (exactly the versions Requires-Python allows, oldest first)."""
    metadata = wheel_metadata(wheel[0])
    links = dict(link.split(", ", 1) for link in metadata.get_all("Project-URL", []))
    assert set(links) == {"Homepage", "Source", "Issues", "Changelog"}
    source = links["Source"]
    assert links["Changelog"] == f"{source}/blob/main/CHANGELOG.md"
    assert links["Issues"] == f"{source}/issues"
    classifiers = metadata.get_all("Classifier", [])
    assert {"Typing :: Typed", "Programming Language :: Python :: 3 :: Only"} <= set(classifiers)
    assert "Topic :: Communications :: Telephony" in classifiers
    pythons = [
        Version(classifier.rsplit(" :: ", 1)[1])
        for classifier in classifiers
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", classifier)
    ]
    requires = SpecifierSet(metadata["Requires-Python"])
    assert pythons
    assert all(str(python) in requires for python in pythons)
    assert min(pythons) == oldest_python(requires)


def test_the_changelog_starts_with_this_version() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    newest = re.search(r"^## \[([^\]]+)\]", changelog, flags=re.M)
    assert newest is not None, "CHANGELOG.md has no version heading"
    assert newest.group(1) == turnfsm.__version__


def stdlib_since() -> dict[str, Version]:
    """Each standard-library module and the Python that brought it (typeshed's table, as
    mypy ships it)."""
    spec = importlib.util.find_spec("mypy")
    assert spec is not None
    assert spec.submodule_search_locations is not None
    table = Path(spec.submodule_search_locations[0], "typeshed", "stdlib", "VERSIONS")
    since = {}
    for line in table.read_text(encoding="utf-8").splitlines():
        entry = line.split("#")[0].strip()
        if entry:
            module, versions = entry.split(":")
            since[module.strip()] = Version(versions.strip().split("-")[0])
    return since


def test_the_library_imports_no_module_newer_than_its_oldest_python() -> None:
    """Requires-Python promises the oldest Python: every module-level import of the
    library must exist there (an import under a version check is the way to differ)."""
    requires = SpecifierSet(
        tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
            "requires-python"
        ]
    )
    oldest = oldest_python(requires)
    since = stdlib_since()
    too_new = set()
    for path in [*(ROOT / "fsm").rglob("*.py"), *(ROOT / "adapters").rglob("*.py")]:
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                parts = name.split(".")
                for length in range(1, len(parts) + 1):
                    module = ".".join(parts[:length])
                    if module in since and since[module] > oldest:
                        too_new.add(f"{path.relative_to(ROOT)}: {module} ({since[module]})")
    assert too_new == set(), f"Python {oldest} lacks them"
