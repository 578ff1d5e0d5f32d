"""httpx / httpx2 hooks: attempts, response headers, status, and the moment a response closes.

Only requests sent while an instrumented SDK call is in progress (``CURRENT_CALL``) are touched;
every other request in the process passes straight through. The SDKs of today send with
``httpx2``; older ones and user-supplied clients with ``httpx``. Both are patched when installed.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from types import ModuleType
from typing import Any, Protocol

from opentelemetry import context as otel_context
from opentelemetry import trace

from . import semconv as sc
from ._internal import internal_error
from ._patch import Patches
from .context import CURRENT_CALL
from .headers import read_headers
from .streams import end_on_exception, error_type_for_status, watch
from .timeline import CallStart, Timeline, is_cancellation

log = logging.getLogger("firsttoken")

# Response object -> the call it belongs to, for the hooks that see only the response.
_calls_by_response: weakref.WeakKeyDictionary[Any, Timeline] = weakref.WeakKeyDictionary()


def call_for_response(response: Any) -> Timeline | None:
    try:
        return _calls_by_response.get(response)
    except TypeError:  # not weak-referenceable / hashable: not a response we registered
        return None


def register_response(response: Any, tl: Timeline) -> None:
    try:
        _calls_by_response[response] = tl
    except TypeError:
        log.debug("firsttoken: cannot track response %r", type(response))


# -- the httpcore trace extension: wire phases ------------------------------------------------

# While a connection is being opened for a call, the DNS hooks know which call it is.
CONNECTING: ContextVar[Timeline | None] = ContextVar("firsttoken_connecting", default=None)


def tls_facts(tl: Timeline, stream: Any) -> None:
    ssl_object = stream.get_extra_info("ssl_object")
    if ssl_object is None:
        return
    version = ssl_object.version()
    if version:
        name, _, number = version.partition("v")
        tl.extra[sc.TLS_PROTOCOL_NAME] = name.lower()
        tl.extra[sc.TLS_PROTOCOL_VERSION] = number or version
    alpn = ssl_object.selected_alpn_protocol()
    if alpn:
        tl.extra[sc.TLS_NEXT_PROTOCOL] = alpn
    tl.extra[sc.TLS_RESUMED] = bool(ssl_object.session_reused)


# What each httpcore event means to a call, worked out once per event name (there are a few dozen):
# (step of the connection or request, "started" | "complete" | "failed"), or None when it means nothing.
_STEPS = frozenset(
    {
        "connect_tcp",
        "connect_unix_socket",
        "start_tls",
        "send_connection_init",
        "send_request_headers",
        "send_request_body",
        "receive_response_headers",
    }
)
_events: dict[str, tuple[str, str] | None] = {}
_UNSEEN: Any = ("", "")
"""``_events.get`` default: an event not worked out yet (``on_event`` does it)."""


def _meaning(event: str) -> tuple[str, str] | None:
    try:
        return _events[event]
    except KeyError:
        head, _, step = event.rpartition(".")
        kind = head.rpartition(".")[2]  # "connection.connect_tcp.started" -> "connect_tcp"
        meaning = (kind, step) if kind in _STEPS else None
        if len(_events) < 256:
            _events[event] = meaning
        return meaning


def on_event(tl: Timeline, event: str, info: dict[str, Any]) -> None:
    """One httpcore trace event of one of the call's requests -> cuts and facts."""
    meaning = _meaning(event)
    if meaning is not None:
        on_step(tl, meaning, info)


def on_step(tl: Timeline, meaning: tuple[str, str], info: dict[str, Any]) -> None:
    """An httpcore event that means something to a call (``_meaning``) -> cuts and facts."""
    now = time.perf_counter_ns()
    kind, step = meaning
    if kind == "connect_tcp" or kind == "connect_unix_socket":
        if step == "started":
            tl.connect_ns = now
            tl.dns_seen = False
            CONNECTING.set(tl)
            return
        CONNECTING.set(None)
        if not tl.dns_seen and tl.connect_ns is not None:
            tl.cut(tl.connect_ns, sc.PHASE_POOL_WAIT)
        if step == "complete":
            tl.cut(now, sc.PHASE_TCP_CONNECT)
            tl.new_connections += 1
    elif kind == "start_tls":
        if step == "started":
            tl.cut(now, sc.PHASE_CONNECT)
        elif step == "complete":
            tl.cut(now, sc.PHASE_TLS_HANDSHAKE)
            stream = info.get("return_value")
            if stream is not None:
                tls_facts(tl, stream)
    elif kind == "send_connection_init" and step == "complete":
        tl.cut(now, sc.PHASE_CONNECT)
    elif kind == "send_request_headers" and step == "started":
        tl.cut(now, sc.PHASE_CONNECT if tl.connect_ns is not None else sc.PHASE_POOL_WAIT)
    elif kind == "send_request_body" and step == "complete":
        tl.cut(now, sc.PHASE_UPLOAD)
    elif kind == "receive_response_headers" and step == "complete":
        tl.cut(now, sc.PHASE_SERVER_WAIT)
        tl.headers_ns = now


def _observe(tl: Timeline, event: str, meaning: tuple[str, str], info: dict[str, Any]) -> None:
    """What both tracers do with an event that may mean something (``_UNSEEN``: not worked out yet).
    Never raises: an exception in a trace callback would fail the app's request."""
    try:
        if meaning is _UNSEEN:
            on_event(tl, event, info)
        else:
            on_step(tl, meaning, info)
    except Exception:
        internal_error("trace event %s failed", event)


class _SyncTrace:
    """httpcore's ``trace`` extension for one request: one small object per request (a closure
    with an attribute was five objects for the collector to track while the call is in flight)."""

    __slots__ = ("chained", "tl")
    _firsttoken = True

    def __init__(self, tl: Timeline, chained: Callable[[str, dict[str, Any]], Any] | None) -> None:
        self.tl = tl
        self.chained = chained

    def __call__(self, event: str, info: dict[str, Any]) -> Any:
        # Half of a request's events mean nothing to the call: those cost a dict lookup only.
        meaning = _events.get(event, _UNSEEN)
        if meaning is not None:
            _observe(self.tl, event, meaning, info)
        chained = self.chained
        return chained(event, info) if chained is not None else None


class _AsyncTrace:
    """The async twin of :class:`_SyncTrace` (httpcore awaits what the callback returns)."""

    __slots__ = ("chained", "tl")
    _firsttoken = True

    def __init__(self, tl: Timeline, chained: Callable[[str, dict[str, Any]], Awaitable[Any]] | None) -> None:
        self.tl = tl
        self.chained = chained

    async def __call__(self, event: str, info: dict[str, Any]) -> Any:
        meaning = _events.get(event, _UNSEEN)
        if meaning is not None:
            _observe(self.tl, event, meaning, info)
        chained = self.chained
        return await chained(event, info) if chained is not None else None


# -- DNS: resolution happens inside connect_tcp; time it only for the call that is connecting --


def _dns_started(tl: Timeline) -> None:
    tl.dns_seen = True
    if tl.connect_ns is not None:
        tl.cut(time.perf_counter_ns(), sc.PHASE_POOL_WAIT)


def _getaddrinfo(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    tl = CONNECTING.get()
    if tl is None:
        return wrapped(*args, **kwargs)
    _dns_started(tl)
    try:
        return wrapped(*args, **kwargs)
    finally:
        tl.cut(time.perf_counter_ns(), sc.PHASE_DNS)


async def _getaddrinfo_async(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    tl = CONNECTING.get()
    if tl is None:
        return await wrapped(*args, **kwargs)
    _dns_started(tl)
    try:
        return await wrapped(*args, **kwargs)
    finally:
        tl.cut(time.perf_counter_ns(), sc.PHASE_DNS)


def next_attempt(tl: Timeline) -> None:
    """One more attempt of call ``tl`` is sent now (in every client adapter): counted, the time since
    the last cut is preparing (the first) or waiting to retry, and it has opened no connection yet."""
    now = time.perf_counter_ns()
    tl.attempts += 1
    tl.cut(now, sc.PHASE_PREPARE if tl.attempts == 1 else sc.PHASE_RETRY_WAIT)
    tl.connect_ns = None


def _before_send(tl: Timeline, request: Any, is_async: bool) -> None:
    next_attempt(tl)
    # A streaming body has no length up front: httpx raises RequestNotRead, a RuntimeError. (No
    # contextlib.suppress: it costs a context manager on every request.)
    try:  # noqa: SIM105
        tl.request_bytes = (tl.request_bytes or 0) + len(request.content)
    except RuntimeError:
        pass
    extensions = getattr(request, "extensions", None)
    if not _wire or not isinstance(extensions, dict):
        return
    chained = extensions.get("trace")
    if getattr(chained, "_firsttoken", False):
        return
    extensions["trace"] = _AsyncTrace(tl, chained) if is_async else _SyncTrace(tl, chained)


def _after_send(tl: Timeline, response: Any) -> None:
    tl.status_code = response.status_code
    tl.attempt_log.append((time.perf_counter_ns(), response.status_code))
    if _wire and tl.connect_ns is None:
        tl.reused_connections += 1
    version = getattr(response, "http_version", None)
    if version:
        tl.extra[sc.NETWORK_PROTOCOL_VERSION] = version.partition("/")[2] or version
    read_headers(tl, response.headers)
    register_response(response, tl)
    if response.is_closed:  # the body was read inside send (not streamed)
        tl.cut(time.perf_counter_ns(), sc.PHASE_DOWNLOAD)
        tl.response_bytes = (tl.response_bytes or 0) + response.num_bytes_downloaded


def _request_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return args[0] if args else kwargs.get("request")


# -- LLM calls made with plain httpx (no SDK) ---------------------------------------------------


class WireRequest:
    """What the provider layer reads of a request, whichever HTTP client sends it (the client seam)."""

    __slots__ = ("client", "content", "headers", "host", "json", "method", "path", "port", "scheme")

    def __init__(
        self,
        method: str,
        scheme: str,
        host: str | None,
        port: int | None,
        path: str,
        headers: Any,
        content: bytes | None,
        json: Any = None,
        client: Any = None,
    ) -> None:
        self.method = method
        self.scheme = scheme
        self.host = host
        self.port = port or (443 if scheme == "https" else 80)
        self.path = path
        self.headers = headers
        """Has ``get(lower-case name, default)``, case-insensitive."""
        self.content = content
        """The body's bytes; None when the client streams it (nothing to read up front)."""
        self.json = json
        """The body as the app handed it to the client already parsed (aiohttp's ``json=``), else None."""
        self.client = client
        """The client object whose connection pool sends it (for client reuse), if known."""


def httpx_request(request: Any, client: Any = None) -> WireRequest:
    """An httpx / httpx2 ``Request`` (sent by ``client``) as the provider layer reads it."""
    url = request.url
    try:
        content = request.content
    except RuntimeError:  # httpx's RequestNotRead: a streaming request body
        content = None
    headers = request.headers
    return WireRequest(request.method, url.scheme, url.host or None, url.port, url.path, headers, content, None, client)


# -- an SDK's retry loop: its attempts are one call ------------------------------------------------


class RetryLoop:
    """An SDK's own retry loop around one call (google-genai's, mistralai's, cohere's), which sends
    each attempt as a request of its own: the LLM requests sent inside it are the attempts of one
    call, as an openai SDK call and its retries are. A failed attempt (an error status, a dropped
    connection) ends the call only when the loop gives up (:meth:`end`). Opened by the provider
    layer around the SDK's loop; the client adapters find it in :data:`RETRY_LOOP`."""

    __slots__ = ("failure", "family", "path", "start", "status", "tl")

    def __init__(self, start: CallStart | None = None) -> None:
        self.tl: Timeline | None = None
        self.start = start
        """When the app called the SDK's method, if the loop's opener knows (its call's start); else
        the call starts at its first attempt's send."""
        self.family = ""
        self.path = ""
        self.status: int | None = None
        """The error status of the last attempt, while the loop decides."""
        self.failure: BaseException | None = None
        """What the last attempt raised, while the loop decides."""

    def attempt(self, calls: DirectCalls, request: WireRequest) -> tuple[Timeline, str] | None:
        """The call ``request`` is an attempt of: the loop's call, or a new one (the first attempt)."""
        tl = self.tl
        if tl is not None and not tl.ended and request.path == self.path:
            self.status = self.failure = None
            return tl, self.family
        started = calls.start(request, self.start)
        if started is not None:
            self.tl, self.family = started
            self.path = request.path
            self.status = self.failure = None
        return started

    def holds(self, tl: Timeline) -> bool:
        return self.tl is tl

    def end(self, exc: BaseException | None) -> None:
        """The SDK's loop is over (``exc``: what it raised): a call it gave up on ends now."""
        tl = self.tl
        if tl is None or tl.ended:
            return
        if exc is not None and is_cancellation(exc):
            end_on_exception(tl, exc)
        elif self.status is not None:
            tl.finish(sc.END_ERROR, time.perf_counter_ns(), error_type_for_status(self.status))
        elif self.failure is not None:
            end_on_exception(tl, self.failure)
        # else the last attempt was answered: the response's own end ends the call


RETRY_LOOP: ContextVar[RetryLoop | None] = ContextVar("firsttoken_retry_loop", default=None)
"""The SDK retry loop the current code runs in, if any (:class:`RetryLoop`)."""


def start_attempt(calls: DirectCalls, request: WireRequest) -> tuple[Timeline, str] | None:
    """The call of an LLM request read on the wire: a new one, or the one of the retry loop it is sent in."""
    loop = RETRY_LOOP.get()
    return calls.start(request) if loop is None else loop.attempt(calls, request)


def attempt_failed(tl: Timeline, exc: BaseException | None = None, status: int | None = None) -> bool:
    """An attempt failed (raised ``exc``, or answered an error ``status``). True: the SDK's retry loop
    decides whether the call goes on (the call stays open until then); False: the call ends now."""
    loop = RETRY_LOOP.get()
    if loop is None or not loop.holds(tl):
        return False
    loop.failure, loop.status = exc, status
    return True


class Attempt:
    """``with Attempt(tl):`` around one send of call ``tl`` (one attempt), in every client adapter: the
    call is current (the hooks below the send find it) and its span is the context; an exception ends
    the call, unless the SDK's retry loop decides (:func:`attempt_failed`), and is raised as it was."""

    __slots__ = ("_call_token", "_context_token", "tl")

    def __init__(self, tl: Timeline) -> None:
        self.tl = tl

    def __enter__(self) -> Timeline:
        self._call_token = CURRENT_CALL.set(self.tl)
        self._context_token = otel_context.attach(trace.set_span_in_context(self.tl.span))
        return self.tl

    def __exit__(self, exc_type: object, exc: BaseException | None, traceback: object) -> None:
        try:
            if exc is not None and not attempt_failed(self.tl, exc):
                end_on_exception(self.tl, exc)
        finally:
            otel_context.detach(self._context_token)
            CURRENT_CALL.reset(self._call_token)


def unregister_response(response: Any) -> None:
    """A failed attempt's response: no longer the call's (the next attempt's will be)."""
    if call_for_response(response) is not None:
        del _calls_by_response[response]


class SseFeed(Protocol):
    """Reads a streamed body's SSE events from the raw bytes passing through the transport."""

    done: bool
    """Whether the stream's terminal event has been seen (or it failed)."""

    def feed(self, chunk: bytes) -> None: ...

    def event(self, event: Mapping[str, Any]) -> None:
        """One event of a stream its client parses itself (botocore's AWS event stream), in the client's shape."""
        ...

    def fail(self, exc: BaseException) -> None:
        """Reading the body raised ``exc``: the call ends with it, at this moment."""
        ...


class DirectCalls(Protocol):
    """How the provider layer recognises and reads LLM calls sent without an SDK firsttoken patches.

    The seam between the HTTP clients (httpx and httpx2 here, aiohttp in :mod:`firsttoken.transport_aiohttp`) and
    the wire formats: a client adapter hands over a :class:`WireRequest`, a status and body bytes;
    it never reads a wire format itself. Handed down by the instrumentor rather than imported here:
    the providers sit above the transport (``firsttoken.providers.direct.DirectCalls``).
    """

    def start(self, request: WireRequest, call_start: CallStart | None = None) -> tuple[Timeline, str] | None:
        """The call's timeline and API family when ``request`` is an LLM API call, else None; the call
        starts at ``call_start`` (when the app called the client's method) if given, else now."""
        ...

    def finish_whole(
        self, tl: Timeline, family: str, status: int, content: bytes | None, end_ns: int | None = None
    ) -> None:
        """Read a whole (not streamed) body that has arrived (``content``), then end the call."""
        ...

    def sse_reader(self, tl: Timeline, family: str) -> SseFeed: ...


_direct: DirectCalls | None = None  # set by patch() when plain-httpx LLM calls are measured
_wire = True  # whether to follow httpcore's trace events (connection set-up, upload, server wait)
_observed_streams: dict[str, tuple[type, type]] = {}  # httpx flavour -> (sync, async) observing streams


def _observing_classes(module: Any) -> tuple[type, type]:
    """Byte streams that hand each raw chunk to an SSE reader (subclasses, for httpx's type checks)."""

    class ObservedSync(module.SyncByteStream):  # type: ignore[misc]
        def __init__(self, inner: Any, reader: Any) -> None:
            self._inner, self._reader = inner, reader

        def __iter__(self) -> Any:
            try:
                for chunk in self._inner:
                    self._reader.feed(chunk)
                    yield chunk
            except GeneratorExit:
                raise
            except BaseException as exc:  # dropped, timed out, interrupted: the call ends with it
                self._reader.fail(exc)
                raise

        def close(self) -> None:
            self._inner.close()

    class ObservedAsync(module.AsyncByteStream):  # type: ignore[misc]
        def __init__(self, inner: Any, reader: Any) -> None:
            self._inner, self._reader = inner, reader

        async def __aiter__(self) -> Any:
            try:
                async for chunk in self._inner:
                    self._reader.feed(chunk)
                    yield chunk
            except GeneratorExit:
                raise
            except BaseException as exc:  # dropped, timed out, cancelled: the call ends with it
                self._reader.fail(exc)
                raise

        async def aclose(self) -> None:
            await self._inner.aclose()

    return ObservedSync, ObservedAsync


def _direct_response(calls: DirectCalls, tl: Timeline, family: str, response: Any) -> None:
    """After a plain-httpx LLM request was sent: end it now, or when its body has been read."""
    status = response.status_code
    if status >= 400 and attempt_failed(tl, None, status):  # the SDK's retry loop decides
        unregister_response(response)
        return
    if status >= 400 and not response.is_closed:  # an error status ends the call now, streamed or not
        tl.finish(sc.END_ERROR, time.perf_counter_ns(), error_type_for_status(status))
        return
    if response.is_closed:
        calls.finish_whole(tl, family, status, getattr(response, "_content", None))
        return
    if "text/event-stream" in response.headers.get("content-type", "") and not response.headers.get("content-encoding"):
        reader = calls.sse_reader(tl, family)
        flavour = type(response).__module__.partition(".")[0]
        sync_cls, async_cls = _observed_streams[flavour]
        is_async = not hasattr(response.stream, "__iter__")
        response.stream = (async_cls if is_async else sync_cls)(response.stream, reader)

        def on_close(tl: Timeline, _response: Any, now: int) -> None:
            tl.finish(sc.END_COMPLETED if tl.terminal_seen else sc.END_CLOSED, now)

        tl.on_close = on_close
    else:

        def on_close_whole(tl: Timeline, response: Any, now: int) -> None:
            content = getattr(response, "_content", None)
            if content is None and response.is_stream_consumed:
                return  # closed inside read(), before the content was kept: the read hook calls again
            calls.finish_whole(tl, family, response.status_code, content, now)

        tl.on_close = on_close_whole
    watch(response, tl)


class ClientHooks(Protocol):
    """What one client adapter does around a send that :func:`send_direct` makes an attempt of an LLM call."""

    client_name: str
    """The client's name, for internal errors."""

    @property
    def calls(self) -> DirectCalls | None:
        """The provider layer's seam, or None while LLM calls sent with this client are not measured."""
        ...

    def wire_request(self, client: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> WireRequest | None:
        """The request the send's arguments make (a POST), as the provider layer reads it; else None."""
        ...

    def sending(self, tl: Timeline, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """The attempt is sent now (:func:`next_attempt` and what the client knows of it up front)."""
        ...

    def responded(self, tl: Timeline, family: str, response: Any) -> None:
        """The attempt was answered: status, headers, and how its body will be read."""
        ...


def _started(
    hooks: ClientHooks, client: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Timeline, str] | None:
    calls = hooks.calls
    if calls is None:
        return None
    try:
        request = hooks.wire_request(client, args, kwargs)
        return None if request is None else start_attempt(calls, request)
    except Exception:
        internal_error("could not start a %s call", hooks.client_name)
        return None


def send_direct(hooks: ClientHooks, wrapped: Any, client: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """One send of a client (httpx, requests, botocore...) outside any SDK call firsttoken patches: when
    it is an LLM request, an attempt of its call (:class:`Attempt`), answered through ``hooks``."""
    if CURRENT_CALL.get() is not None:  # an SDK's call sending through this client: the SDK's hooks have it
        return wrapped(*args, **kwargs)
    started = _started(hooks, client, args, kwargs)
    if started is None:
        return wrapped(*args, **kwargs)
    tl, family = started
    with Attempt(tl):
        try:
            hooks.sending(tl, args, kwargs)
        except Exception:  # firsttoken's own failure: the request still goes
            internal_error("before a %s request", hooks.client_name)
        response = wrapped(*args, **kwargs)
    try:
        hooks.responded(tl, family, response)
    except Exception:
        internal_error("after a %s request", hooks.client_name)
    return response


async def send_direct_async(
    hooks: ClientHooks, wrapped: Any, client: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """The async twin of :func:`send_direct`."""
    if CURRENT_CALL.get() is not None:
        return await wrapped(*args, **kwargs)
    started = _started(hooks, client, args, kwargs)
    if started is None:
        return await wrapped(*args, **kwargs)
    tl, family = started
    with Attempt(tl):
        try:
            hooks.sending(tl, args, kwargs)
        except Exception:  # firsttoken's own failure: the request still goes
            internal_error("before a %s request", hooks.client_name)
        response = await wrapped(*args, **kwargs)
    try:
        hooks.responded(tl, family, response)
    except Exception:
        internal_error("after a %s request", hooks.client_name)
    return response


def read_on(tl: Timeline, response: Any, status: int, now: int) -> bool:
    """An attempt of call ``tl`` was answered ``status`` (its headers read): True when the call goes on
    with ``response``'s body. An error status ends the call now, streamed or not, unless the SDK's
    retry loop decides (:func:`attempt_failed`)."""
    if status >= 400 and attempt_failed(tl, None, status):
        return False
    register_response(response, tl)
    if status >= 400:
        tl.finish(sc.END_ERROR, now, error_type_for_status(status))
        return False
    return True


class _HttpxHooks:
    """Plain httpx's :class:`ClientHooks` (sync or async client)."""

    __slots__ = ("is_async",)
    client_name = "httpx"

    def __init__(self, is_async: bool) -> None:
        self.is_async = is_async

    @property
    def calls(self) -> DirectCalls | None:
        return _direct

    def wire_request(self, client: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> WireRequest | None:
        request = _request_of(args, kwargs)
        return None if request is None else httpx_request(request, client)

    def sending(self, tl: Timeline, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        _before_send(tl, _request_of(args, kwargs), self.is_async)

    def responded(self, tl: Timeline, family: str, response: Any) -> None:
        _after_send(tl, response)
        calls = _direct
        if calls is not None:
            _direct_response(calls, tl, family, response)


_HTTPX_SYNC = _HttpxHooks(False)
_HTTPX_ASYNC = _HttpxHooks(True)


def _send(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    tl = CURRENT_CALL.get()
    if tl is None:
        return send_direct(_HTTPX_SYNC, wrapped, instance, args, kwargs)
    if tl.ended:
        return wrapped(*args, **kwargs)
    try:
        _before_send(tl, _request_of(args, kwargs), False)
    except Exception:
        internal_error("before-send hook failed")
    response = wrapped(*args, **kwargs)
    try:
        _after_send(tl, response)
    except Exception:
        internal_error("after-send hook failed")
    return response


async def _send_async(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    tl = CURRENT_CALL.get()
    if tl is None:
        return await send_direct_async(_HTTPX_ASYNC, wrapped, instance, args, kwargs)
    if tl.ended:
        return await wrapped(*args, **kwargs)
    try:
        _before_send(tl, _request_of(args, kwargs), True)
    except Exception:
        internal_error("before-send hook failed")
    response = await wrapped(*args, **kwargs)
    try:
        _after_send(tl, response)
    except Exception:
        internal_error("after-send hook failed")
    return response


def _closed(response: Any) -> None:
    tl = call_for_response(response)
    if tl is None or tl.ended:
        return
    try:
        if tl.response_bytes is None or tl.on_close is not None:
            tl.response_bytes = response.num_bytes_downloaded
        if tl.on_close is None:
            return
        now = time.perf_counter_ns()
        tl.closed_ns = now
        tl.on_close(tl, response, now)
    except Exception:
        internal_error("response-close hook failed")


def _read_done(response: Any) -> None:
    """A body read whole by the app (``read()``): the close inside it came before the content."""
    tl = call_for_response(response)
    if tl is None or tl.ended or tl.on_close is None or tl.closed_ns is None:
        return
    try:
        tl.on_close(tl, response, tl.closed_ns)
    except Exception:
        internal_error("response-read hook failed")


def _read_failed(response: Any, exc: BaseException) -> None:
    """Reading a whole body raised (connection dropped, timeout): the call ends with it now."""
    tl = call_for_response(response)
    if tl is not None and not tl.ended and tl.on_close is not None:
        end_on_exception(tl, exc)


def _read(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        result = wrapped(*args, **kwargs)
    except BaseException as exc:  # the app's to handle, once the call has ended with it
        _read_failed(instance, exc)
        raise
    _read_done(instance)
    return result


async def _aread(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        result = await wrapped(*args, **kwargs)
    except BaseException as exc:  # the app's to handle, once the call has ended with it
        _read_failed(instance, exc)
        raise
    _read_done(instance)
    return result


def _close(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        return wrapped(*args, **kwargs)
    finally:
        _closed(instance)


async def _aclose(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        return await wrapped(*args, **kwargs)
    finally:
        _closed(instance)


def configure(recorder: Any = None, direct: DirectCalls | None = None) -> None:
    """Whether to follow httpcore's trace events (from the recorder's settings); with ``direct``,
    LLM API requests sent with plain httpx are measured as calls too."""
    global _direct, _wire
    _direct = direct
    _wire = recorder is None or recorder.settings.wire_phases


def patch_flavour(patches: Patches, module: ModuleType) -> bool:
    """Patch one httpx flavour (``httpx`` or ``httpx2``) the app has imported, and DNS with it."""
    name = module.__name__
    _observed_streams[name] = _observing_classes(module)
    ok = patches.wrap(name, "Client.send", _send)
    ok = patches.wrap(name, "AsyncClient.send", _send_async) and ok
    ok = patches.wrap(name, "Response.close", _close) and ok
    ok = patches.wrap(name, "Response.aclose", _aclose) and ok
    ok = patches.wrap(name, "Response.read", _read) and ok
    ok = patches.wrap(name, "Response.aread", _aread) and ok
    if ok:
        patch_dns(patches)
    return ok


def patch_dns(patches: Patches) -> bool:
    """Time sync DNS lookups (``socket.getaddrinfo``) for the call whose connection sets ``CONNECTING``
    (once for every client that connects with sockets: already ours the second time)."""
    return patches.wrap("socket", "getaddrinfo", _getaddrinfo)


def patch_async_dns(patches: Patches) -> bool:
    """Time the DNS lookups of async connections (anyio's, which httpx's async transport uses)."""
    return patches.wrap("anyio._core._sockets", "getaddrinfo", _getaddrinfo_async)
