"""Testing an agent's turn-taking: the outbound caller of ``outbound_caller.py``.

Your own tests look like these: import your agent class and your policy, write what the
callee says as text with the time they say it, script the model's replies, run the call,
and check what the callee heard and what the history keeps. The ``turnfsm_call`` fixture
comes from turnfsm's pytest plugin (``pytest_plugins = ["turnfsm.adapters.sim.testing"]``
in the top-level ``conftest.py``) and runs each test on the virtual clock: the same way
every time, and fast (the barge-in call below lasts 18.4 s and costs 0.6 s of CPU).
"""

from __future__ import annotations

from livekit.agents import AgentSession
from outbound_caller import GREETING, Caller, build_policy

from turnfsm import TurnController
from turnfsm.adapters.livekit import attach
from turnfsm.testing import CallerLine, ScriptedLLM

HELLO = CallerLine("Hello?", at=0.5)
QUESTION = CallerLine("What time do you open tomorrow morning?", at=7.0)


async def test_the_greeting_answers_hello_and_plays_whole(turnfsm_call):
    call = await turnfsm_call(Caller(), build_policy(), caller=[HELLO])
    await call.run()
    call.expect.greeting_played_whole()
    call.expect.history([("user", "Hello?"), ("assistant", GREETING)])
    call.expect.no_breach()


async def test_speech_over_the_greeting_is_answered_whole_after_it(turnfsm_call):
    """The callee talks over the locked greeting: the greeting is not cut, and the whole
    question is answered once it is over (``greeting_overlap="answer_whole"``)."""
    question = CallerLine("What time do you open tomorrow morning?", at=2.5)
    call = await turnfsm_call(
        Caller(), build_policy(), caller=[HELLO, question], replies=["We open at nine."]
    )
    await call.run()
    greeting = call.expect.greeting_played_whole()
    call.expect.history(
        [
            ("user", "Hello?"),
            ("assistant", GREETING),
            ("user", "What time do you open tomorrow morning?"),
            ("assistant", "We open at nine."),
        ]
    )
    answer = call.speeches[-1]
    call.expect.that(answer.started_at > greeting.ended_at, "answered during the greeting")
    call.expect.no_breach()


async def test_a_barge_in_keeps_only_what_was_heard(turnfsm_call):
    """``interrupted_text="spoken"``: the callee cuts a long answer short; the history keeps
    the words the callee heard, so the model knows where it was cut."""
    long_answer = (
        "Your appointment is tomorrow at ten with Doctor Smith, please bring your "
        "insurance card and arrive ten minutes early to fill in the forms."
    )
    call = await turnfsm_call(
        Caller(),
        build_policy(),
        caller=[HELLO, QUESTION, CallerLine("Wait, stop, stop.", at=14.0)],
        replies=[long_answer, "Sure."],
    )
    await call.run()
    (cut,) = [speech for speech in call.speeches if speech.text == long_answer]
    assert cut.interrupted
    assert cut.committed == cut.heard  # the words the callee heard to their end
    assert len(cut.heard) < len(long_answer)
    call.expect.committed_as_heard()
    call.expect.no_breach()


async def test_livekit_text_testing_with_turnfsm_attached():
    """LiveKit's own text tests (``session.run`` + ``result.expect``) work with turnfsm
    attached: the first run's input is the callee's first words, its reply the greeting."""
    llm = ScriptedLLM(["We open at nine."])  # or your model, as in LiveKit's testing docs
    async with AgentSession(llm=llm) as session:
        attach(session, TurnController(build_policy()))
        await session.start(Caller())
        greeted = await session.run(user_input="Hello?")
        greeted.expect.next_event().is_message(role="assistant")
        assert greeted.events[0].item.text_content == GREETING
        result = await session.run(user_input="What time do you open tomorrow morning?")
        result.expect.next_event().is_message(role="assistant")
        result.expect.no_more_events()
