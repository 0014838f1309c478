"""A bare OpenAI Realtime websocket client for protocol tests of `RealtimeTestServer`."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import numpy as np

from turnfsm.adapters.sim.realtime import SAMPLE_RATE, MemoryWebSocket, RealtimeTestServer

__all__ = ["Client", "connect", "message_item", "open_socket"]


class Client:
    """Sends client events and reads server events in order, noting when each arrived."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse | MemoryWebSocket) -> None:
        self.ws = ws
        self.seen: list[tuple[float, dict[str, Any]]] = []
        """Every server event read so far with its ``loop.time()`` arrival."""

    async def send(self, type_: str, **fields: Any) -> float:
        """Sends an event; returns the ``loop.time()`` it was sent at."""
        return await self.send_raw({"type": type_, **fields})

    async def send_raw(self, event: dict[str, Any]) -> float:
        """Sends an event as it is, malformed or not; returns when it was sent."""
        sent_at = asyncio.get_running_loop().time()
        await self.ws.send_str(json.dumps(event))
        return sent_at

    async def expect(self, type_: str, *, timeout: float = 5) -> dict[str, Any]:
        """Reads events until one of ``type_`` arrives and returns it."""
        while True:
            event: dict[str, Any] = json.loads(await self.ws.receive_str(timeout=timeout))
            self.seen.append((asyncio.get_running_loop().time(), event))
            if event["type"] == type_:
                return event

    def arrived_at(self, event: dict[str, Any]) -> float:
        """When a server event read by `expect` arrived."""
        return next(at for at, seen in self.seen if seen is event)

    def seen_of_type(self, type_: str) -> list[dict[str, Any]]:
        """The server events of one type read so far."""
        return [event for _, event in self.seen if event["type"] == type_]

    async def append_audio(self, milliseconds: int, amplitude: float) -> None:
        samples = np.full(SAMPLE_RATE * milliseconds // 1000, amplitude * 32767, dtype=np.int16)
        samples[::2] *= -1  # a full-scale square wave: RMS equals the amplitude
        await self.send(
            "input_audio_buffer.append", audio=base64.b64encode(samples.tobytes()).decode()
        )


def message_item(item_id: str, role: str, text: str) -> dict[str, Any]:
    """A text message item for ``conversation.item.create``."""
    kind = "output_text" if role == "assistant" else "input_text"
    return {
        "id": item_id,
        "type": "message",
        "role": role,
        "content": [{"type": kind, "text": text}],
    }


@asynccontextmanager
async def open_socket(
    server: RealtimeTestServer, path: str = "/v1/realtime", *, authorized: bool = True
) -> AsyncIterator[aiohttp.ClientWebSocketResponse | MemoryWebSocket]:
    """A websocket to the server the way it is reached (in memory, or over TCP), at
    ``path``, with a bearer token unless not ``authorized``; closed on exit."""
    if server.transport == "tcp":
        http: Any = aiohttp.ClientSession()
        url = f"ws://127.0.0.1:{server.port}{path}?model=gpt-realtime"
    else:  # the host is not looked at
        http, url = server.http_session(), f"wss://api.openai.com{path}?model=gpt-realtime"
    headers = {"Authorization": "Bearer dummy"} if authorized else {}
    async with http, http.ws_connect(url, headers=headers) as ws:
        yield ws


@asynccontextmanager
async def connect(server: RealtimeTestServer) -> AsyncIterator[Client]:
    """Connects to the server and waits for ``session.created``."""
    async with open_socket(server) as ws:
        client = Client(ws)
        await client.expect("session.created")
        yield client
