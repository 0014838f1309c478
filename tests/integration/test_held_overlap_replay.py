"""Everything said over a muted greeting is answered as one turn.

Under ``mute_input`` + ``answer_whole`` the caller's audio over the greeting is held and
replayed after it (4x real time). LiveKit committed the first replayed utterance on its
own; the reply to it ran a tool step whose mute (``mute_input_during_tools``) cut the
rest of the replay apart, or lost it: the caller's question asked over the greeting went
unanswered (fuzz seed 434 and 15 of the 20000-29999 run). The machine now holds user
turns while the replay runs and commits what it held as one turn.
"""

from __future__ import annotations

import pytest
from turncalls import SETTING_ROWS, LookupAgent, turn_call

from turnfsm import TurnPolicy
from turnfsm import effects as fx
from turnfsm.adapters.sim import LINES, CallScript, LLMRequest, ScriptedReply, UserLine
from turnfsm.adapters.sim.models import ScriptedLLM, ScriptedToolCall
from turnfsm.adapters.sim.speech import spoken_line
from turnfsm.rules import turns_held

GREETING = (
    "Hello, this is Ada calling from Acme Dental about your appointment tomorrow morning,"
    " do you have a minute?"
)
"""About 7 s: room for a backchannel and a question over it."""
UH_HUH = spoken_line("Uh-huh.", duration=0.45)
QUESTION = LINES["question"]
ANSWER = "We open at nine."


def _answer_after_a_lookup(request: LLMRequest) -> ScriptedReply:
    """Every turn is answered after a tool round (its step mutes the caller)."""
    if request.chat_ctx.items[-1].type == "function_call_output":
        return ScriptedReply(text=ANSWER)
    return ScriptedReply(tool_calls=(ScriptedToolCall("lookup"),))


@pytest.mark.parametrize("settings", SETTING_ROWS)
async def test_a_backchannel_and_a_question_over_the_greeting_are_one_turn(
    settings: str,
) -> None:
    policy = TurnPolicy(
        direction="outbound",
        first_speaker="agent",
        greeting=GREETING,
        greeting_lock="mute_input",
        greeting_overlap="answer_whole",
        mute_input_during_tools=True,
    )
    script = CallScript([UserLine(1.0, UH_HUH), UserLine(2.5, "question")])
    async with turn_call(
        policy,
        script,
        agent=LookupAgent(tool_seconds=1.0),
        llm=ScriptedLLM(_answer_after_a_lookup),
        settings=settings,
    ) as tc:
        call = tc.call
        await call.wait_until(
            lambda: ANSWER in tc.texts("assistant") and tc.controller.state == "listening",
            timeout=25,
        )
        context = tc.describe()

        greeting_end = next(
            tc.at(step) for step in tc.steps if step.before == "greeting" != step.after
        )
        assert greeting_end > 2.5 + QUESTION.duration, context  # both said over it
        # one turn: both utterances, answered once, its answer played whole
        assert tc.texts("user") == [f"Uh-huh. {QUESTION.text}"], context
        assert tc.texts("assistant") == [GREETING, ANSWER], context
        assert [s.interrupted for s in call.audio_output.segments] == [False, False], context
        # held from the greeting's end until the replay was over, then committed
        holds = [tc.at(s) for s in tc.steps if fx.HoldUserTurns() in s.effects]
        resumes = [
            (tc.at(s), e) for s in tc.steps for e in s.effects if isinstance(e, fx.ResumeUserTurns)
        ]
        assert holds == [greeting_end], context
        assert len(resumes) == 1, context
        resumed_at, resume = resumes[0]
        assert resume.commit_pending, context
        assert resumed_at == pytest.approx(greeting_end * 1.25, abs=0.3), context
        assert not turns_held(
            tc.controller.policy, {tc.controller.state, tc.controller.configuration[0]}
        ), context
