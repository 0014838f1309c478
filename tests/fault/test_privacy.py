"""Issue 6.3: transcript text leaves the process only when the user opts in.

Two real calls run side by side with the same callee and replies; one controller keeps
text (``keep_text=True``), the other has the default. Each call's trace is written as
JSON lines and searched for the callee's words, the agent's and the greeting: absent by
default (each reads ``[redacted]``, not even its length shows), present with
``keep_text``. The adapter's log
records (all of them, from DEBUG, on the ``turnfsm`` loggers) are searched too: a failing
drop lever (whose effect and outcome carry no text, only the cut's lengths: issue 21) quotes
none of the reply, and its error's message, like a failing controller step's, only when
text is kept.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from faultcalls import FaultCall, escaped, fault_call, outbound
from livekit.agents import Agent

from turnfsm import TurnController, TurnPolicy
from turnfsm import effects as fx
from turnfsm import events as ev
from turnfsm.adapters.livekit import LEVERS
from turnfsm.adapters.livekit.port import LeverPort, Site
from turnfsm.adapters.sim import LINES, ScriptedLLM
from turnfsm.rules import TurnRules
from turnfsm.trace import REDACTED, Trace

CALLEE_WORDS = LINES["who_is_this"].text  # "Hi, yes, who is this? I was not expecting ..."
REPLY = (
    "This is Ada from Acme Dental, calling to confirm your appointment tomorrow morning "
    "at nine thirty with doctor Chen."
)


def replies(request: object) -> str:
    return REPLY if "who is this" in (getattr(request, "last_user_text", "") or "") else "Okay."


def failing_drop(port: LeverPort, effect: fx.DropUnspokenText, site: Site) -> None:
    raise RuntimeError("chat context unavailable")


async def call_with_heard_text(keep_text: bool, out: Path) -> FaultCall:
    """A real call: "Hello?", the greeting, the callee's question and the start of the
    reply; then the reply is reported cut, so the machine emits ``DropUnspokenText``,
    whose lever fails. The trace is written to ``out``."""
    async with fault_call(
        outbound(), name=f"keep_text={keep_text}", keep_text=keep_text, llm=ScriptedLLM(replies)
    ) as fc:
        fc.call.audio_input.say_now("hello")
        await fc.wait_state("listening", timeout=12)
        fc.call.audio_input.say_now("who_is_this")
        mark = len(fc.steps)
        started = await fc.wait_step(
            lambda s: s.event.name == "agent_speech_started", timeout=15, after=mark
        )
        await asyncio.sleep(0.8)
        assert isinstance(started.event, ev.AgentSpeechStarted)
        fc.adapter.dispatch(
            ev.AgentSpeechEnded(
                at=fc.adapter.now(),
                speech_id=started.event.speech_id,
                interrupted=True,
                played_seconds=0.8,
            )
        )
        fc.adapter.dispatch(ev.CallEnded(at=fc.adapter.now(), reason="hangup"))
    assert fc.controller.trace is not None
    fc.controller.trace.write(out / f"keep_text_{keep_text}.jsonl")
    return fc


async def test_traces_and_logs_carry_text_only_with_keep_text(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.DEBUG, logger="turnfsm")
    monkeypatch.setitem(LEVERS, fx.DropUnspokenText, failing_drop)
    redacted, kept = await asyncio.gather(
        call_with_heard_text(False, tmp_path), call_with_heard_text(True, tmp_path)
    )
    redacted_file = (tmp_path / "keep_text_False.jsonl").read_text()
    kept_file = (tmp_path / "keep_text_True.jsonl").read_text()

    assert CALLEE_WORDS in [text for role, text in redacted.history() if role == "user"]
    # the callee's words and the agent's: absent by default, present with keep_text
    greeting = redacted.controller.policy.greeting
    assert greeting
    for words in ("who is this", "not expecting a call", "Hello?", "Acme Dental", greeting):
        assert words not in redacted_file
        assert words in kept_file
    # not even the lengths stay
    committed = [
        s.event
        for s in Trace.parse(redacted_file.splitlines())
        if isinstance(s.event, ev.UserTurnCommitted)
    ]
    assert len(committed) == 1  # "Hello?" started the greeting from its final transcript
    assert all(c.text == REDACTED for c in committed)
    started = [
        s.effects
        for s in Trace.parse(redacted_file.splitlines())
        if s.event.name == "user_transcript" and s.after == "greeting"
    ]
    firsts = [e.first_words for e in started[0] if isinstance(e, fx.StartGreeting)]
    assert firsts == [REDACTED]
    drops = [*redacted.effects(fx.DropUnspokenText), *kept.effects(fx.DropUnspokenText)]
    assert len(drops) == 2

    # the logs: one warning per call for the failing lever, naming the cut speech and no
    # word of the reply; nothing of ours ever logs what the callee said
    warnings = [
        r.getMessage() for r in caplog.records if "lever drop_unspoken_text" in r.getMessage()
    ]
    assert len(warnings) == 2, warnings
    for drop in drops:
        assert any(f"speech_id={drop.speech_id!r}" in w for w in warnings), warnings
    assert not any("Acme Dental" in w for w in warnings), warnings
    # the lever's error message (which may quote the call) is kept only with keep_text
    assert sum(f"RuntimeError('{REDACTED}')" in w for w in warnings) == 1, warnings
    assert sum("RuntimeError('chat context unavailable')" in w for w in warnings) == 1, warnings
    turnfsm_log = "\n".join(
        logging.Formatter("%(message)s").format(r)
        for r in caplog.records
        if r.name.startswith("turnfsm")
    )
    for words in ("who is this", "not expecting a call", "Hello?", greeting):
        assert words not in turnfsm_log
    assert escaped(caplog.records) == []


class QuotingRules(TurnRules):
    """A rules bug whose error message quotes the caller (as an invariant message may)."""

    def reject_user_turn(self, ev: ev.UserTurnCommitted) -> None:  # type: ignore[override]
        raise ValueError(f"cannot reject {ev.text!r}")


@pytest.mark.parametrize("keep_text", [False, True])
async def test_a_failing_controller_step_does_not_quote_the_caller(
    caplog: pytest.LogCaptureFixture, keep_text: bool
) -> None:
    caplog.set_level(logging.DEBUG, logger="turnfsm")
    policy = TurnPolicy(
        direction="inbound",
        greeting="Welcome to Acme Dental, how can I help you today?",
        greeting_overlap="drop",
    )
    controller = TurnController(policy, keep_text=keep_text, rules_class=QuotingRules)
    async with fault_call(
        policy, controller=controller, agent=Agent(instructions="You are on a call.")
    ) as fc:
        await fc.wait_state("greeting", timeout=5)
        secret = "my card number is 4111 1111"
        fc.adapter.dispatch(ev.UserTurnCommitted(at=fc.adapter.now(), text=secret, item_id="x"))
        assert fc.state == "greeting"  # the step failed; the input was released
        assert fc.adapter.held_turn_settings is None
    failures = [r for r in caplog.records if "controller failed" in r.getMessage()]
    assert len(failures) == 1
    logged = logging.Formatter("%(message)s").format(failures[0])
    assert "user_turn_committed in greeting" in logged
    assert "ValueError" in logged
    assert "reject_user_turn" in logged
    assert (secret in logged) is keep_text
