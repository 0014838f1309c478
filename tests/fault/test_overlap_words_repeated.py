"""A caller who repeats the words of a dropped overlap in a later turn gets an answer, and
the outcome monitor does not take that turn for the overlap (O3).

Found by ``turnfsm fuzz`` (seed 2042 in tests/fuzz/regressions.toml): "Hello?" said over
the greeting is dropped (``greeting_overlap="drop"``); later, "Hello? Can you hear me?"
is a turn of its own, answered as it should be, but the monitor found the overlap's words
in it and reported that the overlap was answered.
"""

from __future__ import annotations

import asyncio

from faultcalls import GREETING, fault_call, outbound

from turnfsm.adapters.sim import ScriptedLLM, spoken_line

HELLO = spoken_line("Hello?", duration=0.5, seed=1)
HELLO_AGAIN = spoken_line("Hello? Can you hear me?", duration=1.6, seed=2)
REPLY = "Yes, I can hear you."


async def test_a_turn_that_repeats_a_dropped_overlap_is_a_new_turn() -> None:
    policy = outbound(
        greeting_lock="keep_listening", greeting_overlap="drop", first_speaker="user"
    )
    model = ScriptedLLM((), default_reply=REPLY)
    async with fault_call(policy, name="overlap-words-repeated", llm=model) as fc:
        fc.call.audio_input.say_now(HELLO)  # the callee's first words: the greeting answers
        await fc.wait_step(lambda s: s.event.name == "agent_speech_started", timeout=5)
        fc.call.audio_input.say_now(HELLO)  # over the greeting: dropped
        await fc.wait_state("listening", timeout=10)
        await asyncio.sleep(2.0)
        fc.call.audio_input.say_now(HELLO_AGAIN)
        await fc.wait_reply_after(HELLO_AGAIN.text, timeout=15)
    history = fc.history()
    assert ("assistant", GREETING) in history, fc.describe()
    assert history[-2:] == [("user", HELLO_AGAIN.text), ("assistant", REPLY)], fc.describe()
    assert dict(fc.adapter.outcomes.counts) == {}, fc.describe()
