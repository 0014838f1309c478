"""A pytest plugin that attaches turnfsm to every ``AgentSession`` a test suite builds.

For running LiveKit's own test suite with turnfsm attached (``make livekit-compat``,
:mod:`run_livekit_suite`): load it with ``-p turnfsm_livekit_compat`` (its folder on
``PYTHONPATH``). Every ``AgentSession`` gets a controller as soon as it is built, as a
user attaches one before ``session.start``, with the policy named by
``TURNFSM_COMPAT_POLICY``:

* ``transparent``: the policy closest to LiveKit's own behaviour: inbound, the caller
  speaks first, an interrupted reply keeps its full text, no timers;
* ``agent``: the same, but the agent speaks first with no greeting text of its own: the
  agent's first speech (e.g. a ``generate_reply`` in ``on_enter``) is the greeting;
* ``off`` (or unset): nothing is attached (the baseline).

Each warning turnfsm logs during a test is appended to ``TURNFSM_COMPAT_WARNINGS`` (a
file), one line per warning with the test's id, so a test that passes while turnfsm
complained is still seen.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Iterator
from typing import Any

import pytest
from livekit.agents import AgentSession

from turnfsm import TurnController, TurnPolicy
from turnfsm.adapters.livekit import attach
from turnfsm.policy import Speaker

FIRST_SPEAKERS: dict[str, Speaker] = {"transparent": "user", "agent": "agent"}
"""Each policy name, and who speaks first under it."""


def _policy() -> TurnPolicy | None:
    name = os.environ.get("TURNFSM_COMPAT_POLICY", "off")
    if name == "off":
        return None
    if name not in FIRST_SPEAKERS:
        choices = ["off", *FIRST_SPEAKERS]
        raise pytest.UsageError(f"TURNFSM_COMPAT_POLICY must be one of {choices}, got {name!r}")
    return TurnPolicy(
        direction="inbound",
        first_speaker=FIRST_SPEAKERS[name],
        interrupted_text="keep",
        await_user_timeout=None,
    )


def pytest_configure(config: pytest.Config) -> None:
    policy = _policy()
    if policy is None:
        return
    built = AgentSession.__init__

    @functools.wraps(built)
    def attached(session: AgentSession, *args: Any, **kwargs: Any) -> None:
        built(session, *args, **kwargs)
        attach(session, TurnController(policy))

    AgentSession.__init__ = attached  # type: ignore[method-assign]


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(autouse=True)
def turnfsm_warnings(request: pytest.FixtureRequest) -> Iterator[None]:
    path = os.environ.get("TURNFSM_COMPAT_WARNINGS")
    handler = _Warnings()
    logger = logging.getLogger("turnfsm")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
    if path and handler.records:
        with open(path, "a", encoding="utf-8") as out:
            for record in handler.records:
                message = record.getMessage().splitlines()[0]
                out.write(f"{request.node.nodeid}\t{message}\n")
