"""The wire: HTTP/1.1 (h11) and HTTP/2 (h2) over asyncio, behind a protocol-neutral ``Exchange``.

Handlers only see :class:`Exchange` (one request, one response). The HTTP/1.1 specifics live in
:class:`H11Connection`, the HTTP/2 ones in ``_h2.H2Connection`` (one ``Exchange`` per stream);
``_alpn.make_protocol`` picks one per connection from the protocol ALPN selected, so ``h2`` is only
imported when a client negotiates it.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import itertools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

import h11

__all__ = [
    "Connection",
    "Disconnected",
    "Exchange",
    "H11Connection",
    "Request",
    "h2_available",
    "next_connection_number",
    "run_handler",
]

log = logging.getLogger(__name__)

MAX_BODY = 64 * 1024 * 1024


class Disconnected(Exception):
    """The client went away (or the server dropped it on purpose); the handler just stops."""


@dataclass
class Request:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes = b""
    #: ``"1.1"`` or ``"2"``.
    http_version: str = "1.1"
    #: Which client connection carried it (see :func:`next_connection_number`).
    connection: int = 0
    path: str = field(init=False)
    query: dict[str, list[str]] = field(init=False)

    def __post_init__(self) -> None:
        parts = urlsplit(self.target)
        self.path = parts.path.rstrip("/") or "/"
        self.query = parse_qs(parts.query)


class Exchange:
    """One request and its response, whatever the HTTP version."""

    request: Request
    #: Set when the peer is gone; a stalled stream waits on it.
    gone: asyncio.Event

    async def send_headers(self, status: int, headers: list[tuple[str, str]]) -> None:
        raise NotImplementedError

    async def send_data(self, data: bytes) -> None:
        raise NotImplementedError

    async def end(self) -> None:
        raise NotImplementedError

    def drop(self) -> None:
        """Cut the connection now: what the client sees is a truncated response."""
        raise NotImplementedError

    @property
    def headers_sent(self) -> bool:
        raise NotImplementedError


Handler = Callable[[Exchange], Awaitable[None]]


_connection_numbers = itertools.count(1)


def next_connection_number() -> int:
    """A number for a new client connection, unique in this process: tests compare them to see reuse."""
    return next(_connection_numbers)


class Connection:
    """What the server keeps of each client connection: enough to shut it down."""

    @property
    def tasks(self) -> list[asyncio.Task[None]]:
        """The handler tasks still running on this connection."""
        raise NotImplementedError

    def abort(self) -> None:
        """Shutdown: stop the handlers and free the socket at once."""
        raise NotImplementedError


_BUG_BODY = b'{"error":{"message":"simulator bug","type":"server_error","param":null,"code":null}}'


async def run_handler(handler: Handler, exchange: Exchange) -> bool:
    """Answer one request; ``False`` when the response did not complete normally (cut it off)."""
    try:
        await handler(exchange)
    except (Disconnected, asyncio.CancelledError):
        return False
    except Exception:
        req = exchange.request
        log.exception("firsttoken.sim: handler failed for %s %s", req.method, req.target)
        if not exchange.headers_sent:
            with contextlib.suppress(Disconnected):
                await exchange.send_headers(500, [("content-type", "application/json")])
                await exchange.send_data(_BUG_BODY)
                await exchange.end()
        return False
    return True


class H11Connection(asyncio.Protocol, Exchange, Connection):
    """An HTTP/1.1 connection: keep-alive, one request at a time, chunked bodies for streams."""

    def __init__(self, handler: Handler, connections: set[Connection]) -> None:
        self._handler = handler
        self._connections = connections
        self._conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_BODY)
        self._number = next_connection_number()
        self._transport: asyncio.Transport | None = None
        self._task: asyncio.Task[None] | None = None
        self._body = bytearray()
        self._pending: h11.Request | None = None
        self._can_write = asyncio.Event()
        self._can_write.set()
        self.gone = asyncio.Event()

    # -- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._connections.add(self)

    def data_received(self, data: bytes) -> None:
        try:
            self._conn.receive_data(data)
        except h11.RemoteProtocolError:
            self.close()
            return
        self._next_request()

    def eof_received(self) -> bool | None:
        with contextlib.suppress(h11.RemoteProtocolError):
            self._conn.receive_data(b"")
        if self._task is None:
            self._next_request()
        return None  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.gone.set()
        self._can_write.set()
        self._connections.discard(self)
        if self._task is not None and not self._task.done():
            self._task.cancel()

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    # -- request cycle ----------------------------------------------------------------------------

    def _next_request(self) -> None:
        if self._task is not None:
            return  # h11 keeps pipelined bytes until this response is done
        while True:
            try:
                event = self._conn.next_event()
            except h11.RemoteProtocolError as exc:
                self._reject(exc)
                return
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.Request):
                self._pending = event
                self._body.clear()
            elif isinstance(event, h11.Data):
                self._body += event.data
            elif isinstance(event, h11.EndOfMessage) and self._pending is not None:
                self._start(self._pending)
                return
            elif isinstance(event, h11.ConnectionClosed):
                self.close()
                return

    def _start(self, event: h11.Request) -> None:
        headers: dict[str, str] = {}
        for name, value in event.headers:
            headers[name.decode("latin-1").lower()] = value.decode("latin-1")
        method, target = event.method.decode("ascii"), event.target.decode("latin-1")
        self.request = Request(method, target, headers, bytes(self._body), connection=self._number)
        self._pending = None
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        try:
            completed = await run_handler(self._handler, self)
        finally:
            self._task = None
        if completed and self._conn.our_state is h11.DONE and self._conn.their_state is h11.DONE:
            self._conn.start_next_cycle()
            self._next_request()
        else:
            self.close()

    def _reject(self, exc: h11.RemoteProtocolError) -> None:
        with contextlib.suppress(h11.LocalProtocolError):
            if self._conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                status = exc.error_status_hint
                self._write(self._conn.send(h11.Response(status_code=status, headers=[("content-length", "0")])))
                self._write(self._conn.send(h11.EndOfMessage()))
        self.close()

    # -- Exchange -------------------------------------------------------------------------------

    @property
    def headers_sent(self) -> bool:
        return self._conn.our_state is not h11.SEND_RESPONSE

    def _write(self, data: bytes | None) -> None:
        if self._transport is None or self._transport.is_closing():
            raise Disconnected
        if data:
            self._transport.write(data)

    async def _drain(self) -> None:
        if not self._can_write.is_set():
            await self._can_write.wait()
        if self.gone.is_set():
            raise Disconnected

    async def send_headers(self, status: int, headers: list[tuple[str, str]]) -> None:
        reason = _REASONS.get(status, b"")
        try:
            self._write(self._conn.send(h11.Response(status_code=status, headers=headers, reason=reason)))
        except h11.LocalProtocolError as exc:
            raise Disconnected from exc
        await self._drain()

    async def send_data(self, data: bytes) -> None:
        if data:
            self._write(self._conn.send(h11.Data(data=data)))
            await self._drain()

    async def end(self) -> None:
        self._write(self._conn.send(h11.EndOfMessage()))
        await self._drain()

    def drop(self) -> None:
        self.close()

    def close(self) -> None:
        """Close after flushing what is already written (a FIN, not a reset)."""
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()

    def abort(self) -> None:
        """Shutdown: stop the handler and free the socket at once."""
        if self._task is not None:
            self._task.cancel()
        if self._transport is not None:
            self._transport.abort()

    @property
    def tasks(self) -> list[asyncio.Task[None]]:
        return [self._task] if self._task is not None else []


_REASONS = {
    200: b"OK",
    400: b"Bad Request",
    401: b"Unauthorized",
    404: b"Not Found",
    405: b"Method Not Allowed",
    413: b"Payload Too Large",
    429: b"Too Many Requests",
    500: b"Internal Server Error",
    502: b"Bad Gateway",
    503: b"Service Unavailable",
    529: b"Site Overloaded",
}


def h2_available() -> bool:
    """Whether the optional ``h2`` package is installed (``pip install firsttoken[http2]``)."""
    return importlib.util.find_spec("h2") is not None
