"""Issue 18.6: turnfsm's pytest plugin in a user's own suite.

A project of its own (a temporary folder, its own ``conftest.py`` registering the plugin
as the README says) is run by pytest in a subprocess, in pytest-asyncio's default strict
mode: its ``turnfsm_call`` tests and ``virtual_clock``-marked tests run on the virtual
clock, its other async tests keep an ordinary event loop, and a failing call test reports
the call (its description, trace and timeline files).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from turnfsm import Trace

CONFTEST = 'pytest_plugins = ["turnfsm.adapters.sim.testing"]\n'

USER_TESTS = """
import asyncio

import pytest

from turnfsm import TurnPolicy
from turnfsm.adapters.livekit import TurnAgent
from turnfsm.adapters.sim.clock import VirtualClockLoop
from turnfsm.testing import CallerLine

pytestmark = pytest.mark.asyncio
POLICY = TurnPolicy(direction="outbound", greeting="Hi, this is Ada from Acme.")
HELLO = CallerLine("Hello?", at=0.5)


async def test_a_plain_async_test_keeps_an_ordinary_loop():
    assert type(asyncio.get_running_loop()) is not VirtualClockLoop


@pytest.mark.virtual_clock
async def test_a_marked_test_runs_on_the_virtual_clock():
    loop = asyncio.get_running_loop()
    start = loop.time()
    await asyncio.sleep(3600)
    assert isinstance(loop, VirtualClockLoop)
    assert loop.time() - start == 3600


async def test_a_call(turnfsm_call):
    assert isinstance(asyncio.get_running_loop(), VirtualClockLoop)
    call = await turnfsm_call(TurnAgent(instructions="x"), POLICY, caller=[HELLO])
    await call.run()
    call.expect.greeting_played_whole()
    assert call.history == [("user", "Hello?"), ("assistant", POLICY.greeting)]


async def test_a_failing_call(turnfsm_call):
    call = await turnfsm_call(TurnAgent(instructions="x"), POLICY, caller=[HELLO])
    await call.run()
    assert call.history == []
"""


def test_the_plugin_in_a_users_suite(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST, encoding="utf-8")
    (tmp_path / "test_agent.py").write_text(USER_TESTS, encoding="utf-8")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-rA",
            "--basetemp",
            str(tmp_path / "basetemp"),
            str(tmp_path),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = result.stdout
    assert "1 failed, 3 passed" in out, out + result.stderr
    assert "FAILED test_agent.py::test_a_failing_call" in out
    assert "asyncio: mode=Mode.STRICT" in out  # pytest-asyncio's default mode
    # the failing test's report shows its call, and where its trace and timeline are
    section = out.split("turnfsm call 0", 1)[1]
    assert "caller   0.5" in section
    assert "awaiting_user->greeting UserTranscript" in section
    assert "history: user: 'Hello?'" in section
    timeline = Path(section.split("timeline: ", 1)[1].split()[0])
    trace = Path(section.split("trace: ", 1)[1].split()[0])
    assert timeline.read_text(encoding="utf-8").startswith("<svg")
    steps = list(Trace.read(trace))
    assert ("awaiting_user", "user_transcript", "greeting") in [
        (step.before, step.event.name, step.after) for step in steps
    ]
