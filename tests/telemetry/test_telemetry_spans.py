"""Issue 13, point 4: the machine in LiveKit's traces, and per-call turn metrics.

Real ``AgentSession`` calls (silero VAD on recorded speech, scripted models) with
LiveKit's tracer provider set to the OpenTelemetry SDK's in-memory exporter:

* every state the machine visits is one ``turnfsm.<state>`` span, in order, each a child
  of that call's LiveKit ``agent_session`` span, with the call id, the policy, and the
  event that left it;
* every effect is a span event on the span of the state its step ended in, in order;
* the metrics handed to ``on_metrics`` equal the figures computed from the call's trace
  (``tests/report/reference.py``), and the spans' lengths match the time per state.

Two calls run side by side: an outbound call whose callee talks over the greeting
(answered as one whole turn), and an inbound call whose model always calls a tool (the
cap is hit) and whose long reply the caller cuts with "Wait, stop, stop." (a barge-in,
unspoken text dropped).

Issue 22: the spans carry no text of the call by default (the policy's greeting reached
the tracing backend verbatim), and with ``keep_text=True`` every text is under a key with
LiveKit's ``pii`` segment (``turnfsm.pii.*``), so LiveKit's own PII filter strips it for
exporters not granted PII.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from livekit.agents import AgentSession, function_tool
from livekit.agents.telemetry import pii
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from turnfsm import Trace, TurnController, TurnPolicy
from turnfsm.adapters.livekit import TurnAgent, attach
from turnfsm.adapters.livekit.telemetry import TurnTelemetry, trace_turns
from turnfsm.adapters.sim import LINES, CallScript, ScriptedLLM, SimulatedCall, UserLine
from turnfsm.events import CallAnswered, EffectOutcome
from turnfsm.fields import text_fields
from turnfsm.tools.metrics import CallMetrics

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "report"))
from reference import call_figures  # noqa: E402

GREETING = "Hi, this is Ada calling from Acme Dental about your appointment tomorrow."
LONG_REPLY = (
    "Good morning, this is the clinic calling to confirm your appointment for Tuesday "
    "at ten, please let us know if that time still works for you."
)
AFTER_STOP = "Okay, I stopped."


class Call:
    """A simulated call with a traced controller."""

    def __init__(self, name: str, policy: TurnPolicy, *, keep_text: bool = True) -> None:
        self.name = name
        self.controller = TurnController(
            policy, strict=True, keep_text=keep_text
        )  # figures are checked against the trace's text
        self.telemetry: TurnTelemetry | None = None
        self.reported: list[CallMetrics] = []
        self.sim: SimulatedCall | None = None

    def attach(self, session: AgentSession) -> None:
        adapter = attach(session, self.controller)
        self.telemetry = trace_turns(adapter, call_id=self.name, on_metrics=self.reported.append)

    @property
    def trace(self) -> Trace:
        assert self.controller.trace is not None
        return self.controller.trace


@asynccontextmanager
async def traced_call(call: Call, script: CallScript, **options: Any) -> AsyncIterator[Call]:
    sim = SimulatedCall(
        script,
        agent=options.pop("agent", None) or TurnAgent(instructions="You are on a call."),
        before_start=call.attach,
        **options,
    )
    async with sim:
        call.sim = sim
        if call.controller.policy.direction == "outbound":
            assert call.telemetry is not None
            adapter = call.telemetry.adapter
            adapter.dispatch(CallAnswered(at=adapter.now()))
        yield call


async def _outbound_overlap(call: Call) -> None:
    script = CallScript([UserLine(1.0, "hello")])
    async with traced_call(call, script, llm=ScriptedLLM(["Sure, I will call back."])) as c:
        sim = c.sim
        assert sim is not None
        await sim.wait_until(lambda: bool(sim.audio_output.segments), timeout=6)
        greeting = sim.audio_output.segments[0]
        await sim.wait_until(lambda: greeting.started_at is not None, timeout=4)
        await sim.sleep_until(sim.now() + 1.0)
        # a lever outcome arrives as a machine event (the adapter reports its levers')
        adapter = call.telemetry.adapter  # type: ignore[union-attr]
        adapter.dispatch(
            EffectOutcome(at=adapter.now(), effect="start_timer", outcome="refused", detail="x")
        )
        sim.audio_input.say_now("long_overlap")
        await sim.wait_until(lambda: len(sim.audio_output.segments) > 1, timeout=12)
        await sim.wait_until(lambda: sim.audio_output.segments[1].finished, timeout=8)
        await sim.sleep_until(sim.now() + 0.5)


class LookupAgent(TurnAgent):
    @function_tool
    async def lookup(self) -> str:
        """Look up the customer's appointment."""
        return "Tuesday at ten."


async def _inbound_tools_and_barge_in(call: Call) -> None:
    script = CallScript([UserLine(0.3, "question")])
    llm = ScriptedLLM(
        lambda request: AFTER_STOP if "stop" in (request.last_user_text or "") else LONG_REPLY,
        always_call_tool="lookup",
        chars_per_second=1000,
    )
    options = {"agent": LookupAgent(instructions="Look things up."), "transcript_sync": True}
    async with traced_call(call, script, llm=llm, **options) as c:
        sim = c.sim
        assert sim is not None
        await sim.wait_until(lambda: bool(sim.audio_output.segments), timeout=10)
        reply = sim.audio_output.segments[0]
        await sim.wait_until(lambda: reply.started_at is not None, timeout=4)
        await sim.sleep_until(sim.now() + 1.2)
        sim.audio_input.say_now("stop")
        await sim.wait_until(lambda: reply.finished, timeout=4)
        await sim.wait_until(
            lambda: len(sim.audio_output.segments) > 1 and sim.audio_output.segments[-1].finished,
            timeout=LINES["stop"].duration + 6,
        )
        await sim.sleep_until(sim.now() + 0.5)


def _state_spans(exported: list[ReadableSpan], call_id: str) -> list[ReadableSpan]:
    ours = [
        s
        for s in exported
        if s.name.startswith("turnfsm.") and s.attributes["turnfsm.call_id"] == call_id
    ]
    return sorted(ours, key=lambda s: (s.start_time, s.end_time))


def _end_index(trace: Trace) -> int:
    return next(i for i, step in enumerate(trace.steps) if step.after == "ended")


def _check_spans(call: Call, exported: list[ReadableSpan]) -> None:
    trace = call.trace
    end = _end_index(trace)
    steps = trace.steps[: end + 1]
    context = "\n".join(
        f"{s.before}->{s.after} {s.event.name} {[e.name for e in s.effects]}" for s in steps
    )
    spans = _state_spans(exported, call.name)

    # one span per state visited, in order
    visits = [steps[0].before] + [s.after for s in steps if s.after != s.before]
    assert [s.name for s in spans] == [f"turnfsm.{state}" for state in visits], context
    assert [s.attributes["turnfsm.state"] for s in spans] == visits

    # nested under this call's LiveKit session span
    sessions = {s.context.span_id: s for s in exported if s.name == "agent_session"}
    parents = {s.parent.span_id for s in spans if s.parent is not None}
    assert len(parents) == 1
    assert all(s.parent is not None for s in spans)
    (parent,) = parents
    assert parent in sessions, "the state spans' parent is not an agent_session span"
    assert {s.context.trace_id for s in spans} == {sessions[parent].context.trace_id}

    # call id and policy on every span (its texts under LiveKit's PII marker); the event
    # that left each state
    policy = call.controller.policy
    texts = text_fields(TurnPolicy)
    settings = {
        f"turnfsm.policy.{name}": value
        for name, value in policy.to_dict().items()
        if name not in texts and value is not None
    }
    policy_texts = {
        f"turnfsm.pii.policy.{name}": value
        for name, value in policy.to_dict().items()
        if name in texts and value is not None
    }
    leaving = [s for s in steps if s.after != s.before]
    for span in spans:
        assert span.attributes["turnfsm.call_id"] == call.name
        shown = {k: v for k, v in span.attributes.items() if k.startswith("turnfsm.policy.")}
        assert shown == settings
        shown = {k: v for k, v in span.attributes.items() if k.startswith("turnfsm.pii.")}
        assert shown == policy_texts  # kept: this test's controllers keep text
    for span, step in zip(spans, leaving, strict=False):
        assert span.attributes["turnfsm.exit_event"] == step.event.name
        assert span.attributes["turnfsm.next_state"] == step.after
    assert spans[-1].attributes["turnfsm.end_reason"] == call.reported[0].end_reason

    # every effect a span event, on the state its step ended in, in order
    expected = [(s.after, s.event.name, e.name) for s in steps for e in s.effects]
    shown = [
        (span.attributes["turnfsm.state"], event.attributes["turnfsm.event"], event.name)
        for span in spans
        for event in span.events
        if event.name != "effect_outcome"
    ]
    assert shown == expected, context
    assert expected, "the call emitted no effect"

    # every lever outcome a span event too, with its fields
    outcomes = [
        (s.after, s.event.effect, s.event.outcome)
        for s in steps
        if isinstance(s.event, EffectOutcome)
    ]
    shown_outcomes = [
        (
            span.attributes["turnfsm.state"],
            event.attributes["turnfsm.outcome.effect"],
            event.attributes["turnfsm.outcome.outcome"],
        )
        for span in spans
        for event in span.events
        if event.name == "effect_outcome"
    ]
    assert shown_outcomes == outcomes, context

    # the spans' lengths are the time per state (wall clock against the loop's clock)
    per_state: dict[str, float] = {}
    for span in spans[:-1]:
        state = str(span.attributes["turnfsm.state"])
        per_state[state] = per_state.get(state, 0.0) + (span.end_time - span.start_time) / 1e9
    metrics = call.reported[0]
    for state, seconds in per_state.items():
        assert abs(seconds - metrics.state_seconds[state]) < 0.1, (state, seconds, metrics)


def _check_metrics(call: Call) -> None:
    assert len(call.reported) == 1, "on_metrics is called once, at the end"
    metrics = call.reported[0]
    trace = call.trace
    upto_end = Trace(policy=trace.policy, steps=trace.steps[: _end_index(trace) + 1])
    for name, value in call_figures(upto_end).items():
        got = getattr(metrics, name)
        got = list(got) if isinstance(got, tuple) else got
        got = dict(got) if name == "state_seconds" else got
        assert got == value, f"{call.name}: {name} is {got!r}, the trace says {value!r}"


async def test_states_spans_effects_and_metrics_on_real_sessions(
    spans: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="turnfsm")
    outbound = Call(
        "outbound-overlap",
        TurnPolicy(direction="outbound", greeting=GREETING, greeting_overlap="answer_whole"),
    )
    inbound = Call(
        "inbound-tools",
        TurnPolicy(direction="inbound", first_speaker="user", max_tool_steps=1),
    )
    await asyncio.gather(_outbound_overlap(outbound), _inbound_tools_and_barge_in(inbound))
    await asyncio.sleep(0.3)
    exported = list(spans.get_finished_spans())
    for call in (outbound, inbound):
        _check_metrics(call)
        _check_spans(call, exported)

    # the calls did what they were scripted for: the figures are not all zero
    first, second = outbound.reported[0], inbound.reported[0]
    assert first.greeting_overlaps >= 1, first
    assert first.lever_outcomes.get("start_timer:refused", 0) >= 1, first
    assert first.overlap_handling == "answer_whole", first
    assert first.time_to_greeting is not None, first
    assert first.time_to_greeting > 1.0, first
    assert second.tool_rounds >= 1, second
    assert second.tool_caps >= 1, second
    assert second.barge_ins == 1, second
    assert second.drops == 1, second
    assert second.dropped_chars > 50, second
    failures = [r.getMessage() for r in caplog.records if r.name.startswith("turnfsm")]
    assert failures == []


async def test_a_failing_metrics_callback_does_not_break_the_call(
    spans: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(metrics: CallMetrics) -> None:
        raise RuntimeError("dashboard down")

    caplog.set_level(logging.WARNING, logger="turnfsm")
    call = Call("broken-callback", TurnPolicy(direction="inbound", greeting=GREETING))
    script = CallScript([UserLine(0.3, "question")])
    async with traced_call(call, script, llm=ScriptedLLM(["We open at nine."])) as c:
        assert call.telemetry is not None
        call.telemetry.on_metrics = broken
        sim = c.sim
        assert sim is not None
        await sim.wait_until(lambda: len(sim.audio_output.segments) > 1, timeout=15)
        await sim.wait_until(lambda: sim.audio_output.segments[1].finished, timeout=8)
    await asyncio.sleep(0.3)
    warnings = [r.getMessage() for r in caplog.records if r.name.startswith("turnfsm")]
    assert len(warnings) == 1, warnings
    assert "step observer failed" in warnings[0]
    assert "dashboard down" in warnings[0]
    assert call.controller.is_ended
    assert call.telemetry.metrics is not None
    names = [s.name for s in _state_spans(list(spans.get_finished_spans()), call.name)]
    assert names == [
        "turnfsm.start",  # an inbound call waits there for its session to start
        "turnfsm.greeting",
        "turnfsm.listening",
        "turnfsm.speaking",
        "turnfsm.listening",
        "turnfsm.ended",
    ]


def _attributes(span: ReadableSpan) -> list[tuple[str, str]]:
    """Every attribute of ``span`` and of its events, as (key, value as text)."""
    found = [(key, str(value)) for key, value in (span.attributes or {}).items()]
    for event in span.events:
        found += [(key, str(value)) for key, value in (event.attributes or {}).items()]
    return found


async def test_spans_carry_text_only_when_kept_and_under_livekits_pii_keys(
    spans: InMemorySpanExporter,
) -> None:
    policy = TurnPolicy(direction="outbound", greeting=GREETING, greeting_overlap="answer_whole")
    default = Call("text-not-kept", policy, keep_text=False)
    kept = Call("text-kept", policy, keep_text=True)
    await asyncio.gather(_outbound_overlap(default), _outbound_overlap(kept))
    await asyncio.sleep(0.3)
    exported = list(spans.get_finished_spans())
    overlap = LINES["long_overlap"].text
    texts = (GREETING, overlap, "Sure, I will call back.")

    # by default no text of the call or of the policy is on any span, not even its length
    for span in _state_spans(exported, default.name):
        shown = f"{span.name} {_attributes(span)} {span.status}"
        for text in texts:
            assert text not in shown, (text, span.name)
    first = _state_spans(exported, default.name)[0]
    assert first.attributes["turnfsm.pii.policy.greeting"] == "[redacted]"

    # kept: the greeting is on the spans, only under keys LiveKit's PII filter knows
    kept_spans = _state_spans(exported, kept.name)
    holding = {key for span in kept_spans for key, value in _attributes(span) if GREETING in value}
    assert holding, "the kept greeting is on no span: the search cannot fail"
    assert all(pii.is_pii_attribute(key) for key in holding), holding
    # what LiveKit sends an exporter not granted PII (allow_pii=False): no text at all
    for span in kept_spans:
        stripped = pii.redact(span)
        for text in texts:
            assert text not in str(_attributes(stripped)), (text, span.name)
    # the policy's settings stay readable by every exporter
    assert stripped.attributes["turnfsm.policy.greeting_overlap"] == "answer_whole"
