"""Issue 9, point 1: a LiveKit setting that breaks a guarantee is refused at ``attach``.

LiveKit's AEC warm-up feeds the STT silence for the first seconds of the agent's first
speech. With ``keep_listening`` + ``answer_whole`` the speech over the greeting would be
answered as a fragment (seen: "could you call me back later this afternoon?" answered
without its first words), so ``attach`` refuses a warm-up set explicitly, and LiveKit's
default one on inbound calls (it is off for outbound SIP calls only), naming the fix.
"""

from __future__ import annotations

from typing import Any

import pytest
from livekit.agents import AgentSession

from turnfsm import TurnController, TurnPolicy
from turnfsm.adapters.livekit import attach


def _attach(policy: TurnPolicy, **session_options: Any) -> None:
    session = AgentSession(**session_options)
    attach(session, TurnController(policy)).detach()


OUTBOUND = TurnPolicy(direction="outbound", greeting="Hi, this is Ada.")
INBOUND = TurnPolicy(direction="inbound", greeting="Hi, this is Ada.")


async def test_a_warm_up_that_silences_the_overlap_is_refused() -> None:
    for policy, options in (
        (OUTBOUND, {"aec_warmup_duration": 2.0}),
        (INBOUND, {}),  # LiveKit's default warm-up stays on for inbound calls
        (INBOUND, {"aec_warmup_duration": 3.0}),
    ):
        with pytest.raises(ValueError, match="aec_warmup_duration=.*greeting_lock='mute_input'"):
            _attach(policy, **options)


async def test_settings_that_keep_the_guarantees_are_accepted() -> None:
    _attach(OUTBOUND)  # LiveKit turns its warm-up off when the outbound SIP callee joins
    _attach(INBOUND, aec_warmup_duration=None)
    _attach(TurnPolicy(direction="inbound", greeting="Hi.", greeting_lock="mute_input"))
    _attach(TurnPolicy(direction="inbound", greeting="Hi.", greeting_overlap="drop"))
    _attach(TurnPolicy(direction="inbound", first_speaker="user"))
