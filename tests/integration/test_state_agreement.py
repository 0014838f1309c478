"""Issue 24: the machine agrees with the session (O7), and a turn LiveKit declines leaves
nothing pending in the machine.

The caller asks a question whose answer needs a 3 s tool; 1 s into the tool they say
"Mhm." and then nothing. With ``min_words=2`` that one-word turn is no turn: the machine
declines it at LiveKit's end of it (``user_turn_ended``), as LiveKit declines one over a
playing reply; no history item, no reply, and the tool's reply plays whole. Under
LiveKit's default turn handling LiveKit has also prepared a reply to "Mhm."
(``preemptive_generation``): declined as LiveKit declines under ``min_words``, that reply
is cancelled with the turn and ends unplayed, so the machine is back in ``listening``
when the tool's reply ends, and with ``idle_timeout=3`` the idle re-prompt plays 3 s
later. (Once the turn was declined in the agent's hook, where LiveKit leaves the reply it
prepared parked: never scheduled, never played, never ended; the machine waited for it,
``speaking`` to the end of the call while LiveKit's agent listened, and no re-prompt. O7
caught it: ``speaking`` with no speech in flight.)

The same holds when the agent's own ``on_user_turn_completed`` stops the reply to a
backchannel (``StopResponse``) after an answer: LiveKit leaves the reply it prepared
parked there too.

Every call runs strict: an O7 breach fails the test (the adapter logs it).
"""

from __future__ import annotations

import pytest
from livekit.agents import StopResponse, llm
from livekit.agents.voice.events import AgentFalseInterruptionEvent
from turncalls import (
    APPOINTMENT,
    APPOINTMENT_QUESTION,
    SETTING_ROWS,
    LookupAgent,
    lookup_reply,
    turn_call,
)

from turnfsm import TurnPolicy
from turnfsm import effects as fx
from turnfsm import events as ev
from turnfsm.adapters.livekit import TurnAgent
from turnfsm.adapters.livekit.prerender import PRERENDERED
from turnfsm.adapters.sim import (
    LINES,
    CallScript,
    ScriptedLLM,
    UserLine,
    spoken_line,
)

MHM = spoken_line("Mhm.", duration=0.6)
"""One word: under ``min_words=2`` LiveKit declines it as a turn over a tool step."""
TOOL_SECONDS = 3.0
IDLE = 3.0


@pytest.mark.parametrize("settings", SETTING_ROWS)
async def test_a_declined_backchannel_leaves_no_phantom_speaking(settings: str) -> None:
    policy = TurnPolicy(
        direction="inbound", first_speaker="user", idle_timeout=IDLE, max_tool_steps=3
    )
    agent = LookupAgent(TOOL_SECONDS)
    async with turn_call(
        policy,
        CallScript([UserLine(0.3, "question")]),
        agent=agent,
        llm=ScriptedLLM(lookup_reply),
        turn_handling={"interruption": {"min_words": 2}},
        settings=settings,
    ) as tc:
        call = tc.call
        await call.wait_until(lambda: bool(agent.started), timeout=LINES["question"].duration + 4)
        await call.sleep_until(tc.call_time(agent.started[0]) + 1.0)
        call.audio_input.say_now(MHM)
        reply = await tc.segment_played(0, timeout=TOOL_SECONDS + 4)
        reprompt = await tc.segment_played(1, timeout=IDLE + 3)
        context = tc.describe()
        # what the caller heard: the tool's reply whole, then the re-prompt, IDLE s later;
        # the TTS rendered the re-prompt as the call started and said only the tool's reply
        # live (the tool-cap fallback waits for the cap)
        assert call.tts.texts == [policy.idle_message, APPOINTMENT], context
        for segment, text in ((reply, APPOINTMENT), (reprompt, policy.idle_message)):
            assert segment.interrupted is False, context
            assert segment.played == segment.pushed, context
            assert abs(segment.pushed - call.tts.duration_of(text)) < 0.1, context
        # the idle timer ran its whole IDLE s from the reply's end, and the re-prompt's
        # first frame left as it fired: pre-rendered, no TTS first byte to wait for (float
        # sums on the virtual clock: exact to a microsecond)
        reply_end = tc.segment_start(reply) + reply.played
        (fired,) = tc.events("idle_timer_expired")
        assert tc.at(fired) - reply_end >= IDLE - 1e-6, context
        assert tc.segment_start(reprompt) - tc.at(fired) < 0.005, context
        (said,) = [s for s in tc.events("effect_outcome") if s.event.effect == "say"]
        assert said.event.detail == PRERENDERED, context
        # the history: "Mhm." was no turn, nothing answered it
        assert tc.texts("user") == [APPOINTMENT_QUESTION], context
        assert tc.texts("assistant") == [APPOINTMENT, policy.idle_message], context
        # the machine declined the turn at LiveKit's end of it, while the tool ran, and
        # what LiveKit prepared for it was cancelled with it, as under its own min_words:
        # ended unplayed, nothing waits for it
        ended, *_ = tc.events("user_turn_ended")
        assert (ended.before, ended.event.words) == ("tool_loop", 1), context
        assert fx.RejectUserTurn() in ended.effects, context
        prepared = [s.event.speech_id for s in tc.events("agent_speech_created")][1:-1]
        if settings == "livekit-defaults":  # preemptive generation prepared a reply
            assert len(prepared) == 1, context
            (cancelled,) = [
                s for s in tc.events("agent_speech_ended") if s.event.speech_id == prepared[0]
            ]
            assert cancelled.event.played_seconds == 0, context
            assert tc.at(cancelled) - tc.at(ended) < 0.1, context
        else:
            assert prepared == [], context
        assert len(call.audio_output.segments) == 2, context
        # listening from the end of the tool's reply on: the re-prompt is the idle timer's
        tool_speech = tc.events("tool_step_started")[0].event.speech_id
        (reply_ended,) = [
            s for s in tc.events("agent_speech_ended") if s.event.speech_id == tool_speech
        ]
        assert (reply_ended.before, reply_ended.after) == ("speaking", "listening"), context
        idle = tc.events("idle_timer_expired")
        assert [s.before for s in idle] == ["listening"], context
        assert tc.adapter.outcomes.agreement_breaches == [], context


class IgnoresBackchannels(TurnAgent):
    """Answers questions; "Uh-huh." gets no reply (the agent's own hook stops it)."""

    async def on_user_turn_completed(
        self, turn_ctx: llm.ChatContext, new_message: llm.ChatMessage
    ) -> None:
        if new_message.text_content == LINES["uh_huh"].text:
            raise StopResponse()


@pytest.mark.parametrize("settings", SETTING_ROWS)
async def test_a_backchannel_the_agent_stops_leaves_no_phantom_speaking(settings: str) -> None:
    policy = TurnPolicy(direction="inbound", first_speaker="user", idle_timeout=IDLE)
    agent = IgnoresBackchannels(instructions="You answer questions.")
    async with turn_call(
        policy,
        CallScript([UserLine(0.3, "question")]),
        agent=agent,
        llm=ScriptedLLM(["We open at nine."]),
        settings=settings,
    ) as tc:
        call = tc.call
        answer = await tc.segment_played(0, timeout=LINES["question"].duration + 4)
        await call.sleep_until(tc.segment_start(answer) + answer.played + 0.5)
        call.audio_input.say_now("uh_huh")
        reprompt = await tc.segment_played(1, timeout=LINES["uh_huh"].duration + IDLE + 3)
        context = tc.describe()
        # the re-prompt rendered as the call started, played from memory
        assert call.tts.texts == [policy.idle_message, "We open at nine."], context
        assert reprompt.interrupted is False, context
        assert tc.texts("user") == [APPOINTMENT_QUESTION], (
            context
        )  # StopResponse: not in the history
        assert tc.texts("assistant") == ["We open at nine.", policy.idle_message], context
        (step,) = tc.events("user_turn_declined")
        assert isinstance(step.event, ev.UserTurnDeclined)
        assert step.event.reason == "stopped_by_agent", context
        assert step.after == "listening", context
        if settings == "livekit-defaults":  # the reply prepared for "Uh-huh." is stopped
            prepared = step.event.prepared_speech_id
            assert (step.before, step.effects[0]) == (
                "speaking",
                fx.Interrupt(force=True, speech_id=prepared),
            ), context
        idle = tc.events("idle_timer_expired")
        assert [s.before for s in idle] == ["listening"], context
        assert tc.adapter.outcomes.agreement_breaches == [], context


async def test_a_false_interruption_is_heard_as_a_declined_turn() -> None:
    """LiveKit resumed a speech the caller's noise paused: no turn, nothing prepared."""
    policy = TurnPolicy(direction="inbound", first_speaker="user")
    async with turn_call(policy) as tc:
        tc.session.emit("agent_false_interruption", AgentFalseInterruptionEvent(resumed=True))
        (step,) = tc.events("user_turn_declined")
        assert step.event == ev.UserTurnDeclined(
            at=step.event.at, reason="false_interruption", item_id="", prepared_speech_id=""
        )
        assert (step.before, step.after, step.effects) == ("listening", "listening", ())
