"""Each `Fidelity` setting of `RealtimeTestServer`, on the wire with a bare client.

They run on the virtual clock, in memory: every time here is exact, however busy the
machine (a float's rounding aside).
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import pytest

from turnfsm.adapters.sim.realtime import (
    FIDELITY_MATRIX,
    IDEAL,
    REAL_PROTOCOL,
    ConformanceError,
    Fidelity,
    RealtimeScript,
    RealtimeTestServer,
)

from support.realtime_client import Client, connect

CPS = 20.0  # speaking rate of these tests: 20 characters a second


@asynccontextmanager
async def served(
    fidelity: Fidelity, *replies: str, lead_ms: int = 0, **options: Any
) -> AsyncIterator[tuple[RealtimeTestServer, Client]]:
    script = RealtimeScript(replies, user_transcripts=["hello"])
    async with (
        RealtimeTestServer(
            script, chars_per_second=CPS, lead_ms=lead_ms, fidelity=fidelity, **options
        ) as server,
        connect(server) as client,
    ):
        yield server, client


def _audio_ms(event: dict[str, Any]) -> float:
    return len(base64.b64decode(event["delta"])) / 2 / 24


# ------------------------------------------------------------------------ the settings


async def test_network_latency_delays_both_directions() -> None:
    latency = FIDELITY_MATRIX["100ms-cancel-150ms"].network_latency_ms / 1000
    async with served(replace(IDEAL, network_latency_ms=100), "Hi.") as (server, client):
        sent_at = await client.send("response.create", event_id="evt_create")
        created = await client.expect("response.created")
        (received,) = server.events_of_type("response.create")
        (emitted,) = server.events_of_type("response.created", direction="sent")

    assert received.timestamp - sent_at == pytest.approx(latency)
    assert client.arrived_at(created) - emitted.timestamp == pytest.approx(latency)
    assert client.arrived_at(created) - sent_at == pytest.approx(2 * latency)


async def test_cancelled_response_stays_active_until_its_done() -> None:
    """The greeting race: ``response.create`` right after ``response.cancel`` is rejected."""
    fidelity = replace(REAL_PROTOCOL, cancel_latency_ms=150)
    async with served(fidelity, "A long answer that takes a while to say.", "Greeting.") as (
        server,
        client,
    ):
        await client.send("response.create")
        first = (await client.expect("response.created"))["response"]["id"]
        await client.expect("response.output_audio.delta")
        cancelled_at = await client.send("response.cancel", event_id="evt_cancel")
        await client.send("response.create", event_id="evt_greeting")
        error = (await client.expect("error"))["error"]
        done = await client.expect("response.done")
        streamed_while_cancelling = [
            event
            for at, event in client.seen
            if event["type"] == "response.output_audio.delta" and at > cancelled_at
        ]
        await client.send("response.create", event_id="evt_retry")
        second = (await client.expect("response.created"))["response"]["id"]

    assert error == {
        "type": "invalid_request_error",
        "code": "conversation_already_has_active_response",
        "message": f"Conversation already has an active response in progress: {first}. "
        "Wait until the response is finished before creating a new one.",
        "param": None,
        "event_id": None,  # the real service does not name the rejected event
    }
    assert done["response"]["id"] == first
    assert done["response"]["status"] == "cancelled"
    assert done["response"]["status_details"] == {
        "type": "cancelled",
        "reason": "client_cancelled",
    }
    (cancel,) = server.events_of_type("response.cancel")
    (done_sent,) = server.events_of_type("response.done", direction="sent")
    assert done_sent.timestamp - cancel.timestamp == pytest.approx(0.15)
    assert client.arrived_at(done) > cancelled_at
    assert streamed_while_cancelling  # it went on streaming until the cancel took effect
    assert second != first
    assert [r.status for r in server.responses] == ["cancelled", "in_progress"]


async def test_without_cancel_latency_a_cancel_ends_the_response_at_once() -> None:
    async with served(REAL_PROTOCOL, "A long answer that takes a while to say.", "Next.") as (
        server,
        client,
    ):
        await client.send("response.create")
        await client.expect("response.output_audio.delta")
        await client.send("response.cancel")
        await client.send("response.create")
        await client.expect("response.done")
        await client.expect("response.created")
    assert not client.seen_of_type("error")


async def test_transcript_runs_ahead_of_audio() -> None:
    text = "One two three four five six seven eight nine ten."  # 2.5 s at 20 chars/s

    async def transcript_before_first_audio(fidelity: Fidelity) -> str:
        async with served(fidelity, text) as (_, client):
            await client.send("response.create")
            await client.expect("response.output_audio.delta")
        return "".join(
            e["delta"] for e in client.seen_of_type("response.output_audio_transcript.delta")
        )

    aligned = await transcript_before_first_audio(IDEAL)
    ahead = await transcript_before_first_audio(replace(IDEAL, transcript_lead_ms=1000))
    # the first 100 ms chunk speaks "One"; a second ahead, the text reaches 1.1 s: 22 chars
    assert aligned == "One"
    assert ahead == "One two three four five"


async def test_audio_is_generated_faster_than_real_time() -> None:
    """3 s of audio at 4x arrive in 0.75 s."""
    text = "x" * 60  # 3 s at 20 chars/s
    async with served(replace(IDEAL, generation_speed=4.0), text) as (_, client):
        created_at = await client.send("response.create")
        done = await client.expect("response.done")
        audio_ms = sum(map(_audio_ms, client.seen_of_type("response.output_audio.delta")))
    assert audio_ms == 3000
    assert client.arrived_at(done) - created_at == pytest.approx(0.75 - 0.1 / 4)


async def test_uneven_speech_is_not_spoken_at_a_constant_rate() -> None:
    text = "Our shop opens at nine and closes at six, and on Sundays at four."
    even = RealtimeTestServer(chars_per_second=CPS, fidelity=IDEAL)
    uneven = RealtimeTestServer(
        chars_per_second=CPS, fidelity=replace(IDEAL, speaking_rate_variation=0.3)
    )
    even_words, even_ms = even.speech_timeline(text)
    uneven_words, uneven_ms = uneven.speech_timeline(text)

    assert even_ms == len(text) / CPS * 1000
    assert [start for start, _ in even_words][:3] == [0.0, 150.0, 400.0]  # "Our", " shop"
    assert uneven.speech_timeline(text) == (uneven_words, uneven_ms)  # the same every time
    assert 0.7 * even_ms < uneven_ms < 1.3 * even_ms
    # where the caller stopped hearing cannot be found at a constant rate any more
    constant_rate = [
        even.heard_prefix(text, round(cut * even_ms / uneven_ms)) for cut in range(0, 3300, 100)
    ]
    actual = [uneven.heard_prefix(text, cut) for cut in range(0, 3300, 100)]
    assert constant_rate != actual
    fast_uneven = replace(IDEAL, speaking_rate_variation=0.3, generation_speed=8.0)
    async with served(fast_uneven, text) as (_, client):
        await client.send("response.create")
        await client.expect("response.done")
    audio_ms = sum(map(_audio_ms, client.seen_of_type("response.output_audio.delta")))
    assert audio_ms == round(uneven_ms)


async def test_truncate_shortfall_and_past_the_end_rejection() -> None:
    text = "x" * 20  # 1000 ms of audio sent
    async with served(REAL_PROTOCOL, text) as (server, client):
        await client.send("response.create")
        item_id = (await client.expect("response.output_item.added"))["item"]["id"]
        await client.expect("response.done")
        received_ms = sum(map(_audio_ms, client.seen_of_type("response.output_audio.delta")))
        await client.send(
            "conversation.item.truncate",
            event_id="evt_past",
            item_id=item_id,
            content_index=0,
            audio_end_ms=int(received_ms) - 50,
        )
        error = (await client.expect("error"))["error"]
        await client.send(
            "conversation.item.truncate", item_id=item_id, content_index=0, audio_end_ms=900
        )
        truncated = await client.expect("conversation.item.truncated")

    assert received_ms == 1000
    assert server.connection.item_audio_ms[item_id] == 900  # 1000 - 85 when rejected, then cut
    assert error == {
        "type": "invalid_request_error",
        "code": "invalid_value",
        "message": "Audio content of 915ms is already shorter than 950ms",
        "param": None,
        "event_id": None,
    }
    assert truncated["audio_end_ms"] == 900
    assert server.conversation_summary() == [("assistant", "")]  # the transcript is gone


async def test_deleting_the_item_of_a_response_in_progress() -> None:
    async with served(REAL_PROTOCOL, "An answer of a second.") as (
        server,
        client,
    ):
        await client.send("response.create")
        item_id = (await client.expect("response.output_item.added"))["item"]["id"]
        await client.send("conversation.item.delete", item_id=item_id)
        deleted = await client.expect("conversation.item.deleted")
        done = await client.expect("response.done")

    deleted_at = client.arrived_at(deleted)
    later_deltas = [
        event
        for at, event in client.seen
        if at > deleted_at and event["type"] == "response.output_audio.delta"
    ]
    assert deleted["item_id"] == item_id
    assert later_deltas  # the response goes on streaming the deleted item
    assert {event["item_id"] for event in later_deltas} == {item_id}
    assert done["response"]["status"] == "completed"
    assert [item["id"] for item in done["response"]["output"]] == [item_id]
    assert server.conversation == []
    assert item_id not in server.connection.item_audio_ms
    assert not [
        event
        for event in client.seen_of_type("conversation.item.done")
        if event["item"]["id"] == item_id
    ]


async def test_server_vad_answers_and_interrupts_by_itself() -> None:
    """With ``create_response``/``interrupt_response`` the server answers a turn and cuts its
    answer at the next speech, without a client request, after its cancel latency."""
    fidelity = FIDELITY_MATRIX["100ms-cancel-150ms"]
    async with served(fidelity, "A long answer that takes a while to say.") as (server, client):
        await client.send(
            "session.update",
            session={
                "type": "realtime",
                "audio": {
                    "input": {"turn_detection": {"type": "server_vad", "silence_duration_ms": 200}}
                },
            },
        )
        await client.expect("session.updated")
        await client.append_audio(300, amplitude=0.1)
        await client.append_audio(300, amplitude=0.0)
        committed = await client.expect("input_audio_buffer.committed")
        created = await client.expect("response.created")
        await client.expect("response.output_audio.delta")
        await client.append_audio(100, amplitude=0.1)
        started = await client.expect("input_audio_buffer.speech_started")
        done = await client.expect("response.done")

    assert not server.events_of_type("response.create")
    assert server.responses[0].trigger == "turn_detected"
    assert created["response"]["id"] == done["response"]["id"]
    assert committed["item_id"] == server.conversation[0]["id"]
    assert done["response"]["status_details"] == {"type": "cancelled", "reason": "turn_detected"}
    (started_sent,) = [
        event
        for event in server.events_of_type("input_audio_buffer.speech_started", direction="sent")
        if event.payload["event_id"] == started["event_id"]
    ]
    (done_sent,) = server.events_of_type("response.done", direction="sent")
    assert done_sent.timestamp - started_sent.timestamp == pytest.approx(0.15)


async def test_state_errors_name_the_client_event_only_when_ideal() -> None:
    for fidelity, named in [(IDEAL, "evt_delete"), (REAL_PROTOCOL, None)]:
        async with served(fidelity) as (_, client):
            await client.send("conversation.item.delete", event_id="evt_delete", item_id="nope")
            error = (await client.expect("error"))["error"]
        assert error == {
            "type": "invalid_request_error",
            "code": "item_delete_invalid_item_id",
            "message": "Error deleting item: the item with id 'nope' does not exist.",
            "param": None,
            "event_id": named,
        }


# ----------------------------------------------------------------- malformed client events


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (
            {"type": "session.updat", "event_id": "evt_1"},
            {"code": "invalid_value", "param": "type", "event_id": None},
        ),
        (
            {
                "type": "session.update",
                "event_id": "evt_2",
                "session": {"type": "realtime", "tools": [{"type": "function", "meta": 1}]},
            },
            {
                "code": "unknown_parameter",
                "message": "Unknown parameter: 'session.tools[0].meta'.",
                "param": "session.tools[0].meta",
                "event_id": "evt_2",
            },
        ),
        (
            {"type": "conversation.item.truncate", "event_id": "evt_3", "item_id": "x"},
            {
                "code": "missing_required_parameter",
                "message": "Missing required parameter: 'audio_end_ms'.",
                "param": "audio_end_ms",
                "event_id": None,
            },
        ),
        (
            {"type": "input_audio_buffer.append", "event_id": "evt_4", "audio": 7},
            {"code": "invalid_value", "param": "audio", "event_id": None},
        ),
        (  # named in the union member the event meant (server_vad), not the others tried
            {
                "type": "session.update",
                "session": {
                    "type": "realtime",
                    "audio": {
                        "input": {"turn_detection": {"type": "server_vad", "threshold": "x"}}
                    },
                },
            },
            {"code": "invalid_value", "param": "session.audio.input.turn_detection.threshold"},
        ),
    ],
    ids=["unknown-type", "unknown-parameter", "missing-parameter", "wrong-type", "in-a-union"],
)
async def test_malformed_client_events_are_rejected_with_the_real_error(
    event: dict[str, Any], expected: dict[str, Any]
) -> None:
    async with served(REAL_PROTOCOL) as (server, client):
        updates = len(server.connection.session_history)
        await client.send_raw(event)
        error = (await client.expect("error"))["error"]
        (violation,) = server.take_violations()

    assert error["type"] == "invalid_request_error"
    assert {key: error[key] for key in expected} == expected
    assert (violation.side, violation.type) == ("client", event["type"])
    assert violation.problems[0].param == error["param"]
    if event["type"] == "session.update":  # no problem from the members not meant
        assert len(violation.problems) == 1
    assert len(server.connection.session_history) == updates  # nothing was applied
    assert server.conversation == []
    if expected["code"] == "invalid_value" and expected["param"] == "type":
        assert error["message"].startswith("Invalid value: 'session.updat'. Supported values")


# --------------------------------------------------------------------------- conformance


async def test_conformance_check_fails_on_a_server_event_missing_a_field() -> None:
    server = RealtimeTestServer(fidelity=IDEAL)
    await server.start()
    async with connect(server) as client:
        server.connection.send_event({"type": "response.done"})  # no "response"
        server.connection.send_event(
            {"type": "conversation.item.deleted", "item_id": "x", "made_up": 1}
        )
        await client.expect("conversation.item.deleted")
    with pytest.raises(ConformanceError) as raised:
        await server.aclose()

    assert [str(v) for v in raised.value.violations] == [
        "server 'response.done': response: missing (Field required)",
        "server 'conversation.item.deleted': made_up: unknown (not declared by the model)",
    ]
    assert server.violations == []


async def test_the_servers_own_events_conform_in_every_setting() -> None:
    """A reply, a cancel, a truncate and the rejections, under each setting: all conform."""
    for setting in [IDEAL, *FIDELITY_MATRIX.values()]:
        # neither the pace nor the network changes an event's content
        fidelity = replace(setting, generation_speed=8.0, network_latency_ms=0)
        async with served(fidelity, "One two three.", "Four.") as (server, client):
            await client.send("response.create")
            item_id = (await client.expect("response.output_item.added"))["item"]["id"]
            await client.send("response.cancel")
            await client.send("response.create")
            await client.send("response.cancel")
            await client.expect("response.done")
            await client.send(
                "conversation.item.truncate", item_id=item_id, content_index=0, audio_end_ms=0
            )
            await client.expect("conversation.item.truncated")
            await client.send("conversation.item.delete", item_id="nope")
            await client.expect("error")
        sent: Callable[[str], list[Any]] = lambda kind: server.events_of_type(  # noqa: E731
            kind, direction="sent"
        )
        assert sent("response.created")
        assert sent("error")
        assert server.violations == []


def test_bad_fidelity_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="network_latency_ms must be an int >= 0"):
        Fidelity(network_latency_ms=-1)
    with pytest.raises(ValueError, match="generation_speed must be >= 1.0"):
        Fidelity(generation_speed=0.5)
    with pytest.raises(ValueError, match="speaking_rate_variation must be in"):
        Fidelity(speaking_rate_variation=1.0)
