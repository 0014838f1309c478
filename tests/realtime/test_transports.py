"""Wall-clock smoke tests: the in-memory transport on the virtual clock gives what TCP on the
wall clock gives.

Every other realtime test reaches `RealtimeTestServer` in memory, on the virtual clock. Each
test here runs one call twice, over a real websocket on 127.0.0.1 in real time, and in
memory on a `VirtualClockLoop`, and compares the two: the same events on the wire, the same
trace shape.
"""

from __future__ import annotations

import asyncio
import difflib
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import pytest

from turnfsm.adapters.sim.clock import VirtualClockLoop
from turnfsm.adapters.sim.realtime import IDEAL, RealtimeScript, RealtimeTestServer, Transport

from support.realtime_calls import Call, greet_after_hello
from support.realtime_client import connect

pytestmark = pytest.mark.wall_clock

_T = TypeVar("_T")

_STREAMED = {"response.output_audio.delta", "response.output_audio_transcript.delta"}
"""Left out of the comparison: how many chunks stream before a cancel lands depends, in real
time, on the machine's speed."""


def on_both(scenario: Callable[[Transport], Awaitable[_T]]) -> tuple[_T, _T]:
    """Runs ``scenario`` over TCP in real time, then in memory on the virtual clock."""
    over_tcp = asyncio.run(scenario("tcp"))
    loop = VirtualClockLoop()
    try:
        in_memory = loop.run_until_complete(scenario("memory"))
    finally:
        loop.close()
    return over_tcp, in_memory


def assert_same(over_tcp: Sequence[object], in_memory: Sequence[object]) -> None:
    """The two runs agree; else the difference, line by line."""
    difference = difflib.unified_diff(
        list(map(str, over_tcp)), list(map(str, in_memory)), "tcp", "memory", lineterm=""
    )
    assert list(over_tcp) == list(in_memory), "\n".join(difference)


def wire_shape(server: RealtimeTestServer) -> list[tuple[str, str]]:
    """The events either way, in order, but the streamed deltas."""
    return [(e.direction, e.type) for e in server.events if e.type not in _STREAMED]


def test_a_bare_client_sees_the_same_events_on_both_transports() -> None:
    async def scenario(transport: Transport) -> list[tuple[str, str]]:
        script = RealtimeScript(["Auto reply.", "A long answer, cut."], user_transcripts=["hi"])
        server = RealtimeTestServer(script, fidelity=IDEAL, transport=transport)
        async with server, connect(server) as client:
            await client.send(
                "session.update",
                session={
                    "type": "realtime",
                    "audio": {
                        "input": {
                            "transcription": {"model": "gpt-4o-mini-transcribe"},
                            "turn_detection": {"type": "server_vad", "silence_duration_ms": 200},
                        }
                    },
                },
            )
            await client.expect("session.updated")
            await client.append_audio(300, amplitude=0.1)
            await client.append_audio(300, amplitude=0.0)
            await client.expect("response.done")  # the server's own reply to the turn
            await client.send("response.create")
            item_id = (await client.expect("response.output_item.added"))["item"]["id"]
            await client.expect("response.output_audio.delta")
            await client.send("response.cancel")
            await client.expect("response.done")
            await client.send(
                "conversation.item.truncate", item_id=item_id, content_index=0, audio_end_ms=0
            )
            await client.expect("conversation.item.truncated")
            await client.send("conversation.item.delete", item_id="nope")
            await client.expect("error")
        return wire_shape(server)

    assert_same(*on_both(scenario))


def test_a_turnfsm_call_has_the_same_trace_shape_on_both_transports() -> None:
    """The outbound greeting after "Hello?", the model's own reply to it suppressed."""

    async def scenario(transport: Transport) -> list[str]:
        server = RealtimeTestServer(RealtimeScript(), fidelity=IDEAL, transport=transport)
        async with server:
            call = Call(server)
            try:
                _, controller, _ = await greet_after_hello(call)
            finally:
                await call.aclose()
        assert controller.trace is not None
        steps = [f"{s.before} {s.event.name} {s.after}" for s in controller.trace]
        return steps + [f"response {r.trigger} {r.status}" for r in server.responses]

    assert_same(*on_both(scenario))
