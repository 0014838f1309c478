"""Shared pytest glue: a ``summary_line`` fixture whose lines are shown after the run.

Property and exploration tests record what they covered (examples, steps,
configurations), so that ``make test`` shows how much was checked, not only that it passed.
The suite runs on two pytest-xdist workers (``addopts`` in pyproject.toml): each worker
sends its lines to the controller, which prints them all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis.internal.conjecture import providers as hypothesis_providers
from hypothesis.internal.constants_ast import Constants

from turnfsm.adapters.sim.clock import VirtualClockLoop
from turnfsm.adapters.sim.session import remember_speaking_rates
from turnfsm.adapters.sim.speech import add_lines

from support.lines import TEST_LINES

add_lines(*TEST_LINES)  # the callee lines only the tests play, beside the demo's
# every TranscriptSynchronizer of the tests (the realtime calls' and RoomIO's too, not only
# SimulatedCall's) estimates the agent's speaking rate from memory: LiveKit's own
# estimates, made once per distinct second of audio (the scripted voices repeat)
remember_speaking_rates()

_NO_LOCAL_CONSTANTS = Constants()


@pytest.fixture(autouse=True, scope="session")
def hypothesis_draws_ignore_what_the_process_imported() -> Iterator[None]:
    """Derandomized hypothesis tests draw the same in any order, worker and process.

    Hypothesis returns, on about one integer, float or string draw in twenty, a literal
    found in the source of the local modules imported so far in the process (turnfsm's,
    the report's, the examples'...; not test files). Which files ran before in the same
    xdist worker decided that pool, so a fixed (derandomized) search drew other calls: the
    state machine of test_stateful_calls took other moves, and the tool-cap bug of
    test_seeded_bugs was found after 268 calls or after 2,079. Hypothesis has no setting
    for it: its private pool is emptied (a rename there fails every test, loudly).
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(hypothesis_providers, "_get_local_constants", lambda: _NO_LOCAL_CONSTANTS)
        yield


_LINES = pytest.StashKey[list[str]]()
_WORKER_LINES = "turnfsm_coverage"
"""The key of a worker's summary lines in what it sends the controller at its end."""


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_LINES] = []
    config.addinivalue_line(
        "markers",
        "wall_clock: run on an ordinary event loop, in real time (the smoke tests that show the "
        "virtual clock matches the real one)",
    )


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    """Every async test runs on the virtual clock, unless marked ``wall_clock``.

    pytest-asyncio asks this while collecting: the mark must be on the test, its class or its
    module (``pytestmark``); one added by ``pytest_collection_modifyitems`` comes too late.
    """
    if item.get_closest_marker("wall_clock") is not None:
        return {"wall_clock": asyncio.new_event_loop}
    return {"virtual_clock": VirtualClockLoop}


@pytest.fixture(scope="session")
def summary_line(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Record one line for the terminal summary."""
    return request.config.stash[_LINES].append


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput: dict[str, Any] | None = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: its lines go to the controller
        workeroutput[_WORKER_LINES] = session.config.stash[_LINES]


@pytest.hookimpl(optionalhook=True)  # an xdist hook: called on the controller
def pytest_testnodedown(node: Any, error: object) -> None:
    lines = getattr(node, "workeroutput", {}).get(_WORKER_LINES, [])
    node.config.stash[_LINES].extend(lines)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = terminalreporter.config.stash.get(_LINES, [])
    if lines:
        terminalreporter.section("turnfsm coverage")
        for line in lines:
            terminalreporter.write_line(line)
