"""Every seed ``turnfsm fuzz`` ever failed on, replayed on every run.

``regressions.toml`` beside this file lists them: the seed, what it found, why, and whether
that is ``fixed`` (the call must pass now) or still ``open`` (a turnfsm bug reported, not
fixed yet: the call must still fail with exactly those judgements, so that a fix shows up
here and the entry moves to ``fixed``). Each entry also pins a fingerprint of the call
the seed draws: a change to what seeds draw (``fuzz/draw.py``) makes every seed another
call, and this test says so instead of replaying calls that no longer mean anything.
"""

from __future__ import annotations

import dataclasses
import zlib
from pathlib import Path

import attrs
import pytest

from turnfsm import TurnPolicy
from turnfsm.adapters.sim.fuzz import draw_call
from turnfsm.adapters.sim.fuzz.draw import LISTED_OPTIONS, World
from turnfsm.adapters.sim.fuzz.runner import judged_call, load_known
from turnfsm.policy import option_of

REGRESSIONS = Path(__file__).with_name("regressions.toml")
KNOWN = load_known(REGRESSIONS)


def plan_fingerprint(seed: int, world: World = "pipeline") -> str:
    """What ``regressions.toml`` pins of the call ``seed`` draws in ``world``: all of it,
    but for the options each drawn from a stream of their own (not in
    :data:`~turnfsm.adapters.sim.fuzz.draw.LISTED_OPTIONS`, nor the call's shape). These
    vary around the listed call, which must still pass with them, and a new option is
    one of them: it changes no fingerprint."""
    plan = draw_call(seed, world)
    listed = {
        option.name: getattr(plan.policy, option.name)
        for option in attrs.fields(TurnPolicy)
        if option.name in LISTED_OPTIONS or option_of(option).shapes_the_call
    }
    return f"{zlib.crc32(repr(dataclasses.replace(plan, policy=listed)).encode()):08x}"


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
