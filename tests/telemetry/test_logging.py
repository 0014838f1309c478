"""Issue 13, point 3: logging that fits a LiveKit worker.

* python-statemachine's engine log is quiet by default: measured on a 9 s simulated
  outbound call (34 steps) at DEBUG through LiveKit's own log handler, 250 engine lines
  per call before (214 with the tabled engine), 0 after. (The compiled engine, the
  default since, runs no python-statemachine step at all: its log is the reference
  engine's, ``engine="reference"``.)
* turnfsm is in LiveKit's plugin registry, so LiveKit's ``setup_logging`` sets its level
  with the worker's ``--log-level``.
* turnfsm's records carry LiveKit-style ``extra`` fields, and no transcript text unless
  the controller keeps text: not even in a lever's exception message (a plugin error that
  quotes its input, issue 22), which is logged as ``RuntimeError('[redacted]')``.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator

import pytest

from turnfsm import TurnController, TurnPolicy
from turnfsm import effects as fx
from turnfsm import events as ev
from turnfsm.adapters.livekit import attach
from turnfsm.adapters.livekit.log import ROOT_LOGGER
from turnfsm.adapters.sim import SimulatedCall
from turnfsm.engine import EngineName
from turnfsm.testing import event_alphabet

POLICY = TurnPolicy(direction="outbound", greeting="Hi, this is Ada.", idle_timeout=5.0)


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def named(self, prefix: str) -> list[logging.LogRecord]:
        return [r for r in self.records if r.name.split(".")[0] == prefix]


@pytest.fixture
def debug_records() -> Iterator[Records]:
    """Everything logged at DEBUG, as under ``--log-level DEBUG``."""
    root, handler = logging.getLogger(), Records()
    level = root.level
    root.setLevel(logging.DEBUG)
    root.addHandler(handler)
    yield handler
    root.removeHandler(handler)
    root.setLevel(level)


def one_call(policy: TurnPolicy, engine: EngineName = "compiled") -> int:
    """Every event of the explorer's alphabet, in order, through a fresh controller."""
    controller = TurnController(policy, engine=engine)
    for event in event_alphabet():
        controller.handle(event)
    return len(controller.trace or ())


def test_the_engine_log_is_quiet_by_default(debug_records: Records) -> None:
    engine = logging.getLogger("statemachine")
    assert engine.level == logging.WARNING  # set when turnfsm was imported
    steps = one_call(POLICY, engine="reference")
    assert steps > 20
    assert debug_records.named("statemachine") == []


def test_the_engine_log_is_there_when_asked_for(debug_records: Records) -> None:
    engine = logging.getLogger("statemachine")
    engine.setLevel(logging.DEBUG)  # before the controller: the engine decides when built
    try:
        steps = one_call(POLICY, engine="reference")
    finally:
        engine.setLevel(logging.WARNING)
    assert len(debug_records.named("statemachine")) > steps  # several lines per step


def test_livekit_sets_turnfsms_level_with_its_own() -> None:
    probe = (
        "import logging\n"
        "import turnfsm.adapters.livekit\n"
        "from livekit.agents.cli.log import setup_logging\n"
        "setup_logging('WARNING', devmode=False, console=False)\n"
        f"print(logging.getLevelName(logging.getLogger({ROOT_LOGGER!r}).level))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.split() == ["WARNING"]


def _no_tts(port: object, effect: fx.StartGreeting, site: object) -> None:
    raise RuntimeError(f"TTS plugin rejected {effect.text!r}: rate limited")  # quotes its input


@pytest.mark.parametrize("keep_text", [False, True])
async def test_records_have_extra_fields_and_text_only_when_kept(
    debug_records: Records, keep_text: bool
) -> None:
    controller = TurnController(POLICY, keep_text=keep_text)
    call = SimulatedCall()
    adapter = attach(call.build_session(), controller)
    adapter.levers[fx.StartGreeting] = _no_tts
    adapter.dispatch(ev.SessionStarted(at=0.0))
    adapter.dispatch(ev.CallAnswered(at=0.1))
    adapter.dispatch(ev.UserTurnCommitted(at=0.5, text="Hello?", item_id="u1"))
    adapter.detach()
    await call.aclose()
    ours = debug_records.named(ROOT_LOGGER)
    (failed,) = [r for r in ours if getattr(r, "where", None) == "lever start_greeting"]
    assert failed.levelno == logging.WARNING
    assert failed.error == "RuntimeError"  # type: ignore[attr-defined]
    shown = [f"{r.getMessage()} {vars(r)}" for r in ours]
    assert any(POLICY.greeting in line for line in shown) == keep_text  # type: ignore[operator]
    assert ("rate limited" in failed.getMessage()) == keep_text  # the message: kept or withheld
    if not keep_text:
        assert "RuntimeError('[redacted]')" in failed.getMessage()
