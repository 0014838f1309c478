"""An in-memory websocket between the OpenAI realtime plugin and `RealtimeTestServer`.

The plugin reaches its service through ``http_session.ws_connect(url=..., headers=...)``,
then ``send_str``, ``receive()`` and ``close()`` on the socket it gets. `MemoryHttpSession`
answers that call with one end of an in-memory pipe whose other end the server serves, so
a call runs without a network socket: no port, no scheduling of a real network, and on a
virtual clock the network's latency (a `Fidelity` setting, modelled by the server) is
virtual too. Messages keep their order; a message sent is readable at the same instant.

The ends behave as aiohttp's do where the plugin can tell: a clean close by the server
reads as a ``CLOSE`` message, a dropped connection as ``CLOSED`` with close code 1006, a
local ``close()`` wakes a pending ``receive()`` with ``CLOSING``, and sending on a closed
end raises ``ClientConnectionResetError``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol
from urllib.parse import parse_qsl, urlsplit

from aiohttp import (
    ClientConnectionResetError,
    WSCloseCode,
    WSMessage,
    WSMessageTypeError,
    WSMsgType,
    WSServerHandshakeError,
)
from aiohttp.http_websocket import WS_CLOSED_MESSAGE, WS_CLOSING_MESSAGE

__all__ = ["Handshake", "MemoryHttpSession", "MemoryWebSocket", "ServerSocket", "memory_pipe"]

_LOST = WSMessage(WSMsgType.CLOSED, None, None)
"""What a dropped connection leaves in the peer's inbox (aiohttp reads it as ``CLOSED``)."""


@dataclass(frozen=True)
class Handshake:
    """The websocket upgrade request, as the server sees it.

    Attributes:
        path: Request path, e.g. ``/v1/realtime``.
        query: Query parameters, e.g. ``{"model": "gpt-realtime"}``.
        headers: Request headers.
    """

    path: str
    query: Mapping[str, str]
    headers: Mapping[str, str]


class ServerSocket(Protocol):
    """The server's end of a connection, in memory (`MemoryWebSocket`) or over TCP."""

    @property
    def closed(self) -> bool: ...

    async def send_str(self, data: str) -> None: ...

    async def close(self) -> bool: ...

    def drop(self) -> None:
        """Ends the connection without a close handshake, as a network failure does."""

    def __aiter__(self) -> AsyncIterator[WSMessage]: ...


class MemoryWebSocket:
    """One end of an in-memory websocket (the client's end is what ``ws_connect`` returns).

    Supports what the plugin and a bare test client use of aiohttp's
    ``ClientWebSocketResponse``: ``send_str``, ``receive``, ``receive_str``, ``close``,
    ``closed``, ``close_code``, async iteration and ``async with``. The server's end also
    reads with async iteration, which ends at the peer's close.
    """

    def __init__(self) -> None:
        self._inbox: asyncio.Queue[WSMessage] = asyncio.Queue()
        self._peer: MemoryWebSocket | None = None
        self._closed = False
        self._close_code: int | None = None
        self._waiting = False

    @property
    def closed(self) -> bool:
        """Whether this end was closed, by either side, or its connection dropped."""
        return self._closed

    @property
    def close_code(self) -> int | None:
        """1000 after a clean close, 1006 after a dropped connection, else None."""
        return self._close_code

    async def send_str(self, data: str, compress: int | None = None) -> None:
        """Sends a text message; the peer can read it at once."""
        if not isinstance(data, str):
            raise TypeError(f"data argument must be str ({type(data)!r})")
        if self._closed:
            raise ClientConnectionResetError("Cannot write to closing transport")
        assert self._peer is not None
        if not self._peer._closed:  # else it is lost on the way, as on a dropped socket
            self._peer._inbox.put_nowait(WSMessage(WSMsgType.TEXT, data, None))

    async def receive(self, timeout: float | None = None) -> WSMessage:
        """The next message: ``TEXT``, ``CLOSE`` (the peer closed), ``CLOSING`` (this end
        was closed while waiting) or ``CLOSED`` (after the close, or a dropped connection).
        """
        if self._waiting:
            raise RuntimeError("Concurrent call to receive() is not allowed")
        if self._closed:
            return WS_CLOSED_MESSAGE
        self._waiting = True
        try:
            message = await asyncio.wait_for(self._inbox.get(), timeout)
        finally:
            self._waiting = False
        if message is _LOST:
            self._closed, self._close_code = True, WSCloseCode.ABNORMAL_CLOSURE
            return WS_CLOSED_MESSAGE
        if message.type is WSMsgType.CLOSE:
            self._closed, self._close_code = True, int(message.data)
        return message

    async def receive_str(self, *, timeout: float | None = None) -> str:
        """The next message, which must be ``TEXT``."""
        message = await self.receive(timeout)
        if message.type is not WSMsgType.TEXT:
            raise WSMessageTypeError(
                f"Received message {message.type}:{message.data!r} is not WSMsgType.TEXT"
            )
        return str(message.data)

    async def close(self, *, code: int = WSCloseCode.OK, message: bytes = b"") -> bool:
        """Closes both ends cleanly; False if this end was closed already."""
        if self._closed:
            return False
        self._end(int(code))  # aiohttp reports a clean close's code as a plain int
        assert self._peer is not None
        if not self._peer._closed:
            self._peer._inbox.put_nowait(WSMessage(WSMsgType.CLOSE, int(code), message.decode()))
        return True

    def drop(self) -> None:
        """Drops the connection without a close handshake (a network failure): the peer
        reads what had reached it, then ``CLOSED``; what it sends from now on is lost."""
        if self._closed:
            return
        self._end(WSCloseCode.ABNORMAL_CLOSURE)
        assert self._peer is not None
        if not self._peer._closed:
            self._peer._inbox.put_nowait(_LOST)

    def _end(self, code: int) -> None:
        self._closed, self._close_code = True, code
        if self._waiting:
            self._inbox.put_nowait(WS_CLOSING_MESSAGE)  # wakes the pending receive()

    def __aiter__(self) -> MemoryWebSocket:
        return self

    async def __anext__(self) -> WSMessage:
        message = await self.receive()
        if message.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED):
            raise StopAsyncIteration
        return message

    async def __aenter__(self) -> MemoryWebSocket:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


def memory_pipe() -> tuple[MemoryWebSocket, MemoryWebSocket]:
    """Two connected ends: ``(client, server)``."""
    client, server = MemoryWebSocket(), MemoryWebSocket()
    client._peer, server._peer = server, client
    return client, server


Accept = Callable[[Handshake, MemoryWebSocket], None]
"""What the server does with a new connection: serve the server's end."""


class _Connecting:
    """What ``ws_connect`` returns: awaitable, and an async context manager that closes
    the socket on exit (as aiohttp's request context manager)."""

    def __init__(self, connect: Awaitable[MemoryWebSocket]) -> None:
        self._connect = connect
        self._socket: MemoryWebSocket | None = None

    def __await__(self) -> Generator[object, None, MemoryWebSocket]:
        return self._connect.__await__()

    async def __aenter__(self) -> MemoryWebSocket:
        self._socket = await self._connect
        return self._socket

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._socket is not None:
            await self._socket.close()


def _handshake_error(status: int, message: str) -> WSServerHandshakeError:
    # aiohttp passes the request's info; there is no HTTP request here
    return WSServerHandshakeError(None, (), status=status, message=message)  # type: ignore[arg-type]


class MemoryHttpSession:
    """Stands in for the ``aiohttp.ClientSession`` a ``RealtimeModel`` is given as
    ``http_session``: its ``ws_connect`` opens an in-memory connection to one server.

    Made by `RealtimeTestServer.http_session`. The handshake is checked as the server's
    HTTP endpoint checks it: an unknown path fails with status 404, a request without a
    bearer token with 401 (``WSServerHandshakeError``, as aiohttp raises).
    """

    def __init__(self, accept: Accept, paths: frozenset[str]) -> None:
        self._accept = accept
        self._paths = paths
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def ws_connect(self, url: str, *, headers: Mapping[str, str] | None = None) -> _Connecting:
        """Opens a connection to the server; ``url``'s host is not looked at."""
        return _Connecting(self._connect(url, dict(headers or {})))

    async def _connect(self, url: str, headers: dict[str, str]) -> MemoryWebSocket:
        if self._closed:
            raise RuntimeError("Session is closed")
        parts = urlsplit(url)
        if parts.path not in self._paths:
            raise _handshake_error(404, "Not Found")
        if not headers.get("Authorization", "").startswith("Bearer "):
            raise _handshake_error(401, "missing bearer token")
        client, server = memory_pipe()
        self._accept(Handshake(parts.path, dict(parse_qsl(parts.query)), headers), server)
        await asyncio.sleep(0)  # the server sends its first event as the connection opens
        return client

    async def close(self) -> None:
        self._closed = True

    async def __aenter__(self) -> MemoryHttpSession:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
