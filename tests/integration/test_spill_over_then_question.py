"""Under ``mute_input`` + ``drop``, a question asked right after a spill-over is new
speech, answered without an outcome breach.

The caller talks over the end of a muted greeting: the speech that starts within
``spill_over_window`` after the unmute is the tail of that overlap, and is dropped (held,
then cleared at its end). The machine takes only that first speech for the tail. The
outcome monitor took any speech starting in the window for the overlap's, so a question
the caller began after the tail had ended, still within the window, was judged an
answered overlap fragment (O3) although it was said after the greeting (fuzz seed 24019:
a false breach). Both now agree: the window holds one spill-over.
"""

from __future__ import annotations

from turncalls import turn_call

from turnfsm import TurnPolicy
from turnfsm import effects as fx
from turnfsm.adapters.sim import LINES, CallScript, ScriptedLLM, UserLine

GREETING = "Hi, this is Ada from Acme Dental, calling about your appointment."
GREETING_END = 4.37
"""Where the greeting ends (call time): fixed, as the call runs on the virtual clock."""
ANSWER = "We open at nine."


async def test_a_question_after_the_spill_over_is_new_speech() -> None:
    policy = TurnPolicy(
        direction="inbound",
        first_speaker="agent",
        greeting=GREETING,
        greeting_lock="mute_input",
        greeting_overlap="drop",
        spill_over_window=2.0,
    )
    script = CallScript(
        [UserLine(GREETING_END - 0.2, "hello"), UserLine(GREETING_END + 1.2, "question")]
    )
    llm = ScriptedLLM([ANSWER])
    async with turn_call(policy, script, llm=llm, settings="livekit-defaults") as tc:
        await tc.call.wait_until(lambda: ANSWER in tc.texts("assistant"), timeout=12)
        context = tc.describe()

        greeting_end = next(
            tc.at(step) for step in tc.steps if step.before == "greeting" != step.after
        )
        # "Hello?" spilled over the greeting's end; the question began in the window
        hello_at = GREETING_END - 0.2
        assert hello_at < greeting_end < hello_at + LINES["hello"].duration, context
        starts = [tc.at(s) for s in tc.steps if s.event.name == "user_speech_started"]
        assert len(starts) == 2, context
        assert greeting_end < starts[1] < greeting_end + policy.spill_over_window, context
        # the tail was dropped, the question answered, and nothing breached
        assert len(tc.effects(fx.ClearUserTurn)) == 1, context
        assert tc.texts("user") == [LINES["question"].text], context
        assert dict(tc.adapter.outcomes.counts) == {}, context
