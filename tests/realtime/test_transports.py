"""The in-memory transport: on the virtual clock it gives what TCP on the wall clock gives,
and a call replays exactly.

Every other realtime test reaches `RealtimeTestServer` in memory, on the virtual clock. The
wall-clock smoke tests here run one scenario twice, over a real websocket on 127.0.0.1 in
real time, and in memory on a `VirtualClockLoop`, and compare the two: the same events on
the wire, the same trace shape, the same ends of a connection as aiohttp reports them.
"""

from __future__ import annotations

import asyncio
import difflib
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import pytest
from aiohttp import ClientConnectionResetError, WSServerHandshakeError

from turnfsm.adapters.sim.clock import VirtualClockLoop
from turnfsm.adapters.sim.realtime import (
    FIDELITY_MATRIX,
    IDEAL,
    RealtimeScript,
    RealtimeTestServer,
    Transport,
)

from support.realtime_calls import Call, greet_after_hello
from support.realtime_client import connect, open_socket

_T = TypeVar("_T")

LONG_AUTO_REPLY = " ".join(["Auto reply nobody should hear, as it goes on and on."] * 3)
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


@pytest.mark.wall_clock
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


@pytest.mark.wall_clock
def test_a_turnfsm_call_has_the_same_trace_shape_on_both_transports() -> None:
    """The outbound greeting after "Hello?", the model's own reply to it suppressed: the
    same decisions (the steps that move the machine or emit effects) and the same
    responses. Steps that decide nothing (a lever's outcome, a transcript) are left out:
    in real time, under load, the order of two arriving at one moment varies. The model's
    own reply is long (about 8 s of speech): its cancel lands before it is done even on a
    busy machine (a short one once finished first over TCP, under load, and its text was
    committed and dropped: a late cancel, which tests/realtime's fault cases cover)."""

    async def scenario(transport: Transport) -> list[str]:
        server = RealtimeTestServer(RealtimeScript(), fidelity=IDEAL, transport=transport)
        async with server:
            call = Call(server)
            try:
                _, controller, _ = await greet_after_hello(call, auto_reply=LONG_AUTO_REPLY)
            finally:
                await call.aclose()
        assert controller.trace is not None
        decisions = [
            f"{s.before} {s.event.name} {s.after} {[e.name for e in s.effects]}"
            for s in controller.trace
            if s.effects or s.after != s.before
        ]
        return decisions + [f"response {r.trigger} {r.status}" for r in server.responses]

    assert_same(*on_both(scenario))


@pytest.mark.wall_clock
@pytest.mark.parametrize("ending", ["server-drops", "client-closes"])
def test_a_connection_ends_as_over_tcp(ending: str) -> None:
    """What the client reads, whether it is closed and with which code, and what a send
    raises, when the network drops the connection or the client closes it while a
    receive is pending. (A close by the server is not compared: over TCP the code the
    client reports then depends on whether the server's teardown beats the client's reply.)"""

    async def scenario(transport: Transport) -> list[object]:
        seen: list[object] = []
        server = RealtimeTestServer(RealtimeScript(), fidelity=IDEAL, transport=transport)
        async with server, open_socket(server) as ws:
            seen.append((await ws.receive()).type)  # session.created
            if ending == "server-drops":
                server.connections[0].drop()
            else:
                pending = asyncio.create_task(ws.receive())
                await asyncio.sleep(0.01)
                await ws.close()
                seen.append((await pending).type)
            for _ in range(2):
                message = await ws.receive(timeout=5)
                seen.append((message.type, message.data, ws.closed, ws.close_code))
            with pytest.raises(ClientConnectionResetError):
                await ws.send_str("{}")
        return seen

    assert_same(*on_both(scenario))


@pytest.mark.wall_clock
@pytest.mark.parametrize(
    ("path", "authorized"), [("/v1/chat", True), ("/v1/realtime", False)], ids=["path", "token"]
)
def test_a_refused_handshake_fails_as_over_tcp(path: str, authorized: bool) -> None:
    async def scenario(transport: Transport) -> list[object]:
        server = RealtimeTestServer(RealtimeScript(), fidelity=IDEAL, transport=transport)
        async with server:
            with pytest.raises(WSServerHandshakeError) as refused:
                async with open_socket(server, path, authorized=authorized):
                    pass
        return [refused.value.status]

    assert_same(*on_both(scenario))


def test_a_call_in_memory_replays_exactly() -> None:
    """The same call twice on the virtual clock: every event either way, with its payload,
    ids and timestamp, every machine step with its time, and what the callee heard, alike."""

    async def call_once() -> list[object]:
        server = RealtimeTestServer(
            RealtimeScript(), fidelity=FIDELITY_MATRIX["100ms-cancel-150ms"]
        )
        async with server:
            call = Call(server)
            try:
                _, controller, greeting = await greet_after_hello(call)
            finally:
                await call.aclose()
        assert controller.trace is not None
        return [
            *((e.direction, e.timestamp, json.dumps(e.payload)) for e in server.events),
            *((s.event, s.before, s.after, s.effects) for s in controller.trace),
            (greeting.started_at, greeting.finished_at, greeting.played),
        ]

    runs = []
    for _ in range(2):
        loop = VirtualClockLoop(seed=7)
        try:
            runs.append(loop.run_until_complete(call_once()))
        finally:
            loop.close()
    assert len(runs[0]) > 100
    assert_same(*runs)
