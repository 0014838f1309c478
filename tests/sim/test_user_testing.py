"""Issue 18.6: the user-facing testing helpers (``turnfsm.testing``'s simulated calls).

Each check a user runs (``call.expect.*``) passes on a right call and fails, with the
call's description, on a call a seeded bug broke (a lever replaced by one that does
nothing): the helpers can fail, and say why.
"""

from __future__ import annotations

import pytest
from livekit.agents import RunContext, function_tool

from turnfsm import TurnPolicy
from turnfsm import effects as fx
from turnfsm.adapters.livekit import TurnAgent
from turnfsm.adapters.sim import ScriptedLLM
from turnfsm.adapters.sim.testing import CallerLine, SimulatedTurnCall, simulate_call

GREETING = "Hi, this is Ada calling from Acme Dental about your appointment tomorrow."
HELLO = CallerLine("Hello?", at=0.5)
OVERLAP = CallerLine("Hi, yes, who is this? I was not expecting a call today.", at=2.5)
QUESTION = CallerLine("What time do you open tomorrow morning?", at=8.0)
STOP = CallerLine("Wait, stop, stop.", at=15.0)
LONG_ANSWER = (
    "Your appointment is tomorrow at ten with Doctor Smith, please bring your insurance "
    "card and arrive ten minutes early to fill in the forms."
)


def outbound(**options: object) -> TurnPolicy:
    return TurnPolicy(direction="outbound", greeting=GREETING, **options)  # type: ignore[arg-type]


def does_nothing(port: object, effect: object, site: object) -> None:
    """A seeded bug: the lever carries out nothing."""


def seed_bug(call: SimulatedTurnCall, effect: type[fx.Effect]) -> None:
    call.adapter.levers[effect] = does_nothing


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"text": " ", "at": 0.0}, "CallerLine.text must hold at least one word"),
        ({"text": "Hello?", "at": -1.0}, "CallerLine.at must be a call time >= 0"),
        ({"text": "Hello?", "at": "soon"}, "CallerLine.at must be a call time >= 0"),
        ({"text": "Hello?", "at": 0.0, "duration": 0.1}, "CallerLine.duration must be at least"),
    ],
)
def test_a_bad_caller_line_is_refused_naming_the_field(
    arguments: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        CallerLine(**arguments)  # type: ignore[arg-type]


async def test_any_text_is_spoken_for_its_duration_and_transcribed() -> None:
    """No recording: a line made from its text lasts its duration, and the STT gets it."""
    lines = [
        CallerLine("Hello, is this the dentist?", at=0.5, duration=1.5),
        CallerLine("I would like to move my appointment to Friday.", at=8.0),
    ]
    async with simulate_call(TurnAgent(instructions="x"), outbound(), caller=lines) as call:
        await call.run()
        said = call.call.ledger.utterances
        assert [u.line.text for u in said] == [line.text for line in lines]
        first, second = (u.ended_at - u.started_at for u in said)  # type: ignore[operator]
        assert first == pytest.approx(1.5, abs=0.02)
        assert second == pytest.approx(len(lines[1].text) / 14, abs=0.02)
        call.expect.greeting_played_whole()
        assert [text for role, text in call.history if role == "user"] == [
            line.text for line in lines
        ]


async def test_the_caller_can_react_to_the_call() -> None:
    async with simulate_call(TurnAgent(instructions="x"), outbound(), caller=[HELLO]) as call:
        await call.run()
        call.say("Sorry, who is this?")
        await call.run()
        assert call.history[-2] == ("user", "Sorry, who is this?")
        assert call.history[-1][0] == "assistant"


async def test_the_greeting_check_passes_on_a_locked_greeting_and_fails_on_a_cut_one() -> None:
    async with simulate_call(
        TurnAgent(instructions="x"), outbound(), caller=[HELLO, OVERLAP]
    ) as call:
        await call.run()
        greeting = call.expect.greeting_played_whole()
        assert greeting.text == GREETING
        call.expect.no_breach()
    # the seeded bug: the greeting is never locked, so the overlap cuts it (the turn
    # hook's reply, which LockSpeech locks: one started on the final transcript is
    # created locked)
    policy = outbound(greeting_overlap="drop", greet_on="end_of_turn")
    async with simulate_call(
        TurnAgent(instructions="x"), policy, caller=[HELLO, OVERLAP], livekit_defaults=False
    ) as call:
        seed_bug(call, fx.LockSpeech)
        seed_bug(call, fx.HoldUserTurns)
        await call.run()
        with pytest.raises(AssertionError, match="the greeting did not play whole") as failure:
            call.expect.greeting_played_whole()
    message = str(failure.value)
    assert "caller   2.5" in message  # the description: the caller's lines,
    assert "greeting->" in message  # the machine's steps,
    assert f"history: assistant: {call.greeting.committed!r}" in message  # type: ignore[union-attr]
    assert "segment 0:" in message  # and the loudspeaker's segments


async def test_committed_as_heard_passes_under_spoken_and_fails_when_all_is_kept() -> None:
    for kept in ("spoken", "keep"):
        async with simulate_call(
            TurnAgent(instructions="x"),
            outbound(interrupted_text=kept),
            caller=[HELLO, QUESTION, STOP],
            replies=[LONG_ANSWER],
        ) as call:
            await call.run()
            (cut,) = [s for s in call.speeches if s.text == LONG_ANSWER]
            assert cut.interrupted
            assert 0 < cut.played_seconds < cut.audio_seconds
            if kept == "spoken":
                call.expect.committed_as_heard()
                assert cut.committed == cut.heard
                continue
            assert cut.committed == LONG_ANSWER
            with pytest.raises(AssertionError, match="but the caller heard only"):
                call.expect.committed_as_heard()


class Booker(TurnAgent):
    def __init__(self) -> None:
        super().__init__(instructions="You book appointments.")

    @function_tool
    async def lookup_slot(self, context: RunContext) -> str:
        """Find a free slot."""
        return "none yet"


async def test_tool_rounds_are_counted_per_turn_and_the_cap_check_can_fail() -> None:
    looping = {"llm": ScriptedLLM(always_call_tool="lookup_slot")}
    async with simulate_call(
        Booker(), outbound(max_tool_steps=2), caller=[HELLO, QUESTION], **looping
    ) as call:
        await call.run()
        assert call.tool_rounds == [0, 2]  # "Hello?" (the greeting), the question
        call.expect.tool_rounds_capped()
    looping = {"llm": ScriptedLLM(always_call_tool="lookup_slot")}
    async with simulate_call(
        Booker(), outbound(max_tool_steps=2), caller=[HELLO, QUESTION], **looping
    ) as call:
        seed_bug(call, fx.CancelToolReply)  # LiveKit's own cap lets one more round through
        await call.run()
        assert call.tool_rounds[-1] > 2
        with pytest.raises(AssertionError, match=r"tool rounds per turn \[0, [3-9]\] exceed 2"):
            call.expect.tool_rounds_capped()


async def test_no_breach_fails_on_a_lever_that_raised() -> None:
    def raises(port: object, effect: object, site: object) -> None:
        raise RuntimeError("seeded")

    async with simulate_call(TurnAgent(instructions="x"), outbound(), caller=[HELLO]) as call:
        call.adapter.levers[fx.ResumeUserTurns] = raises
        await call.run()
        with pytest.raises(AssertionError, match="lever resume_user_turns failed"):
            call.expect.no_breach()


async def test_run_fails_with_the_description_when_the_call_is_never_quiet() -> None:
    async with simulate_call(TurnAgent(instructions="x"), outbound(), caller=[HELLO]) as call:
        with pytest.raises(AssertionError, match="not quiet after 1.0 s") as failure:
            await call.run(timeout=1.0)
    assert "caller   0.5" in str(failure.value)


async def test_run_until_a_time_and_an_unanswered_call() -> None:
    """Nobody picks up, nobody speaks (words would answer the call: the machine greets)."""
    async with simulate_call(TurnAgent(instructions="x"), outbound(), answer_at=None) as call:
        await call.run(until=5.0)
        assert call.now() == pytest.approx(5.0)
        assert call.controller.state == "ringing"
        assert call.greeting is None
        with pytest.raises(AssertionError, match="no greeting was started"):
            call.expect.greeting_played_whole()
