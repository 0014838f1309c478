"""Issue 19's matrix: the realtime promises under every timing, speech and fault.

Axes: one-way latency {0, 100, 300 ms} × cancel delay {0, 150, 600 ms} × transcript lead
{0, 1 s} × speech rate {even, uneven} × LiveKit's transcript synchronizer {on, off} ×
fault {none, refused once, refused twice, failed, socket drop, VAD race}: 432 cells,
every one in ``make test-matrix``, which ``.ci/run`` runs after ``make test``
(``tests/realtime/test_realtime_matrix_<latency>.py``, one module per latency so that
the two workers share them); ``make test`` runs a covering subset of 18 (every fault
with every value of every other axis), so that it keeps to three minutes.

Each cell is one outbound call on the virtual clock: the callee answers and says "Hello?",
turnfsm greets (the fault hits the greeting), then the callee asks a question and barges
in on the answer 1.5 s into it. What the callee got is judged:

1. the greeting: its last speech played whole and no other speech came before it (or,
   refused twice, the call ended ``greeting_failed`` with nothing played);
2. the heard text: every assistant message in the history is a word prefix of the words
   of its reply played to their end (the server's own speech timeline);
3. the call goes on: the barge-in is answered, the machine listens;

and no step of the machine broke an invariant (its strict controller refused none).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from dataclasses import dataclass, replace

import pytest
from livekit.agents import llm

from turnfsm import TurnPolicy
from turnfsm import events as ev
from turnfsm.adapters.sim.realtime import REAL_PROTOCOL, Fidelity
from turnfsm.tools.metrics import call_metrics

from .realtime_calls import Call, scripted_model, served_call, wait_finished, words_heard
from .tone import ToneMicrophone

GREETING = "Hi, this is Ada from Acme, calling about the order you placed last week."
ANSWER = (
    "Our shop opens at nine and closes at six on weekdays, and on Saturdays "
    "it opens at ten and closes at four."
)
LATENCIES_MS = (0, 100, 300)
CANCEL_DELAYS_MS = (0, 150, 600)
TEXT_LEADS_MS = (0, 1000)
RATES = ("even", "uneven")
SYNCHRONIZER = (False, True)
FAULTS = ("none", "refused once", "refused twice", "failed", "socket drop", "VAD race")


@dataclass(frozen=True)
class Cell:
    latency_ms: int
    cancel_ms: int
    lead_ms: int
    rate: str
    synchronizer: bool
    fault: str

    @property
    def fidelity(self) -> Fidelity:
        return replace(
            REAL_PROTOCOL,
            network_latency_ms=self.latency_ms,
            cancel_latency_ms=self.cancel_ms,
            transcript_lead_ms=self.lead_ms,
            generation_speed=2.0,
            speaking_rate_variation=0.3 if self.rate == "uneven" else 0.0,
        )

    def __str__(self) -> str:
        sync = "sync" if self.synchronizer else "nosync"
        return (
            f"{self.latency_ms}ms-cancel{self.cancel_ms}-lead{self.lead_ms}-{self.rate}-"
            f"{sync}-{self.fault.replace(' ', '_')}"
        )


FULL_MATRIX = os.environ.get("TURNFSM_REALTIME_MATRIX") == "1"
"""``make test-matrix`` (``.ci/run``) runs every cell; ``make test`` a covering subset."""


def cells(latency_ms: int) -> list[Cell]:
    """The matrix's cells at one one-way latency (144: one test module each, so that the
    suite's workers share the matrix)."""
    return [
        Cell(latency_ms, *values)
        for values in itertools.product(
            CANCEL_DELAYS_MS, TEXT_LEADS_MS, RATES, SYNCHRONIZER, FAULTS
        )
    ]


def covering_cells(latency_ms: int) -> list[Cell]:
    """Six of them: every fault once, the other axes cycled so that over the three
    latencies each fault meets every value of every other axis (18 cells in all)."""
    shift = LATENCIES_MS.index(latency_ms)
    chosen = []
    for number, fault in enumerate(FAULTS):
        k = number + shift
        chosen.append(
            Cell(
                latency_ms,
                CANCEL_DELAYS_MS[k % 3],
                TEXT_LEADS_MS[(k + 1) % 2],
                RATES[k % 2],
                SYNCHRONIZER[(k // 2) % 2],
                fault,
            )
        )
    return chosen


def cells_to_run(latency_ms: int) -> list[Cell]:
    """Every cell under ``make test-matrix``, the covering subset under ``make test``."""
    return cells(latency_ms) if FULL_MATRIX else covering_cells(latency_ms)


def _assistant_messages(call: Call) -> list[llm.ChatMessage]:
    assert call.session is not None
    return [
        item
        for item in call.session.history.items
        if isinstance(item, llm.ChatMessage) and item.role == "assistant"
    ]


class _ControllerFailures(logging.Handler):
    """The adapter's log of controller steps that failed: a strict controller refuses a
    step that breaks an invariant, and the adapter logs it instead of raising it into
    LiveKit."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.failures: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "controller failed" in record.getMessage():
            self.failures.append(record.getMessage().splitlines()[0])


async def run_cell(cell: Cell) -> None:
    """One cell; it fails on what the callee got, or on any step the machine refused."""
    failures = _ControllerFailures()
    adapter_log = logging.getLogger("turnfsm.adapters.livekit")
    adapter_log.addHandler(failures)
    try:
        await _run_cell(cell)
    finally:
        adapter_log.removeHandler(failures)
    assert failures.failures == []


async def _run_cell(cell: Cell) -> None:
    async with served_call(cell.fidelity) as call:
        # the plugin sends the model 100 ms chunks: frames of that length change nothing it
        # hears, and cost a fifth of the 20 ms ones
        call.microphone = ToneMicrophone(frame_duration=0.1)
        server, script = call.server, call.server.script
        script.policy = scripted_model([])  # a reply of its own to "Hello?" says "Okay."
        if cell.fault == "refused once":
            script.refuse_creates = 1
        elif cell.fault == "refused twice":
            script.refuse_creates = 2
        elif cell.fault == "failed":
            script.fail_responses, script.fail_after_ms = 1, 1200
        elif cell.fault == "VAD race":
            script.race_auto_replies = 1
        session, adapter, controller = await call.start(
            TurnPolicy(direction="outbound", greeting=GREETING),
            transcript_sync=cell.synchronizer,
        )
        adapter.dispatch(ev.CallAnswered(at=adapter.now()))
        call.microphone.speak(0.6)  # "Hello?"

        if cell.fault == "refused twice":
            await asyncio.sleep(8.0)
            assert controller.is_ended
            assert controller.trace is not None
            assert call_metrics(controller.trace).end_reason == "greeting_failed"
            assert not [s for s in call.speaker.segments if s.played > 0]
            return

        first = await call.segment_playing(0, timeout=15.0)
        if cell.fault == "socket drop":
            await call.played(first, 1.0)
            server.connection.drop()
        greeting = first
        if cell.fault in ("failed", "socket drop"):
            greeting = await call.segment_playing(1, timeout=15.0)
        await wait_finished(greeting)
        # 1. the greeting played whole, and nothing but a cut greeting came before it
        assert not greeting.interrupted
        assert greeting.played == pytest.approx(greeting.pushed, abs=0.01)
        greeted = [r for r in server.responses if r.reply.text == GREETING]
        assert greeted[-1].status == "completed"
        played_before = [s for s in call.speaker.segments if s is not greeting and s.played > 0]
        assert len(played_before) == (1 if cell.fault in ("failed", "socket drop") else 0)

        # 3. the call goes on: a question, its answer, a barge-in 1.5 s into it
        script.policy = scripted_model([ANSWER, "Sure."])
        await asyncio.sleep(1.0)
        call.microphone.speak(0.5)
        answer = await call.segment_playing(len(call.speaker.segments), timeout=15.0)
        await call.played(answer, 1.5)
        call.microphone.speak(0.5)
        await wait_finished(answer)
        await asyncio.sleep(3.0)
        assert controller.state == "listening"
        assert answer.interrupted

        # 2. every assistant message holds only words played to their end
        played = {GREETING: [*played_before, greeting], ANSWER: [answer]}
        for message in _assistant_messages(call):
            said = (message.text_content or "").split()
            if said in (["Sure."], ["Okay."]):  # played whole, or suppressed unplayed
                continue
            reply = GREETING if " ".join(said) in GREETING else ANSWER
            heard = [
                reply.split()
                if s.played >= s.pushed - 0.01 and not s.interrupted and s is greeting
                else words_heard(server, reply, s.played)
                for s in played[reply]
            ]
            assert any(said == words[: len(said)] for words in heard), (said, heard)
