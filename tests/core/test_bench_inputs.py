"""What the benchmarks measure is what they say they measure.

``make bench`` is not part of ``make test`` (its figures are reported, never asserted), so
a change to the machine could leave a section measuring something else, or nothing, unseen
until the next bench run (the ignored-events section once restored a phase the policy
never reaches, and was refused). These tests run the sections' inputs, not their timing.
"""

from __future__ import annotations

from benchmarks.bench_core import ignored_pairs
from benchmarks.callscript import POLICY
from turnfsm import TurnController
from turnfsm.testing import fresh_context


def test_the_ignored_events_section_sends_events_its_states_ignore() -> None:
    pairs = ignored_pairs()
    # the states a call spends its time in, each with events it ignores
    lived_in = {"ringing", "awaiting_user", "greeting_playing", "listening_open", "speaking"}
    assert lived_in <= {state for state, _ in pairs}
    for state, event in pairs:
        controller = TurnController(POLICY, record=False, strict=True)
        controller.restore(state, fresh_context(state, POLICY))
        before = controller.configuration
        assert controller.handle(event) == (), (state, event)
        assert controller.configuration == before, (state, event)
        assert controller.context == fresh_context(state, POLICY), (state, event)
