"""Issue 3, point 5: the tool loop runs exactly ``max_tool_steps`` rounds, then one
spoken reply without tools.

* A model that always calls a tool: exactly N rounds, then one request with
  ``tool_choice="none"`` whose reply is played. With the session's own
  ``max_tool_steps`` left at LiveKit's default (3, i.e. 4 rounds) under a policy cap of
  5 (which ``attach`` raises), and with LiveKit's cap far above the policy's.
* A model that ignores ``tool_choice="none"``: the policy's fallback text is said.
* Three parallel calls in one step count as one round.
* A barge-in while a (slow) tool runs stops the loop once LiveKit interrupts the tool
  step's speech (not on the raw VAD start): no further tool round for that turn, and
  the tool's result is never spoken (tests/integration/test_barge_in_rules.py: LiveKit's
  interruption options).
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

import pytest
from turncalls import (
    SETTING_ROWS,
    LookupAgent,
    TurnCall,
    line_start,
    run_scenarios,
    turn_call,
    wait_segment,
)

from turnfsm import TurnPolicy
from turnfsm import effects as fx
from turnfsm.adapters.sim import (
    LINES,
    CallScript,
    LLMRequest,
    ScriptedLLM,
    ScriptedReply,
    ScriptedToolCall,
    UserLine,
)

FINAL = "I could not find anything."
QUESTION = LINES["question"].text


def _question_call(
    policy: TurnPolicy, agent: LookupAgent, llm: ScriptedLLM, **options: object
) -> AbstractAsyncContextManager[TurnCall]:
    script = CallScript([UserLine(0.3, "question")])
    return turn_call(policy, script, agent=agent, llm=llm, **options)


async def _final_reply_played(tc: TurnCall, text: str) -> None:
    call = tc.call
    segment = await wait_segment(call, 0, timeout=LINES["question"].duration + 6, finished=True)
    await call.sleep_until(call.now() + 1.0)  # no further request or speech comes
    context = tc.describe()
    assert segment.interrupted is False, context
    assert segment.played == segment.pushed, context
    assert abs(segment.pushed - tc.call.tts.duration_of(text)) < 0.1, context
    assert len(call.audio_output.segments) == 1, context
    assert [m.text_content for m in call.messages("assistant")] == [text], context
    assert tc.controller.state == "listening", context


def _tool_rounds(llm: ScriptedLLM) -> list[LLMRequest]:
    return [r for r in llm.requests if r.reply.tool_calls]


async def _capped(cap: int, session_max_tool_steps: int | None, settings: str) -> None:
    policy = TurnPolicy(direction="inbound", first_speaker="user", max_tool_steps=cap)
    agent = LookupAgent()
    llm = ScriptedLLM([FINAL], always_call_tool="lookup")
    options = {} if session_max_tool_steps is None else {"max_tool_steps": session_max_tool_steps}
    async with _question_call(
        policy, agent, llm, session_options=options, settings=settings
    ) as tc:
        await _final_reply_played(tc, FINAL)
        context = tc.describe()
        executed = tc.call.events_named("function_tools_executed")
        assert len(executed) == cap, context
        assert len(agent.finished) == cap, context
        assert len(_tool_rounds(llm)) == cap, context
        assert [r.tool_choice for r in llm.requests][-1] == "none", context
        assert len(llm.requests) == cap + 1, context
        assert llm.requests[-1].reply.text == FINAL
        # the fallback rendered at the cap, while the final reply was asked for, never played
        assert tc.call.tts.texts == [policy.tool_cap_fallback, FINAL], context
        assert len(tc.effects(fx.FinalReplyWithoutTools)) == 1, context


async def _ignores_tool_choice(settings: str) -> None:
    policy = TurnPolicy(direction="inbound", first_speaker="user", max_tool_steps=2)
    agent = LookupAgent()
    llm = ScriptedLLM([FINAL], always_call_tool="lookup", ignore_tool_choice=True)
    async with _question_call(policy, agent, llm, settings=settings) as tc:
        await _final_reply_played(tc, policy.tool_cap_fallback)
        context = tc.describe()
        assert len(agent.finished) == 2, context  # the call made under "none" never ran
        assert [r.tool_choice for r in llm.requests][-1] == "none", context
        assert llm.requests[-1].reply.tool_calls, context  # it called a tool anyway
        assert len(llm.requests) == 3, context
        assert " ".join(tc.call.tts.texts) == policy.tool_cap_fallback, context
        says = tc.effects(fx.Say)
        assert [s.reason for s in says] == ["tool_fallback"], context


async def _parallel_calls_count_once(settings: str) -> None:
    policy = TurnPolicy(direction="inbound", first_speaker="user", max_tool_steps=2)
    agent = LookupAgent(tool_seconds=0.2)
    three = ScriptedReply(tool_calls=(ScriptedToolCall("lookup"),) * 3)
    llm = ScriptedLLM([three, three, FINAL])
    async with _question_call(policy, agent, llm, settings=settings) as tc:
        await _final_reply_played(tc, FINAL)
        context = tc.describe()
        executed = tc.call.events_named("function_tools_executed")
        assert [len(e.event.function_calls) for e in executed] == [3, 3], context
        assert len(agent.finished) == 6, context
        # the three calls of a step ran side by side
        assert max(agent.started[:3]) < min(agent.finished[:3]), context
        assert [r.tool_choice for r in llm.requests][-1] == "none", context
        assert len(llm.requests) == 3, context
        assert len(tc.events("tool_step_started")) == 2, context


async def _barge_in_stops_the_loop(settings: str) -> None:
    policy = TurnPolicy(direction="inbound", first_speaker="user", max_tool_steps=3)
    # the tool outlasts the barge-in (LiveKit may interrupt only at its end, 2.2 s after
    # the tool started): at 1.5 s its result could start a second round first, under load
    agent = LookupAgent(tool_seconds=3.5)
    stopped = "Okay, I will stop."

    def reply(request: LLMRequest) -> ScriptedReply:
        if request.last_user_text == QUESTION:
            return ScriptedReply(tool_calls=(ScriptedToolCall("lookup"),))
        return ScriptedReply(text=stopped)

    llm = ScriptedLLM(reply)
    async with _question_call(policy, agent, llm, settings=settings) as tc:
        call = tc.call
        await call.wait_until(lambda: bool(agent.started), timeout=LINES["question"].duration + 3)
        call.audio_input.say_now("stop")
        await call.wait_until(
            lambda: [m.text_content for m in call.messages("assistant")][-1:] == [stopped],
            timeout=LINES["stop"].duration + 5,
        )
        await call.sleep_until(call.now() + 1.0)
        context = tc.describe()

        tool_start = tc.call_time(agent.started[0])
        tool_end = tc.call_time(agent.finished[0])
        assert tool_start < line_start(call, "stop") < tool_end - 1.0, context  # during it
        barge_in = [s for s in tc.events("user_speech_started") if s.before == "tool_loop"]
        assert barge_in, context
        assert fx.Interrupt(force=False) not in barge_in[0].effects, context  # not raw VAD
        # LiveKit's own decision stopped the loop: it interrupted the tool step's speech
        tool_speech = tc.events("tool_step_started")[0].event.speech_id
        interrupted = [e.event.speech_id for e in tc.events("agent_speech_interrupted")]
        assert tool_speech in interrupted, context
        assert len(agent.finished) == 1, context  # the tool ran to its end
        # no further tool round for the question: at most the reply to the tool's result
        # was asked for (LiveKit interrupts it before it plays when the step ended first);
        # it was never spoken; the other requests answer the barge-in (one turn, or more
        # if the endpointing cut "Wait, stop, stop." at a pause)
        asked = [r.last_user_text for r in llm.requests]
        assert asked[0] == QUESTION, context
        assert asked[1:].count(QUESTION) <= 1, context
        assert len(call.events_named("function_tools_executed")) == 1, context
        barge_in_turns = [t or "" for t in asked[1:] if t != QUESTION]
        assert " ".join(barge_in_turns).endswith(LINES["stop"].text[-5:]), context
        # only the answer to the barge-in (LiveKit may synthesize a reply it then discards
        # again; no cap, so no fallback rendered)
        assert set(call.tts.texts) == {stopped}, context
        assert call.messages("assistant")[-1].text_content == stopped, context


@pytest.mark.parametrize("settings", SETTING_ROWS)
async def test_tool_loop(settings: str) -> None:
    await run_scenarios(
        {
            "cap-2": _capped(2, session_max_tool_steps=10, settings=settings),
            "cap-5-livekit-default": _capped(5, session_max_tool_steps=None, settings=settings),
            "ignores-tool-choice": _ignores_tool_choice(settings),
            "parallel-calls": _parallel_calls_count_once(settings),
            "barge-in": _barge_in_stops_the_loop(settings),
        }
    )
