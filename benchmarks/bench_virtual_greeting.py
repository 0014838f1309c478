"""The greeting's first audio against the TTS's first-byte delay (issue 23, point 1).

The same outbound call three ways, each on the virtual clock (so the figures are the
call's own times, not the machine's load): "Hello?" at 0.5 s, then the greeting, under
LiveKit 1.8.9's default turn handling with a transcript synchronizer, with a scripted
TTS whose first audio comes ``first byte`` after it is asked:

* **turnfsm**: ``TurnPolicy(direction="outbound", greeting=...)``; the greeting was
  rendered while the call rang, and plays when the callee's first words are taken (their
  final transcript: ``greet_on="final_transcript"``, the default);
* **plain say**: ``session.say(greeting, allow_interruptions=False)`` on the callee's
  first final transcript (the fastest plain-LiveKit code; LiveKit's own reply stopped);
* **plain reply**: LiveKit's own reply to "Hello?" is the greeting (the LLM says it):
  LiveKit's reply node, its endpointing, LLM and TTS.

Rows: end of "Hello?" → first greeting frame at the output, and, for turnfsm, the step
that takes the callee's first words (starts the greeting) → first frame. Goals: that step
→ first frame ≤ 30 ms; end of "Hello?" → greeting no later than plain say at every
first-byte delay, and ≥ 150 ms earlier at 0.3 s and beyond.
"""

from __future__ import annotations

import asyncio

from livekit.agents import Agent

from turnfsm import TurnController, TurnPolicy
from turnfsm.adapters.livekit import TurnAgent, adapter_for, attach
from turnfsm.adapters.sim import clock
from turnfsm.adapters.sim.models import ScriptedLLM, ScriptedTTS
from turnfsm.adapters.sim.session import SimulatedCall, load_silero_vad
from turnfsm.adapters.sim.speech import CallScript, UserLine
from turnfsm.events import CallAnswered

from .bench_turns import GREETING, _PlainCaller
from .harness import Config, Row, Section, verdict

FIRST_BYTES = (0.0, 0.15, 0.3, 0.35)
COMMIT_TO_FRAME_GOAL_MS = 30.0
EARLIER_GOAL_MS = 150.0


async def _greeting_call(variant: str, first_byte: float) -> tuple[float, float | None]:
    """(end of "Hello?" → first greeting frame, first words taken → first frame) in ms."""
    tts = ScriptedTTS(synthesis_delay=first_byte)
    controller: TurnController | None = None
    plain = _PlainCaller()
    agent: Agent = plain
    if variant == "turnfsm":
        controller = TurnController(TurnPolicy(direction="outbound", greeting=GREETING))
        agent = TurnAgent(instructions="x")
    elif variant == "plain reply":
        agent = Agent(instructions="x")

    def before_start(session: object) -> None:
        if controller is not None:
            attach(session, controller)  # type: ignore[arg-type]
        elif variant == "plain say":
            plain.greet_on_final(session)  # type: ignore[arg-type]

    call = SimulatedCall(
        CallScript([UserLine(0.5, "hello")]),
        agent=agent,
        llm=ScriptedLLM([GREETING, GREETING]),
        tts=tts,
        livekit_defaults=True,
        transcript_sync=True,
        before_start=before_start,
    )
    async with call:
        if (adapter := adapter_for(call.session)) is not None:
            adapter.dispatch(CallAnswered(at=adapter.now()))
        await call.wait_until(lambda: bool(call.audio_output.segments), timeout=10)
        first_frame = call.audio_output.segments[0].captured_at
        hello = call.ledger.utterances_of("hello")[0]
        assert hello.ended_at is not None
        commit_to_frame = None
        if controller is not None:
            assert controller.trace is not None
            # the step that took the callee's first words: it started the greeting
            (taken,) = [s for s in controller.trace if s.before != s.after == "greeting"]
            assert adapter is not None
            offset = asyncio.get_running_loop().time() - adapter.now()  # one instant: exact
            commit_to_frame = (first_frame - (taken.at + offset)) * 1000
        return (first_frame - hello.ended_at) * 1000, commit_to_frame


def greeting_latency(config: Config) -> Section:
    load_silero_vad()
    rows: list[Row] = []
    for first_byte in FIRST_BYTES:
        figures = {
            variant: clock.run(_greeting_call(variant, first_byte))
            for variant in ("turnfsm", "plain say", "plain reply")
        }
        ours, commit_to_frame = figures["turnfsm"]
        say, reply = figures["plain say"][0], figures["plain reply"][0]
        label = f"first byte {first_byte * 1000:.0f} ms"
        row = Row(f"end of Hello? → greeting, {label}: turnfsm", [ours], "ms")
        row.ratios = f"{ours - say:+.0f} ms vs plain say, {ours - reply:+.0f} ms vs plain reply"
        earlier = say - ours
        goal = EARLIER_GOAL_MS if first_byte >= 0.3 else 0.0
        row.target = verdict(
            earlier >= goal, f"≥ {goal:.0f} ms before plain say; {earlier:.0f} ms"
        )
        assert commit_to_frame is not None
        commit_row = Row(
            f"first words taken → greeting, {label}: turnfsm", [commit_to_frame], "ms"
        )
        commit_row.target = verdict(
            commit_to_frame <= COMMIT_TO_FRAME_GOAL_MS,
            f"≤ {COMMIT_TO_FRAME_GOAL_MS:.0f} ms; {commit_to_frame:.0f} ms",
        )
        rows += [
            row,
            commit_row,
            Row(f"end of Hello? → greeting, {label}: plain say", [say], "ms"),
            Row(f"end of Hello? → greeting, {label}: plain reply", [reply], "ms"),
        ]
    return Section(
        "Greeting latency against the TTS's first byte (virtual clock, LiveKit defaults)",
        rows,
        [
            "One call per row on the virtual clock: exact call times, the same on every "
            "run. See the module docstring for the three variants.",
        ],
    )


SECTIONS = [greeting_latency]
