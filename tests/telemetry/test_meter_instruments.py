"""Issue 22: turnfsm's OpenTelemetry meter instruments beside LiveKit's, and one summary
line per call.

OpenTelemetry's global meter provider (the one LiveKit's ``lk.agents.*`` instruments use)
is set to the SDK's, read by an in-memory metric reader (``otel_memory``). Three real
calls run side by side under LiveKit's default turn handling (preemptive generation on, a
transcript synchronizer):

* ``interrupt``: the callee asks a question and cuts the long answer one second in (one
  barge-in, its unheard text trimmed); LiveKit's preemptive reply to "Hello?", which the
  machine stops before the greeting, is a discarded speech;
* ``overlap_and_tools``: the callee talks over the greeting (answered whole after it), and
  the model calls a tool until the cap (one round) is hit;
* ``breach``: the greeting is not locked (the lock and hold levers do nothing), so the
  callee's overlap cuts it: outcome check O2 fires; the policy drops overlapping speech.

Every instrument's measurements equal the calls' own figures, and those are checked
against what the session really did (audio segments played and cut, requests the model
received, the outcome monitor's breaches). Each call logs exactly one INFO line.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

import pytest
from livekit.agents import function_tool
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from otel_memory import measurements

from turnfsm import TurnPolicy
from turnfsm import effects as fx
from turnfsm.adapters.livekit import TurnAgent
from turnfsm.adapters.livekit.port import LeverPort, Site
from turnfsm.adapters.sim import LINES, CallScript, ScriptedLLM, UserLine
from turnfsm.events import CallEnded
from turnfsm.tools.metrics import CallMetrics

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from turncalls import GREETING, TurnCall, run_scenarios, turn_call, wait_segment  # noqa: E402

LONG_ANSWER = (
    "We open at nine. On Tuesdays and Thursdays we stay open late, until seven in the "
    "evening. On Saturdays we open at ten and close at two."
)


def total(points: list[Any], field: str = "value", **where: str) -> float:
    """The sum of ``field`` (a histogram's ``count`` or ``sum``) over the points whose
    attributes include ``where`` (keys with ``_`` for ``.``)."""
    wanted = {key.replace("__", "."): value for key, value in where.items()}
    return sum(
        getattr(point, field)
        for point in points
        if wanted.items() <= dict(point.attributes or {}).items()
    )


def hang_up(tc: TurnCall) -> None:
    tc.adapter.dispatch(CallEnded(at=tc.adapter.now(), reason="hangup"))


async def _interrupt(calls: dict[str, TurnCall]) -> None:
    script = CallScript([UserLine(1.0, "hello"), UserLine(8.0, "question")])
    # greeted on the committed turn: LiveKit prepares an early reply to "Hello?" (discarded)
    policy = TurnPolicy(direction="outbound", greeting=GREETING, greet_on="end_of_turn")
    llm = ScriptedLLM([LONG_ANSWER, "Sure, go ahead."])
    async with turn_call(policy, script, llm=llm, settings="livekit-defaults") as tc:
        calls["interrupt"] = tc
        await tc.segment_played(0, timeout=10)  # the greeting
        answer = await wait_segment(tc.call, 1, timeout=20)
        await tc.call.sleep_until(tc.segment_start(answer) + 1.0)
        tc.call.audio_input.say_now("stop")
        await tc.call.wait_until(lambda: answer.finished, timeout=6)
        await tc.call.sleep_until(tc.call.now() + LINES["stop"].duration + 3)
        hang_up(tc)


class LookupAgent(TurnAgent):
    @function_tool
    async def lookup(self) -> str:
        """Look up the customer's appointment."""
        return "Tuesday at ten."


async def _overlap_and_tools(calls: dict[str, TurnCall]) -> None:
    script = CallScript([UserLine(1.0, "hello")])
    policy = TurnPolicy(
        direction="outbound", greeting=GREETING, greeting_overlap="answer_whole", max_tool_steps=1
    )
    llm = ScriptedLLM(["I will call you back."], always_call_tool="lookup")
    agent = LookupAgent(instructions="Look things up.")
    async with turn_call(policy, script, llm=llm, agent=agent, settings="livekit-defaults") as tc:
        calls["overlap_and_tools"] = tc
        greeting = await wait_segment(tc.call, 0, timeout=8)
        await tc.call.sleep_until(tc.segment_start(greeting) + 1.0)
        tc.call.audio_input.say_now("long_overlap")
        await tc.segment_played(1, timeout=LINES["long_overlap"].duration + 15)
        hang_up(tc)


def _does_nothing(port: LeverPort, effect: fx.Effect, site: Site) -> None:
    """A lever that returns without touching LiveKit."""


async def _breach(calls: dict[str, TurnCall]) -> None:
    script = CallScript([UserLine(1.0, "hello")])
    # on the turn hook's reply, locked by LockSpeech (one started on the final transcript
    # is created locked)
    policy = TurnPolicy(
        direction="outbound", greeting=GREETING, greeting_overlap="drop", greet_on="end_of_turn"
    )
    async with turn_call(policy, script, settings="livekit-defaults") as tc:
        calls["breach"] = tc
        tc.adapter.outcomes.strict = False
        tc.adapter.levers.update({fx.LockSpeech: _does_nothing, fx.HoldUserTurns: _does_nothing})
        greeting = await wait_segment(tc.call, 0, timeout=8)
        await tc.call.sleep_until(tc.segment_start(greeting) + 1.0)
        tc.call.audio_input.say_now("long_overlap")
        await tc.call.sleep_until(tc.call.now() + LINES["long_overlap"].duration + 4)
        hang_up(tc)


async def test_instruments_beside_livekits_and_one_summary_line_per_call(
    reader: InMemoryMetricReader, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="turnfsm")
    calls: dict[str, TurnCall] = {}
    await run_scenarios(
        {
            name: run(calls)
            for name, run in (
                ("interrupt", _interrupt),
                ("overlap_and_tools", _overlap_and_tools),
                ("breach", _breach),
            )
        }
    )
    await asyncio.sleep(0.3)
    context = "\n\n".join(f"[{name}]\n{tc.describe()}" for name, tc in calls.items())
    figures: dict[str, CallMetrics] = {}
    for name, tc in calls.items():
        assert tc.adapter.call_metrics is not None, f"{name} was not reported\n{context}"
        figures[name] = tc.adapter.call_metrics
    interrupt, tools, breach = (figures[n] for n in ("interrupt", "overlap_and_tools", "breach"))
    context += f"\n\n{figures}"

    # the calls did what they were scripted for, as the session shows
    played = calls["interrupt"].call.audio_output.segments
    cut = sum(segment.interrupted and segment.played > 0 for segment in played)
    assert interrupt.barge_ins == cut >= 1, context  # more if a reply to "Wait," is cut too
    assert interrupt.discarded_speeches >= 1, context  # LiveKit's early reply to "Hello?"
    assert interrupt.drops >= 1, context
    heard = calls["interrupt"].texts("assistant")[1]
    assert interrupt.dropped_chars >= len(LONG_ANSWER) - len(heard) > 0, context
    assert interrupt.lever_outcomes == {}, context
    requests = calls["overlap_and_tools"].call.llm.requests
    assert [r.tool_choice for r in requests].count("none") == tools.tool_caps == 1, context
    assert tools.greeting_overlaps >= 1, context
    assert tools.overlap_handling == "answer_whole", context
    breaches = calls["breach"].adapter.outcomes.counts
    assert breaches["O2"] >= 1, context
    assert breach.greeting_overlaps >= 1, context
    assert breach.overlap_handling == "drop", context

    # turnfsm's instruments hold exactly those figures, beside LiveKit's own
    got = measurements(reader)
    assert any(name.startswith("lk.agents.") for name in got), sorted(got)
    every = [interrupt, tools, breach]
    assert total(got["turnfsm.call.ended"], turnfsm__end_reason="hangup") == 3
    greeting_times = got["turnfsm.call.time_to_greeting"]
    assert total(greeting_times, "count") == 3
    assert total(greeting_times, "sum") == pytest.approx(
        sum(m.time_to_greeting or 0.0 for m in every)
    )
    for instrument, figure in (
        ("turnfsm.turn.barge_ins", "barge_ins"),
        ("turnfsm.turn.discarded_speeches", "discarded_speeches"),
        ("turnfsm.turn.unspoken_text_drops", "drops"),
        ("turnfsm.turn.unspoken_characters", "dropped_chars"),
        ("turnfsm.tool.cap_hits", "tool_caps"),
        ("turnfsm.greeting.overlap_dropped", "overlap_dropped"),
    ):
        assert total(got[instrument]) == sum(getattr(m, figure) for m in every), instrument
    overlaps = got["turnfsm.greeting.overlaps"]
    answered = total(overlaps, turnfsm__policy__greeting_overlap="answer_whole")
    dropped = total(overlaps, turnfsm__policy__greeting_overlap="drop")
    assert (answered, dropped) == (tools.greeting_overlaps, breach.greeting_overlaps)
    assert total(got["turnfsm.outcome.breaches"], turnfsm__check="O2") == breaches["O2"]
    assert total(got["turnfsm.outcome.breaches"]) == sum(breaches.values())
    ours = [p for name, points in got.items() if name.startswith("turnfsm.") for p in points]
    assert all(p.attributes["turnfsm.policy.direction"] == "outbound" for p in ours)

    # one INFO line per call, its figures in extra fields
    summaries = [
        r for r in caplog.records if r.getMessage().startswith("turnfsm: call ended (hangup)")
    ]
    assert len(summaries) == 3, [r.getMessage() for r in summaries]
    assert all(r.levelno == logging.INFO for r in summaries)
    logged = sorted((r.barge_ins, r.discarded_speeches, r.tool_caps) for r in summaries)  # type: ignore[attr-defined]
    assert logged == sorted((m.barge_ins, m.discarded_speeches, m.tool_caps) for m in every)
    caplog.clear()  # the O2 warning was provoked
