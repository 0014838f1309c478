"""LiveKit's answering-machine detection (``AMD``) reaches the machine through
``watch_amd``, as ``place_sip_call`` wires it: each verdict LiveKit's detector emits
(``AMD._on_amd_prediction``, here called with LiveKit's own ``AMDPredictionEvent``) is
an ``AnsweringMachineDetected`` event; a machine verdict hangs up."""

from __future__ import annotations

import pytest
from livekit.agents import AMD, AgentSession, AMDCategory, AMDPredictionEvent

from turnfsm import TurnController, TurnPolicy
from turnfsm.adapters.livekit import attach, watch_amd
from turnfsm.events import CallAnswered


def verdict(category: AMDCategory) -> AMDPredictionEvent:
    return AMDPredictionEvent(
        speech_duration=2.0, category=category, reason="test", transcript="", delay=0.1
    )


@pytest.mark.parametrize(
    ("category", "state", "hung_up"),
    [
        (AMDCategory.MACHINE_VM, "ended", ["answering_machine"]),
        (AMDCategory.MACHINE_UNAVAILABLE, "ended", ["answering_machine"]),
        (AMDCategory.HUMAN, "awaiting_user", []),
        (AMDCategory.UNCERTAIN, "awaiting_user", []),
    ],
)
async def test_an_amd_verdict_reaches_the_machine(
    category: AMDCategory, state: str, hung_up: list[str]
) -> None:
    hang_ups: list[str] = []
    controller = TurnController(TurnPolicy(direction="outbound", greeting="Hi."), strict=True)
    session = AgentSession()
    adapter = attach(session, controller, end_call=hang_ups.append)
    detector = AMD(session, llm=None, stt=None, suppress_compatibility_warning=True)
    stop = watch_amd(adapter, detector)
    adapter.dispatch(CallAnswered(at=adapter.now()))
    detector._on_amd_prediction(verdict(category))  # what its classifier calls
    assert controller.state == state
    assert hang_ups == hung_up
    stop()  # a verdict after watching stopped changes nothing
    detector._on_amd_prediction(verdict(AMDCategory.MACHINE_VM))
    assert (controller.state, hang_ups) == (state, hung_up)
    adapter.detach()
