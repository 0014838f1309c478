"""Issue 9, point 4: a greeting that did not start is said again, locked; never a deaf call.

The agent's own ``on_user_turn_completed`` stops LiveKit's reply to the callee's short
"Hello?" (``StopResponse``), so no reply will take the greeting. The greeting's outcome
comes back ``refused`` and the machine says the greeting with a locked ``session.say``:
it plays whole, first, and the callee's next question is answered. Under LiveKit's
default turn handling (the simulation's row adds nothing here: the retry is a plain
``session.say``, and LiveKit's preemptive reply is the harder case). Checked on what the
caller heard and on the history.

(Before issue 9 point 2 an ``llm_node`` override without ``super()`` provoked this; the
turnfsm hooks now run in front of such overrides: tests/integration/test_agent_shapes.py.)
"""

from __future__ import annotations

from livekit.agents import StopResponse, llm
from turncalls import GREETING, turn_call, wait_segment

from turnfsm import TurnPolicy
from turnfsm import effects as fx
from turnfsm import events as ev
from turnfsm.adapters.livekit import TurnAgent
from turnfsm.adapters.sim import LINES, CallScript, ScriptedLLM, UserLine

ANSWER = "We open at nine."
QUESTION_AT = 10.0


class StopsShortTurns(TurnAgent):
    """Filters short turns itself: no reply to "Hello?", so none can be the greeting."""

    async def on_user_turn_completed(
        self, turn_ctx: llm.ChatContext, new_message: llm.ChatMessage
    ) -> None:
        if len((new_message.text_content or "").split()) < 2:
            raise StopResponse()


async def test_a_refused_greeting_is_said_again_locked() -> None:
    settings = "livekit-defaults"  # the retry is a plain session.say: no setting in play
    policy = TurnPolicy(direction="outbound", greeting=GREETING)
    script = CallScript([UserLine(2.0, "hello"), UserLine(QUESTION_AT, "question")])
    agent = StopsShortTurns(instructions="You are on a call.")
    async with turn_call(
        policy, script, agent=agent, llm=ScriptedLLM([ANSWER]), settings=settings
    ) as tc:
        call = tc.call
        try:
            await wait_segment(call, 1, timeout=QUESTION_AT + 6, finished=True)
        except TimeoutError:
            raise AssertionError(tc.describe()) from None
        context = tc.describe()

        # the greeting's start was refused; the machine said it, locked
        outcomes = [s.event for s in tc.events("effect_outcome")]
        greeting_outcome = next(o for o in outcomes if o.effect == fx.StartGreeting.name)
        assert isinstance(greeting_outcome, ev.EffectOutcome)
        assert greeting_outcome.outcome == "refused", context
        assert tc.effects(fx.Say) == [
            fx.Say(text=GREETING, reason="greeting", allow_interruptions=False)
        ], context

        # what the caller heard: the whole greeting, first, then the answer
        assert call.tts.texts == [GREETING, ANSWER], context
        greeting = call.audio_output.segments[0]
        assert greeting.interrupted is False, context
        assert greeting.played == greeting.pushed, context
        assert abs(greeting.pushed - call.tts.duration_of(GREETING)) < 0.05, context
        history = [(m.role, m.text_content) for m in call.messages()]
        assert history == [
            ("assistant", GREETING),
            ("user", LINES["question"].text),
            ("assistant", ANSWER),
        ], context
        assert tc.adapter.outcomes.counts == {}, context
