"""Issue 3, point 2: a callee who says nothing. After ``await_user_timeout`` the agent
greets anyway (``on_await_user_timeout="greet"``) or hangs up (``"hang_up"``: the
``EndCall`` effect shuts the session down by default)."""

from __future__ import annotations

from turncalls import GREETING, run_scenarios, turn_call, wait_segment

from turnfsm import TurnPolicy
from turnfsm import effects as fx

AWAIT_USER = 1.5


async def _greets_anyway(settings: str) -> None:
    policy = TurnPolicy(
        direction="outbound",
        greeting=GREETING,
        await_user_timeout=AWAIT_USER,
        on_await_user_timeout="greet",
    )
    async with turn_call(policy, settings=settings) as tc:
        call = tc.call
        greeting = await wait_segment(call, 0, timeout=AWAIT_USER + 8, finished=True)
        context = tc.describe()
        (fired,) = tc.events("await_user_timer_expired")
        answered = tc.at(tc.events("call_answered")[0])
        assert fired.event.timer == "await_user", context
        assert (fired.before, fired.after) == ("awaiting_user", "greeting"), context
        assert AWAIT_USER <= tc.at(fired) - answered <= AWAIT_USER + 0.5, context
        assert tc.call_time(greeting.captured_at) >= tc.at(fired), context  # none before
        assert tc.segment_start(greeting) - tc.at(fired) < 0.5, context
        assert call.tts.texts == [GREETING]
        assert greeting.interrupted is False, context
        assert greeting.played == greeting.pushed, context
        assert [(m.role, m.text_content) for m in call.messages()] == [("assistant", GREETING)]
        assert tc.controller.state == "listening", context


async def _hangs_up(settings: str) -> None:
    policy = TurnPolicy(
        direction="outbound",
        greeting=GREETING,
        await_user_timeout=AWAIT_USER,
        on_await_user_timeout="hang_up",
    )
    async with turn_call(policy, settings=settings) as tc:
        call = tc.call
        closed = await call.wait_for_event("close", timeout=AWAIT_USER + 3)
        context = tc.describe()
        (fired,) = tc.events("await_user_timer_expired")
        assert (fired.before, fired.after) == ("awaiting_user", "ended"), context
        assert [e.reason for e in tc.effects(fx.EndCall)] == ["no_answer"], context
        assert closed.at - tc.at(fired) < 1.5, context
        assert tc.steps[-1].after == "ended", context
        assert tc.controller.is_ended
        assert call.audio_output.segments == [], context
        assert call.tts.texts == [GREETING], context  # rendered ahead while it rang, unplayed
        assert call.messages() == [], context
        assert not tc.adapter.port.timers, context


async def test_silent_callee() -> None:
    # LiveKit's defaults only: with no callee speech there is no preemptive reply and no
    # interruption, so the rows differ only by the synchronizer (test_interrupted_text.py)
    settings = "livekit-defaults"
    await run_scenarios({"greet": _greets_anyway(settings), "hang_up": _hangs_up(settings)})
