"""A caller who hangs up while talking over the greeting ends the call; the greeting is
not "cut" (O2).

Found by ``turnfsm fuzz`` (seeds 80, 251, 1702 and others in tests/fuzz/regressions.toml):
LiveKit's ``aclose()`` interrupts the speech playing and ends the caller's speech (a
``user_state_changed`` to listening) before it emits ``close``. The outcome monitor judged
the cut greeting on that speech end, as though the call went on after the cut.
"""

from __future__ import annotations

import asyncio

from faultcalls import fault_call

from turnfsm import TurnPolicy
from turnfsm import events as ev

LONG_GREETING = (
    "Hi, this is Ada from the clinic, calling about your appointment on Tuesday morning."
)


async def test_a_hang_up_while_the_caller_talks_over_the_greeting_breaches_nothing() -> None:
    policy = TurnPolicy(
        direction="inbound",
        first_speaker="agent",
        greeting=LONG_GREETING,
        greeting_lock="keep_listening",  # the caller is heard: LiveKit ends their speech
    )
    async with fault_call(policy, name="hang-up-over-greeting") as fc:
        await fc.wait_step(lambda s: s.event.name == "agent_speech_started", timeout=5)
        fc.call.audio_input.say_now("long_overlap")
        await asyncio.sleep(1.5)  # the caller is mid-sentence, the greeting still plays
        assert fc.state == "greeting", fc.describe()
        await fc.session.aclose()
        await fc.wait_detached()
    ended = [step.event for step in fc.steps if isinstance(step.event, ev.CallEnded)]
    assert [event.reason for event in ended] == ["user_initiated"], fc.describe()
    assert dict(fc.adapter.outcomes.counts) == {}, fc.describe()
