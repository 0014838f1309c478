"""Every seed ``turnfsm fuzz`` ever failed on, replayed on every run.

``regressions.toml`` beside this file lists them: the seed, what it found, why, and whether
that is ``fixed`` (the call must pass now) or still ``open`` (a turnfsm bug reported, not
fixed yet: the call must still fail with exactly those judgements, so that a fix shows up
here and the entry moves to ``fixed``). Each entry also pins a fingerprint of the call
the seed draws: a change to what seeds draw (``fuzz/draw.py``) makes every seed another
call, and this test says so instead of replaying calls that no longer mean anything.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest

from turnfsm.adapters.sim.fuzz import draw_call
from turnfsm.adapters.sim.fuzz.draw import World
from turnfsm.adapters.sim.fuzz.runner import judged_call, load_known

REGRESSIONS = Path(__file__).with_name("regressions.toml")
KNOWN = load_known(REGRESSIONS)


def plan_fingerprint(seed: int, world: World = "pipeline") -> str:
    """What ``regressions.toml`` pins of the call ``seed`` draws in ``world``."""
    return f"{zlib.crc32(repr(draw_call(seed, world)).encode()):08x}"


def test_the_list_is_read() -> None:
    assert len(KNOWN) >= 20
    # every entry fixed or open (none is open since the 20000-29999 triage)
    assert {call.status for call in KNOWN.values()} <= {"fixed", "open"}


@pytest.mark.parametrize(("world", "seed"), sorted(KNOWN))
def test_a_seed_that_once_failed(world: World, seed: int) -> None:
    known = KNOWN[world, seed]
    assert plan_fingerprint(seed, world) == known.plan, (
        f"{world} seed {seed} draws another call than when it was listed: re-triage the list"
    )
    verdict = judged_call(seed, world)
    findings = "\n".join(str(finding) for finding in verdict.findings)
    if known.status == "fixed":
        assert not verdict.failed, f"seed {seed} fails again ({known.cause}):\n{findings}"
    else:
        assert known.expects(verdict), (
            f"seed {seed} (open: {known.cause}) now finds {sorted(verdict.judgements)}, "
            f"listed {list(known.found)}: fixed? move it to 'fixed'\n{findings}"
        )
