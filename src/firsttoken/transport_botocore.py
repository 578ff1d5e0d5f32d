"""botocore: boto3's ``bedrock-runtime`` calls measured like httpx ones (the client seam's fourth adapter).

boto3 sends through botocore, which sends through urllib3, and parses Bedrock's streams (AWS
event-stream binary frames, each checked against its CRCs) itself. This adapter hands the provider
layer a :class:`~firsttoken.transport.WireRequest`, a status, and the body (whole bytes, or each event
as botocore parsed it) through the same ``DirectCalls`` seam, and knows no wire format:

* ``BaseClient._make_api_call`` is the app's call to the client's method (``converse(...)``): for one
  of the ``bedrock-runtime`` operations firsttoken measures, the call's start is stamped there, as the
  openai and anthropic SDKs' public methods stamp theirs, so botocore's work before the first attempt
  is sent (validation, serialization, the ``before-*`` handlers, endpoint resolution, signing and a
  credential refresh in it) is in TTFT and the duration, as the ``prepare`` phase. Any other client's
  calls cost a look at the client's service name;
* ``Endpoint._send_request`` runs one API call and botocore's own retries of it: it is a
  :class:`~firsttoken.transport.RetryLoop`, so the attempts are one call (attempt count, events,
  ``retry_wait``), ended with the last attempt's failure when botocore gives up (a throttled call
  retried to the end ends with the 429's class);
* ``Endpoint._send`` (one attempt, the signed request) is :func:`~firsttoken.transport.send_direct`'s
  send: it opens the call (at the stamp, or now for a request sent without one), counts the attempt,
  reads the status and the headers;
* a whole answer (``converse``) was read and parsed when ``_send_request`` returns: the call ends then;
* a streamed one (``converse_stream``, ``invoke_model_with_response_stream``) is read as the app
  iterates botocore's ``EventStream``: each parsed event to the reader (TTFT at the first content
  delta, the usage in the last ``metadata`` event or the model's own events); an exception event
  ends the call as an error event, a dropped connection with its class, ``close()`` before the end
  as closed, a stream left unread as abandoned;
* ``invoke_model``'s body is the app's to read (``StreamingBody.read()``): the call ends when it
  has been read whole, with the usage in it.

Only the request's path, body and content headers are read: never the ``Authorization`` header, the
signature or the session token. What boto3 returns or raises is untouched. Patched when the app
imports botocore: importing firsttoken imports no botocore.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterator
from contextvars import ContextVar
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

from . import semconv as sc
from ._internal import internal_error
from ._patch import Patches
from .context import CURRENT_CALL
from .recorder import app_suppressed
from .streams import ERROR_EVENT, end_on_exception, watch
from .timeline import CallStart, Timeline
from .transport import (
    RETRY_LOOP,
    DirectCalls,
    RetryLoop,
    SseFeed,
    WireRequest,
    next_attempt,
    send_direct,
)
from .transport_requests import patch_urllib3, urllib3_responded

MEASURED_SERVICE = "bedrock-runtime"
MEASURED_OPERATIONS = frozenset({"Converse", "ConverseStream", "InvokeModel", "InvokeModelWithResponseStream"})
"""The operations whose requests :mod:`firsttoken.providers.bedrock` reads (its ``_PATH``)."""

API_CALL: ContextVar[CallStart | None] = ContextVar("firsttoken_botocore_api_call", default=None)
"""When the app called the measured client method the current code runs in (botocore's or aiobotocore's)."""


def measured(client: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether ``client._make_api_call(*args, **kwargs)`` is a call firsttoken measures: any other
    service's is told by its name alone (botocore caches it on the service model)."""
    try:
        if client._service_model.service_name != MEASURED_SERVICE:
            return False
        return (args[0] if args else kwargs.get("operation_name")) in MEASURED_OPERATIONS
    except Exception:  # not a botocore client after all: not ours to measure
        return False


def stamp() -> CallStart:
    """The start of the app's call, now (and whether its context suppresses instrumentation)."""
    return time.perf_counter_ns(), time.time_ns(), app_suppressed()


class _Headers:
    """A signed request's headers (botocore's ``HTTPHeaders``) as ``WireRequest`` reads them."""

    __slots__ = ("headers",)

    def __init__(self, headers: Any) -> None:
        self.headers = headers

    def get(self, name: str, default: str = "") -> str:
        value = self.headers.get(name)
        if value is None:
            return default
        return value.decode("latin-1") if isinstance(value, bytes) else str(value)


class _Body:
    """A streamed answer's call, while it is open: its reader (an ``EventStream``'s events), or the
    pieces read so far (a ``StreamingBody``'s bytes)."""

    __slots__ = ("family", "http_response", "length", "pieces", "read", "reader", "tl")

    def __init__(self, tl: Timeline, family: str, reader: SseFeed | None, http_response: Any) -> None:
        self.tl = tl
        self.family = family
        self.reader = reader
        self.http_response = http_response
        self.pieces: list[bytes] = []
        self.read = 0
        """Bytes the app has read of a ``StreamingBody``."""
        self.length = _declared_length(http_response)
        """Its ``Content-Length``: read that far, the body is whole (None: not declared)."""


def _declared_length(response: Any) -> int | None:
    """The answer's ``Content-Length`` (None for a chunked body, or one not a number)."""
    try:
        return int(response.headers["content-length"])
    except Exception:  # absent, not a number, a response without headers
        return None


def _raw_bytes(response: Any) -> int | None:
    """The streamed body's bytes as they came over the wire (urllib3's ``tell()``); None (not known)
    for a chunked body, which urllib3 does not count (Bedrock's streams are). aiobotocore's raw is
    aiohttp's ``ClientResponse`` (no ``tell()``): its ``StreamReader`` counts what it received."""
    raw = getattr(response, "raw", None)
    tell = getattr(raw, "tell", None)
    try:
        if tell is None:
            return getattr(getattr(raw, "content", None), "total_bytes", None) or None
        return int(tell()) or None
    except Exception:  # a raw that is neither
        return None


class RetryScope:
    """``with``: botocore's (or aiobotocore's) retry loop around one API call, in :data:`RETRY_LOOP`
    while it runs; over, the call ends as the loop returned (``result``) or raised."""

    __slots__ = ("adapter", "loop", "result", "token")

    def __init__(self, adapter: BotocoreAdapter, start: CallStart | None) -> None:
        self.adapter = adapter
        self.loop = RetryLoop(start)
        self.result: Any = None

    def __enter__(self) -> RetryScope:
        self.token = RETRY_LOOP.set(self.loop)
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, traceback: object) -> None:
        RETRY_LOOP.reset(self.token)
        self.adapter.over(self.loop, exc, self.result)


class BotocoreAdapter:
    """botocore's hooks, for one installation: its ``DirectCalls`` and whether to cut wire phases."""

    client_name = "botocore"

    def __init__(self, calls: DirectCalls, wire_phases: bool) -> None:
        self.calls = calls
        self.wire_phases = wire_phases
        self.bodies: weakref.WeakKeyDictionary[Any, _Body] = weakref.WeakKeyDictionary()
        """EventStream or StreamingBody -> its call, while the call is open."""
        self.stream_error: type[BaseException] = Exception
        """botocore's ``EventStreamError``: an exception event inside the stream."""
        self.event_stream: type = type(None)
        self.streaming_body: type = type(None)

    def patch(self, patches: Patches, module: ModuleType) -> bool:
        from botocore.eventstream import EventStream  # type: ignore[import-untyped]
        from botocore.exceptions import EventStreamError  # type: ignore[import-untyped]
        from botocore.response import StreamingBody  # type: ignore[import-untyped]

        self.stream_error, self.event_stream, self.streaming_body = EventStreamError, EventStream, StreamingBody
        ok = patches.wrap("botocore.client", "BaseClient._make_api_call", self._make_api_call)
        ok = patches.wrap("botocore.endpoint", "Endpoint._send_request", self._send_request) and ok
        ok = patches.wrap("botocore.endpoint", "Endpoint._send", self._send) and ok
        ok = patches.wrap("botocore.eventstream", "EventStream.__iter__", self._iter) and ok
        ok = patches.wrap("botocore.eventstream", "EventStream.close", self.close_body) and ok
        ok = patches.wrap("botocore.response", "StreamingBody.read", self._read) and ok
        ok = patches.wrap("botocore.response", "StreamingBody.close", self.close_body) and ok
        if ok and self.wire_phases:
            patch_urllib3(patches)
        return ok

    # -- the app's call to the client's method --------------------------------------------------

    def _make_api_call(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if not measured(instance, args, kwargs):
            return wrapped(*args, **kwargs)
        token = API_CALL.set(stamp())
        try:
            return wrapped(*args, **kwargs)
        finally:
            API_CALL.reset(token)

    # -- one API call, botocore's retries included ---------------------------------------------

    def retry_scope(self) -> RetryScope | None:
        """The scope of an API call about to run, or None inside another call (nothing to measure)."""
        if CURRENT_CALL.get() is not None or RETRY_LOOP.get() is not None:
            return None
        return RetryScope(self, API_CALL.get())

    def _send_request(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        scope = self.retry_scope()
        if scope is None:
            return wrapped(*args, **kwargs)
        with scope:
            scope.result = wrapped(*args, **kwargs)
        return scope.result

    def over(self, loop: RetryLoop, exc: BaseException | None, result: Any) -> None:
        """botocore's retry loop is over: it raised ``exc`` or returned ``(http_response, parsed)``."""
        try:
            loop.end(exc)
            tl = loop.tl
            if tl is None or tl.ended:
                return
            if exc is not None:  # answered, then failed while botocore read or parsed the body
                end_on_exception(tl, exc)
                return
            http_response, parsed = result
            body = next((v for v in parsed.values() if isinstance(v, (self.event_stream, self.streaming_body))), None)
            if body is None:  # a whole answer, read and parsed
                now = time.perf_counter_ns()
                tl.cut(now, sc.PHASE_DOWNLOAD)
                content = getattr(http_response, "_content", None)
                tl.response_bytes = None if content is None else len(content)
                self.calls.finish_whole(tl, loop.family, http_response.status_code, content, now)
                return
            events = isinstance(body, self.event_stream)
            reader = self.calls.sse_reader(tl, loop.family) if events else None
            self.bodies[body] = _Body(tl, loop.family, reader, http_response)

            def on_close(tl: Timeline, _body: Any, now: int) -> None:
                tl.response_bytes = _raw_bytes(http_response)
                tl.finish(sc.END_COMPLETED if tl.terminal_seen else sc.END_CLOSED, now)

            tl.on_close = on_close
            watch(body, tl)
        except Exception:
            internal_error("after a botocore call")

    # -- one attempt (transport.send_direct) ----------------------------------------------------

    def _send(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return send_direct(self, wrapped, instance, args, kwargs)

    def wire_request(self, client: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> WireRequest | None:
        request = args[0] if args else kwargs["request"]
        if request.method != "POST":
            return None
        url = urlsplit(request.url)
        body = request.body
        if isinstance(body, str):
            body = body.encode()
        content = bytes(body) if isinstance(body, (bytes, bytearray)) else None
        headers = _Headers(request.headers)
        return WireRequest("POST", url.scheme, url.hostname, url.port, url.path, headers, content, None, client)

    def sending(self, tl: Timeline, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        next_attempt(tl)
        tl.headers_ns = None
        body = (args[0] if args else kwargs["request"]).body
        if isinstance(body, (bytes, bytearray, str)):
            tl.request_bytes = (tl.request_bytes or 0) + len(body.encode() if isinstance(body, str) else body)

    def responded(self, tl: Timeline, family: str, response: Any) -> None:
        urllib3_responded(tl, response, self.wire_phases)

    # -- a streamed answer, as the app reads it --------------------------------------------------

    def _iter(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        events = wrapped(*args, **kwargs)
        body = self.bodies.get(instance)
        if body is None or body.reader is None or body.tl.ended:
            return events
        return self._observed(events, body, body.reader)

    def _observed(self, events: Iterator[Any], body: _Body, reader: SseFeed) -> Iterator[Any]:
        try:
            for event in events:
                self.event(body, reader, event)
                yield event
        except GeneratorExit:
            raise
        except BaseException as exc:
            self.failed(body, exc)
            raise
        self.exhausted(body, reader)

    def event(self, body: _Body, reader: SseFeed, event: Any) -> None:
        """One event of a streamed answer, as the client parsed it, before the app gets it."""
        tl = body.tl
        if not tl.ended:
            reader.event(event)
            if reader.done and not tl.ended:
                tl.response_bytes = _raw_bytes(body.http_response)
                tl.finish(sc.END_COMPLETED)

    def failed(self, body: _Body, exc: BaseException) -> None:
        """Reading the stream raised ``exc`` (an exception event, a dropped connection): the call ends
        with it, now."""
        tl = body.tl
        if not tl.ended:
            tl.response_bytes = _raw_bytes(body.http_response)
            if isinstance(exc, self.stream_error):
                tl.finish(sc.END_ERROR, time.perf_counter_ns(), ERROR_EVENT)
            else:
                end_on_exception(tl, exc)

    def exhausted(self, body: _Body, reader: SseFeed) -> None:
        """The stream ran out: the call completed if its last event came, else it was cut short."""
        tl = body.tl
        if not tl.ended:
            tl.response_bytes = _raw_bytes(body.http_response)
            tl.finish(sc.END_COMPLETED if reader.done else sc.END_CLOSED)

    def _read(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        body = self.bodies.get(instance)
        if body is None or body.tl.ended:
            return wrapped(*args, **kwargs)
        try:
            data = wrapped(*args, **kwargs)
        except BaseException as exc:  # dropped, timed out: the call ends with it
            end_on_exception(body.tl, exc)
            raise
        self.piece(body, data, args, kwargs)
        return data

    def piece(self, body: _Body, data: bytes, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """The app read ``data`` of a ``StreamingBody`` (``read(*args, **kwargs)``): read to its end,
        the whole answer is read and the call ends."""
        tl = body.tl
        try:
            body.pieces.append(data)
            body.read += len(data)
            whole = (args[0] if args else kwargs.get("amt")) is None
            # Read to its end: whole, an empty read, or as many bytes as declared (``read(length)``).
            if whole or not data or (body.length is not None and body.read >= body.length):
                now = time.perf_counter_ns()
                tl.cut(now, sc.PHASE_DOWNLOAD)
                content, body.pieces = b"".join(body.pieces), []
                tl.response_bytes = len(content)
                self.calls.finish_whole(tl, body.family, tl.status_code or 200, content, now)
        except Exception:
            internal_error("reading a botocore body failed")

    def close_body(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        body = self.bodies.get(instance)
        on_close = None if body is None or body.tl.ended else body.tl.on_close
        if body is not None and on_close is not None:
            try:
                now = time.perf_counter_ns()
                body.tl.closed_ns = now
                on_close(body.tl, instance, now)
            except Exception:
                internal_error("botocore stream close failed")
        return wrapped(*args, **kwargs)
