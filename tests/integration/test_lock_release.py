"""Issue 3, point 3: the greeting's lock never outlives the greeting.

* After the greeting the callee barges in on a long reply and interrupts it as usual.
* Hang-up, an unrecoverable session error, the call's time limit, or a hang-up during a
  greeting that the await timeout started: whenever the call ends during the greeting —
  with the callee talking over it, so audio is held (``mute_input``) or user turns are
  held (``keep_listening``) and a timer runs — the input is left open, nothing is held,
  turn detection and ``discard_audio_if_uninterruptible`` are what they were, no timer
  and no task is left behind.
"""

from __future__ import annotations

import asyncio

import pytest
from turncalls import (
    GREETING,
    SETTING_ROWS,
    TurnCall,
    line_start,
    run_scenarios,
    settle,
    turn_call,
    wait_line_done,
    wait_segment,
)

from turnfsm import TurnPolicy
from turnfsm import effects as fx
from turnfsm import events as ev
from turnfsm.adapters.sim import LINES, CallScript, ScriptedLLM, UserLine
from turnfsm.rules import turns_held

LONG_REPLY = (
    "Good morning, this is the clinic calling to confirm your appointment for Tuesday "
    "at ten, please let us know if that time still works for you."
)


def _assert_released(tc: TurnCall, turn_detection: object, discard: object) -> None:
    context = tc.describe()
    gate = tc.adapter.gate
    # the gate is in the input chain only when the policy mutes the caller
    assert (gate is not None) == tc.controller.policy.can_mute_input, context
    assert gate is None or not gate.muted, context
    assert gate is None or gate.held_seconds == 0, context
    assert tc.adapter.held_turn_settings is None, context
    assert tc.session.turn_detection == turn_detection, context
    assert tc.session.options.interruption["discard_audio_if_uninterruptible"] == discard
    assert tc.adapter.port.timers == {}, context


async def _barge_in_after_greeting(lock: str, settings: str) -> None:
    policy = TurnPolicy(
        direction="outbound", greeting="Hi, this is Ada from Acme.", greeting_lock=lock
    )
    question = LINES["question"].text
    llm = ScriptedLLM(
        lambda request: LONG_REPLY if request.last_user_text == question else "Okay.",
        chars_per_second=1000,
    )
    script = CallScript([UserLine(0.5, "hello")])
    async with turn_call(policy, script, llm=llm, settings=settings) as tc:
        call = tc.call
        turn_detection = tc.session.turn_detection
        discard = tc.session.options.interruption["discard_audio_if_uninterruptible"]
        await wait_segment(call, 0, timeout=4, finished=True)
        await call.wait_until(lambda: tc.controller.state == "listening", timeout=0.5)
        gate = tc.adapter.gate
        # audio held over the greeting (answer_whole) is replayed on unmute (4x real time),
        # user turns held until the replay is over
        await call.wait_until(
            lambda: (
                (gate is None or gate.held_seconds == 0)
                and not turns_held(
                    tc.controller.policy, {tc.controller.state, tc.controller.configuration[0]}
                )
            ),
            timeout=0.5,
        )
        _assert_released(tc, turn_detection, discard)
        call.audio_input.say_now("question")
        reply = await wait_segment(call, 1, timeout=LINES["question"].duration + 3)
        await call.sleep_until(tc.segment_start(reply) + 1.0)
        call.audio_input.say_now("stop")
        await wait_line_done(call, "stop", timeout=LINES["stop"].duration + 2)
        await call.wait_until(  # "stop" answered (its message committed after playout)
            lambda: tc.texts("assistant")[-1] == "Okay." and tc.controller.state == "listening",
            timeout=5,
        )
        context = tc.describe()

        stop_start = line_start(call, "stop")
        assert reply.interrupted is True, context
        assert reply.played < reply.pushed - 5.0, context
        assert reply.finished_at is not None
        heard_until = tc.segment_start(reply) + reply.played
        assert stop_start < heard_until <= stop_start + 1.2, context
        assert tc.call_time(reply.finished_at) <= stop_start + 2.0, context
        # LiveKit's own barge-in (the only Interrupt stops a preemptive reply to "Hello?")
        assert not [
            s
            for s in tc.steps
            if s.before not in ("ringing", "awaiting_user")
            and any(isinstance(e, fx.Interrupt) for e in s.effects)
        ], context
        # everything after the question is the barge-in, answered (one turn, or more if
        # the endpointing cut it at a pause)
        messages = [(m.role, m.text_content) for m in call.messages()]
        after = messages[messages.index(("user", question)) + 2 :]
        said = " ".join(text or "" for role, text in after if role == "user")
        assert said == LINES["stop"].text, context
        assert after[-1] == ("assistant", "Okay."), context
        _assert_released(tc, turn_detection, discard)


@pytest.mark.parametrize("settings", SETTING_ROWS)
async def test_barge_in_after_the_greeting_interrupts_the_agent(settings: str) -> None:
    await run_scenarios(
        {
            lock: _barge_in_after_greeting(lock, settings)
            for lock in ("mute_input", "keep_listening")
        }
    )


END_AT = 3.6
"""When the call ends: mid-greeting, with the callee talking over it."""

END_REASONS = {"hang_up": "hangup", "error": "error", "time_limit": "max_duration"}


async def _ends_during_greeting(lock: str, ending: str, settings: str) -> None:
    silent = ending == "await_timeout_then_hang_up"
    policy = TurnPolicy(
        direction="outbound",
        greeting=GREETING,
        greeting_lock=lock,
        greeting_overlap="answer_whole",
        await_user_timeout=1.0 if silent else 8.0,
        max_call_duration=END_AT if ending == "time_limit" else 60.0,
    )
    lines = [UserLine(2.0, "long_overlap")]
    if not silent:
        lines.append(UserLine(0.5, "hello"))
    async with turn_call(policy, CallScript(lines), settings=settings) as tc:
        call, adapter = tc.call, tc.adapter
        turn_detection = tc.session.turn_detection
        discard = tc.session.options.interruption["discard_audio_if_uninterruptible"]
        await wait_segment(call, 0, timeout=3)
        await call.sleep_until(END_AT - 0.5)
        context = tc.describe()

        # the lock is in force, over the callee's speech, with the time limit running
        assert tc.controller.state == "greeting", context
        assert line_start(call, "long_overlap") < call.now() - 0.5, context
        assert "max_duration" in adapter.port.timers, context
        if lock == "mute_input":
            assert adapter.gate is not None
            assert adapter.gate.muted, context
            assert adapter.gate.held_seconds > 0.5, context
        else:
            assert adapter.held_turn_settings is not None, context
            assert tc.session.turn_detection == "manual", context

        await call.sleep_until(END_AT)
        if ending in ("hang_up", "await_timeout_then_hang_up"):
            adapter.dispatch(ev.CallEnded(at=adapter.now()))
        elif ending == "error":
            adapter.dispatch(ev.SessionError(at=adapter.now(), recoverable=False))
        await call.wait_for_event("close", timeout=3)  # EndCall shut the session down
        await settle()
        context = tc.describe()

        assert tc.controller.is_ended, context
        assert tc.steps[-1].after == "ended", context
        reasons = [e.reason for e in tc.effects(fx.EndCall)]  # type: ignore[attr-defined]
        assert reasons == [END_REASONS.get(ending, "hangup")], context
        _assert_released(tc, turn_detection, discard)
        await wait_line_done(call, "long_overlap", timeout=3)


@pytest.mark.parametrize("settings", SETTING_ROWS)
async def test_ending_during_the_greeting_leaves_nothing_behind(settings: str) -> None:
    before = asyncio.all_tasks()
    await run_scenarios(
        {
            f"{lock}/{ending}": _ends_during_greeting(lock, ending, settings)
            for lock in ("mute_input", "keep_listening")
            for ending in ("hang_up", "error", "time_limit", "await_timeout_then_hang_up")
        }
    )
    await settle(0.5)  # the closed sessions' own tasks wind down
    left = [
        task.get_name()
        for task in asyncio.all_tasks() - before
        if not task.done() and task is not asyncio.current_task()
    ]
    assert left == [], f"tasks left behind: {left}"
