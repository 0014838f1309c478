"""Issue 23, point 1: the greeting starts on the callee's first final transcript
(``greet_on="final_transcript"``, the default), about 0.5 s before LiveKit's end of turn
would commit "Hello?", and no later than plain LiveKit's ``session.say`` on that final.

Checked on what the call did: "Hello?" is in the history once, before the greeting, and
LiveKit never answers it (nor a part of it) as a turn of its own; speech that goes on
after the final transcript ("Hello? ... What time do you open tomorrow morning?") is an
overlap of the greeting, answered whole after it or dropped, under both locks; with
``greet_on="end_of_turn"`` the greeting waits for LiveKit's committed turn, as before.
"""

from __future__ import annotations

import pytest
from turncalls import GREETING, run_scenarios, turn_call, wait_segment

from turnfsm import TurnPolicy
from turnfsm.adapters.sim import LINES, CallScript, ScriptedLLM, UserLine

HELLO_AT = 2.0
REPLY = "We open at nine."
QUESTION = LINES["question"].text
SETTINGS = ["livekit-defaults", "sim"]
FRAME_AFTER_FINAL = 0.03
"""The longest wait from the first words' final transcript to the greeting's first frame."""


def _policy(
    lock: str = "keep_listening", overlap: str = "answer_whole", **options: str
) -> TurnPolicy:
    return TurnPolicy(
        direction="outbound",
        greeting=GREETING,
        greeting_lock=lock,  # type: ignore[arg-type]
        greeting_overlap=overlap,  # type: ignore[arg-type]
        **options,  # type: ignore[arg-type]
    )


async def _hello_only(settings: str, lock: str) -> None:
    llm = ScriptedLLM([REPLY])
    script = CallScript([UserLine(HELLO_AT, "hello")])
    async with turn_call(_policy(lock), script, llm=llm, settings=settings) as tc:
        greeting = await wait_segment(tc.call, 0, timeout=HELLO_AT + 4)
        await tc.segment_played(0, timeout=8)
        await tc.call.sleep_until(tc.now() + 3.0)  # a second answer to "Hello?" would be here
        context = tc.describe()
        (final,) = [s for s in tc.events("user_transcript") if s.event.is_final]
        (ended,) = tc.events("user_speech_ended")
        assert (final.before, final.after) == ("awaiting_user", "greeting"), context
        assert tc.segment_start(greeting) - tc.at(final) <= FRAME_AFTER_FINAL, context
        assert tc.segment_start(greeting) < tc.at(ended), context  # before the VAD's end
        assert tc.events("user_turn_committed") == [], context
        messages = [(m.role, m.text_content) for m in tc.call.messages()]
        assert messages == [("user", "Hello?"), ("assistant", GREETING)], context
        assert llm.requests == [], context  # no reply to "Hello?", preemptive or not
        assert len(tc.call.audio_output.segments) == 1, context
        assert greeting.played == greeting.pushed, context
        assert tc.controller.state == "listening", context


@pytest.mark.parametrize("settings", SETTINGS)
async def test_the_greeting_answers_the_first_final_transcript(settings: str) -> None:
    await run_scenarios(
        {lock: _hello_only(settings, lock) for lock in ("keep_listening", "mute_input")}
    )


GAPS = {"no-vad-gap": 0.3, "new-speech": 1.2}
"""Silence between "Hello?" and the question: longer than the STT's final lag (0.1 s),
shorter than the VAD's end of speech (0.55 s), so the callee's voice never stops; or a
new speech, started while the greeting plays."""


async def _hello_then_question(settings: str, lock: str, overlap: str, gap: float) -> None:
    llm = ScriptedLLM(lambda request: REPLY)
    question_at = HELLO_AT + LINES["hello"].duration + gap
    script = CallScript([UserLine(HELLO_AT, "hello"), UserLine(question_at, "question")])
    async with turn_call(_policy(lock, overlap), script, llm=llm, settings=settings) as tc:
        greeting = await wait_segment(tc.call, 0, timeout=HELLO_AT + 4)
        await tc.segment_played(0, timeout=8)
        if overlap == "answer_whole":
            await tc.segment_played(1, timeout=8)
        await tc.call.sleep_until(tc.now() + 3.0)  # nothing more comes
        context = tc.describe()
        assert tc.segment_start(greeting) < question_at, context  # the question overlaps it
        assert greeting.played == greeting.pushed, context
        messages = [(m.role, m.text_content) for m in tc.call.messages()]
        head = [("user", "Hello?"), ("assistant", GREETING)]
        if overlap == "drop":
            assert messages == head, context
            assert llm.requests == [], context
            assert len(tc.call.audio_output.segments) == 1, context
        else:
            assert messages == [*head, ("user", QUESTION), ("assistant", REPLY)], context
            asked = [r.last_user_text for r in llm.requests]
            assert asked[-1] == QUESTION, context
            # preemptive replies to the replayed question's first words are never played
            assert all(text is not None and text in QUESTION for text in asked), context
            assert len(tc.call.audio_output.segments) == 2, context
        assert tc.controller.state == "listening", context


@pytest.mark.parametrize("settings", SETTINGS)
@pytest.mark.parametrize("gap", list(GAPS), ids=list(GAPS))
async def test_speech_after_the_final_transcript_overlaps_the_greeting(
    settings: str, gap: str
) -> None:
    await run_scenarios(
        {
            f"{lock}/{overlap}": _hello_then_question(settings, lock, overlap, GAPS[gap])
            for lock in ("keep_listening", "mute_input")
            for overlap in ("answer_whole", "drop")
        }
    )


@pytest.mark.parametrize("settings", SETTINGS)
async def test_greet_on_end_of_turn_waits_for_livekits_committed_turn(settings: str) -> None:
    policy = _policy(greet_on="end_of_turn")
    script = CallScript([UserLine(HELLO_AT, "hello")])
    async with turn_call(policy, script, settings=settings) as tc:
        greeting = await wait_segment(tc.call, 0, timeout=HELLO_AT + 4)
        context = tc.describe()
        (committed,) = tc.events("user_turn_committed")
        (ended,) = tc.events("user_speech_ended")
        assert (committed.before, committed.after) == ("awaiting_user", "greeting"), context
        assert tc.segment_start(greeting) >= tc.at(ended), context
        assert [s.after for s in tc.events("user_transcript")] == ["awaiting_user"], context
        await tc.segment_played(0, timeout=8)
        messages = [(m.role, m.text_content) for m in tc.call.messages()]
        assert messages == [("user", "Hello?"), ("assistant", GREETING)], context


INSTRUCTIONS = "Greet the callee: you are Ada from Acme Dental."
GENERATED = "Hi, Ada from Acme Dental here."


@pytest.mark.parametrize("settings", SETTINGS)
async def test_a_generated_greeting_is_asked_with_the_first_words_before_its_instructions(
    settings: str,
) -> None:
    """The model reads "Hello?", then the greeting's instructions (as in a committed
    turn's context), once, without tools; the history keeps the words and the greeting."""
    policy = TurnPolicy(direction="outbound", greeting_instructions=INSTRUCTIONS)
    llm = ScriptedLLM([GENERATED])
    script = CallScript([UserLine(HELLO_AT, "hello")])
    async with turn_call(policy, script, llm=llm, settings=settings) as tc:
        await tc.segment_played(0, timeout=HELLO_AT + 8)
        await tc.call.sleep_until(tc.now() + 2.0)
        context = tc.describe()
        (request,) = llm.requests
        texts = [
            (item.role, item.text_content)
            for item in request.chat_ctx.items
            if item.type == "message"
        ]
        assert texts[-2:] == [("user", "Hello?"), ("system", INSTRUCTIONS)], context
        assert not request.tool_names, context
        messages = [(m.role, m.text_content) for m in tc.call.messages()]
        assert messages == [("user", "Hello?"), ("assistant", GENERATED)], context
