"""Issue 22: no text of the call or of the policy leaves the process by any channel unless
``keep_text=True``.

One real call under LiveKit's default turn handling with a transcript synchronizer (as
RoomIO has), with the default ``keep_text=False``, makes every kind of text the process
holds: the greeting, the idle re-prompt, the tool-cap fallback (each from the policy),
what the callee says and what the model replies (in the transcripts, the history, and
the heard part of a reply the callee cuts), and a lever whose plugin error quotes the
text it was given. Each text carries a canary word found nowhere else.

Then every output channel is read whole and searched for the canaries: the trace file and
the trace streamed as it happened, the pictures drawn from it (timeline, diagram overlay,
by API and by the ``turnfsm`` command line, with what the commands print), the report,
turnfsm's spans (names, attributes, events, status), every measurement on the meter
provider (names and attributes, LiveKit's included), every log record of turnfsm and
python-statemachine at DEBUG (message, arguments and ``extra`` fields), the metrics given
to ``on_metrics`` and the outcome breaches. None holds one. So that the search can fail,
the canaries are shown to be in the process (the history, the TTS's input, the effects
the adapter ran, the errors the lever raised) and each channel to hold what it should.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from pathlib import Path
from typing import Any

import pytest
from livekit.agents import function_tool
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otel_memory import measurements

from turnfsm import Trace, TraceWriter, TurnController, TurnPolicy
from turnfsm import effects as fx
from turnfsm.adapters.livekit import LEVERS, TurnAdapter, TurnAgent, attach
from turnfsm.adapters.livekit.port import LeverPort, Site
from turnfsm.adapters.livekit.telemetry import trace_turns
from turnfsm.adapters.sim import (
    LINES,
    CallScript,
    LLMRequest,
    ScriptedLLM,
    ScriptedReply,
    ScriptedToolCall,
    SimulatedCall,
    UserLine,
)
from turnfsm.adapters.sim.speech import SpeechLine, add_lines
from turnfsm.events import CallAnswered, CallEnded, EffectOutcome
from turnfsm.tools.cli import main as turnfsm_cli
from turnfsm.tools.diagram import build_diagram, to_dot, to_mermaid
from turnfsm.tools.metrics import CallMetrics
from turnfsm.tools.timeline import render_timeline
from turnfsm.trace import REDACTED, TraceStep

GREETING = "Hi Mrs Quillfeather, this is Ada about your loan."
IDLE = "Are you still there? Say Tangerine if you are."
FALLBACK = "Sorry, the Bramblewick ledger did not answer."
SAID = "My account code is Zephyrine nine."
REPLY = (
    "Your Ostrogoth plan renews on Friday at nine, and the first payment of the new term "
    "is taken the Monday after, unless you change the date before then."
)
CANARIES = ("Quillfeather", "Tangerine", "Bramblewick", "Zephyrine", "Ostrogoth")
"""One word of each text, found nowhere else: greeting, idle message, fallback, what the
callee says, what the model replies."""


@pytest.fixture(scope="module")
def canary_line(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A callee line saying :data:`SAID` (the question's recording under another text:
    the scripted STT transcribes the line's text)."""
    name = "canary_account"
    if name not in LINES:
        folder = tmp_path_factory.mktemp("canary")
        shutil.copy(LINES["question"].path, folder / f"{name}.wav")
        add_lines(SpeechLine(name, SAID, folder=folder))
    return name


def replies(request: LLMRequest) -> ScriptedReply | str:
    """A tool call on every round for the account question (also under
    ``tool_choice="none"``: the reply says nothing, the fallback is said); the long reply
    to the next question; "Okay." once cut."""
    said = request.last_user_text or ""
    if "Zephyrine" in said:
        return ScriptedReply(tool_calls=(ScriptedToolCall("lookup"),))
    return "Okay." if said == LINES["stop"].text else REPLY


class LookupAgent(TurnAgent):
    @function_tool
    async def lookup(self) -> str:
        """Look up the customer's account."""
        return "Nothing found."


class Walk:
    """The call's adapter and what it left in the process, for the positive controls."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.policy = TurnPolicy(
            direction="outbound",
            greeting=GREETING,
            idle_timeout=2.5,
            idle_message=IDLE,
            tool_cap_fallback=FALLBACK,
            max_tool_steps=1,
        )
        self.writer = TraceWriter(tmp_path / "streamed.jsonl")
        self.controller = TurnController(self.policy, strict=True, trace_sink=self.writer)
        self.adapter: TurnAdapter | None = None
        self.steps: list[TraceStep] = []
        """The steps as the adapter ran them, texts and all."""
        self.raised: list[BaseException] = []
        self.reported: list[CallMetrics] = []

    def attach(self, session: Any) -> None:
        adapter = self.adapter = attach(session, self.controller)
        trace_turns(adapter, call_id="privacy-walk", on_metrics=self.reported.append)
        adapter.observers.append(self.steps.append)
        say = LEVERS[fx.Say]

        def say_then_fail(port: LeverPort, effect: fx.Say, site: Site) -> None:
            say(port, effect, site)
            error = RuntimeError(f"TTS plugin: rate limit reached while saying {effect.text!r}")
            self.raised.append(error)
            raise error

        adapter.levers[fx.Say] = say_then_fail


async def run_call(walk: Walk, canary_line: str) -> SimulatedCall:
    call = SimulatedCall(
        CallScript([UserLine(1.0, "hello")]),
        agent=LookupAgent(instructions="You help with loans."),
        llm=ScriptedLLM(replies, ignore_tool_choice=True),
        livekit_defaults=True,
        transcript_sync=True,
        before_start=walk.attach,
    )
    segments = call.audio_output.segments

    async def played(count: int, timeout: float) -> None:
        await call.wait_until(
            lambda: len(segments) >= count and segments[-1].finished, timeout=timeout
        )

    async with call:
        adapter = walk.adapter
        assert adapter is not None
        adapter.dispatch(CallAnswered(at=adapter.now()))
        await played(1, timeout=12)  # the greeting
        await played(2, timeout=10)  # the idle re-prompt
        call.audio_input.say_now(canary_line)
        await played(3, timeout=20)  # the fallback, after one tool round
        call.audio_input.say_now("question")
        await call.wait_until(lambda: len(segments) >= 4, timeout=15)
        answer = segments[3]
        await call.wait_until(lambda: answer.started_at is not None, timeout=5)
        await call.sleep_until(call.now() + 1.5)
        call.audio_input.say_now("stop")
        await played(5, timeout=15)  # "Okay."
        adapter.dispatch(CallEnded(at=adapter.now(), reason="hangup"))
    walk.writer.close()
    await asyncio.sleep(0.3)
    return call


def _span_text(spans: InMemorySpanExporter) -> str:
    shown = []
    for span in spans.get_finished_spans():
        if span.name.startswith("turnfsm."):
            shown.append(f"{span.name} {dict(span.attributes or {})} {span.status}")
            shown += [f"{e.name} {dict(e.attributes or {})}" for e in span.events]
    return "\n".join(shown)


def _log_text(records: list[logging.LogRecord]) -> str:
    ours = [r for r in records if r.name.split(".")[0] in ("turnfsm", "statemachine")]
    return "\n".join(f"{r.getMessage()} {vars(r)} {r.exc_text or ''}" for r in ours)


async def test_no_text_leaves_by_any_channel_by_default(
    tmp_path: Path,
    canary_line: str,
    spans: InMemorySpanExporter,
    reader: InMemoryMetricReader,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG, logger="turnfsm")
    caplog.set_level(logging.DEBUG, logger="statemachine")
    walk = Walk(tmp_path)
    call = await run_call(walk, canary_line)
    adapter = walk.adapter
    assert adapter is not None
    trace = walk.controller.trace
    assert trace is not None
    context = "\n".join(
        f"{s.at:6.2f} {s.before}->{s.after} {s.event.name} {[e.name for e in s.effects]}"
        for s in trace
    )

    # the texts were in the process: said, heard, replied, quoted by the failing lever
    synthesized = " ".join(call.tts.texts)  # the TTS gets them sentence by sentence
    assert all(text in synthesized for text in (GREETING, IDLE, FALLBACK)), context
    history = [(m.role, m.text_content or "") for m in call.messages()]
    assert ("user", SAID) in history, history
    assert any(role == "assistant" and "Ostrogoth" in text for role, text in history), history
    ran = [e for step in walk.steps for e in step.effects]
    assert fx.Say(text=IDLE, reason="reprompt") in ran, context
    cuts = [
        (step.event.text_chars, step.event.heard_chars)
        for step in walk.steps
        if isinstance(step.event, EffectOutcome) and step.event.effect == "drop_unspoken_text"
    ]
    # cut after 1.5 s: some of the reply heard, not all (the lengths alone leave the process)
    assert any(0 < (heard or 0) < (full or 0) for full, heard in cuts), (cuts, context)
    assert {str(error) for error in walk.raised} >= {
        f"TTS plugin: rate limit reached while saying {IDLE!r}",
        f"TTS plugin: rate limit reached while saying {FALLBACK!r}",
    }

    # every output channel, read whole
    trace.write(tmp_path / "call.jsonl")
    read_back = Trace.read(tmp_path / "call.jsonl")
    capsys.readouterr()
    commands = [
        ["timeline", str(tmp_path / "call.jsonl"), "-o", str(tmp_path / "timeline.svg")],
        ["diagram", "--trace", str(tmp_path / "call.jsonl"), "-o", str(tmp_path / "call.mmd")],
        ["report", str(tmp_path / "call.jsonl"), "-o", str(tmp_path / "report.html")],
    ]
    for command in commands:
        assert turnfsm_cli(command) == 0, command
    printed = capsys.readouterr()
    diagram = build_diagram(trace=read_back)
    channels = {
        "trace file": (tmp_path / "call.jsonl").read_text(encoding="utf-8"),
        "streamed trace": (tmp_path / "streamed.jsonl").read_text(encoding="utf-8"),
        "pictures": "\n".join(
            (render_timeline(read_back), to_mermaid(diagram), to_dot(diagram), repr(read_back))
        ),
        "timeline command": (tmp_path / "timeline.svg").read_text(encoding="utf-8"),
        "diagram command": (tmp_path / "call.mmd").read_text(encoding="utf-8"),
        "report command": (tmp_path / "report.html").read_text(encoding="utf-8"),
        "command output": printed.out + printed.err,
        "spans": _span_text(spans),
        "measurements": repr(measurements(reader)),
        "logs": _log_text(caplog.records),
        "metrics": f"{walk.reported} {adapter.call_metrics}",
        "outcome breaches": repr(adapter.outcomes.breaches),
    }
    for channel, text in channels.items():
        for canary in CANARIES:
            assert canary not in text, f"{canary!r} leaked through the {channel}"

    # each channel holds what it should (the search reads real output)
    assert channels["trace file"].count(REDACTED) >= 10
    assert channels["streamed trace"] == channels["trace file"]
    assert "<svg" in channels["timeline command"]
    assert "ended" in channels["diagram command"]
    assert "<!DOCTYPE html>" in channels["report command"]
    assert "'turnfsm.pii.policy.idle_message': '[redacted]'" in channels["spans"]
    assert "'turnfsm.pii.effect.text': '[redacted]'" in channels["spans"]
    assert "turnfsm.turn.barge_ins" in channels["measurements"]
    assert "lever say failed" in channels["logs"]
    assert "RuntimeError('[redacted]')" in channels["logs"]
    assert "turnfsm: call ended (hangup)" in channels["logs"]
    assert len(walk.reported) == 1, walk.reported
    assert walk.reported[0].tool_fallbacks == 1, walk.reported
    assert walk.reported[0].reprompts >= 1, walk.reported
    assert walk.reported[0].barge_ins >= 1, walk.reported
