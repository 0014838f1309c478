"""Run LiveKit's own AgentSession tests with turnfsm attached, and count them per file.

``make livekit-compat LIVEKIT_MIRROR=path/to/livekit-agents.git [LIVEKIT_COMMIT=rev]``

The livekit/agents repository (a clone, or a bare mirror) is read, never copied here:
its ``tests/`` folder and ``pyproject.toml`` (pytest's settings and markers) are exported
with ``git archive`` at the commit whose ``livekit-agents`` version is the installed one,
or at ``LIVEKIT_COMMIT``, or at the newest commit when the installed version is not in
its history (said so). Every test file that builds an ``AgentSession`` is then run on its
own, three times: without turnfsm, and with the plugin :mod:`turnfsm_livekit_compat`
attaching a controller to every session under each policy (``transparent``: the caller
speaks first, turnfsm says nothing; ``agent``: the agent's own first speech is the
greeting). The table gives passed / failed / errors per file and run, then every test
whose result differs from the run without turnfsm, and the warnings turnfsm logged. A test
that hangs fails after ``TEST_TIMEOUT`` seconds and its file goes on.

Exit status: 0 when every test that passes without turnfsm passes in the transparent run
too, else 1 (each such test is listed as a regression). A test that does not pass without
turnfsm judges nothing: its failure or teardown error may change with turnfsm attached
(LiveKit's own tests leak tasks from one test into the next one's teardown), and that
change is listed, not counted.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ElementTree
from importlib.metadata import version
from pathlib import Path

POLICIES = ("off", "transparent", "agent")
VERSION_FILE = "livekit-agents/livekit/agents/version.py"
BUILDS_A_SESSION = re.compile(r"AgentSession|create_session|fake_session")
SKIPPED = ("test_plugin_", "test_ipc.py")
"""Provider plugins (need keys), and job processes (minutes of real time, no session)."""
PLUGIN_DIR = Path(__file__).resolve().parent
TEST_TIMEOUT = 120
"""Seconds before one test counts as hung (LiveKit's tests run on a virtual clock: a few
seconds each)."""
FILE_TIMEOUT = 1800
HUNG = "(the file hung: no report)"
"""The result of a file whose run was stopped, or left no report."""

Outcome = str
"""``passed``, ``failed``, ``error`` (at setup or teardown) or ``skipped``."""


def git(mirror: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(mirror), *args], check=True, capture_output=True, text=True
    ).stdout


def pick_commit(mirror: Path, wanted: str | None) -> tuple[str, str]:
    """The commit to test at, and why it was chosen."""
    if wanted:
        return git(mirror, "rev-parse", wanted).strip(), f"{wanted}, as asked"
    installed = version("livekit-agents")
    found = git(
        mirror,
        "log",
        "--all",
        "--format=%H",
        "-S",
        f'__version__ = "{installed}"',
        "--",
        VERSION_FILE,
    ).split()
    if found:
        return found[-1], f"the commit that set livekit-agents {installed}"
    head = git(mirror, "rev-parse", "HEAD").strip()
    newest = re.search(r'__version__ = "([^"]+)"', git(mirror, "show", f"HEAD:{VERSION_FILE}"))
    at_head = newest.group(1) if newest else "?"
    return head, (
        f"HEAD, livekit-agents {at_head}: the installed {installed} is not in this "
        "snapshot's history (tests written for another version fail with and without "
        "turnfsm alike)"
    )


def export(mirror: Path, commit: str, into: Path) -> list[Path]:
    """Export the tests at ``commit``; the files that build a session."""
    archive = into / "tests.tar"
    with archive.open("wb") as out:
        subprocess.run(
            ["git", "-C", str(mirror), "archive", commit, "tests", "pyproject.toml"],
            check=True,
            stdout=out,
        )
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return sorted(
        path
        for path in (into / "tests").glob("test_*.py")
        if not path.name.startswith(SKIPPED)
        and path.name not in SKIPPED
        and BUILDS_A_SESSION.search(path.read_text(encoding="utf-8"))
    )


def run(root: Path, test_file: Path, policy: str, out: Path) -> dict[str, Outcome]:
    """Run one file under ``policy``; each test's outcome."""
    report = out / f"{policy}-{test_file.stem}.xml"
    env = {
        **os.environ,
        "TURNFSM_COMPAT_POLICY": policy,
        "TURNFSM_COMPAT_WARNINGS": str(out / f"{policy}-warnings.tsv"),
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(PLUGIN_DIR), os.environ.get("PYTHONPATH")])
        ),
    }
    command = [
        sys.executable,
        "-m",
        "pytest",
        str(test_file.relative_to(root)),
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "turnfsm_livekit_compat",
        # a source excerpt of a deep traceback can crash pytest's reporting on 3.11
        "--tb=native",
        # a test that hangs fails (pytest-timeout, from the test extra) and the file goes on
        "-o",
        f"timeout={TEST_TIMEOUT}",
        f"--junitxml={report}",
    ]
    try:
        subprocess.run(command, cwd=root, env=env, capture_output=True, timeout=FILE_TIMEOUT)
    except subprocess.TimeoutExpired:
        return {HUNG: "error"}
    return outcomes(report) if report.exists() else {HUNG: "error"}


def outcomes(report: Path) -> dict[str, Outcome]:
    found: dict[str, Outcome] = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        tags = {child.tag for child in case}
        name = case.get("name", "?")
        if "error" in tags:  # a teardown error follows the test's own result
            found[name] = "error"
        elif "failure" in tags:
            found[name] = "failed"
        elif "skipped" in tags:
            found[name] = "skipped"
        else:
            found[name] = found.get(name, "passed")
    return found


def counts(results: dict[str, Outcome]) -> str:
    tally = collections.Counter(results.values())
    return f"{tally['passed']}/{len(results)} F{tally['failed']} E{tally['error']}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirror", type=Path, required=True, help="livekit/agents git dir")
    parser.add_argument("--commit", help="the commit to test at (default: see above)")
    parser.add_argument("--only", nargs="*", default=(), help="test file names to run")
    args = parser.parse_args(argv)
    inside = subprocess.run(
        ["git", "-C", str(args.mirror), "rev-parse", "--git-dir"], capture_output=True, text=True
    )
    if inside.returncode != 0:
        parser.error(f"--mirror {args.mirror}: not a git repository ({inside.stderr.strip()})")
    commit, why = pick_commit(args.mirror, args.commit)
    print(f"LiveKit's tests at {commit[:12]} ({why}); livekit-agents {version('livekit-agents')}")
    with tempfile.TemporaryDirectory(prefix="livekit-compat-") as folder:
        root, out = Path(folder), Path(folder) / "reports"
        out.mkdir()
        files = [
            f for f in export(args.mirror, commit, root) if not args.only or f.name in args.only
        ]
        results = {policy: {} for policy in POLICIES}
        print(f"{'file':<46}" + "".join(f"{policy:>22}" for policy in POLICIES))
        for test_file in files:
            row = {policy: run(root, test_file, policy, out) for policy in POLICIES}
            for policy in POLICIES:
                results[policy][test_file.stem] = row[policy]
            print(f"{test_file.stem:<46}" + "".join(f"{counts(row[p]):>22}" for p in POLICIES))
        merged = {
            policy: {f"{f}::{t}": o for f, tests in per_file.items() for t, o in tests.items()}
            for policy, per_file in results.items()
        }
        print(f"{'all':<46}" + "".join(f"{counts(merged[p]):>22}" for p in POLICIES))
        for policy in POLICIES[1:]:
            for test, outcome in sorted(merged[policy].items()):
                before = merged["off"].get(test, "missing")
                if outcome != before:
                    print(f"{policy}: {test}: {before} -> {outcome}")
            warned = out / f"{policy}-warnings.tsv"
            if warned.exists():
                lines = warned.read_text(encoding="utf-8").splitlines()
                messages = collections.Counter(line.split("\t", 1)[1] for line in lines)
                for message, times in messages.most_common():
                    print(f"{policy}: turnfsm warned {times}x: {message}")
    lost = regressions(merged["off"], merged["transparent"])
    for test in lost:
        print(f"regression: {test} passes without turnfsm, not with it (transparent)")
    return 1 if lost else 0


def regressions(baseline: dict[str, Outcome], attached: dict[str, Outcome]) -> list[str]:
    """The tests that pass without turnfsm and not with it attached: what turnfsm broke.
    (A file that hung with turnfsm has no test results: each of its passes is lost.)"""
    return sorted(
        test
        for test, outcome in baseline.items()
        if outcome == "passed" and attached.get(test) != "passed"
    )


if __name__ == "__main__":
    sys.exit(main())
