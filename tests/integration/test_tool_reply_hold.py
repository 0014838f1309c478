"""Issue 23, point 2: a tool-step barge-in wastes no model request.

The caller starts speaking while a slow tool runs, and is still speaking when the tool
finishes. LiveKit asks the model for the reply to the tool's output at once, but decides
on the barge-in only when the caller's turn commits, later. The machine holds that round
(``HoldToolReply``) while the caller speaks during the step, until LiveKit decided:

* a real turn ("Wait, stop, stop.", ``min_words=3``): LiveKit interrupts the step's speech,
  and the model never receives the round (before the hold: one request, thrown away);
* a backchannel ("Uh-huh.", under ``min_words=3``): at LiveKit's end of the caller's turn
  (``user_turn_ended``, its word count as LiveKit counts it) the machine declines it as
  LiveKit does over a playing reply (no turn), and the round goes to the model right then,
  not when the hold runs out; its reply is spoken whole.

All calls run under LiveKit's default turn handling (``livekit-defaults``), and assert on
the requests the model received, the audio played and the history.
"""

from __future__ import annotations

from turncalls import (
    APPOINTMENT,
    APPOINTMENT_QUESTION,
    LookupAgent,
    TurnCall,
    barge_into_tool_step,
    line_end,
    line_start,
    run_scenarios,
)

from turnfsm import effects as fx
from turnfsm.adapters.sim import LINES, LLMRequest, ScriptedLLM

TOOL_SECONDS = 2.5
BARGE_IN_AFTER = 2.0
"""Seconds into the tool step the caller starts speaking: the tool ends while they speak."""
HOLD_SECONDS = 3.0
"""The policy's ``tool_reply_hold`` (its default)."""


def tool_reply_requests(llm: ScriptedLLM) -> list[LLMRequest]:
    """The requests that ask for the reply to a tool's output."""
    return [r for r in llm.requests if r.chat_ctx.items[-1].type == "function_call_output"]


async def _barge_in_as_the_tool_ends(line: str) -> tuple[TurnCall, ScriptedLLM, LookupAgent]:
    tc, agent, llm = await barge_into_tool_step(
        {"min_words": 3},
        line,
        after=BARGE_IN_AFTER,
        tool_seconds=TOOL_SECONDS,
        tool_reply_hold=HOLD_SECONDS,
    )
    tool_end = tc.call_time(agent.finished[0])
    assert line_start(tc.call, line) < tool_end < line_end(tc.call, line), tc.describe()
    return tc, llm, agent


async def _real_turn_sends_no_tool_reply() -> None:
    tc, llm, agent = await _barge_in_as_the_tool_ends("stop")
    call, context = tc.call, tc.describe()
    tool_speech = tc.events("tool_step_started")[0].event.speech_id
    assert tool_speech in [s.event.speech_id for s in tc.events("agent_speech_interrupted")]
    # told once, as the session started: LiveKit's min_words, with an STT
    told = [s.event for s in tc.events("interruption_settings")]
    assert [(e.min_words, e.stt, e.manual_turns) for e in told] == [(3, True, False)], context
    # LiveKit's end of the turn: three words, a turn; the machine lets LiveKit commit it
    ended = tc.events("user_turn_ended")
    assert [s.event.words for s in ended] == [3], context
    assert not any(isinstance(e, fx.RejectUserTurn) for e in ended[0].effects), context
    # the model never received the round answering the tool's output, and no tool ran again
    assert tool_reply_requests(llm) == [], context
    # the others answer the barge-in (preemptive ones, on its partial transcripts, too)
    asked = [r.last_user_text or "" for r in llm.requests]
    assert asked[0] == APPOINTMENT_QUESTION, context
    assert asked[-1] == LINES["stop"].text, context
    assert all(LINES["stop"].text.startswith(text) for text in asked[1:]), context
    assert len(agent.started) == 1, context
    # the caller is answered; the tool's output never is
    assert APPOINTMENT not in call.tts.texts, context
    assert [m.text_content for m in call.messages("assistant")] == ["Okay."], context
    assert call.messages("user")[-1].text_content == LINES["stop"].text, context


async def _backchannel_gets_the_tool_reply() -> None:
    tc, llm, agent = await _barge_in_as_the_tool_ends("uh_huh")
    call, context = tc.call, tc.describe()
    # LiveKit declined the backchannel: the round was sent once, and its reply spoken whole
    (request,) = tool_reply_requests(llm)
    assert len(llm.requests) == 2, context
    # the reply, synthesized once (the tool-cap fallback waits for the cap)
    assert call.tts.texts == [APPOINTMENT], context
    (segment,) = call.audio_output.segments
    assert segment.interrupted is False, context
    assert abs(segment.played - call.tts.duration_of(APPOINTMENT)) < 0.1, context
    assert [m.text_content for m in call.messages("assistant")] == [APPOINTMENT], context
    # the backchannel is no turn (LiveKit keeps its words for the next one)
    committed = [s.event.text for s in tc.events("user_turn_committed")]
    assert committed == [APPOINTMENT_QUESTION], context
    # the machine declined it at LiveKit's end of the turn: one word, under min_words
    tool_speech = tc.events("tool_step_started")[0].event.speech_id
    # (LiveKit ends it once more as the session closes, with its words kept: no turn then)
    ended, *_ = tc.events("user_turn_ended")
    assert ended.event.words == 1, context
    assert fx.RejectUserTurn() in ended.effects, context
    assert fx.ReleaseToolReply(speech_id=tool_speech, send=True) in ended.effects, context
    # held from the barge-in until LiveKit's end of the turn (its endpointing delay after
    # the caller stopped), not until the hold ran out: the round was asked for right then
    stopped = [s for s in tc.events("user_speech_ended") if s.before == "speaking"][-1]
    hold = tc.controller.policy.tool_reply_hold
    assert hold is not None, context
    assert abs(tc.call_time(request.started_at) - tc.at(ended)) < 0.05, context
    assert tc.at(ended) - tc.at(stopped) < hold / 2, context
    assert len(agent.started) == 1, context


async def test_tool_step_barge_in_wastes_no_model_request() -> None:
    await run_scenarios(
        {
            "real-turn": _real_turn_sends_no_tool_reply(),
            "backchannel": _backchannel_gets_the_tool_reply(),
        }
    )
