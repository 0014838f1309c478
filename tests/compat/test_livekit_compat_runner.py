"""``make livekit-compat`` itself, offline: what it runs is what it says it runs.

The real run needs a livekit/agents clone (network), so it is no part of ``make test``;
these tests build a tiny stand-in repository instead: a git history whose
``livekit-agents`` version moves, and a test file that builds an ``AgentSession``.
"""

from __future__ import annotations

import subprocess
from importlib.metadata import version
from pathlib import Path

import pytest
from compat import run_livekit_suite
from compat.run_livekit_suite import POLICIES, VERSION_FILE, export, pick_commit, run

SESSION_TEST = """
from livekit.agents import AgentSession
from turnfsm.adapters.livekit import adapter_for


async def test_a_session_is_built() -> None:
    session = AgentSession()
    assert adapter_for(session) is not None, "no turnfsm attached"
    assert adapter_for(session).controller.policy.first_speaker == "{first}"
"""


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def _commit_version(repo: Path, number: str) -> str:
    path = repo / VERSION_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'__version__ = "{number}"\n', encoding="utf-8")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", number)
    return _git(repo, "rev-parse", "HEAD")


@pytest.fixture
def mirror(tmp_path: Path) -> Path:
    repo = tmp_path / "agents"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "pyproject.toml").write_text("[tool.pytest.ini_options]\n", encoding="utf-8")
    tests = repo / "tests"
    tests.mkdir()
    (tests / "test_no_session.py").write_text("def test_x() -> None: ...\n", encoding="utf-8")
    return repo


def test_the_commit_of_the_installed_version_is_picked_else_head(mirror: Path) -> None:
    installed = version("livekit-agents")
    _commit_version(mirror, "0.0.1")
    wanted = _commit_version(mirror, installed)
    head = _commit_version(mirror, "999.0.0")
    assert pick_commit(mirror, None) == (wanted, f"the commit that set livekit-agents {installed}")
    assert pick_commit(mirror, head)[0] == head  # asked for

    other = mirror.parent / "other"
    other.mkdir()
    _git(other, "init", "-q")
    (other / "tests").mkdir()
    newest = _commit_version(other, "999.0.0")
    commit, why = pick_commit(other, None)
    assert commit == newest
    assert why.startswith("HEAD, livekit-agents 999.0.0: the installed")
    assert installed in why


@pytest.mark.parametrize("policy", POLICIES)
def test_every_session_gets_the_policys_controller(
    mirror: Path, tmp_path: Path, policy: str
) -> None:
    (mirror / "tests" / "test_session.py").write_text(
        SESSION_TEST.format(first="agent" if policy == "agent" else "user"), encoding="utf-8"
    )
    commit = _commit_version(mirror, "0.0.1")
    root, out = tmp_path / "export", tmp_path / "reports"
    root.mkdir()
    out.mkdir()
    files = export(mirror, commit, root)
    assert [f.name for f in files] == ["test_session.py"]  # only files that build a session
    # pytest-asyncio's auto mode, as LiveKit's pyproject sets it
    (root / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\nasyncio_mode = "auto"\n', encoding="utf-8"
    )
    results = run(root, files[0], policy, out)
    expected = "failed" if policy == "off" else "passed"  # off: nothing attached
    assert results == {"test_a_session_is_built": expected}


def test_a_test_that_hangs_fails_and_its_file_goes_on(
    mirror: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (mirror / "tests" / "test_hangs.py").write_text(
        "import time\n\n\n"
        "def test_hangs() -> None:  # as an AgentSession waiting for nothing\n"
        "    time.sleep(600)\n\n\n"
        "def test_after() -> None: ...\n",
        encoding="utf-8",
    )
    commit = _commit_version(mirror, "0.0.1")
    root, out = tmp_path / "export", tmp_path / "reports"
    root.mkdir()
    out.mkdir()
    (test_file,) = export(mirror, commit, root)
    monkeypatch.setattr(run_livekit_suite, "TEST_TIMEOUT", 2)
    assert run(root, test_file, "off", out) == {"test_hangs": "failed", "test_after": "passed"}


def test_only_a_lost_pass_is_a_regression() -> None:
    baseline = {
        "f::passes": "passed",
        "f::fails_in_both": "error",  # a task leaked by the test before it, at teardown
        "f::breaks": "passed",
        "g::in_a_hung_file": "passed",
    }
    attached = {
        "f::passes": "passed",
        "f::fails_in_both": "failed",
        "f::breaks": "failed",
        f"g::{run_livekit_suite.HUNG}": "error",
    }
    assert run_livekit_suite.regressions(baseline, attached) == ["f::breaks", "g::in_a_hung_file"]
    assert run_livekit_suite.regressions(baseline, baseline) == []


def test_a_mirror_that_is_no_repository_is_refused_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as refused:
        run_livekit_suite.main(["--mirror", str(tmp_path / "absent")])
    assert refused.value.code == 2
    assert f"--mirror {tmp_path / 'absent'}: not a git repository" in capsys.readouterr().err
