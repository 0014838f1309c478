"""`RealtimeTestServer` on the wire, with a bare websocket client."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from turnfsm.adapters.sim.realtime import IDEAL, RealtimeScript, RealtimeTestServer

from support.realtime_client import Client, connect, message_item


@pytest.fixture
async def server() -> AsyncIterator[RealtimeTestServer]:
    script = RealtimeScript(user_transcripts=["hello"])
    # the idealised server's mechanics; the real service's rules: test_realtime_fidelity.py
    async with RealtimeTestServer(
        script, chars_per_second=200, lead_ms=0, fidelity=IDEAL
    ) as test_server:
        yield test_server


@pytest.fixture
async def client(server: RealtimeTestServer) -> AsyncIterator[Client]:
    async with connect(server) as test_client:
        yield test_client


async def test_session_update_merges_audio_and_replaces_turn_detection(
    server: RealtimeTestServer, client: Client
) -> None:
    turn_detection = {"type": "server_vad", "silence_duration_ms": 200}
    await client.send(
        "session.update",
        session={"type": "realtime", "audio": {"input": {"turn_detection": turn_detection}}},
    )
    updated = await client.expect("session.updated")

    assert updated["session"]["audio"]["input"]["turn_detection"] == turn_detection
    assert updated["session"]["audio"]["output"]["voice"] == "marin"
    await client.send(
        "session.update",
        session={"type": "realtime", "audio": {"input": {"turn_detection": None}}},
    )
    await client.expect("session.updated")
    assert server.turn_detection is None
    assert server.session["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}
    assert len(server.connection.session_history) == 3


async def test_conversation_edits_and_rejections(
    server: RealtimeTestServer, client: Client
) -> None:
    await client.send("conversation.item.create", item=message_item("u1", "user", "hi"))
    assert (await client.expect("conversation.item.added"))["previous_item_id"] is None
    await client.send(
        "conversation.item.create",
        item=message_item("s1", "system", "be nice"),
        previous_item_id="root",
    )
    await client.expect("conversation.item.added")
    await client.send(
        "conversation.item.create",
        item=message_item("a1", "assistant", "hey"),
        previous_item_id="s1",
    )
    assert (await client.expect("conversation.item.added"))["previous_item_id"] == "s1"
    assert server.conversation_summary() == [
        ("system", "be nice"),
        ("assistant", "hey"),
        ("user", "hi"),
    ]

    await client.send("conversation.item.delete", item_id="a1", event_id="evt_delete")
    assert (await client.expect("conversation.item.deleted"))["item_id"] == "a1"
    rejected = [
        ("conversation.item.delete", {"item_id": "a1"}, "item_delete_invalid_item_id"),
        (
            "conversation.item.create",
            {"item": message_item("u1", "user", "x")},
            "item_create_duplicate_item_id",
        ),
        (
            "conversation.item.truncate",
            {"item_id": "a1", "content_index": 0, "audio_end_ms": 10},
            "item_truncate_invalid_item_id",
        ),
        (
            "conversation.item.truncate",
            {"item_id": "u1", "content_index": 0, "audio_end_ms": 10},
            "unsupported_content_type",  # only model output audio can be truncated
        ),
        ("input_audio_buffer.commit", {}, "input_audio_buffer_commit_empty"),
        ("response.cancel", {}, "response_cancel_not_active"),
    ]
    for index, (type_, fields, code) in enumerate(rejected):
        await client.send(type_, event_id=f"evt_{index}", **fields)
        error = (await client.expect("error"))["error"]
        assert (error["code"], error["event_id"]) == (code, f"evt_{index}")
    assert [item["id"] for item in server.conversation] == ["s1", "u1"]


async def test_truncate_keeps_the_heard_part_of_a_reply(
    server: RealtimeTestServer, client: Client
) -> None:
    server.script.push_response("One two three four five six.")  # 28 chars: 140 ms
    await client.send("response.create", response={"instructions": "count"})
    item_id = (await client.expect("response.output_item.added"))["item"]["id"]
    done = await client.expect("response.done")
    assert done["response"]["status"] == "completed"
    assert done["response"]["usage"]["output_token_details"]["audio_tokens"] == 2
    assert server.connection.item_audio_ms[item_id] == 140

    await client.send(
        "conversation.item.truncate", item_id=item_id, content_index=0, audio_end_ms=150
    )
    assert (await client.expect("error"))["error"]["code"] == "invalid_value"
    await client.send(
        "conversation.item.truncate", item_id=item_id, content_index=0, audio_end_ms=30
    )
    assert (await client.expect("conversation.item.truncated"))["audio_end_ms"] == 30
    assert server.conversation_summary() == [("assistant", "One two")]
    assert server.responses[0].request.instructions == "count"


async def test_server_vad_follows_audio_energy(server: RealtimeTestServer, client: Client) -> None:
    await client.send(
        "session.update",
        session={
            "type": "realtime",
            "audio": {
                "input": {
                    "transcription": {"model": "gpt-4o-mini-transcribe"},
                    "turn_detection": {
                        "type": "server_vad",
                        "prefix_padding_ms": 100,
                        "silence_duration_ms": 200,
                        "create_response": False,
                    },
                }
            },
        },
    )
    await client.append_audio(300, amplitude=0.0)
    await client.append_audio(400, amplitude=0.1)
    await client.append_audio(150, amplitude=0.01)  # below the 0.02 RMS threshold
    await client.append_audio(150, amplitude=0.0)

    started = await client.expect("input_audio_buffer.speech_started")
    stopped = await client.expect("input_audio_buffer.speech_stopped")
    committed = await client.expect("input_audio_buffer.committed")
    transcript = await client.expect("conversation.item.input_audio_transcription.completed")
    assert started["audio_start_ms"] == 300 - 100
    assert stopped["audio_end_ms"] == 700 + 200
    assert started["item_id"] == stopped["item_id"] == committed["item_id"]
    assert transcript["transcript"] == "hello"
    assert server.conversation_summary() == [("user", "hello")]
    assert server.connection.input_audio_ms == 1000
    assert server.responses == []
