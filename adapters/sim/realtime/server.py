"""An OpenAI Realtime protocol test server for offline LiveKit Agents sessions.

The real ``livekit.plugins.openai.realtime.RealtimeModel`` connects to it in memory,
through the ``http_session`` it is given (`transport`), or over TCP (``base_url``)::

    async with RealtimeTestServer(RealtimeScript(["Hello there."])) as server:
        model = openai.realtime.RealtimeModel(api_key="dummy", http_session=server.http_session())

The server speaks the GA event names that the installed plugin (livekit-agents 1.8.9)
parses, e.g. ``response.output_audio.delta`` and ``conversation.item.added``. It cannot
understand audio or text, so a `RealtimeScript` decides what each response says or which
tools it calls, and supplies the transcript of each user utterance. What it does model:

* server turn detection from the **energy** of the received PCM16 audio
  (``speech_started``/``speech_stopped``/``committed``), honouring ``create_response`` and
  ``interrupt_response`` of the session's ``turn_detection`` at the moment it decides;
* responses streamed at real-time pace (``chunk_ms`` of tone every ``chunk_ms``, after an
  initial burst of ``lead_ms``), so a response is still in flight while the client plays
  it and can be cancelled mid-way;
* the server-side conversation, including ``conversation.item.truncate`` and
  ``conversation.item.delete``;
* how far it departs from the real service's timing and rules: a `Fidelity` (network
  latency, cancel latency, text ahead of audio, generation faster than real time, the
  truncation rules, which errors name the client event); `FIDELITY_MATRIX` holds the
  settings the realtime suite is run against;
* conformance: every event sent and received is checked against the ``openai`` package's
  typed event models (`conformance`); a malformed client event is rejected with
  the real error, and leaving the server with unchecked violations raises
  `ConformanceError`;
* a record of every event received and sent, with timestamps taken on the server's side
  of the network, on the event loop's clock (``loop.time()``: ``time.monotonic()`` on an
  ordinary loop, the virtual time on a `VirtualClockLoop`, the clock the simulated
  loudspeaker and microphone keep).

Deliberate differences from the real service: the VAD ignores ``threshold`` and uses the
server's ``vad_rms_threshold``; input transcription is emitted right after the user item
is committed; an automatic response for a turn that ends while another response is in
flight starts once that response is done; deleting the message item of a response still
in progress removes it from the conversation while the response goes on streaming (no
record of the real service's behaviour was found).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import functools
import json
import logging
import math
import random
import re
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np
from aiohttp import WSMessage, WSMsgType, web
from typing_extensions import Self

from .conformance import (
    ConformanceError,
    Violation,
    client_event_error,
    client_event_problems,
    server_event_problems,
)
from .fidelity import IDEAL, Fidelity
from .script import (
    RealtimeScript,
    ResponseRequest,
    ResponseTrigger,
    ScriptedResponse,
    ToolCall,
)
from .transport import Handshake, MemoryHttpSession, MemoryWebSocket, ServerSocket

__all__ = [
    "SAMPLE_RATE",
    "Direction",
    "RealtimeConnection",
    "RealtimeTestServer",
    "RecordedEvent",
    "ResponseRecord",
    "SessionSnapshot",
    "Transport",
]

logger = logging.getLogger(__name__)

SAMPLE_RATE = 24000
"""Sample rate of the PCM16 mono audio in both directions, as the plugin configures it."""

_VAD_WINDOW_SAMPLES = SAMPLE_RATE // 100  # 10 ms analysis windows
_DEFAULT_SILENCE_MS = 500
_DEFAULT_PREFIX_PADDING_MS = 300
_SEMANTIC_EAGERNESS_SILENCE_MS = {"low": 1000, "medium": 500, "auto": 500, "high": 300}
_WORD_PATTERN = re.compile(r"\s*\S+")

Direction = Literal["received", "sent"]
"""Which way an event went: ``received`` from the client or ``sent`` by the server."""


def _now() -> float:
    """The running loop's clock: the server's timestamps are on the loop's time."""
    return asyncio.get_running_loop().time()


def _new_id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:16]}"


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class RecordedEvent:
    """One event on the wire.

    Attributes:
        direction: ``"received"`` from the client or ``"sent"`` by the server.
        type: The event's ``type``.
        wire: The event as it crossed the network (JSON text).
        timestamp: ``loop.time()`` on the server's side of the network: when the
            server handled a client event (``network_latency_ms`` after the client sent
            it) or sent a server event (it reaches the client ``network_latency_ms``
            later).
        connection: Index of the websocket connection in `RealtimeTestServer.connections`.
    """

    direction: Direction
    type: str
    wire: str
    timestamp: float
    connection: int

    @functools.cached_property
    def payload(self) -> dict[str, Any]:
        """The full event as JSON-decoded data (decoded when first read: most records
        of a call, its audio chunks, never are)."""
        decoded: dict[str, Any] = json.loads(self.wire)
        return decoded


@dataclass(frozen=True)
class SessionSnapshot:
    """The full session configuration after a ``session.update`` (or at connect).

    Attributes:
        timestamp: ``loop.time()`` when the configuration took effect.
        session: The merged session configuration.
    """

    timestamp: float
    session: dict[str, Any]


@dataclass
class ResponseRecord:
    """Progress and outcome of one response.

    Attributes:
        id: Response id (``resp_...``).
        trigger: Why the response started.
        request: What the script was asked.
        reply: What the script decided.
        created_at: ``loop.time()`` of ``response.created``.
        status: ``in_progress``, ``completed``, ``cancelled`` or ``failed``.
        status_reason: ``turn_detected`` or ``client_cancelled`` for cancelled responses.
        message_item_id: Id of the spoken message item, if any.
        transcript_sent: Transcript streamed before the response ended.
        audio_ms_sent: Audio streamed before the response ended, in milliseconds.
        done_at: ``loop.time()`` of ``response.done``.
    """

    id: str
    trigger: ResponseTrigger
    request: ResponseRequest
    reply: ScriptedResponse
    created_at: float
    status: Literal["in_progress", "completed", "cancelled", "failed"] = "in_progress"
    status_reason: str | None = None
    message_item_id: str | None = None
    transcript_sent: str = ""
    audio_ms_sent: int = 0
    done_at: float | None = None


# --------------------------------------------------------------------------- helpers


def _default_session(model: str) -> dict[str, Any]:
    pcm = {"type": "audio/pcm", "rate": SAMPLE_RATE}
    return {
        "type": "realtime",
        "object": "realtime.session",
        "id": _new_id("sess_"),
        "model": model,
        "output_modalities": ["audio"],
        "instructions": "",
        "tools": [],
        "tool_choice": "auto",
        "max_output_tokens": "inf",
        "audio": {
            "input": {
                "format": pcm,
                "transcription": None,
                "noise_reduction": None,
                "turn_detection": {
                    "type": "server_vad",
                    "threshold": 0.5,
                    "prefix_padding_ms": _DEFAULT_PREFIX_PADDING_MS,
                    "silence_duration_ms": _DEFAULT_SILENCE_MS,
                    "create_response": True,
                    "interrupt_response": True,
                },
            },
            "output": {"format": pcm, "voice": "marin", "speed": 1.0},
        },
    }


_MERGED_SESSION_KEYS = {(): {"audio"}, ("audio",): {"input", "output"}}


def _merge_session(
    session: dict[str, Any], update: Mapping[str, Any], path: tuple[str, ...] = ()
) -> None:
    """Applies a partial session update in place.

    Only the ``audio``, ``audio.input`` and ``audio.output`` containers are merged key by
    key; every other value (``turn_detection``, ``tools``, ``tool_choice``, ...) is
    replaced as a whole, and an explicit ``null`` clears it.
    """
    for key, value in update.items():
        current = session.get(key)
        if (
            key in _MERGED_SESSION_KEYS.get(path, ())
            and isinstance(current, dict)
            and isinstance(value, dict)
        ):
            _merge_session(current, value, (*path, key))
        else:
            session[key] = copy.deepcopy(value)


def _tool_names(tools: Sequence[Mapping[str, Any]] | None) -> tuple[str, ...]:
    return tuple(str(tool["name"]) for tool in tools or () if tool.get("name"))


def _word_offsets(text: str) -> list[tuple[int, str]]:
    """Splits text into words with their leading whitespace and start offsets."""
    return [(match.start(), match.group()) for match in _WORD_PATTERN.finditer(text)]


class _ToneGenerator:
    """A continuous sine tone, cut into PCM16 chunks."""

    def __init__(self, frequency_hz: float, amplitude: float) -> None:
        self._frequency_hz = frequency_hz
        self._amplitude = amplitude
        self._sample_index = 0

    def next_chunk(self, num_samples: int) -> bytes:
        indices = np.arange(self._sample_index, self._sample_index + num_samples)
        self._sample_index += num_samples
        wave = self._amplitude * np.sin(2 * np.pi * self._frequency_hz * indices / SAMPLE_RATE)
        return (wave * 32767).astype("<i2").tobytes()


@dataclass
class _VadState:
    """Energy VAD state of one connection's input audio buffer."""

    speaking: bool = False
    silence_ms: int = 0
    item_id: str | None = None
    pending_samples: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int16))


@dataclass
class _ActiveResponse:
    record: ResponseRecord
    output_items: list[dict[str, Any]] = field(default_factory=list)
    message_item: dict[str, Any] | None = None
    message_open: bool = False
    task: asyncio.Task[None] | None = None
    cancel_reason: str | None = None
    """Set once a cancel was accepted; the response ends when the cancel takes effect."""
    fail_after_ms: int | None = None
    """The response fails (``status`` ``failed``) once it generated this much audio."""


# --------------------------------------------------------------------------- connection


class RealtimeConnection:
    """Server-side state of one websocket connection (one realtime session).

    Attributes:
        index: Position in `RealtimeTestServer.connections`.
        path: Request path, e.g. ``/v1/realtime``.
        query: Query parameters, e.g. ``{"model": "gpt-realtime"}``.
        authorization: The ``Authorization`` header sent by the client.
        session: The current merged session configuration.
        session_history: The configuration after every change, oldest first.
        conversation: Server-side conversation items in order, as wire dicts.
        item_audio_ms: Audio length of items that carry audio, by item id.
        responses: Every response of this connection, oldest first.
        input_audio_ms: Total input audio appended so far, in milliseconds.
    """

    def __init__(
        self,
        server: RealtimeTestServer,
        index: int,
        handshake: Handshake,
        ws: ServerSocket,
    ) -> None:
        self._server = server
        self._ws = ws
        self._fidelity = server.fidelity
        # server events with the time they reach the client; None stops the writer
        self._outbox: asyncio.Queue[tuple[float, str] | None] = asyncio.Queue()
        # client events with the time they reach the server; None stops the reader
        self._inbox: asyncio.Queue[tuple[float, str] | None] = asyncio.Queue()
        self._pending_cancel: asyncio.TimerHandle | None = None
        self._vad = _VadState()
        self._input_samples = 0
        self._buffer_samples = 0
        self._active: _ActiveResponse | None = None
        self._turn_response_pending = False
        self._tool_reply_pending = False
        self._handlers: dict[str, Callable[[dict[str, Any]], None]] = {
            "session.update": self._on_session_update,
            "input_audio_buffer.append": self._on_audio_append,
            "input_audio_buffer.commit": self._on_audio_commit,
            "input_audio_buffer.clear": self._on_audio_clear,
            "conversation.item.create": self._on_item_create,
            "conversation.item.truncate": self._on_item_truncate,
            "conversation.item.delete": self._on_item_delete,
            "response.create": self._on_response_create,
            "response.cancel": self._on_response_cancel,
        }
        self.index = index
        self.path = handshake.path
        self.query = dict(handshake.query)
        self.authorization = handshake.headers.get("Authorization", "")
        self.session = _default_session(self.query.get("model", "gpt-realtime"))
        self.session_history = [SessionSnapshot(_now(), copy.deepcopy(self.session))]
        self.conversation: list[dict[str, Any]] = []
        self.item_audio_ms: dict[str, int] = {}
        self.responses: list[ResponseRecord] = []

    # ----------------------------------------------------------------- public views

    @property
    def input_audio_ms(self) -> int:
        """Total input audio appended so far, in milliseconds."""
        return self._input_samples * 1000 // SAMPLE_RATE

    @property
    def turn_detection(self) -> dict[str, Any] | None:
        """The ``audio.input.turn_detection`` currently in force (None when off)."""
        turn_detection: dict[str, Any] | None = self.session["audio"]["input"].get(
            "turn_detection"
        )
        return turn_detection

    @property
    def active_response(self) -> ResponseRecord | None:
        """The response being generated, if any."""
        return self._active.record if self._active else None

    def turn_detection_at(self, timestamp: float) -> dict[str, Any] | None:
        """The turn detection that was in force at a ``loop.time()`` timestamp.

        Args:
            timestamp: A monotonic time, e.g. `RecordedEvent.timestamp`.

        Returns:
            ``audio.input.turn_detection`` as configured at that moment (None when off).
        """
        in_force = self.session_history[0]
        for snapshot in self.session_history:
            if snapshot.timestamp <= timestamp:
                in_force = snapshot
        turn_detection: dict[str, Any] | None = in_force.session["audio"]["input"].get(
            "turn_detection"
        )
        return turn_detection

    def item(self, item_id: str) -> dict[str, Any] | None:
        """Returns the conversation item with this id, or None."""
        return next((item for item in self.conversation if item.get("id") == item_id), None)

    # ----------------------------------------------------------------- lifecycle

    async def serve(self) -> None:
        """Runs the connection until the client or the server closes it."""
        writer = asyncio.create_task(self._write_loop(), name="realtime-test-server-writer")
        reader = asyncio.create_task(self._read_loop(), name="realtime-test-server-reader")
        self._send({"type": "session.created", "session": copy.deepcopy(self.session)})
        latency = self._fidelity.network_latency_ms / 1000
        try:
            async for message in self._ws:
                if message.type == WSMsgType.TEXT:
                    self._inbox.put_nowait((_now() + latency, message.data))
        finally:
            self._inbox.put_nowait(None)
            await reader
            self._stop_response()
            self._outbox.put_nowait(None)
            await writer

    async def _read_loop(self) -> None:
        """Handles each client event once it has crossed the network, in order."""
        while (arrival := await self._inbox.get()) is not None:
            arrives_at, wire = arrival
            await asyncio.sleep(max(0.0, arrives_at - _now()))
            if self._ws.closed:
                continue  # the client left while its last events were in flight
            event = json.loads(wire)
            self._server._record("received", event, wire, self.index)
            problems = client_event_problems(event)
            if problems:
                violation = Violation("client", str(event.get("type")), problems, event)
                self._server._violation(violation)
                if self._fidelity.reject_malformed:
                    self._send({"type": "error", "error": client_event_error(event, problems)})
                    continue
            self._dispatch(event)

    async def _write_loop(self) -> None:
        while (departure := await self._outbox.get()) is not None:
            arrives_at, wire = departure
            await asyncio.sleep(max(0.0, arrives_at - _now()))
            if self._ws.closed:
                continue
            with contextlib.suppress(ConnectionError):
                await self._ws.send_str(wire)

    def drop(self) -> None:
        """Drops the connection as a network failure does: no close handshake, and the
        events still in flight either way are lost. The client reads it as closed with
        code 1006 (aiohttp's ``CLOSED``), as it would from a real socket."""
        self._ws.drop()

    def send_event(self, event: dict[str, Any]) -> None:
        """Sends a raw server event as it is: for tests of what the client does with an
        event this server would not send by itself. It is checked like any other."""
        self._send(event)

    def _send(self, event: dict[str, Any]) -> None:
        event.setdefault("event_id", _new_id("event_"))
        wire = json.dumps(event)  # as it leaves: what the client gets is what is recorded
        self._server._record("sent", event, wire, self.index)
        problems = server_event_problems(event)
        if problems:
            self._server._violation(Violation("server", str(event.get("type")), problems, event))
        latency = self._fidelity.network_latency_ms / 1000
        self._outbox.put_nowait((_now() + latency, wire))

    def _send_error(
        self, code: str, message: str, client_event: Mapping[str, Any], *, param: str | None = None
    ) -> None:
        """Rejects a client event whose request the conversation's state does not allow."""
        self._send(
            {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "code": code,
                    "message": message,
                    "param": param,
                    "event_id": (
                        client_event.get("event_id")
                        if self._fidelity.state_errors_name_event
                        else None
                    ),
                },
            }
        )

    def _stop_response(self) -> None:
        self._stop_pending_cancel()
        if self._active is not None and self._active.task is not None:
            self._active.task.cancel()
        self._active = None

    # ----------------------------------------------------------------- dispatch

    def _dispatch(self, event: dict[str, Any]) -> None:
        handler = self._handlers.get(event.get("type", ""))
        if handler is None:
            # a valid event this server does not implement (or, when malformed events are
            # let through, an unknown one): say so rather than pretend
            self._send(
                {
                    "type": "error",
                    "error": {
                        "type": "server_error",
                        "code": None,
                        "message": f"RealtimeTestServer does not handle {event.get('type')!r}",
                        "param": None,
                        "event_id": event.get("event_id"),
                    },
                }
            )
            return
        handler(event)

    def _on_session_update(self, event: dict[str, Any]) -> None:
        had_turn_detection = self.turn_detection is not None
        _merge_session(self.session, event.get("session", {}))
        if had_turn_detection and self.turn_detection is None:
            self._vad = _VadState()
        self.session_history.append(SessionSnapshot(_now(), copy.deepcopy(self.session)))
        self._send({"type": "session.updated", "session": copy.deepcopy(self.session)})

    # ----------------------------------------------------------------- input audio

    def _on_audio_append(self, event: dict[str, Any]) -> None:
        samples = np.frombuffer(base64.b64decode(event.get("audio", "")), dtype="<i2")
        self._input_samples += len(samples)
        self._buffer_samples += len(samples)
        if self.turn_detection is None:
            return
        pending = np.concatenate([self._vad.pending_samples, samples])
        end_sample = self._input_samples - len(pending)
        whole = len(pending) - len(pending) % _VAD_WINDOW_SAMPLES
        # every whole window's RMS at once (one numpy pass per chunk, not per window)
        windows = pending[:whole].astype(np.float64).reshape(-1, _VAD_WINDOW_SAMPLES) / 32768.0
        for rms in np.sqrt(np.mean(windows**2, axis=1)).tolist():
            end_sample += _VAD_WINDOW_SAMPLES
            self._vad_window(rms >= self._server.vad_rms_threshold, end_sample)
        self._vad.pending_samples = pending[whole:]

    def _vad_window(self, voiced: bool, end_sample: int) -> None:
        turn_detection = self.turn_detection
        assert turn_detection is not None
        end_ms = end_sample * 1000 // SAMPLE_RATE
        window_ms = _VAD_WINDOW_SAMPLES * 1000 // SAMPLE_RATE
        if not self._vad.speaking:
            if voiced:
                self._speech_started(turn_detection, start_ms=end_ms - window_ms)
            return
        self._vad.silence_ms = 0 if voiced else self._vad.silence_ms + window_ms
        if self._vad.silence_ms >= self._silence_duration_ms(turn_detection):
            self._speech_stopped(turn_detection, end_ms=end_ms)

    @staticmethod
    def _silence_duration_ms(turn_detection: Mapping[str, Any]) -> int:
        if turn_detection.get("type") == "semantic_vad":
            eagerness = turn_detection.get("eagerness") or "auto"
            return _SEMANTIC_EAGERNESS_SILENCE_MS.get(eagerness, _DEFAULT_SILENCE_MS)
        silence_ms: int = turn_detection.get("silence_duration_ms") or _DEFAULT_SILENCE_MS
        return silence_ms

    def _speech_started(self, turn_detection: Mapping[str, Any], *, start_ms: int) -> None:
        padding_ms = turn_detection.get("prefix_padding_ms") or _DEFAULT_PREFIX_PADDING_MS
        self._vad.speaking = True
        self._vad.silence_ms = 0
        self._vad.item_id = _new_id("item_")
        self._send(
            {
                "type": "input_audio_buffer.speech_started",
                "audio_start_ms": max(0, start_ms - padding_ms),
                "item_id": self._vad.item_id,
            }
        )
        if self._active is not None and turn_detection.get("interrupt_response", True):
            self._cancel_response("turn_detected")

    def _speech_stopped(self, turn_detection: Mapping[str, Any], *, end_ms: int) -> None:
        item_id = self._vad.item_id
        assert item_id is not None
        self._vad.speaking = False
        self._vad.item_id = None
        self._send(
            {
                "type": "input_audio_buffer.speech_stopped",
                "audio_end_ms": end_ms,
                "item_id": item_id,
            }
        )
        self._commit_user_audio(item_id)
        script = self._server.script
        racing = not turn_detection.get("create_response", True) and script.race_auto_replies
        if racing:
            script.race_auto_replies -= 1
        if turn_detection.get("create_response", True) or racing:
            self._turn_response_pending = True
            self._start_pending_response()

    def _on_audio_commit(self, event: dict[str, Any]) -> None:
        if self._buffer_samples * 1000 // SAMPLE_RATE < 100:
            self._send_error(
                "input_audio_buffer_commit_empty",
                "Error committing input audio buffer: buffer too small. Expected at least "
                f"100ms of audio, but buffer only has {self._buffer_samples * 1000 // SAMPLE_RATE}"
                "ms of audio.",
                event,
            )
            return
        item_id = self._vad.item_id or _new_id("item_")
        self._vad = _VadState()
        self._commit_user_audio(item_id)

    def _on_audio_clear(self, event: dict[str, Any]) -> None:
        self._buffer_samples = 0
        self._vad = _VadState()
        self._send({"type": "input_audio_buffer.cleared"})

    def _commit_user_audio(self, item_id: str) -> None:
        previous_item_id = self.conversation[-1]["id"] if self.conversation else None
        self._send(
            {
                "type": "input_audio_buffer.committed",
                "previous_item_id": previous_item_id,
                "item_id": item_id,
            }
        )
        item: dict[str, Any] = {
            "id": item_id,
            "object": "realtime.item",
            "type": "message",
            "status": "completed",
            "role": "user",
            "content": [{"type": "input_audio", "transcript": None}],
        }
        self.item_audio_ms[item_id] = self._buffer_samples * 1000 // SAMPLE_RATE
        self._buffer_samples = 0
        self._append_item(item)
        if self.session["audio"]["input"].get("transcription") is not None:
            transcript = self._server.script.next_user_transcript()
            item["content"][0]["transcript"] = transcript
            self._send(
                {
                    "type": "conversation.item.input_audio_transcription.completed",
                    "item_id": item_id,
                    "content_index": 0,
                    "transcript": transcript,
                    "usage": {"type": "duration", "seconds": self.item_audio_ms[item_id] / 1000},
                }
            )

    # ----------------------------------------------------------------- conversation

    def _append_item(self, item: dict[str, Any]) -> None:
        previous_item_id = self.conversation[-1]["id"] if self.conversation else None
        self.conversation.append(item)
        self._send_item_added(item, previous_item_id)

    def _send_item_added(self, item: dict[str, Any], previous_item_id: str | None) -> None:
        snapshot = copy.deepcopy(item)
        self._send(
            {
                "type": "conversation.item.added",
                "previous_item_id": previous_item_id,
                "item": snapshot,
            }
        )
        if item.get("status") == "completed":
            self._send(
                {
                    "type": "conversation.item.done",
                    "previous_item_id": previous_item_id,
                    "item": snapshot,
                }
            )

    def _on_item_create(self, event: dict[str, Any]) -> None:
        item = copy.deepcopy(event.get("item", {}))
        item.setdefault("id", _new_id("item_"))
        item.setdefault("object", "realtime.item")
        item.setdefault("status", "completed")
        if self.item(item["id"]) is not None:
            self._send_error(
                "item_create_duplicate_item_id",
                f"Item with item_id '{item['id']}' already exists.",
                event,
            )
            return
        previous_item_id = event.get("previous_item_id")
        if previous_item_id == "root":
            index = 0
        elif previous_item_id is None:
            index = len(self.conversation)
        else:
            previous = self.item(previous_item_id)
            if previous is None:
                self._send_error(
                    "item_create_invalid_previous_item_id",
                    f"Previous item with item_id '{previous_item_id}' not found.",
                    event,
                )
                return
            index = self.conversation.index(previous) + 1
        self.conversation.insert(index, item)
        self._send_item_added(item, self.conversation[index - 1]["id"] if index else None)
        if item.get("type") == "function_call_output" and self._server.script.auto_tool_reply:
            self._tool_reply_pending = True
            self._start_pending_response()

    def _start_pending_response(self) -> None:
        """Starts a server-initiated response that is due, once no response is active."""
        if self._active is not None:
            return
        if self._turn_response_pending:
            self._start_response("turn_detected", {})
        elif self._tool_reply_pending and self._all_tool_calls_answered():
            self._start_response("tool_output", {})

    def _all_tool_calls_answered(self) -> bool:
        answered = {
            item.get("call_id")
            for item in self.conversation
            if item.get("type") == "function_call_output"
        }
        return all(
            item.get("call_id") in answered
            for item in self.conversation
            if item.get("type") == "function_call"
        )

    def _on_item_truncate(self, event: dict[str, Any]) -> None:
        item_id = event.get("item_id", "")
        audio_end_ms = int(event.get("audio_end_ms", 0))
        item = self.item(item_id)
        if item is None:
            self._send_error(
                "item_truncate_invalid_item_id",
                f"Error truncating item: the item with id '{item_id}' does not exist.",
                event,
            )
            return
        if item.get("role") != "assistant" or item_id not in self.item_audio_ms:
            # also an assistant item none of whose audio was sent yet (seen when a client
            # truncates at 0 ms before the first audio delta)
            self._send_error(
                "unsupported_content_type",
                "Only model output audio messages can be truncated",
                event,
            )
            return
        if audio_end_ms > self.item_audio_ms[item_id]:
            self._send_error(
                "invalid_value",
                f"Audio content of {self.item_audio_ms[item_id]}ms is already shorter than "
                f"{audio_end_ms}ms",
                event,
            )
            return
        part = item["content"][event.get("content_index", 0)]
        transcript = part.get("transcript") or ""
        part["transcript"] = (
            ""
            if self._fidelity.truncate_clears_transcript
            else self._server.heard_prefix(transcript, audio_end_ms)
        )
        self.item_audio_ms[item_id] = audio_end_ms
        self._send(
            {
                "type": "conversation.item.truncated",
                "item_id": item_id,
                "content_index": event.get("content_index", 0),
                "audio_end_ms": audio_end_ms,
            }
        )

    def _on_item_delete(self, event: dict[str, Any]) -> None:
        item_id = event.get("item_id", "")
        item = self.item(item_id)
        if item is None:
            self._send_error(
                "item_delete_invalid_item_id",
                f"Error deleting item: the item with id '{item_id}' does not exist.",
                event,
            )
            return
        self.conversation.remove(item)
        self.item_audio_ms.pop(item_id, None)
        self._send({"type": "conversation.item.deleted", "item_id": item_id})

    # ----------------------------------------------------------------- responses

    def _on_response_create(self, event: dict[str, Any]) -> None:
        script = self._server.script
        if self._active is None and script.refuse_creates > 0:
            script.refuse_creates -= 1
            self._start_response("turn_detected", {})  # its own reply, just before the create
        if self._active is not None:
            active = self._active.record.id
            self._send_error(
                "conversation_already_has_active_response",
                f"Conversation already has an active response in progress: {active}. Wait "
                "until the response is finished before creating a new one.",
                event,
            )
            return
        fails = script.fail_responses > 0
        if fails:
            script.fail_responses -= 1
        self._start_response("response.create", event.get("response") or {})
        if fails and self._active is not None:
            self._active.fail_after_ms = script.fail_after_ms

    def _on_response_cancel(self, event: dict[str, Any]) -> None:
        response_id = event.get("response_id")
        if self._active is None or (response_id and response_id != self._active.record.id):
            self._send_error(
                "response_cancel_not_active",
                "Cancellation failed: no active response found",
                event,
            )
            return
        self._cancel_response("client_cancelled")

    def _start_response(self, trigger: ResponseTrigger, params: Mapping[str, Any]) -> None:
        # whatever starts now sees the whole conversation, so it answers pending triggers too
        self._turn_response_pending = False
        self._tool_reply_pending = False
        tools = params.get("tools", self.session.get("tools"))
        request = ResponseRequest(
            trigger=trigger,
            instructions=params.get("instructions") or self.session.get("instructions"),
            tool_choice=params.get("tool_choice") or self.session.get("tool_choice") or "auto",
            tool_names=_tool_names(tools),
            conversation=tuple(copy.deepcopy(self.conversation)),
            params=copy.deepcopy(dict(params)),
        )
        record = ResponseRecord(
            id=_new_id("resp_"),
            trigger=trigger,
            request=request,
            reply=self._server.script.next_response(request),
            created_at=_now(),
        )
        self.responses.append(record)
        active = _ActiveResponse(record=record)
        self._active = active
        self._send({"type": "response.created", "response": self._response_payload(active)})
        active.task = asyncio.create_task(
            self._generate(active), name=f"realtime-test-server-{record.id}"
        )

    def _response_payload(self, active: _ActiveResponse) -> dict[str, Any]:
        record = active.record
        status_details: dict[str, Any] | None = None
        if record.status == "failed":
            status_details = {
                "type": "failed",
                "error": {"type": "server_error", "code": record.status_reason},
            }
        elif record.status_reason:
            status_details = {"type": record.status, "reason": record.status_reason}
        payload: dict[str, Any] = {
            "id": record.id,
            "object": "realtime.response",
            "status": record.status,
            "status_details": status_details,
            "output": copy.deepcopy(active.output_items),
            "metadata": record.request.params.get("metadata"),
            "output_modalities": list(self.session.get("output_modalities") or ["audio"]),
            "usage": None,
        }
        if record.status != "in_progress":
            output_tokens = max(1, len(record.transcript_sent) // 4)
            audio_tokens = record.audio_ms_sent // 50
            payload["usage"] = {
                "total_tokens": output_tokens + audio_tokens + 10,
                "input_tokens": 10,
                "output_tokens": output_tokens + audio_tokens,
                "input_token_details": {"text_tokens": 10, "audio_tokens": 0, "cached_tokens": 0},
                "output_token_details": {
                    "text_tokens": output_tokens,
                    "audio_tokens": audio_tokens,
                },
            }
        return payload

    async def _generate(self, active: _ActiveResponse) -> None:
        reply = active.record.reply
        if reply.text:
            await self._stream_message(active, reply.text)
        if active.fail_after_ms is not None and active.message_open:
            # it failed mid-message (the 1.2 s into a greeting)
            self._close_message(active, "incomplete")
            self._finish_response(active, "failed", "server_error")
            return
        if active.cancel_reason is not None:
            # generated to the end while its cancel was on the way: it ends cancelled now
            self._stop_pending_cancel()
            self._finish_response(active, "cancelled", active.cancel_reason)
            return
        for call in reply.tool_calls:
            self._emit_function_call(active, call)
        self._finish_response(active, "completed", None)

    def _stop_pending_cancel(self) -> None:
        if self._pending_cancel is not None:
            self._pending_cancel.cancel()
            self._pending_cancel = None

    def _message_event(self, active: _ActiveResponse, type_: str, **fields: Any) -> None:
        assert active.message_item is not None
        self._send(
            {
                "type": type_,
                "response_id": active.record.id,
                "item_id": active.message_item["id"],
                "output_index": active.output_items.index(active.message_item),
                "content_index": 0,
                **fields,
            }
        )

    async def _stream_message(self, active: _ActiveResponse, text: str) -> None:
        audio = "audio" in (self.session.get("output_modalities") or ["audio"])
        item: dict[str, Any] = {
            "id": _new_id("item_"),
            "object": "realtime.item",
            "type": "message",
            "status": "in_progress",
            "role": "assistant",
            "content": [],
        }
        active.message_item = item
        active.message_open = True
        active.record.message_item_id = item["id"]
        active.output_items.append(item)
        self._send(
            {
                "type": "response.output_item.added",
                "response_id": active.record.id,
                "output_index": len(active.output_items) - 1,
                "item": copy.deepcopy(item),
            }
        )
        self._append_item(item)
        if audio:
            item["content"] = [{"type": "output_audio", "transcript": ""}]
            self._message_event(
                active, "response.content_part.added", part={"type": "audio", "transcript": ""}
            )
        else:
            item["content"] = [{"type": "output_text", "text": ""}]
            self._message_event(
                active, "response.content_part.added", part={"type": "text", "text": ""}
            )

        server = self._server
        chunk_ms = server.chunk_ms
        timeline, speech_ms = server.speech_timeline(text)
        total_ms = max(chunk_ms, round(speech_ms))
        words = deque(timeline)
        tone = _ToneGenerator(server.tone_hz, server.tone_amplitude)
        speed = self._fidelity.generation_speed
        text_lead_ms = self._fidelity.transcript_lead_ms if audio else 0
        started = _now()
        for chunk_index in range(math.ceil(total_ms / chunk_ms)):
            due = started + max(0, chunk_index * chunk_ms - server.lead_ms) / 1000 / speed
            await asyncio.sleep(max(0.0, due - _now()))
            chunk_start_ms = chunk_index * chunk_ms
            if active.fail_after_ms is not None and chunk_start_ms >= active.fail_after_ms:
                return  # the message stays open: the response fails
            # the words whose speech starts before this chunk ends, or text_lead_ms later
            spoken_by_ms = chunk_start_ms + chunk_ms + text_lead_ms
            delta = ""
            while words and words[0][0] < spoken_by_ms:
                delta += words.popleft()[1]
            if delta:
                active.record.transcript_sent += delta
                if audio:
                    item["content"][0]["transcript"] += delta
                    self._message_event(
                        active, "response.output_audio_transcript.delta", delta=delta
                    )
                else:
                    item["content"][0]["text"] += delta
                    self._message_event(active, "response.output_text.delta", delta=delta)
            if audio:
                duration_ms = min(chunk_ms, total_ms - chunk_start_ms)
                pcm = tone.next_chunk(duration_ms * SAMPLE_RATE // 1000)
                active.record.audio_ms_sent += duration_ms
                if self.item(item["id"]) is not None:  # not once the client deleted it
                    self.item_audio_ms[item["id"]] = max(
                        0, active.record.audio_ms_sent - self._fidelity.truncate_shortfall_ms
                    )
                self._message_event(
                    active,
                    "response.output_audio.delta",
                    delta=base64.b64encode(pcm).decode("ascii"),
                )
        self._close_message(active, "completed")

    def _close_message(self, active: _ActiveResponse, status: str) -> None:
        item = active.message_item
        assert item is not None
        active.message_open = False
        item["status"] = status
        part = item["content"][0]
        if part["type"] == "output_audio":
            self._message_event(active, "response.output_audio.done")
            self._message_event(
                active, "response.output_audio_transcript.done", transcript=part["transcript"]
            )
            done_part = {"type": "audio", "transcript": part["transcript"]}
        else:
            self._message_event(active, "response.output_text.done", text=part["text"])
            done_part = {"type": "text", "text": part["text"]}
        self._message_event(active, "response.content_part.done", part=done_part)
        self._send(
            {
                "type": "response.output_item.done",
                "response_id": active.record.id,
                "output_index": active.output_items.index(item),
                "item": copy.deepcopy(item),
            }
        )
        if self.item(item["id"]) is not None:
            self._send({"type": "conversation.item.done", "item": copy.deepcopy(item)})

    def _emit_function_call(self, active: _ActiveResponse, call: ToolCall) -> None:
        arguments = call.arguments_json()
        item: dict[str, Any] = {
            "id": _new_id("item_"),
            "object": "realtime.item",
            "type": "function_call",
            "status": "in_progress",
            "name": call.name,
            "call_id": call.call_id or _new_id("call_"),
            "arguments": "",
        }
        active.output_items.append(item)
        output_index = len(active.output_items) - 1
        self._send(
            {
                "type": "response.output_item.added",
                "response_id": active.record.id,
                "output_index": output_index,
                "item": copy.deepcopy(item),
            }
        )
        self._append_item(item)
        common = {
            "response_id": active.record.id,
            "item_id": item["id"],
            "output_index": output_index,
            "call_id": item["call_id"],
        }
        self._send(
            {"type": "response.function_call_arguments.delta", **common, "delta": arguments}
        )
        item["arguments"] = arguments
        item["status"] = "completed"
        self._send(
            {
                "type": "response.function_call_arguments.done",
                **common,
                "name": call.name,
                "arguments": arguments,
            }
        )
        self._send(
            {
                "type": "response.output_item.done",
                "response_id": active.record.id,
                "output_index": output_index,
                "item": copy.deepcopy(item),
            }
        )
        self._send({"type": "conversation.item.done", "item": copy.deepcopy(item)})

    def _cancel_response(self, reason: str) -> None:
        """Cancels the active response, after ``cancel_latency_ms`` (it stays active and
        keeps streaming until then; a second cancel meanwhile changes nothing)."""
        active = self._active
        assert active is not None
        if active.cancel_reason is not None:
            return
        active.cancel_reason = reason
        latency = self._fidelity.cancel_latency_ms / 1000
        if latency:
            self._pending_cancel = asyncio.get_running_loop().call_later(
                latency, self._end_cancelled, active
            )
        else:
            self._end_cancelled(active)

    def _end_cancelled(self, active: _ActiveResponse) -> None:
        self._pending_cancel = None
        if self._active is not active:
            return
        if active.task is not None:
            active.task.cancel()
        if active.message_open:
            self._close_message(active, "incomplete")
        self._finish_response(active, "cancelled", active.cancel_reason)

    def _finish_response(
        self,
        active: _ActiveResponse,
        status: Literal["completed", "cancelled", "failed"],
        reason: str | None,
    ) -> None:
        active.record.status = status
        active.record.status_reason = reason
        active.record.done_at = _now()
        self._send({"type": "response.done", "response": self._response_payload(active)})
        self._active = None
        self._start_pending_response()


# --------------------------------------------------------------------------- server


Transport = Literal["memory", "tcp"]
"""How clients reach the server: an in-memory websocket, or a websocket on 127.0.0.1."""

_PATHS = frozenset({"/v1/realtime", "/realtime"})


class _TcpSocket:
    """The server's end of a TCP websocket, as a `ServerSocket`."""

    def __init__(self, request: web.Request, ws: web.WebSocketResponse) -> None:
        self._request = request
        self._ws = ws

    @property
    def closed(self) -> bool:
        return self._ws.closed

    async def send_str(self, data: str) -> None:
        await self._ws.send_str(data)

    async def close(self) -> bool:
        return await self._ws.close()

    def drop(self) -> None:
        if self._request.transport is not None:
            self._request.transport.abort()

    def __aiter__(self) -> AsyncIterator[WSMessage]:
        return self._ws.__aiter__()


class RealtimeTestServer:
    """An OpenAI Realtime protocol server for offline calls.

    Use it as an async context manager. A ``RealtimeModel`` reaches it in memory through
    `http_session` (no socket: on a virtual clock the whole call, network latency
    included, runs in virtual time), or, with ``transport="tcp"``, over a websocket on
    127.0.0.1 at `base_url` (``ws://127.0.0.1:<port>/v1/realtime?model=...``).
    `model_options` gives whichever applies.

    Args:
        script: Decides responses and user transcripts; an empty script when None.
        chars_per_second: Speaking rate; a reply lasts ``len(text) / chars_per_second`` s.
        chunk_ms: Audio is streamed in chunks of this length, one chunk per ``chunk_ms``.
        lead_ms: How far the stream runs ahead of real time: the first ``lead_ms`` of a
            reply are sent at once. A real server generates faster than real time; some
            lead keeps the client's playout buffer from running dry, so a cancelled stream
            ends before its playback does.
        tone_hz: Frequency of the tone that stands in for speech.
        tone_amplitude: Amplitude of the tone, as a fraction of full scale.
        vad_rms_threshold: Input RMS (fraction of full scale) above which a 10 ms window
            counts as speech for server turn detection.
        fidelity: How closely to imitate the real service; `default_fidelity` when None.
        transport: ``"memory"`` (the default) or ``"tcp"``, which also serves 127.0.0.1.

    Attributes:
        script: The script in use; tests may push responses while the server runs.
        fidelity: The `Fidelity` in force.
        transport: How clients reach the server.
        connections: Every websocket connection so far, oldest first.
        events: Every event received and sent, in order.
        violations: Every event, either way, that did not conform to the ``openai``
            package's models and has not been taken by `take_violations`. Leaving the
            server (``async with`` or `aclose`) raises `ConformanceError` while any remain.
    """

    default_fidelity: ClassVar[Fidelity] = IDEAL
    """The fidelity of servers created without one (the realtime suite's conftest sets it
    from ``TURNFSM_REALTIME_FIDELITY``)."""

    def __init__(
        self,
        script: RealtimeScript | None = None,
        *,
        chars_per_second: float = 15.0,
        chunk_ms: int = 100,
        lead_ms: int = 300,
        tone_hz: float = 220.0,
        tone_amplitude: float = 0.3,
        vad_rms_threshold: float = 0.02,
        fidelity: Fidelity | None = None,
        transport: Transport = "memory",
    ) -> None:
        if transport not in ("memory", "tcp"):
            raise ValueError(f"transport must be 'memory' or 'tcp', got {transport!r}")
        self.script = script or RealtimeScript()
        self.fidelity = fidelity or self.default_fidelity
        self.chars_per_second = chars_per_second
        self.chunk_ms = chunk_ms
        self.lead_ms = lead_ms
        self.tone_hz = tone_hz
        self.tone_amplitude = tone_amplitude
        self.vad_rms_threshold = vad_rms_threshold
        self.transport: Transport = transport
        self.connections: list[RealtimeConnection] = []
        self.events: list[RecordedEvent] = []
        self.violations: list[Violation] = []
        self._waiters: list[tuple[Callable[[RecordedEvent], bool], asyncio.Future[None]]] = []
        self._sockets: set[ServerSocket] = set()
        self._served: set[asyncio.Task[None]] = set()
        self._runner: web.AppRunner | None = None
        self._port: int | None = None

    # ----------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None:
        # a failure inside the block is the one to report; conformance is checked otherwise
        await self.aclose(check_conformance=exc_type is None)

    async def start(self) -> None:
        """Starts serving: over TCP, binds 127.0.0.1 on a free port (in memory there is
        nothing to start)."""
        if self.transport != "tcp":
            return
        app = web.Application()
        for path in sorted(_PATHS):
            app.router.add_get(path, self._handle_websocket)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._port = int(self._runner.addresses[0][1])

    async def aclose(self, *, check_conformance: bool = True) -> None:
        """Closes every connection and stops serving.

        Args:
            check_conformance: Raise `ConformanceError` if `violations` is not empty.
        """
        for ws in list(self._sockets):
            await ws.close()
        if self._served:
            await asyncio.wait(self._served)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        for _, future in self._waiters:
            future.cancel()
        self._waiters.clear()
        if check_conformance and self.violations:
            raise ConformanceError(self.take_violations())

    def take_violations(self) -> list[Violation]:
        """Returns the conformance violations seen so far and forgets them (for tests that
        send malformed events on purpose)."""
        taken, self.violations = self.violations, []
        return taken

    def _violation(self, violation: Violation) -> None:
        logger.error("realtime conformance: %s", violation)
        self.violations.append(violation)

    def http_session(self) -> MemoryHttpSession:
        """What to give ``RealtimeModel`` as ``http_session`` to reach this server in
        memory: its ``ws_connect`` opens a connection to this server, whatever the URL's
        host (``base_url`` may stay the default)."""
        return MemoryHttpSession(self._accept, _PATHS)

    @property
    def port(self) -> int:
        """The bound TCP port (``transport="tcp"`` only)."""
        if self._port is None:
            raise RuntimeError(
                "RealtimeTestServer has no port: it serves over TCP only when made with "
                "transport='tcp' and started (in memory, use http_session())"
            )
        return self._port

    @property
    def base_url(self) -> str:
        """The ``base_url`` to give ``RealtimeModel`` over TCP:
        ``http://127.0.0.1:<port>/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def model_options(self) -> dict[str, Any]:
        """How a ``RealtimeModel`` reaches this server, as its keyword arguments:
        ``http_session`` in memory, ``base_url`` over TCP."""
        if self.transport == "tcp":
            return {"base_url": self.base_url}
        return {"http_session": self.http_session()}

    def _accept(self, handshake: Handshake, ws: MemoryWebSocket) -> None:
        """Serves a new in-memory connection."""
        served = asyncio.create_task(self._serve(handshake, ws), name="realtime-test-server")
        self._served.add(served)
        served.add_done_callback(self._served.discard)

    async def _handle_websocket(self, request: web.Request) -> web.StreamResponse:
        if not request.headers.get("Authorization", "").startswith("Bearer "):
            raise web.HTTPUnauthorized(text="missing bearer token")
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        handshake = Handshake(request.path, dict(request.query), dict(request.headers))
        await self._serve(handshake, _TcpSocket(request, ws))
        return ws

    async def _serve(self, handshake: Handshake, ws: ServerSocket) -> None:
        self._sockets.add(ws)
        connection = RealtimeConnection(self, len(self.connections), handshake, ws)
        self.connections.append(connection)
        try:
            await connection.serve()
        finally:
            self._sockets.discard(ws)

    # ----------------------------------------------------------------- recording

    def _record(
        self, direction: Direction, payload: dict[str, Any], wire: str, connection: int
    ) -> None:
        event = RecordedEvent(
            direction=direction,
            type=str(payload.get("type", "")),
            wire=wire,
            timestamp=_now(),
            connection=connection,
        )
        self.events.append(event)
        for waiter in list(self._waiters):
            matches, future = waiter
            if not future.done() and matches(event):
                future.set_result(None)
                self._waiters.remove(waiter)

    @property
    def received(self) -> list[RecordedEvent]:
        """Every client event received, in order."""
        return [event for event in self.events if event.direction == "received"]

    @property
    def sent(self) -> list[RecordedEvent]:
        """Every server event sent, in order."""
        return [event for event in self.events if event.direction == "sent"]

    def events_of_type(
        self, type_: str, *, direction: Direction = "received"
    ) -> list[RecordedEvent]:
        """Returns the recorded events of one type.

        Args:
            type_: Event type, e.g. ``"conversation.item.truncate"``.
            direction: ``"received"`` (client events) or ``"sent"`` (server events).

        Returns:
            The matching events, oldest first.
        """
        return [e for e in self.events if e.type == type_ and e.direction == direction]

    async def wait_for_event(
        self,
        type_: str,
        *,
        direction: Direction = "received",
        count: int = 1,
        predicate: Callable[[RecordedEvent], bool] | None = None,
        timeout: float = 5.0,
    ) -> RecordedEvent:
        """Waits until ``count`` matching events have been recorded.

        Args:
            type_: Event type to wait for.
            direction: ``"received"`` or ``"sent"``.
            count: How many matching events must exist.
            predicate: Extra condition on each event.
            timeout: Seconds to wait before `TimeoutError`.

        Returns:
            The ``count``-th matching event.
        """

        def matches(event: RecordedEvent) -> bool:
            return (
                event.type == type_
                and event.direction == direction
                and (predicate is None or predicate(event))
            )

        deadline = _now() + timeout
        while True:
            found = [event for event in self.events if matches(event)]
            if len(found) >= count:
                return found[count - 1]
            waiter = (matches, asyncio.get_running_loop().create_future())
            self._waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter[1], deadline - _now())
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    # ----------------------------------------------------------------- current session

    @property
    def connection(self) -> RealtimeConnection:
        """The most recent connection."""
        if not self.connections:
            raise RuntimeError("no client has connected")
        return self.connections[-1]

    @property
    def session(self) -> dict[str, Any]:
        """Session configuration of the most recent connection."""
        return self.connection.session

    @property
    def turn_detection(self) -> dict[str, Any] | None:
        """Turn detection in force on the most recent connection (None when off)."""
        return self.connection.turn_detection

    @property
    def conversation(self) -> list[dict[str, Any]]:
        """Server-side conversation items of the most recent connection."""
        return self.connection.conversation

    @property
    def responses(self) -> list[ResponseRecord]:
        """Responses of every connection, oldest first."""
        return [record for connection in self.connections for record in connection.responses]

    def conversation_summary(self) -> list[tuple[str, str]]:
        """Summarises the current conversation for comparison with a chat context.

        Returns:
            One ``(kind, text)`` per item: ``("user"|"assistant"|"system", transcript or
            text)``, ``("function_call", name)`` or ``("function_call_output", output)``.
        """
        summary: list[tuple[str, str]] = []
        for item in self.conversation:
            if item.get("type") == "message":
                text = "".join(
                    part.get("transcript") or part.get("text") or ""
                    for part in item.get("content", [])
                )
                summary.append((str(item.get("role")), text))
            elif item.get("type") == "function_call":
                summary.append(("function_call", str(item.get("name"))))
            elif item.get("type") == "function_call_output":
                summary.append(("function_call_output", str(item.get("output"))))
        return summary

    # ----------------------------------------------------------------- speech timing

    def speech_timeline(self, text: str) -> tuple[list[tuple[float, str]], float]:
        """When each word of a reply is spoken, and how long the reply lasts.

        A word (with its leading whitespace) lasts ``len(word) / chars_per_second``, scaled
        by a factor in ``1 ± speaking_rate_variation`` drawn from a generator seeded with
        the text (the same reply is always spoken the same way).

        Returns:
            ``([(start_ms, word), ...], total_ms)``.
        """
        variation = self.fidelity.speaking_rate_variation
        rng = random.Random(text)
        timeline: list[tuple[float, str]] = []
        spoken_chars = 0.0  # characters at the nominal rate, so 0 variation is exact
        for _, word in _word_offsets(text):
            timeline.append((spoken_chars * 1000 / self.chars_per_second, word))
            factor = 1.0 + variation * rng.uniform(-1.0, 1.0) if variation else 1.0
            spoken_chars += len(word) * factor
        return timeline, spoken_chars * 1000 / self.chars_per_second

    def heard_prefix(self, text: str, audio_end_ms: int) -> str:
        """The words of a reply whose speech started before ``audio_end_ms``."""
        timeline, _ = self.speech_timeline(text)
        return "".join(word for start_ms, word in timeline if start_ms < audio_end_ms)
