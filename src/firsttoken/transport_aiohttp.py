"""aiohttp: LLM calls sent with ``aiohttp`` measured like httpx ones (the client seam's second adapter).

google-genai's async client sends through aiohttp whenever aiohttp is importable, and apps call
the OpenAI, Anthropic and Gemini APIs with it directly. This adapter does for aiohttp what
:mod:`firsttoken.transport` does for httpx, and nothing about wire formats: it hands the provider
layer a :class:`~firsttoken.transport.WireRequest`, a status and the body's bytes through the same
``DirectCalls`` seam, and the same call lifecycle and readers do the rest.

* ``ClientSession._request`` (every ``get``/``post``/``request`` goes through it) starts the call,
  counts the attempt and ends the call on an exception (a timeout, a refused connection, a
  cancellation);
* aiohttp's own ``TraceConfig`` signals cut the wire phases: connection queued, DNS, connection
  created (TCP and TLS together: aiohttp does not tell them apart) or reused, request headers and
  body sent, response headers received. ``ClientSession.__init__`` adds the one ``TraceConfig`` to
  each session made after ``instrument()``; a session made before gets no wire phases, its calls
  are measured all the same;
* a streamed (SSE) body is read as the app consumes it: its ``StreamReader`` is given a subclass
  (same slots) that hands each consumed piece to the SSE reader, ends the call when the terminal
  event was consumed, and ends it with an error when the stream fails (the connection dropped, a
  read timeout, a cancellation) at that moment;
* a whole body ends the call when ``ClientResponse.read`` (which ``json()`` and ``text()`` use)
  returns; ``release()``/``close()`` before that ends it as closed.

Patched when the app imports aiohttp: importing firsttoken imports no aiohttp. An SDK call that
sends through aiohttp (openai's ``DefaultAioHttpClient``) is the SDK's call: only its wire phases
come from here.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from . import semconv as sc
from ._internal import internal_error
from ._patch import Patches
from .context import CURRENT_CALL
from .headers import read_header_pairs
from .streams import end_on_exception, watch
from .timeline import Timeline
from .transport import (
    DirectCalls,
    SseFeed,
    WireRequest,
    call_for_response,
    next_attempt,
    read_on,
    send_direct_async,
    tls_facts,
)

_feeds: dict[int, tuple[Timeline, SseFeed]] = {}
"""id(observed StreamReader) -> its call and SSE reader (aiohttp's readers take no weak references)."""


class _Headers:
    """A request's headers over its session's defaults, looked up by lower-case name."""

    __slots__ = ("own", "session")

    def __init__(self, own: Any, session: Any) -> None:
        pairs = own.items() if isinstance(own, Mapping) else (own or ())
        self.own = {str(k).lower(): str(v) for k, v in pairs}
        self.session = session

    def get(self, name: str, default: str = "") -> str:
        value = self.own.get(name)
        if value is not None:
            return value
        return str(self.session.get(name, default)) if self.session is not None else default


def _wire_request(session: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> WireRequest | None:
    method = args[0] if args else kwargs.get("method")
    if method != "POST" and method != "post":
        return None
    url = session._build_url(args[1] if len(args) > 1 else kwargs["str_or_url"])
    data = kwargs.get("data")
    if isinstance(data, str):
        data = data.encode()
    content = bytes(data) if isinstance(data, (bytes, bytearray, memoryview)) else None
    headers = _Headers(kwargs.get("headers"), getattr(session, "headers", None))
    return WireRequest("POST", url.scheme, url.host, url.port, url.path, headers, content, kwargs.get("json"), session)


def _observed_class(base: type) -> type:
    class ObservedStreamReader(base):  # type: ignore[misc]
        """aiohttp's ``StreamReader`` with the same slots (its instances may take this class): the
        bytes the app consumes go to the call's SSE reader, and a failure ends the call."""

        __slots__ = ()

        def _read_nowait_chunk(self, n: int) -> bytes:
            data: bytes = super()._read_nowait_chunk(n)
            entry = _feeds.get(id(self))
            if entry is not None:
                tl, feed = entry
                try:
                    feed.feed(data)
                    if feed.done and not tl.ended:
                        _feeds.pop(id(self), None)
                        tl.response_bytes = self.total_bytes
                        tl.finish(sc.END_COMPLETED)
                except Exception:
                    internal_error("reading an aiohttp stream failed")
            return data

        def set_exception(self, exc: BaseException, *args: Any) -> None:
            _failed(self, exc)
            super().set_exception(exc, *args)

        async def _wait(self, func_name: str) -> None:
            try:
                await super()._wait(func_name)
            except BaseException as exc:  # ended with the call, then the app's to handle
                _failed(self, exc)
                raise

    return ObservedStreamReader


def _failed(stream: Any, exc: BaseException) -> None:
    entry = _feeds.pop(id(stream), None)
    if entry is not None and not entry[0].ended:
        end_on_exception(entry[0], exc)


class AiohttpAdapter:
    """aiohttp's hooks, for one installation: its ``DirectCalls`` and whether to cut wire phases."""

    def __init__(self, calls: DirectCalls, wire_phases: bool) -> None:
        self.calls = calls
        self.wire_phases = wire_phases
        self.trace_config: Any = None
        self.observed: Any = None
        self.stream_class: Any = None

    # -- installing ----------------------------------------------------------------------------

    def patch(self, patches: Patches, module: ModuleType) -> bool:
        from aiohttp import streams

        self.stream_class = streams.StreamReader
        self.observed = _observed_class(streams.StreamReader)
        if self.wire_phases:
            self.trace_config = self._trace_config(module)
        ok = patches.wrap("aiohttp.client", "ClientSession._request", self._request)
        ok = patches.wrap("aiohttp.client_reqrep", "ClientResponse.read", self._read) and ok
        ok = patches.wrap("aiohttp.client_reqrep", "ClientResponse.release", self._release) and ok
        ok = patches.wrap("aiohttp.client_reqrep", "ClientResponse.close", self._release) and ok
        if ok and self.trace_config is not None:
            patches.wrap("aiohttp.client", "ClientSession.__init__", self._session_init)
        return ok

    def _trace_config(self, module: Any) -> Any:
        config = module.TraceConfig()
        config.on_connection_queued_end.append(_queued_end)
        config.on_connection_create_start.append(_create_start)
        config.on_dns_resolvehost_start.append(_dns_start)
        config.on_dns_resolvehost_end.append(_dns_end)
        config.on_connection_create_end.append(_create_end)
        config.on_connection_reuseconn.append(_reused)
        config.on_request_headers_sent.append(_headers_sent)
        config.on_request_chunk_sent.append(_chunk_sent)
        config.on_request_end.append(_request_end)
        return config

    def _session_init(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        configs = kwargs.get("trace_configs")
        if self.trace_config not in (configs or ()):
            kwargs = {**kwargs, "trace_configs": [*(configs or ()), self.trace_config]}
        return wrapped(*args, **kwargs)

    # -- a request: an attempt of its call (transport.send_direct_async) ------------------------

    client_name = "aiohttp"

    def wire_request(self, client: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> WireRequest | None:
        return _wire_request(client, args, kwargs)

    def sending(self, tl: Timeline, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        next_attempt(tl)
        tl.headers_ns = None  # this attempt's (an SDK's retry loop may send several)

    async def _request(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return await send_direct_async(self, wrapped, instance, args, kwargs)

    def responded(self, tl: Timeline, family: str, response: Any) -> None:
        now = aiohttp_responded(tl, response)
        if not read_on(tl, response, response.status, now):
            return
        stream: Any = response.content
        if "text/event-stream" in response.headers.get("Content-Type", "") and type(stream) is self.stream_class:
            feed = self.calls.sse_reader(tl, family)
            if len(_feeds) >= 64:  # drop what abandoned streams left
                for key in [k for k, (call, _) in _feeds.items() if call.ended]:
                    del _feeds[key]
            _feeds[id(stream)] = (tl, feed)
            stream.__class__ = self.observed

            def on_close(tl: Timeline, _response: Any, now: int) -> None:
                _feeds.pop(id(stream), None)
                tl.response_bytes = stream.total_bytes
                tl.finish(sc.END_COMPLETED if tl.terminal_seen else sc.END_CLOSED, now)

            tl.on_close = on_close
        else:
            calls = self.calls

            def on_close_whole(tl: Timeline, response: Any, now: int) -> None:
                body = getattr(response, "_body", None)
                if body is not None:
                    tl.response_bytes = len(body)
                calls.finish_whole(tl, family, response.status, body, now)

            tl.on_close = on_close_whole
        watch(response, tl)

    async def _read(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        tl = call_for_response(instance)
        if tl is None or tl.ended:
            return await wrapped(*args, **kwargs)
        on_close, tl.on_close = tl.on_close, None  # read() closes the response when it fails
        try:
            body = await wrapped(*args, **kwargs)
        except BaseException as exc:  # dropped, timed out, cancelled: the call ends with it
            end_on_exception(tl, exc)
            raise
        finally:
            tl.on_close = on_close
        _ended(instance)
        return body

    def _release(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        _ended(instance)  # first: releasing sets a "connection closed" error on an unread stream
        return wrapped(*args, **kwargs)


def aiohttp_responded(tl: Timeline, response: Any) -> int:
    """An attempt's answer over aiohttp (its ``ClientResponse``, an aiobotocore response's ``raw``):
    its status, the headers' time (the ``TraceConfig`` cut it already, when it is on), HTTP version,
    headers and TLS facts; returns the time it was seen (its reuse is the ``TraceConfig``'s to count)."""
    now = time.perf_counter_ns()
    tl.status_code = response.status
    tl.attempt_log.append((now, response.status))
    if tl.headers_ns is None:
        tl.headers_ns = now
    version = response.version
    if version is not None:
        tl.extra[sc.NETWORK_PROTOCOL_VERSION] = f"{version.major}.{version.minor}"
    read_header_pairs(tl, response.raw_headers)
    connection = response.connection
    transport = None if connection is None else connection.transport
    if transport is not None:
        tls_facts(tl, transport)
    return now


def _ended(response: Any) -> None:
    tl = call_for_response(response)
    if tl is None or tl.ended or tl.on_close is None:
        return
    try:
        now = time.perf_counter_ns()
        tl.closed_ns = now
        tl.on_close(tl, response, now)
    except Exception:
        internal_error("aiohttp response end failed")


# -- TraceConfig signals: the wire phases of the call in progress ----------------------------------


async def _queued_end(session: Any, ctx: Any, params: Any) -> None:
    tl = CURRENT_CALL.get()
    if tl is not None:
        tl.cut(time.perf_counter_ns(), sc.PHASE_POOL_WAIT)


async def _create_start(session: Any, ctx: Any, params: Any) -> None:
    tl = CURRENT_CALL.get()
    if tl is not None:
        now = time.perf_counter_ns()
        tl.cut(now, sc.PHASE_POOL_WAIT)
        tl.connect_ns = now


async def _dns_start(session: Any, ctx: Any, params: Any) -> None:
    tl = CURRENT_CALL.get()
    if tl is not None:  # from the connection's start to here: still waiting, as httpx's DNS cut says
        tl.cut(time.perf_counter_ns(), sc.PHASE_POOL_WAIT)


async def _dns_end(session: Any, ctx: Any, params: Any) -> None:
    tl = CURRENT_CALL.get()
    if tl is not None:
        tl.cut(time.perf_counter_ns(), sc.PHASE_DNS)


async def _create_end(session: Any, ctx: Any, params: Any) -> None:
    tl = CURRENT_CALL.get()
    if tl is not None:
        tl.cut(time.perf_counter_ns(), sc.PHASE_CONNECT)
        tl.new_connections += 1


async def _reused(session: Any, ctx: Any, params: Any) -> None:
    tl = CURRENT_CALL.get()
    if tl is not None:
        tl.cut(time.perf_counter_ns(), sc.PHASE_POOL_WAIT)
        tl.reused_connections += 1


async def _headers_sent(session: Any, ctx: Any, params: Any) -> None:
    tl = CURRENT_CALL.get()
    if tl is not None:
        tl.cut(time.perf_counter_ns(), sc.PHASE_UPLOAD)


async def _chunk_sent(session: Any, ctx: Any, params: Any) -> None:
    tl = CURRENT_CALL.get()
    if tl is not None:
        tl.request_bytes = (tl.request_bytes or 0) + len(params.chunk)
        tl.cut(time.perf_counter_ns(), sc.PHASE_UPLOAD)


async def _request_end(session: Any, ctx: Any, params: Any) -> None:
    tl = CURRENT_CALL.get()
    if tl is not None and tl.headers_ns is None:
        now = time.perf_counter_ns()
        tl.cut(now, sc.PHASE_SERVER_WAIT)
        tl.headers_ns = now
