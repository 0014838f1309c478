"""Issue 9, point 3: a barge-in during a tool step follows LiveKit's interruption decision.

The caller speaks while a slow tool runs. The machine no longer stops the tool loop on the
raw VAD start: it stops it when LiveKit really interrupts the speech
(``agent_speech_interrupted``), after the session's own ``interruption`` rules. All calls
run under LiveKit's default turn handling (preemptive generation on, false-interruption
resume on, interruption mode left to LiveKit, a transcript synchronizer in the output
chain), the settings whose interruption rules are the point of the test; the simulation's
row is tool_loop's barge-in (test_tool_loop.py).

* ``min_words=3``: a one-word backchannel ("Uh-huh.", 0.74 s: above ``min_duration``) is
  no interruption: the tool's result is spoken whole, the backchannel is no turn. The
  machine decides it at LiveKit's end of the turn (``user_turn_ended``, one word), as
  LiveKit decides over a playing reply: LiveKit itself applies ``min_words`` only to its
  current speech, and the step's speech is a background one while its tool runs.
* The same backchannel under LiveKit's default ``min_words=0`` *is* one: the loop stops
  and the tool's result is never spoken (so the first case can fail).
* With the hold off (``tool_reply_hold=None``) the tool step is LiveKit's alone: the same
  backchannel under ``min_words=3`` interrupts the step, as in plain LiveKit.
* ``enabled=False``: "Wait, stop, stop." does not interrupt: the tool's result is spoken
  whole; LiveKit drops the caller's turn (it completed during an uninterruptible speech).

Each case asserts on what reached the caller (playout segments, the TTS), the history and
the model's requests, not only on effects.
"""

from __future__ import annotations

from typing import Any

from turncalls import (
    APPOINTMENT,
    APPOINTMENT_QUESTION,
    LookupAgent,
    TurnCall,
    barge_into_tool_step,
    line_start,
    run_scenarios,
    turn_call,
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
from turnfsm.trace import TraceStep

TOOL_SECONDS = 2.5


async def _barge_into_tool_step(
    interruption: dict[str, Any], line: str, **policy_fields: Any
) -> tuple[TurnCall, LookupAgent]:
    """Ask the question; say ``line`` early in the tool's run (LiveKit decides before the
    tool returns); wait until the call is quiet."""
    tc, agent, _ = await barge_into_tool_step(
        interruption, line, after=0.3, tool_seconds=TOOL_SECONDS, **policy_fields
    )
    tool_start, tool_end = tc.call_time(agent.started[0]), tc.call_time(agent.finished[0])
    assert tool_start < line_start(tc.call, line) < tool_end - 0.5, tc.describe()  # during it
    return tc, agent


def _tool_speech_interrupted(tc: TurnCall) -> list[TraceStep]:
    """The ``agent_speech_interrupted`` steps of the speech that ran the tool (preemptive
    replies to partial transcripts are interrupted too, as LiveKit discards them)."""
    tool_speech = tc.events("tool_step_started")[0].event.speech_id
    return [s for s in tc.events("agent_speech_interrupted") if s.event.speech_id == tool_speech]


def _result_spoken_whole(tc: TurnCall) -> None:
    call, context = tc.call, tc.describe()
    assert _tool_speech_interrupted(tc) == [], context
    # synthesized once: the tool's reply (the tool-cap fallback waits for the cap)
    assert call.tts.texts == [APPOINTMENT], context
    segments = call.audio_output.segments
    assert len(segments) == 1, context
    assert segments[0].interrupted is False, context
    assert abs(segments[0].played - call.tts.duration_of(APPOINTMENT)) < 0.1, context
    assistant = call.messages("assistant")
    assert [m.text_content for m in assistant] == [APPOINTMENT], context
    assert assistant[0].interrupted is False, context


async def _backchannel_with_min_words() -> None:
    tc, _ = await _barge_into_tool_step({"min_words": 3}, "uh_huh")
    _result_spoken_whole(tc)
    context = tc.describe()
    # the backchannel was heard (VAD), but it is no turn: never committed, never answered;
    # LiveKit keeps its words for the caller's next turn, as under min_words over a playing
    # reply (and puts them in the history when the session closes, after the reply)
    assert any(s.before == "tool_loop" for s in tc.events("user_speech_started")), context
    assert [s.event.text for s in tc.events("user_turn_committed")] == [APPOINTMENT_QUESTION], (
        context
    )
    history = [(m.role, m.text_content) for m in tc.call.messages()]
    assert history == [
        ("user", APPOINTMENT_QUESTION),
        ("assistant", APPOINTMENT),
        ("user", LINES["uh_huh"].text),
    ], context
    # the machine declined it at LiveKit's end of the turn, while the tool still ran
    ended, *_ = tc.events("user_turn_ended")
    assert (ended.before, ended.event.words) == ("tool_loop", 1), context
    assert fx.RejectUserTurn() in ended.effects, context


async def _backchannel_by_default() -> None:
    tc, _ = await _barge_into_tool_step({}, "uh_huh")
    _backchannel_interrupts(tc)


async def _backchannel_without_the_hold() -> None:
    tc, _ = await _barge_into_tool_step({"min_words": 3}, "uh_huh", tool_reply_hold=None)
    _backchannel_interrupts(tc)
    assert tc.effects(fx.HoldToolReply) == [], tc.describe()


def _backchannel_interrupts(tc: TurnCall) -> None:
    call, context = tc.call, tc.describe()
    interrupted = _tool_speech_interrupted(tc)
    assert len(interrupted) == 1, context
    assert interrupted[0].before == "tool_loop", context
    # LiveKit interrupted the tool step: its result never reached the model nor the caller
    assert APPOINTMENT not in call.tts.texts, context
    assert [m.text_content for m in call.messages("assistant")] == ["Okay."], context
    assert call.messages("user")[-1].text_content == LINES["uh_huh"].text, context
    assert call.audio_output.segments[-1].interrupted is False, context


async def _interruptions_disabled() -> None:
    tc, _ = await _barge_into_tool_step({"enabled": False}, "stop")
    _result_spoken_whole(tc)
    context = tc.describe()
    assert any(s.before == "tool_loop" for s in tc.events("user_speech_started")), context
    # an uninterruptible speech: LiveKit drops the turn that completed during it
    assert [m.text_content for m in tc.call.messages("user")] == [APPOINTMENT_QUESTION], context


async def test_barge_in_follows_livekit_interruption_rules() -> None:
    await run_scenarios(
        {
            "min-words-3-backchannel": _backchannel_with_min_words(),
            "default-backchannel-interrupts": _backchannel_by_default(),
            "no-hold-backchannel-interrupts": _backchannel_without_the_hold(),
            "interruptions-disabled": _interruptions_disabled(),
        }
    )


LOOKING = (
    "Let me look that up for you in our calendar system, it will only take a moment,"
    " thank you for waiting."
)
"""What the reply says before its tool call: about 7 s of audio, played while the tool runs."""


def _speaks_then_looks_up(request: LLMRequest) -> ScriptedReply:
    if request.chat_ctx.items[-1].type == "function_call_output":
        return ScriptedReply(text=APPOINTMENT)
    if request.last_user_text == APPOINTMENT_QUESTION:
        return ScriptedReply(text=LOOKING, tool_calls=(ScriptedToolCall("lookup"),))
    return ScriptedReply(text="Okay.")


async def test_a_turn_over_the_words_before_a_tool_call_is_answered_under_min_words() -> None:
    """``min_words=3``: the reply speaks, then calls its tool; the caller says "Wait, stop,
    stop." (three words) while those words still play and the tool runs. The reply is
    still LiveKit's current speech then, and LiveKit's own rules apply: the speech is
    interrupted and the caller answered. The tool step's min_words guard made it
    uninterruptible from the tool call on, and LiveKit dropped the caller's turn as it
    ended ('current speech generation cannot be interrupted'): never answered (seed 871,
    where a turn ended as a later round's step started)."""
    policy = TurnPolicy(direction="inbound", first_speaker="user", max_tool_steps=3)
    agent = LookupAgent(TOOL_SECONDS)
    script = CallScript([UserLine(0.3, "question")])
    async with turn_call(
        policy,
        script,
        agent=agent,
        llm=ScriptedLLM(_speaks_then_looks_up),
        turn_handling={"interruption": {"min_words": 3}},
        settings="livekit-defaults",
    ) as tc:
        call = tc.call
        await call.wait_until(lambda: bool(agent.started), timeout=LINES["question"].duration + 4)
        await call.sleep_until(call.now() + 0.3)
        call.audio_input.say_now("stop")
        try:
            await call.wait_until(lambda: "Okay." in tc.texts("assistant"), timeout=10)
        except TimeoutError:
            raise AssertionError(f"the caller was not answered\n{tc.describe()}") from None
        context = tc.describe()

        looking = call.audio_output.segments[0]
        assert looking.interrupted, context  # cut by the caller, its words still playing
        stop_start = line_start(call, "stop")
        assert tc.segment_start(looking) < stop_start < tc.segment_start(looking) + 3, context
        assert call.messages("user")[-1].text_content == LINES["stop"].text, context
        assert APPOINTMENT not in call.tts.texts, context  # the tool's output unanswered
