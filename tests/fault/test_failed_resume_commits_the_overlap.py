"""A question asked over a ``keep_listening`` greeting is answered even when the lever
that commits it fails.

Under ``keep_listening`` + ``answer_whole`` the caller's speech over the greeting is held
as a pending user turn and committed by ``ResumeUserTurns(commit_pending=True)`` when the
greeting ends. When that lever raised, the adapter's fallback restored turn detection but
committed nothing: the caller's end of speech had come while turns were held, so LiveKit
never committed the question either, and the caller, waiting for an answer, got none
(fuzz seed 22696). The fallback now commits the held turn too.
"""

from __future__ import annotations

from faultcalls import fault_call

from turnfsm import TurnPolicy
from turnfsm import effects as fx
from turnfsm import events as ev
from turnfsm.adapters.livekit.port import LeverPort, Site
from turnfsm.adapters.sim import LINES, CallScript, UserLine
from turnfsm.adapters.sim.models import ScriptedLLM

ANSWER = "We open at nine."
GREETING = "Hi, this is Ada calling from Acme Dental about your appointment tomorrow."
"""About 5 s: the question (2.2 s from 1 s on) ends over it."""


def _failing_resume(port: LeverPort, effect: fx.ResumeUserTurns, site: Site) -> None:
    raise RuntimeError("stands for update_options or commit_user_turn raising")


async def test_a_held_overlap_is_answered_when_resuming_user_turns_fails() -> None:
    policy = TurnPolicy(direction="outbound", first_speaker="agent", greeting=GREETING)
    script = CallScript([UserLine(1.0, "question")])
    async with fault_call(
        policy, script, name="failed-resume", llm=ScriptedLLM([ANSWER]), livekit_defaults=True
    ) as fc:
        fc.adapter.levers[fx.ResumeUserTurns] = _failing_resume
        await fc.wait_reply_after(LINES["question"].text, timeout=15)
        context = fc.describe()

        resumes = fc.effects(fx.ResumeUserTurns)
        assert resumes == [fx.ResumeUserTurns(commit_pending=True)], context
        outcomes = [
            s.event.outcome
            for s in fc.steps
            if isinstance(s.event, ev.EffectOutcome) and s.event.effect == "resume_user_turns"
        ]
        assert outcomes == ["failed"], context
        answered = [("user", LINES["question"].text), ("assistant", ANSWER)]
        assert fc.history()[1:] == answered, context
        assert fc.session.turn_detection != "manual", context
