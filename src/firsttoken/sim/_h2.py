"""HTTP/2 (ALPN ``h2``) with the ``h2`` package: one connection, many streams, one ``Exchange`` each.

Only imported when a client negotiates ``h2``, so ``h2`` stays an optional dependency. Everything runs
on the simulator's event loop; the ``h2`` state machine is touched from one thread only.

Flow control, both ways: request bodies are acknowledged as they arrive (so the client's window
reopens), and response bodies are cut to what the peer's stream and connection windows and its
maximum frame size allow; a stream whose window is shut waits for the client's ``WINDOW_UPDATE``
while the other streams go on. The transport's own back-pressure (``pause_writing``) applies on top.

Faults map onto HTTP/2 the way a real front end behaves: ``drop_after`` resets that one stream
(``RST_STREAM`` ``INTERNAL_ERROR``) and leaves the other streams of the connection alone; a stream the
client resets (or a connection it closes) stops its handler.
"""

from __future__ import annotations

import asyncio
import contextlib

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
from h2.errors import ErrorCodes
from h2.settings import SettingCodes

from ._http import (
    MAX_BODY,
    Connection,
    Disconnected,
    Exchange,
    Handler,
    Request,
    next_connection_number,
    run_handler,
)

__all__ = ["H2Connection", "H2Stream"]

#: Connection-specific header fields, forbidden in HTTP/2 (RFC 9113 section 8.2.2).
_CONNECTION_SPECIFIC = frozenset({"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"})

#: Generous receive windows: request bodies are acknowledged as they arrive anyway.
_STREAM_WINDOW = 1 << 20
_CONNECTION_WINDOW = 1 << 24
_MAX_STREAMS = 1000

_H2Error = h2.exceptions.ProtocolError  # StreamClosedError included


class H2Stream(Exchange):
    """One request/response on an HTTP/2 connection."""

    def __init__(self, connection: H2Connection, stream_id: int, headers: list[tuple[bytes, bytes]]) -> None:
        self._connection = connection
        self.stream_id = stream_id
        self._raw_headers = headers
        self._body = bytearray()
        self._headers_sent = False
        #: We ended or reset our side: nothing more may be sent.
        self.closed = False
        #: The request was refused (too large); its remaining frames are ignored.
        self.refused = False
        self.gone = asyncio.Event()
        self.window_open = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    # -- request ------------------------------------------------------------------------------------

    def receive(self, data: bytes) -> bool:
        """Buffer request body bytes; ``False`` once the body is too large."""
        self._body += data
        return len(self._body) <= MAX_BODY

    def make_request(self) -> Request:
        method, target = "GET", "/"
        headers: dict[str, str] = {}
        for raw_name, raw_value in self._raw_headers:
            name, value = raw_name.decode("latin-1"), raw_value.decode("latin-1")
            if name == ":method":
                method = value
            elif name == ":path":
                target = value
            elif name == ":authority":
                headers.setdefault("host", value)
            elif name.startswith(":"):
                continue
            elif name == "cookie" and name in headers:
                headers[name] += "; " + value  # HTTP/2 may split cookies into several fields
            else:
                headers[name] = value
        number = self._connection.number
        return Request(method, target, headers, bytes(self._body), http_version="2", connection=number)

    def peer_gone(self) -> None:
        """The client reset the stream or the connection is gone: wake and stop the handler."""
        self.closed = True
        self.gone.set()
        self.window_open.set()
        if self.task is not None and not self.task.done():
            self.task.cancel()

    # -- Exchange -----------------------------------------------------------------------------------

    @property
    def headers_sent(self) -> bool:
        return self._headers_sent

    def _check(self) -> None:
        if self.closed or self.gone.is_set():
            raise Disconnected

    async def send_headers(self, status: int, headers: list[tuple[str, str]]) -> None:
        self._check()
        block = [(b":status", str(status).encode())]
        for name, value in headers:
            lowered = name.lower()
            if lowered not in _CONNECTION_SPECIFIC:
                block.append((lowered.encode("latin-1"), value.encode("latin-1")))
        try:
            self._connection.h2.send_headers(self.stream_id, block)
        except _H2Error as exc:
            raise Disconnected from exc
        self._headers_sent = True
        self._connection.flush()
        await self._connection.drain(self)

    async def send_data(self, data: bytes) -> None:
        conn = self._connection.h2
        view = memoryview(data)
        while view:
            self._check()
            try:
                size = min(len(view), conn.local_flow_control_window(self.stream_id), conn.max_outbound_frame_size)
                if size <= 0:
                    self.window_open.clear()
                    await self.window_open.wait()
                    continue
                conn.send_data(self.stream_id, view[:size].tobytes())
            except _H2Error as exc:
                raise Disconnected from exc
            view = view[size:]
            self._connection.flush()
            await self._connection.drain(self)

    async def end(self) -> None:
        self._check()
        try:
            self._connection.h2.end_stream(self.stream_id)
        except _H2Error as exc:
            raise Disconnected from exc
        self.closed = True
        self._connection.flush()
        await self._connection.drain(self)

    def drop(self) -> None:
        """Reset this stream: the client sees it fail; the connection's other streams go on."""
        self.reset(ErrorCodes.INTERNAL_ERROR)

    def reset(self, code: ErrorCodes) -> None:
        if not self.closed:
            self.closed = True
            with contextlib.suppress(_H2Error):
                self._connection.h2.reset_stream(self.stream_id, code)
            self._connection.flush()
        self.gone.set()
        self.window_open.set()


class H2Connection(asyncio.Protocol, Connection):
    """An HTTP/2 connection (server side): streams are answered concurrently, each by its own task."""

    def __init__(self, handler: Handler, connections: set[Connection]) -> None:
        self._handler = handler
        self._connections = connections
        config = h2.config.H2Configuration(client_side=False, header_encoding=None)
        self.h2 = h2.connection.H2Connection(config=config)
        self.h2.local_settings = h2.settings.Settings(
            client=False,
            initial_values={
                SettingCodes.MAX_CONCURRENT_STREAMS: _MAX_STREAMS,
                SettingCodes.INITIAL_WINDOW_SIZE: _STREAM_WINDOW,
                SettingCodes.MAX_HEADER_LIST_SIZE: 1 << 16,
            },
        )
        self.number = next_connection_number()
        self._transport: asyncio.Transport | None = None
        self._streams: dict[int, H2Stream] = {}
        self._can_write = asyncio.Event()
        self._can_write.set()

    # -- asyncio.Protocol ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._connections.add(self)
        self.h2.initiate_connection()
        self.h2.increment_flow_control_window(_CONNECTION_WINDOW - 65535)
        self.flush()

    def data_received(self, data: bytes) -> None:
        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError:
            self._fail()
            return
        for event in events:
            self._dispatch(event)
        self.flush()

    def eof_received(self) -> bool | None:
        return None  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self._can_write.set()
        self._connections.discard(self)
        for stream in list(self._streams.values()):
            stream.peer_gone()
        self._streams.clear()

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    # -- events -------------------------------------------------------------------------------------

    def _dispatch(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.RequestReceived):
            assert event.stream_id is not None and event.headers is not None
            self._streams[event.stream_id] = H2Stream(self, event.stream_id, list(event.headers))
        elif isinstance(event, h2.events.DataReceived):
            assert event.stream_id is not None and event.data is not None
            with contextlib.suppress(_H2Error):
                self.h2.acknowledge_received_data(event.flow_controlled_length or 0, event.stream_id)
            stream = self._streams.get(event.stream_id)
            if stream is not None and not stream.refused and not stream.receive(event.data):
                self._refuse(stream)
        elif isinstance(event, h2.events.StreamEnded):
            stream = self._streams.get(event.stream_id or 0)
            if stream is not None and not stream.refused:
                stream.request = stream.make_request()
                stream.task = asyncio.get_running_loop().create_task(self._run(stream))
        elif isinstance(event, h2.events.StreamReset):
            stream = self._streams.pop(event.stream_id or 0, None)
            if stream is not None:
                stream.peer_gone()
        elif isinstance(event, h2.events.WindowUpdated):
            if not event.stream_id:
                for stream in self._streams.values():
                    stream.window_open.set()
            elif (stream := self._streams.get(event.stream_id)) is not None:
                stream.window_open.set()
        elif isinstance(event, h2.events.RemoteSettingsChanged):
            for stream in self._streams.values():
                stream.window_open.set()  # the initial window or the frame size may have grown
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.close()

    def _refuse(self, stream: H2Stream) -> None:
        """A body over the limit: answer 413 at once, then ask the client to stop sending (RFC 9113 8.1)."""
        stream.refused = True
        with contextlib.suppress(_H2Error):
            self.h2.send_headers(stream.stream_id, [(b":status", b"413"), (b"content-length", b"0")], end_stream=True)
        stream.reset(ErrorCodes.NO_ERROR)
        self._streams.pop(stream.stream_id, None)

    async def _run(self, stream: H2Stream) -> None:
        try:
            completed = await run_handler(self._handler, stream)
            if not completed or not stream.closed:
                stream.reset(ErrorCodes.INTERNAL_ERROR if completed else ErrorCodes.CANCEL)
        finally:
            self._streams.pop(stream.stream_id, None)

    # -- writing ------------------------------------------------------------------------------------

    def flush(self) -> None:
        data = self.h2.data_to_send()
        if data and self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)

    async def drain(self, stream: H2Stream) -> None:
        if not self._can_write.is_set():
            await self._can_write.wait()
        if stream.gone.is_set() or self._transport is None or self._transport.is_closing():
            raise Disconnected

    def _fail(self) -> None:
        with contextlib.suppress(_H2Error):
            self.h2.close_connection(ErrorCodes.PROTOCOL_ERROR)
        self.flush()
        self.close()

    def close(self) -> None:
        """Close after flushing what is already written."""
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()

    # -- Connection ---------------------------------------------------------------------------------

    @property
    def tasks(self) -> list[asyncio.Task[None]]:
        return [s.task for s in self._streams.values() if s.task is not None and not s.task.done()]

    def abort(self) -> None:
        """Shutdown: a best-effort ``GOAWAY``, then stop every stream and free the socket at once."""
        with contextlib.suppress(_H2Error):
            self.h2.close_connection()
        self.flush()
        for stream in list(self._streams.values()):
            if stream.task is not None:
                stream.task.cancel()
        if self._transport is not None:
            self._transport.abort()
