"""Issue 3, point 1: the outbound greeting waits for the callee, starts promptly (on the
callee's first final transcript: issue 23), plays whole over the callee's talk, follows
"Hello?" in the history, and settles the overlap (dropped, or answered as one whole turn)
— for both greeting locks, both overlap policies, and an STT whose final transcript lags
the speech by 0.9 s.

Each call: answered at 0 s, silent for 2 s, "Hello?" at 2.0 s, the greeting (4.9 s), and
the callee's ``long_overlap`` line (3.8 s) from 1.5 s into the greeting, so that it
spills 0.4 s past the greeting's end. Under LiveKit's default turn handling (a preemptive
reply to "Hello?" is prepared, and dropped: the model is never asked before the greeting)
and the simulation's (with the lagging STT: the slower, harder cell of the old pair).
"""

from __future__ import annotations

import pytest
from turncalls import (
    GREETING,
    run_scenarios,
    turn_call,
    wait_line_done,
    wait_segment,
)

from turnfsm import TurnPolicy
from turnfsm.adapters.sim import LINES, CallScript, ScriptedLLM, UserLine

HELLO_AT = 2.0
"""The callee stays silent this long after answering."""

OVERLAP_AFTER = 1.5
"""The callee starts talking this long after the greeting started playing."""

REPLY = "Sure, I will call you back later."
FRAGMENT = "A reply to part of the overlap."

PROMPT_MARGIN = 0.03
"""Allowed between the step that takes the callee's first words (their final transcript:
``greet_on="final_transcript"``) and the greeting's first audio."""


async def _greeting_call(lock: str, overlap: str, final_lag: float, settings: str) -> None:
    policy = TurnPolicy(
        direction="outbound", greeting=GREETING, greeting_lock=lock, greeting_overlap=overlap
    )
    whole = LINES["long_overlap"].text
    llm = ScriptedLLM(lambda request: REPLY if request.last_user_text == whole else FRAGMENT)
    script = CallScript([UserLine(HELLO_AT, "hello")])
    async with turn_call(policy, script, llm=llm, final_lag=final_lag, settings=settings) as tc:
        call = tc.call
        greeting = await wait_segment(call, 0, timeout=HELLO_AT + 4)
        greeting_start = tc.segment_start(greeting)
        await call.sleep_until(greeting_start + OVERLAP_AFTER)
        call.audio_input.say_now("long_overlap")
        overlap_end = await wait_line_done(
            call, "long_overlap", timeout=LINES["long_overlap"].duration + 2
        )
        if overlap == "answer_whole":
            await wait_segment(call, 1, timeout=6, finished=True)
            await call.sleep_until(call.now() + 1.0)  # nothing more comes
        else:
            await call.sleep_until(overlap_end + 3.0 + final_lag)  # a reply would be here
        context = tc.describe()

        # -- no agent audio before the callee spoke
        hello_end = HELLO_AT + LINES["hello"].duration
        hello_utterance = call.ledger.utterances_of("hello")[0]
        assert hello_utterance.ended_at is not None
        assert tc.call_time(hello_utterance.started_at) >= HELLO_AT - 0.05, context
        first_audio = min(tc.call_time(s.captured_at) for s in call.audio_output.segments)
        assert first_audio > hello_end, context

        # -- the greeting starts as the callee's first words are in (their final transcript)
        (taken,) = [step for step in tc.steps if step.before != step.after == "greeting"]
        assert taken.event.name == "user_transcript", context
        assert tc.at(taken) >= hello_end + final_lag - 0.05, context
        delay = greeting_start - tc.at(taken)
        assert 0 <= delay <= PROMPT_MARGIN, f"greeting {delay:.2f} s late\n{context}"

        # -- the callee really talked over the greeting, which still played in full
        overlap_start = tc.call_time(call.ledger.utterances_of("long_overlap")[0].started_at)
        assert greeting.finished_at is not None
        assert overlap_start < tc.call_time(greeting.finished_at) - 2.0, context
        assert overlap_end > tc.call_time(greeting.finished_at), context  # it spilled over
        assert call.tts.texts[0] == GREETING
        assert greeting.interrupted is False, context
        assert greeting.played == greeting.pushed, context
        assert abs(greeting.pushed - call.tts.duration_of(GREETING)) < 0.05

        # -- "Hello?" is in the history before the greeting; the overlap is settled
        messages = [(m.role, m.text_content) for m in call.messages()]
        head = [("user", LINES["hello"].text), ("assistant", GREETING)]
        if overlap == "drop":
            assert messages == head, context
            assert llm.requests == [], context
            assert len(call.audio_output.segments) == 1, context
        else:
            assert messages == [*head, ("user", whole), ("assistant", REPLY)], context
            asked = [r.last_user_text for r in llm.requests]
            assert asked[-1] == whole, context
            assert call.tts.texts == [GREETING, REPLY], context  # no reply to a fragment
            if settings == "sim":
                assert asked == [whole], context
            else:  # preemptive replies to the replayed overlap's first words, never played
                assert all(text is not None and text in whole for text in asked), context
            reply = call.audio_output.segments[1]
            assert len(call.audio_output.segments) == 2, context
            assert reply.started_at is not None
            assert tc.call_time(reply.started_at) > tc.call_time(greeting.finished_at)
            assert reply.played == reply.pushed, context
        assert tc.controller.state == "listening", context


@pytest.mark.parametrize(
    ("settings", "final_lag"),
    [("livekit-defaults", 0.1), ("livekit-defaults", 0.9), ("sim", 0.9)],
    ids=["livekit-defaults-final-0.1s", "livekit-defaults-final-0.9s", "sim-final-0.9s"],
)
async def test_outbound_greeting(final_lag: float, settings: str) -> None:
    await run_scenarios(
        {
            f"{lock}/{overlap}": _greeting_call(lock, overlap, final_lag, settings)
            for lock in ("mute_input", "keep_listening")
            for overlap in ("drop", "answer_whole")
        }
    )
