"""Issue 9, point 4: a greeting that did not start is said again, locked; never a deaf call.

The agent's own ``on_user_turn_completed`` stops LiveKit's reply to the callee's short
"Hello?" (``StopResponse``, or an error: LiveKit logs it and skips the reply), so no
reply will be the greeting. The greeting's outcome comes back ``refused`` when the hook
ends (issue 12.3: the greeting travels in that reply's ``turn_ctx``) and the machine says
the greeting with a locked ``session.say``: it plays whole, first, and the callee's next
question is answered. A hook that drops the greeting's request from ``turn_ctx`` gets the
same retry. Under LiveKit's default turn handling (the simulation's row adds nothing
here: the retry is a plain ``session.say``, and LiveKit's preemptive reply is the harder
case). Checked on what the caller heard and on the history.

(Before issue 9 point 2 an ``llm_node`` override without ``super()`` provoked this; the
turnfsm hooks now run in front of such overrides: tests/integration/test_agent_shapes.py.)
"""

from __future__ import annotations

import logging

import pytest
from livekit.agents import StopResponse, llm
from turncalls import GREETING, TurnCall, turn_call

from turnfsm import TurnPolicy
from turnfsm import effects as fx
from turnfsm import events as ev
from turnfsm.adapters.livekit import TurnAgent
from turnfsm.adapters.livekit.turn_hook import requested_greeting
from turnfsm.adapters.sim import LINES, CallScript, ScriptedLLM, UserLine

ANSWER = "We open at nine."
QUESTION_AT = 10.0


def _short(message: llm.ChatMessage) -> bool:
    return len((message.text_content or "").split()) < 2


class StopsShortTurns(TurnAgent):
    """Filters short turns itself: no reply to "Hello?", so none can be the greeting."""

    async def on_user_turn_completed(
        self, turn_ctx: llm.ChatContext, new_message: llm.ChatMessage
    ) -> None:
        if _short(new_message):
            raise StopResponse()


class FailsOnShortTurns(TurnAgent):
    """A hook with a bug on short turns: LiveKit logs the error and skips the reply."""

    async def on_user_turn_completed(
        self, turn_ctx: llm.ChatContext, new_message: llm.ChatMessage
    ) -> None:
        if _short(new_message):
            raise RuntimeError("no customer record for this turn")


class ReplacesSystemMessages(TurnAgent):
    """Puts its own system message in the reply's context in place of the others (the
    greeting's request goes with them)."""

    async def on_user_turn_completed(
        self, turn_ctx: llm.ChatContext, new_message: llm.ChatMessage
    ) -> None:
        kept = [i for i in turn_ctx.items if i.type != "message" or i.role != "system"]
        turn_ctx.items[:] = kept
        turn_ctx.add_message(role="system", content="Today is Tuesday.")


@pytest.mark.parametrize(
    ("agent_class", "detail"),
    [
        (StopsShortTurns, "the agent's on_user_turn_completed stopped the reply"),
        (FailsOnShortTurns, "the agent's on_user_turn_completed raised RuntimeError"),
    ],
)
async def test_a_refused_greeting_is_said_again_locked(
    agent_class: type[TurnAgent], detail: str
) -> None:
    settings = "livekit-defaults"  # the retry is a plain session.say: no setting in play
    policy = TurnPolicy(direction="outbound", greeting=GREETING, greet_on="end_of_turn")
    script = CallScript([UserLine(2.0, "hello"), UserLine(QUESTION_AT, "question")])
    agent = agent_class(instructions="You are on a call.")
    async with turn_call(
        policy, script, agent=agent, llm=ScriptedLLM([ANSWER]), settings=settings
    ) as tc:
        call = tc.call
        await tc.segment_played(1, timeout=QUESTION_AT + 6)
        context = tc.describe()

        # the greeting's start was refused; the machine said it, locked
        assert _greeting_start(tc) == ("refused", detail), context
        (hello,) = tc.events("user_turn_committed")[:1]
        assert tc.effects(fx.Say) == [
            fx.Say(
                text=GREETING,
                reason="greeting",
                allow_interruptions=False,
                in_reply_to=hello.event.item_id,
            )
        ], context

        # what the caller heard: the whole greeting, first, then the answer
        assert call.tts.texts == [GREETING, ANSWER], context
        _assert_played_whole(tc, context)
        history = [(m.role, m.text_content) for m in call.messages()]
        assert history == [
            ("assistant", GREETING),
            ("user", LINES["question"].text),
            ("assistant", ANSWER),
        ], context
        assert tc.adapter.outcomes.counts == {}, context


async def test_a_greeting_dropped_from_turn_ctx_is_said_locked_first() -> None:
    """The hook let LiveKit reply, but from a context without the greeting's request:
    that reply is the agent's own, so the greeting is refused and said first, locked."""
    policy = TurnPolicy(direction="outbound", greeting=GREETING, greet_on="end_of_turn")
    script = CallScript([UserLine(2.0, "hello")])
    agent = ReplacesSystemMessages(instructions="You are on a call.")
    llm_ = ScriptedLLM(["Hello there."])
    async with turn_call(policy, script, agent=agent, llm=llm_, settings="livekit-defaults") as tc:
        call = tc.call
        await tc.segment_played(1, timeout=12)
        context = tc.describe()
        removed = "the agent's on_user_turn_completed removed it from turn_ctx"
        assert _greeting_start(tc) == ("refused", removed), context
        assert call.tts.texts == [GREETING, "Hello there."], context
        _assert_played_whole(tc, context)
        assert [requested_greeting(r.chat_ctx) for r in llm_.requests] == [None], context
        # that reply waits behind the greeting: the agent's turn when the greeting ends
        # (not the caller's, while LiveKit plays it: O7)
        greeting_end = [s for s in tc.events("agent_speech_ended") if s.before == "greeting"]
        assert [s.after for s in greeting_end] == ["speaking"], context


@pytest.mark.parametrize("settings", ["livekit-defaults", "sim"])
async def test_a_greeting_whose_start_fails_in_the_turn_hook_still_answers_hello(
    settings: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The greeting's start fails inside ``on_user_turn_completed`` of "Hello?" (its lever
    raises): the retry, in the same hook, makes the reply to "Hello?" the greeting, so
    "Hello?" stays in the history before it (a plain ``session.say`` there left LiveKit's
    reply empty and "Hello?" out of the history: fuzz seed 564)."""
    policy = TurnPolicy(direction="outbound", greeting=GREETING, greet_on="end_of_turn")
    script = CallScript([UserLine(2.0, "hello")])
    async with turn_call(policy, script, settings=settings) as tc:

        def session_refuses(port: object, effect: fx.StartGreeting, site: object) -> None:
            raise ConnectionError("the session refused the greeting")

        tc.adapter.levers[fx.StartGreeting] = session_refuses
        await tc.segment_played(0, timeout=10)
        await tc.call.sleep_until(tc.now() + 1.0)
        context = tc.describe()
        assert _greeting_start(tc) == ("failed", "ConnectionError"), context
        (hello,) = tc.events("user_turn_committed")
        (retry,) = tc.effects(fx.Say)
        assert retry.in_reply_to == hello.event.item_id, context
        _assert_played_whole(tc, context)
        history = [(m.role, m.text_content) for m in tc.call.messages()]
        assert history == [("user", "Hello?"), ("assistant", GREETING)], context
        assert tc.call.tts.texts == [GREETING], context  # pre-rendered, played once
        assert tc.adapter.outcomes.counts == {}, context
    # the one failure is the lever's own, logged once (the suite fails on any other)
    failures = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(failures) == 1, failures
    assert failures[0].startswith("turnfsm: lever start_greeting failed"), failures
    caplog.clear()


def _greeting_start(tc: TurnCall) -> tuple[str, str]:
    """The outcome of the greeting's start, and its detail."""
    (outcome,) = [
        s.event
        for s in tc.events("effect_outcome")
        if isinstance(s.event, ev.EffectOutcome) and s.event.effect == fx.StartGreeting.name
    ]
    return outcome.outcome, outcome.detail


def _assert_played_whole(tc: TurnCall, context: str) -> None:
    greeting = tc.call.audio_output.segments[0]
    assert greeting.interrupted is False, context
    assert greeting.played == greeting.pushed, context
    assert abs(greeting.pushed - tc.call.tts.duration_of(GREETING)) < 0.05, context
