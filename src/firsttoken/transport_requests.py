"""requests: LLM calls sent with ``requests`` measured like httpx ones (the client seam's third adapter).

Apps call the OpenAI, Anthropic and Gemini APIs with ``requests.post(..., stream=True)`` and
``iter_lines()``; google-auth's ``AuthorizedSession`` is a ``requests.Session``. This adapter hands
the provider layer a :class:`~firsttoken.transport.WireRequest`, a status and the body's bytes
through the same ``DirectCalls`` seam, and knows no wire format:

* ``HTTPAdapter.send`` (every session's every request, redirects included, goes through it) starts
  the call, counts the attempt, reads the status and headers, and ends the call on an exception (a
  refused connection, a timeout before the headers) or an error status;
* ``Response.iter_content`` (which ``iter_lines``, ``__iter__``, ``.content``, ``.text`` and
  ``.json()`` all use) hands each piece the app consumes to the call, unchanged: a streamed SSE
  body to the SSE reader (the call ends at its terminal event, TTFT at its first content event), a
  whole body to ``finish_whole`` once read; a failure while reading (the connection dropped, a
  read timeout) ends the call at that moment, with the class requests raises;
* ``Response.close`` before the end ends the call as closed; a response collected unread, abandoned;
* urllib3's ``HTTPConnection.connect`` / ``HTTPSConnection.connect`` and ``getresponse`` cut the
  wire phases: DNS (``socket.getaddrinfo``, as for httpx), connect (TCP and TLS together), upload,
  server wait; a request that opened no connection went on a reused one.

Patched when the app imports requests: importing firsttoken imports no requests.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterator
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

from . import semconv as sc
from ._internal import internal_error
from ._patch import Patches
from .context import CURRENT_CALL
from .headers import read_headers
from .streams import end_on_exception, watch
from .timeline import Timeline
from .transport import (
    CONNECTING,
    DirectCalls,
    SseFeed,
    WireRequest,
    call_for_response,
    next_attempt,
    patch_dns,
    read_on,
    send_direct,
    tls_facts,
)


def _wire_request(request: Any, adapter: Any) -> WireRequest | None:
    if request.method != "POST":
        return None
    url = urlsplit(request.url)
    body = request.body
    if isinstance(body, str):
        body = body.encode()
    content = bytes(body) if isinstance(body, (bytes, bytearray, memoryview)) else None  # else a streamed body
    headers = _Headers(request.headers)
    return WireRequest("POST", url.scheme, url.hostname, url.port, url.path, headers, content, None, adapter)


class _Headers:
    """A prepared request's headers (requests' ``CaseInsensitiveDict``) as ``WireRequest`` reads them."""

    __slots__ = ("headers",)

    def __init__(self, headers: Any) -> None:
        self.headers = headers

    def get(self, name: str, default: str = "") -> str:
        value = self.headers.get(name)
        return default if value is None else str(value)


class _Socket:
    """An ``ssl.SSLSocket`` as :func:`~firsttoken.transport.tls_facts` reads a stream."""

    __slots__ = ("sock",)

    def __init__(self, sock: Any) -> None:
        self.sock = sock

    def get_extra_info(self, name: str) -> Any:
        return self.sock if name == "ssl_object" and hasattr(self.sock, "selected_alpn_protocol") else None


class _Body:
    """How one response's body is read for its call: the SSE reader, or the whole body's pieces."""

    __slots__ = ("family", "feed", "pieces", "received")

    def __init__(self, family: str, feed: SseFeed | None) -> None:
        self.family = family
        self.feed = feed
        self.pieces: list[bytes] = []
        self.received = 0


class RequestsAdapter:
    """requests' hooks, for one installation: its ``DirectCalls`` and whether to cut wire phases."""

    def __init__(self, calls: DirectCalls, wire_phases: bool) -> None:
        self.calls = calls
        self.wire_phases = wire_phases
        self.bodies: weakref.WeakKeyDictionary[Any, _Body] = weakref.WeakKeyDictionary()
        """Response -> how its body is read, while its call is open."""

    def patch(self, patches: Patches, module: ModuleType) -> bool:
        ok = patches.wrap("requests.adapters", "HTTPAdapter.send", self._send)
        ok = patches.wrap("requests.models", "Response.iter_content", self._iter_content) and ok
        ok = patches.wrap("requests.models", "Response.close", self._close) and ok
        if ok and self.wire_phases:
            patch_urllib3(patches)
        return ok

    # -- a request: an attempt of its call (transport.send_direct) -------------------------------

    client_name = "requests"

    def wire_request(self, client: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> WireRequest | None:
        return _wire_request(args[0] if args else kwargs["request"], client)

    def sending(self, tl: Timeline, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        next_attempt(tl)
        tl.headers_ns = None
        sent = (args[0] if args else kwargs["request"]).body
        if isinstance(sent, (bytes, str)):  # else a streamed body: its size is not known up front
            tl.request_bytes = (tl.request_bytes or 0) + len(sent.encode() if isinstance(sent, str) else sent)

    def _send(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return send_direct(self, wrapped, instance, args, kwargs)

    def responded(self, tl: Timeline, family: str, response: Any) -> None:
        if not urllib3_responded(tl, response, self.wire_phases):
            return
        headers = response.headers
        streamed = "text/event-stream" in headers.get("Content-Type", "")
        body = _Body(family, self.calls.sse_reader(tl, family) if streamed else None)
        self.bodies[response] = body

        def on_close(tl: Timeline, response: Any, now: int) -> None:
            tl.response_bytes = _wire_bytes(response, body)
            # Closed after the terminal event (the answer whole), the call completed, as on the other clients.
            tl.finish(sc.END_COMPLETED if body.feed is not None and tl.terminal_seen else sc.END_CLOSED, now)

        tl.on_close = on_close
        watch(response, tl)

    # -- the body, as the app reads it -----------------------------------------------------------

    def _iter_content(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        chunks = wrapped(*args, **kwargs)  # argument errors and a consumed stream raise as before
        tl = call_for_response(instance)
        if tl is None or tl.ended:
            return chunks
        body = self.bodies.get(instance)
        return chunks if body is None else self._observed(chunks, tl, body, instance)

    def _observed(self, chunks: Iterator[Any], tl: Timeline, body: _Body, response: Any) -> Iterator[Any]:
        try:
            for chunk in chunks:
                if not tl.ended:
                    self._piece(tl, body, response, chunk)
                yield chunk
        except GeneratorExit:
            raise
        except BaseException as exc:  # dropped, timed out, interrupted: the call ends with it, now
            if not tl.ended:
                tl.response_bytes = _wire_bytes(response, body)
                end_on_exception(tl, exc)
            raise
        if not tl.ended:
            self._done(tl, body, response)

    def _piece(self, tl: Timeline, body: _Body, response: Any, chunk: Any) -> None:
        try:
            data = chunk if isinstance(chunk, bytes) else chunk.encode(response.encoding or "utf-8", "replace")
            body.received += len(data)
            feed = body.feed
            if feed is None:
                body.pieces.append(data)
                return
            feed.feed(data)
            if feed.done:
                tl.response_bytes = _wire_bytes(response, body)
                tl.finish(sc.END_COMPLETED)
        except Exception:
            internal_error("reading a requests body failed")

    def _done(self, tl: Timeline, body: _Body, response: Any) -> None:
        """The body was read to its end."""
        try:
            now = time.perf_counter_ns()
            tl.response_bytes = _wire_bytes(response, body)
            if body.feed is not None:
                tl.finish(sc.END_COMPLETED if body.feed.done else sc.END_CLOSED, now)
                return
            tl.cut(now, sc.PHASE_DOWNLOAD)
            content, body.pieces = b"".join(body.pieces), []
            self.calls.finish_whole(tl, body.family, tl.status_code or 200, content, now)
        except Exception:
            internal_error("ending a requests call failed")

    def _close(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        tl = call_for_response(instance)
        if tl is not None and not tl.ended and tl.on_close is not None:
            try:
                now = time.perf_counter_ns()
                tl.closed_ns = now
                tl.on_close(tl, instance, now)
            except Exception:
                internal_error("requests response close failed")
        return wrapped(*args, **kwargs)


def urllib3_responded(tl: Timeline, response: Any, wire_phases: bool) -> bool:
    """An attempt's answer over urllib3 (a requests or botocore response): its status, the server wait
    cut at its headers, the connection's reuse and HTTP version, its headers; whether to read it on
    (``transport.read_on``)."""
    now = time.perf_counter_ns()
    status = response.status_code
    tl.status_code = status
    tl.attempt_log.append((now, status))
    if tl.headers_ns is None:
        tl.cut(now, sc.PHASE_SERVER_WAIT)
        tl.headers_ns = now
    if wire_phases and tl.connect_ns is None:
        tl.reused_connections += 1
    version = getattr(response.raw, "version", None)
    if version in (10, 11, 20):
        tl.extra[sc.NETWORK_PROTOCOL_VERSION] = f"{version // 10}.{version % 10}"
    read_headers(tl, response.headers)
    return read_on(tl, response, status, now)


def _wire_bytes(response: Any, body: _Body) -> int:
    """The body's bytes as they came over the wire (before decompression: urllib3's ``tell()``); a
    chunked body, which urllib3 does not count, as the app read it (after decompression)."""
    tell = getattr(response.raw, "tell", None)
    try:
        wire = int(tell()) if tell is not None else 0
    except Exception:  # a raw that is not urllib3's
        wire = 0
    return wire or body.received


# -- urllib3's connection: the wire phases of the call in progress ---------------------------------


def patch_urllib3(patches: Patches) -> None:
    """Cut the wire phases of the call in progress in urllib3's connections (requests' and botocore's),
    DNS with them."""
    patch_dns(patches)
    patches.wrap("urllib3.connection", "HTTPConnection.connect", _connect)
    patches.wrap("urllib3.connection", "HTTPSConnection.connect", _connect)
    patches.wrap("urllib3.connection", "HTTPConnection.getresponse", _getresponse)


def _connect(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    tl = CURRENT_CALL.get()
    if tl is None:
        return wrapped(*args, **kwargs)
    try:
        now = time.perf_counter_ns()
        tl.cut(now, sc.PHASE_POOL_WAIT)
        tl.connect_ns = now
        tl.dns_seen = False
    except Exception:
        internal_error("requests connect hook failed")
    token = CONNECTING.set(tl)  # the socket hook cuts DNS for this call
    try:
        result = wrapped(*args, **kwargs)
    finally:
        CONNECTING.reset(token)
    try:
        tl.cut(time.perf_counter_ns(), sc.PHASE_CONNECT)
        tl.new_connections += 1
        sock = getattr(instance, "sock", None)
        if sock is not None:
            tls_facts(tl, _Socket(sock))
    except Exception:
        internal_error("requests connect hook failed")
    return result


def _getresponse(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    tl = CURRENT_CALL.get()
    if tl is None:
        return wrapped(*args, **kwargs)
    try:
        tl.cut(time.perf_counter_ns(), sc.PHASE_UPLOAD)  # the request's headers and body are sent
    except Exception:
        internal_error("requests getresponse hook failed")
    result = wrapped(*args, **kwargs)
    try:
        now = time.perf_counter_ns()
        tl.cut(now, sc.PHASE_SERVER_WAIT)
        tl.headers_ns = now
    except Exception:
        internal_error("requests getresponse hook failed")
    return result
