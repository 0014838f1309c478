"""The distribution is the library: a wheel built from the tree installs into a clean venv
and imports, and it carries the license, the type marker and what ``make demo`` needs,
not the test world.

Offline: the wheel is built without build isolation, installed with ``--no-deps`` and the
clean venv borrows this venv's site-packages for turnfsm's dependencies (only a plain
path: this venv's own ``.pth`` files, among them turnfsm's editable install, are not read
from there). About 8 s.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

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
    dist = tmp_path_factory.mktemp("dist")
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
    assert "turnfsm/adapters/sim/realtime/server.py" in names  # the simulated realtime model
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
    )
    shown = run(python, "-c", probe, cwd=tmp_path).stdout.splitlines()
    assert shown[0].startswith(str(venv)), shown  # the installed copy, not the tree's
    assert shown[1] == "True"  # the demo's recordings came along
