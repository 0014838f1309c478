"""Silence after "Hello?" on a realtime model, per latency and cancel delay (issue 19).

``.venv/bin/python -m benchmarks.realtime_silence`` prints one markdown table. Each cell is
one outbound call on the real ``openai.realtime.RealtimeModel`` against the protocol test
server (the real service's rules, ``REAL_PROTOCOL``, at that one-way network latency and
cancel delay), on the virtual clock, so the numbers are exact and load-independent: the
callee answers and says "Hello?" (0.6 s of tone); the model has server turn detection
(500 ms of silence ends a turn) and would answer it on its own; turnfsm greets.

Columns:

- *silence*: from the end of "Hello?" to the greeting's first audio at the callee's
  loudspeaker (the 500 ms the server's VAD waits for silence included);
- *after commit*: from the server's commit of "Hello?" to that audio: three one-way
  latencies at least while the server must not answer on its own (the commit's way to the
  client, the client's ``response.create`` to the server, the audio back);
- *after the client learns*: from the commit's arrival at the client to that audio, the
  part the client decides; the issue's goal is at most twice the one-way latency plus the
  model's first audio (the test server sends its first chunk at once);
- *create reaction*: from the commit's arrival at the client to the greeting's
  ``response.create`` leaving it (the issue's goal: at most 50 ms);
- *CPU*: process time of the cell.
"""

from __future__ import annotations

import asyncio
import resource
import sys
from dataclasses import replace
from pathlib import Path

from turnfsm.adapters.sim import clock
from turnfsm.adapters.sim.realtime import REAL_PROTOCOL

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support.realtime_calls import greet_after_hello_started, served_call  # noqa: E402

LATENCIES_MS = (0, 100, 300)
CANCEL_DELAYS_MS = (0, 150, 600)
HELLO_SECONDS = 0.6


async def one_call(latency_ms: int, cancel_ms: int) -> tuple[float, float, float, float]:
    """(silence, after commit, after the client learns, create reaction) in seconds, for
    one cell."""
    fidelity = replace(REAL_PROTOCOL, network_latency_ms=latency_ms, cancel_latency_ms=cancel_ms)
    async with served_call(fidelity) as call:
        server = call.server
        await greet_after_hello_started(call)
        hello_ended = asyncio.get_running_loop().time() + HELLO_SECONDS
        greeting = await call.segment_playing(0, timeout=30.0)
        assert greeting.started_at is not None
        committed = server.events_of_type("input_audio_buffer.committed", direction="sent")[0]
        created = server.events_of_type("response.create")[0]
        latency = latency_ms / 1000
        learned = committed.timestamp + latency
        return (
            greeting.started_at - hello_ended,
            greeting.started_at - committed.timestamp,
            greeting.started_at - learned,
            (created.timestamp - latency) - learned,
        )


def _cpu_seconds() -> float:
    """This process's CPU time (user and system; the virtual clock leaves it alone)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    rows = [
        "| latency | cancel delay | silence after Hello? | after commit | after the client"
        " learns | goal | create reaction | CPU |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for latency_ms in LATENCIES_MS:
        for cancel_ms in CANCEL_DELAYS_MS:
            started = _cpu_seconds()
            silence, after_commit, learned, reaction = clock.run(one_call(latency_ms, cancel_ms))
            cpu = _cpu_seconds() - started
            rows.append(
                f"| {latency_ms} ms | {cancel_ms} ms | {silence:.2f} s | {after_commit:.2f} s "
                f"| {learned:.2f} s | ≤ {2 * latency_ms / 1000:.2f} s "
                f"| {reaction * 1000:.0f} ms | {cpu:.1f} s |"
            )
    print("\n".join(rows))


if __name__ == "__main__":
    main()
