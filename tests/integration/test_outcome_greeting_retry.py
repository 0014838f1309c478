"""Issue 9, point 4: a greeting that did not start is said again, locked; never a deaf call.

The agent overrides ``llm_node`` without calling ``super()``, so the reply to the callee's
"Hello?" never takes the greeting: the model's own reply plays instead. The greeting's
outcome comes back ``refused`` (another reply played first) and the machine says the
greeting once more with a locked ``session.say``: it plays whole, and the callee's next
question is answered. The outcome monitor reports the reply that reached the caller
before the greeting (O1). Checked on what the caller heard and on the history.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from livekit.agents import llm
from turncalls import GREETING, turn_call, wait_segment

from turnfsm import TurnPolicy
from turnfsm import effects as fx
from turnfsm import events as ev
from turnfsm.adapters.livekit import TurnAgent
from turnfsm.adapters.sim import LINES, CallScript, ScriptedLLM, UserLine

OWN_REPLY = "Hello there, how can I help you today?"
ANSWER = "We open at nine."
QUESTION_AT = 13.0


class OwnLLMNodeAgent(TurnAgent):
    """Replies with its own stream: the greeting handed to ``llm_node`` is never taken."""

    async def llm_node(self, chat_ctx: llm.ChatContext, tools: Any, model_settings: Any) -> Any:
        async def own() -> AsyncIterator[str]:
            last = chat_ctx.items[-1]
            asked = (
                isinstance(last, llm.ChatMessage) and last.text_content == LINES["question"].text
            )
            yield ANSWER if asked else OWN_REPLY

        return own()


async def test_a_refused_greeting_is_said_again_locked(caplog: pytest.LogCaptureFixture) -> None:
    policy = TurnPolicy(direction="outbound", greeting=GREETING)
    script = CallScript([UserLine(2.0, "hello"), UserLine(QUESTION_AT, "question")])
    agent = OwnLLMNodeAgent(instructions="You are on a call.")
    async with turn_call(policy, script, agent=agent, llm=ScriptedLLM()) as tc:
        tc.adapter.outcomes.strict = False  # O1 fires, as it must; checked below
        call = tc.call
        try:
            await wait_segment(call, 2, timeout=QUESTION_AT + 6, finished=True)
        except TimeoutError:
            raise AssertionError(tc.describe()) from None
        context = tc.describe()

        # the greeting's start was refused; the machine said it again, locked
        outcomes = [s.event for s in tc.events("effect_outcome")]
        greeting_outcome = next(o for o in outcomes if o.effect == fx.StartGreeting.name)
        assert isinstance(greeting_outcome, ev.EffectOutcome)
        assert greeting_outcome.outcome == "refused", context
        assert tc.effects(fx.Say) == [
            fx.Say(text=GREETING, reason="greeting", allow_interruptions=False)
        ], context

        # what the caller heard: the model's reply, the whole greeting, then the answer
        assert call.tts.texts == [OWN_REPLY, GREETING, ANSWER], context
        greeting = call.audio_output.segments[1]
        assert greeting.interrupted is False, context
        assert greeting.played == greeting.pushed, context
        assert abs(greeting.pushed - call.tts.duration_of(GREETING)) < 0.05, context
        history = [(m.role, m.text_content) for m in call.messages()]
        assert history == [
            ("user", LINES["hello"].text),
            ("assistant", OWN_REPLY),
            ("assistant", GREETING),
            ("user", LINES["question"].text),
            ("assistant", ANSWER),
        ], context
        assert tc.adapter.outcomes.counts == {"O1": 1}, context
    warnings = [r.getMessage() for r in caplog.get_records("call") if r.levelno >= logging.WARNING]
    turnfsm_warnings = [m for m in warnings if m.startswith("turnfsm")]
    assert len(turnfsm_warnings) == 1, warnings
    assert turnfsm_warnings[0].startswith("turnfsm: outcome check O1 no_audio_before_greeting")
    caplog.clear()  # the breach this test provokes is no failure of the adapter
