"""Shared pytest glue: a ``summary_line`` fixture whose lines are shown after the run.

Property and exploration tests record what they covered (examples, steps,
configurations), so that ``make test`` shows how much was checked, not only that it passed.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from turnfsm.adapters.sim.speech import add_lines

from support.lines import TEST_LINES

add_lines(*TEST_LINES)  # the callee lines only the tests play, beside the demo's

_LINES = pytest.StashKey[list[str]]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_LINES] = []


@pytest.fixture(scope="session")
def summary_line(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Record one line for the terminal summary."""
    return request.config.stash[_LINES].append


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = terminalreporter.config.stash.get(_LINES, [])
    if lines:
        terminalreporter.section("turnfsm coverage")
        for line in lines:
            terminalreporter.write_line(line)
