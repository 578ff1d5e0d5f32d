"""OpenAI Realtime sessions: the openai SDK's ``client.realtime.connect()``, sync and async.

A session is a websocket; its latency lives in its responses. The hooks wrap the SDK's connection
(``connect()`` and entering its manager, the connection's ``recv``, ``send`` and ``close``) and read
the events going by, never changing them:

- a **session span** (``realtime_session {model}``) from ``connect()`` entered to the websocket's
  end: connect time, responses, server ``error`` events, how it ended (closed by the app, dropped,
  collected unclosed);
- a **call per response** (operation ``realtime``), parented to it, fed to the Recorder as every other
  call is: its clock starts at the turn's *hand-off* (``response.create`` sent, or server VAD's
  ``input_audio_buffer.speech_stopped``, else ``committed``), the first chunk is ``response.created``,
  the first token the first output delta (audio, text, transcript or tool-call arguments), the end
  ``response.done`` with its usage and status.

Per event: a clock read, a type lookup, and for an output delta the writes of any stream chunk (an
audio delta also adds its base64 length). A reconnection by the SDK (``on_reconnecting``) is a new
server session, so a new session span.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.util.types import AttributeValue

from .. import semconv as sc
from .._internal import internal_error
from .._patch import Patches
from ..context import TRAFFIC_CLASS
from ..recorder import Recorder
from ..timeline import Timeline, is_cancellation
from . import _common as common

_MODULE = "openai.resources.realtime.realtime"

_FORMAT_BYTES_PER_S = {"audio/pcm": 2 * 24_000, "audio/pcmu": 8_000, "audio/pcma": 8_000}
"""Output audio bytes per second of each format the API sends (PCM16 at 24 kHz; G.711 at 8 kHz)."""

_EMPTY: dict[str, Any] = {}

_MAX_ERROR_EVENTS = 32
"""Span events for a session's ``error`` events, at most (all are counted)."""

_TEXT_DELTAS = frozenset({"response.output_text.delta", "response.output_audio_transcript.delta"})
_OUTPUT_DELTAS = _TEXT_DELTAS | {"response.output_audio.delta", "response.function_call_arguments.delta"}


def _b64_bytes(encoded: str) -> int:
    """Bytes a base64 text decodes to, without decoding it."""
    n = len(encoded)
    return n * 3 // 4 - (2 if encoded.endswith("==") else 1 if encoded.endswith("=") else 0)


class _Handoff:
    """A turn handed to the model and not answered yet (no ``response.created``)."""

    __slots__ = ("at_ns", "error", "event_id", "source", "tool_wait_ns", "wall_ns")

    def __init__(self, at_ns: int, source: str, event_id: Any = None) -> None:
        self.at_ns, self.wall_ns = at_ns, time.time_ns()
        self.source = source
        self.event_id = event_id if isinstance(event_id, str) else None
        """The ``response.create``'s own ``event_id``, when the app gave one: errors name it."""
        self.error: tuple[int, str, str | None] | None = None
        """An ``error`` event that may answer it: (when, error.type, message)."""
        self.tool_wait_ns: int | None = None
        """The previous response called tools and ended this long before this turn: the app's tools ran."""


class _Response:
    """One response's extra marks (the Timeline holds the rest)."""

    __slots__ = ("audio_bytes", "first_audio_ns", "first_text_ns", "first_tool_ns", "tl")

    def __init__(self, tl: Timeline) -> None:
        self.tl = tl
        self.first_audio_ns: int | None = None
        self.first_text_ns: int | None = None
        self.first_tool_ns: int | None = None
        self.audio_bytes = 0


class _Session:
    """One websocket: its span and its responses."""

    def __init__(
        self, recorder: Recorder, provider: str, model: str | None, host: str | None, port: int | None
    ) -> None:
        self.recorder = recorder
        self.provider = provider
        self.model = model
        self.host = host
        self.port = port
        self.start_ns, self.start_wall_ns = time.perf_counter_ns(), time.time_ns()
        self.span = common.start_session_span(recorder, provider, model, host, port, self.start_wall_ns)
        self.facts: dict[str, AttributeValue] = {}
        """What the session span says at its end, besides how it ended."""
        self.error_events: list[tuple[int, str, dict[str, AttributeValue]]] = []
        self.lock = threading.Lock()
        self.capture = recorder.settings.capture_content
        self.traffic_class = TRAFFIC_CLASS.get()
        """The app's traffic class where it connected: every response of the session is of it."""
        self.audio_bytes_per_s = _FORMAT_BYTES_PER_S["audio/pcm"]
        self.handoff: _Handoff | None = None
        self.tools_called_ns: int | None = None
        """When the last response, if it called tools, ended: the app runs them, then asks again."""
        self.responses: dict[str, _Response] = {}
        self.response_count = 0
        self.errors = 0
        self.ended = False

    # -- the app's side --------------------------------------------------------------------

    def opened(self) -> None:
        self.facts[sc.FT_REALTIME_CONNECT_TIME] = (time.perf_counter_ns() - self.start_ns) / 1e9

    def sent(self, event: Any) -> None:
        if common.get(event, "type") == "response.create":
            self._hand_off(_Handoff(time.perf_counter_ns(), "response.create", common.get(event, "event_id")))

    def _hand_off(self, handoff: _Handoff | None) -> None:
        """A new turn (None: the pending one is answered). A pending one an ``error`` answered failed."""
        with self.lock:
            pending, self.handoff = self.handoff, handoff
            if handoff is not None:
                if self.tools_called_ns is not None and handoff.source == "response.create":
                    handoff.tool_wait_ns = handoff.at_ns - self.tools_called_ns
                self.tools_called_ns = None
        if pending is not None and pending.error is not None:
            self._refused(pending, *pending.error)

    # -- the server's side -----------------------------------------------------------------

    def received(self, event: Any, now: int) -> None:
        # The SDK's events are pydantic models (fields in __dict__) or, for a type it does not know, dicts.
        fields: dict[str, Any] = event if isinstance(event, dict) else getattr(event, "__dict__", _EMPTY)
        kind = fields.get("type")
        if kind in _OUTPUT_DELTAS:
            rid = fields.get("response_id")
            r = self.responses.get(rid) if isinstance(rid, str) else None
            if r is None:
                return
            r.tl.chunk_count += 1
            r.tl.output_token(now)
            if kind == "response.output_audio.delta":
                if r.first_audio_ns is None:
                    r.first_audio_ns = now
                delta = fields.get("delta")
                if isinstance(delta, str):
                    r.audio_bytes += _b64_bytes(delta)
            elif kind in _TEXT_DELTAS:
                if r.first_text_ns is None:
                    r.first_text_ns = now
                delta = fields.get("delta")
                if r.tl.capture is not None and isinstance(delta, str):
                    common.append_output(r.tl, delta)
            elif r.first_tool_ns is None:
                r.first_tool_ns = now
            return
        if kind == "response.created":
            self._created(common.get(event, "response"), now)
        elif kind == "response.done":
            self._done(common.get(event, "response"), now)
        elif kind == "input_audio_buffer.speech_stopped":
            self._hand_off(_Handoff(now, "speech_stopped"))
        elif kind == "input_audio_buffer.committed":
            if self.handoff is None:
                self._hand_off(_Handoff(now, "committed"))
        elif kind == "error":
            self._error(common.get(event, "error"), now)
        elif kind in ("session.created", "session.updated"):
            self._session(common.get(event, "session"))

    def _session(self, session: Any) -> None:
        model = common.get(session, "model")
        if isinstance(model, str) and model:
            self.facts[sc.GEN_AI_RESPONSE_MODEL] = model
        fmt = common.get(common.get(common.get(common.get(session, "audio"), "output"), "format"), "type")
        if isinstance(fmt, str) and fmt in _FORMAT_BYTES_PER_S:
            self.audio_bytes_per_s = _FORMAT_BYTES_PER_S[fmt]

    def _created(self, response: Any, now: int) -> None:
        rid = common.get(response, "id")
        if not isinstance(rid, str):
            return
        with self.lock:
            handoff, self.handoff = self.handoff, None  # answered: an error seen meanwhile was another's
        tl = self._call(handoff or _Handoff(now, "response.created"))
        tl.response_id = rid
        tl.first_chunk_ns = now
        tl.last_chunk_ns = now
        tl.chunk_count = 1
        if self.capture:
            tl.capture = {}
        self.responses[rid] = _Response(tl)
        self.response_count += 1

    def _call(self, handoff: _Handoff) -> Timeline:
        """A response's call, started at its hand-off, under the session span."""
        tl = Timeline(
            provider=self.provider,
            operation=sc.OP_REALTIME,
            request_model=self.model,
            server_address=self.host,
            server_port=self.port,
            stream=True,
            on_finish=self.recorder.finish,
            start=(handoff.at_ns, handoff.wall_ns, None),
        )
        tl.extra[sc.FT_REALTIME_HANDOFF] = handoff.source
        if handoff.tool_wait_ns is not None:
            tl.extra[sc.FT_REALTIME_TOOL_WAIT] = handoff.tool_wait_ns / 1e9
        tl.traffic_class = self.traffic_class
        self.recorder.start_in(tl, self.span)
        return tl

    def _done(self, response: Any, now: int) -> None:
        r = self.responses.pop(common.get(response, "id"), None)
        if r is None:
            return
        tl = r.tl
        tl.last_chunk_ns = now
        tl.chunk_count += 1
        tl.terminal_seen = True
        status = common.get(response, "status")
        details = common.get(response, "status_details")
        reason = common.get(details, "reason")
        if isinstance(status, str):
            tl.extra[sc.FT_REALTIME_STATUS] = status
            tl.finish_reasons[0] = reason if isinstance(reason, str) else status
        if isinstance(reason, str):
            tl.extra[sc.FT_REALTIME_STATUS_REASON] = reason
        _read_usage(tl, common.get(response, "usage"))
        output = common.get(response, "output")
        tools = sum(common.get(item, "type") == "function_call" for item in output) if isinstance(output, list) else 0
        if tools:
            tl.extra[sc.FT_REALTIME_TOOL_CALLS] = tools
            if status == "completed":
                with self.lock:
                    self.tools_called_ns = now
        if status == "cancelled":
            self._finish(r, sc.END_CANCELLED, now)
        elif status == "failed":
            error = common.get(details, "error")
            kind = common.get(error, "code") or common.get(error, "type") or "failed"
            self._finish(r, sc.END_ERROR, now, str(kind), common.get(error, "message"))
        else:
            self._finish(r, sc.END_COMPLETED, now)

    def _error(self, error: Any, now: int) -> None:
        self.errors += 1
        kind = str(common.get(error, "code") or common.get(error, "type") or "error")
        if len(self.error_events) < _MAX_ERROR_EVENTS:
            self.error_events.append((time.time_ns(), sc.EVENT_REALTIME_ERROR, {sc.ERROR_TYPE: kind}))
        message = common.get(error, "message")
        answered = common.get(error, "event_id")
        with self.lock:
            handoff = self.handoff
            if handoff is None or handoff.source != "response.create":
                return
            if handoff.event_id is None or not isinstance(answered, str):
                # Which client event it answers is not said: it failed the pending response.create if
                # no response.created follows before the next turn or the session's end.
                handoff.error = (now, kind, message if isinstance(message, str) else None)
                return
            if answered != handoff.event_id:
                return
            self.handoff = None
        self._refused(handoff, now, kind, message if isinstance(message, str) else None)

    def _refused(self, handoff: _Handoff, now: int, kind: str, message: str | None) -> None:
        """The server answered the app's ``response.create`` with an ``error``: a failed call."""
        self._call(handoff).finish(sc.END_ERROR, now, kind, message)

    def _finish(self, r: _Response, reason: str, now: int, error_type: str | None = None, message: Any = None) -> None:
        tl = r.tl
        extra = tl.extra
        for key, mark in (
            (sc.FT_REALTIME_TIME_TO_FIRST_AUDIO, r.first_audio_ns),
            (sc.FT_REALTIME_TIME_TO_FIRST_TEXT, r.first_text_ns),
            (sc.FT_REALTIME_TIME_TO_FIRST_TOOL_CALL, r.first_tool_ns),
            (sc.FT_REALTIME_TIME_TO_LAST_DELTA, tl.last_token_ns),
        ):
            if mark is not None:
                extra[key] = (mark - tl.start_ns) / 1e9
        if r.audio_bytes:
            extra[sc.FT_REALTIME_AUDIO_DURATION] = r.audio_bytes / self.audio_bytes_per_s
        tl.finish(reason, now, error_type, message if isinstance(message, str) else None)

    # -- the end ---------------------------------------------------------------------------

    def end(self, reason: str, error_type: str | None = None) -> None:
        """The websocket is over: end the responses still open, then the session span. Once."""
        with self.lock:
            if self.ended:
                return
            self.ended = True
        now = time.perf_counter_ns()
        self._hand_off(None)
        for r in list(self.responses.values()):
            if reason == sc.END_DROPPED:
                self._finish(r, sc.END_ERROR, now, error_type or "ConnectionClosed")
            else:
                self._finish(r, sc.END_CLOSED if reason != sc.END_ABANDONED else reason, now)
        self.responses.clear()
        facts = self.facts
        facts[sc.FT_END_REASON] = reason
        facts[sc.FT_REALTIME_RESPONSES] = self.response_count
        if self.errors:
            facts[sc.FT_REALTIME_ERRORS] = self.errors
        self.recorder.end_session(self.span, facts, self.error_events, error_type)


def _abandoned(session: _Session) -> None:
    """The connection was collected unclosed (a finalizer: it must not raise)."""
    try:
        session.end(sc.END_ABANDONED)
    except Exception:
        internal_error("ending an abandoned realtime session failed")


def _read_usage(tl: Timeline, usage: Any) -> None:
    if usage is None:
        return
    for name in ("input_tokens", "output_tokens"):
        value = common.get(usage, name)
        if isinstance(value, int):
            setattr(tl, name, value)
    inputs = common.get(usage, "input_token_details")
    cached = common.get(inputs, "cached_tokens")
    if isinstance(cached, int):
        tl.cache_read_tokens = cached
    outputs = common.get(usage, "output_token_details")
    for key, value in (
        (sc.GEN_AI_USAGE_AUDIO_INPUT_TOKENS, common.get(inputs, "audio_tokens")),
        (sc.GEN_AI_USAGE_AUDIO_OUTPUT_TOKENS, common.get(outputs, "audio_tokens")),
        (sc.GEN_AI_USAGE_TEXT_OUTPUT_TOKENS, common.get(outputs, "text_tokens")),
    ):
        if isinstance(value, int):
            tl.extra[key] = value


# -- the hooks -------------------------------------------------------------------------------


class RealtimeHooks:
    """The wrappers, sharing one recorder; sessions are found by connection (weakly)."""

    def __init__(self, recorder: Recorder, provider_of: common.ProviderResolver) -> None:
        self.recorder = recorder
        self.provider_of = provider_of
        self.managers: weakref.WeakKeyDictionary[Any, tuple[str | None, str | None, int | None]] = (
            weakref.WeakKeyDictionary()
        )
        self.sessions: weakref.WeakKeyDictionary[Any, _Session] = weakref.WeakKeyDictionary()
        self.queued: weakref.WeakSet[Any] = weakref.WeakSet()
        """Managers the app queued a ``response.create`` on before connecting (sent on entering)."""

    def connect(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        manager = wrapped(*args, **kwargs)
        try:
            model = kwargs.get("model")
            client = instance._client
            base = client.websocket_base_url or client.base_url
            parts = urlsplit(str(base))
            port = parts.port or (443 if parts.scheme in ("https", "wss") else 80)
            self.managers[manager] = (model if isinstance(model, str) else None, parts.hostname, port)
        except Exception:
            internal_error("reading a realtime connect() failed")
        return manager

    def _begin(self, manager: Any) -> _Session | None:
        known = self.managers.get(manager)
        if known is None:
            return None
        try:
            model, host, port = known
            return _Session(self.recorder, self.provider_of(host, "openai"), model, host, port)
        except Exception:
            internal_error("starting a realtime session failed")
            return None

    def queue(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            if common.get(args[0] if args else kwargs.get("event"), "type") == "response.create":
                self.queued.add(instance)
        except Exception:
            internal_error("reading a queued realtime client event failed")
        return wrapped(*args, **kwargs)

    def _entered(self, session: _Session | None, manager: Any, connection: Any) -> None:
        if session is None:
            return
        try:
            session.opened()
            if manager in self.queued:  # the SDK sent it on entering, just now
                self.queued.discard(manager)
                session.sent({"type": "response.create"})
            self.sessions[connection] = session
            weakref.finalize(connection, _abandoned, session)
        except Exception:
            internal_error("opening a realtime session failed")

    @staticmethod
    def _failed(session: _Session | None, exc: BaseException) -> None:
        """Connecting failed (the app gets its exception, never one of ours)."""
        if session is None:
            return
        try:
            if is_cancellation(exc):
                session.end(sc.END_CANCELLED)
            else:
                session.end(sc.END_ERROR, type(exc).__qualname__)
        except Exception:
            internal_error("ending a realtime session failed")

    def enter(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        session = self._begin(instance)
        try:
            connection = wrapped(*args, **kwargs)
        except BaseException as exc:
            self._failed(session, exc)
            raise
        self._entered(session, instance, connection)
        return connection

    async def aenter(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        session = self._begin(instance)
        try:
            connection = await wrapped(*args, **kwargs)
        except BaseException as exc:
            self._failed(session, exc)
            raise
        self._entered(session, instance, connection)
        return connection

    def _received(self, instance: Any, event: Any) -> None:
        session = self.sessions.get(instance)
        if session is not None:
            try:
                if session.ended:
                    session = self._reconnected(instance, session, event)
                    if session is None:
                        return
                session.received(event, time.perf_counter_ns())
            except Exception:
                internal_error("reading a realtime event failed")

    def _reconnected(self, connection: Any, old: _Session, event: Any) -> _Session | None:
        """The SDK reconnected after a drop (``on_reconnecting``): the server's new session is a new
        session span, from its ``session.created`` (the new websocket's connect time is not seen)."""
        if common.get(event, "type") != "session.created":
            return None
        session = _Session(self.recorder, old.provider, old.model, old.host, old.port)
        session.facts[sc.FT_REALTIME_RECONNECTED] = True
        self.sessions[connection] = session
        weakref.finalize(connection, _abandoned, session)
        return session

    def _recv_failed(self, instance: Any, exc: BaseException) -> None:
        session = self.sessions.get(instance)
        if session is None or is_cancellation(exc) or session.ended:
            return
        try:
            from websockets.exceptions import ConnectionClosed, ConnectionClosedOK

            if isinstance(exc, ConnectionClosedOK):
                session.end(sc.END_CLOSED)
            elif isinstance(exc, ConnectionClosed):
                session.end(sc.END_DROPPED, type(exc).__qualname__)
        except Exception:
            internal_error("ending a realtime session failed")

    def recv(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            event = wrapped(*args, **kwargs)
        except BaseException as exc:
            self._recv_failed(instance, exc)
            raise
        self._received(instance, event)
        return event

    async def arecv(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            event = await wrapped(*args, **kwargs)
        except BaseException as exc:
            self._recv_failed(instance, exc)
            raise
        self._received(instance, event)
        return event

    def _sent(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        session = self.sessions.get(instance)
        if session is not None:
            try:
                session.sent(args[0] if args else kwargs.get("event"))
            except Exception:
                internal_error("reading a realtime client event failed")

    def send(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        self._sent(instance, args, kwargs)
        return wrapped(*args, **kwargs)

    async def asend(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        self._sent(instance, args, kwargs)
        return await wrapped(*args, **kwargs)

    def _closing(self, instance: Any) -> None:
        session = self.sessions.get(instance)
        if session is not None:
            try:
                session.end(sc.END_CLOSED)
            except Exception:
                internal_error("ending a realtime session failed")

    def close(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            return wrapped(*args, **kwargs)
        finally:
            self._closing(instance)

    async def aclose(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            return await wrapped(*args, **kwargs)
        finally:
            self._closing(instance)


def patch(patches: Patches, recorder: Recorder, provider_of: common.ProviderResolver) -> None:
    """Wrap the Realtime connection once the app loads it (openai imports it on ``client.realtime``)."""
    hooks = RealtimeHooks(recorder, provider_of)
    wrappers: tuple[tuple[str, Callable[..., Any]], ...] = (
        ("Realtime.connect", hooks.connect),
        ("AsyncRealtime.connect", hooks.connect),
        ("RealtimeConnectionManager.__enter__", hooks.enter),
        ("RealtimeConnectionManager.enter", hooks.enter),
        ("AsyncRealtimeConnectionManager.__aenter__", hooks.aenter),
        ("AsyncRealtimeConnectionManager.enter", hooks.aenter),
        ("RealtimeConnectionManager.send", hooks.queue),
        ("AsyncRealtimeConnectionManager.send", hooks.queue),
        ("RealtimeConnection.recv", hooks.recv),
        ("AsyncRealtimeConnection.recv", hooks.arecv),
        ("RealtimeConnection.send", hooks.send),
        ("AsyncRealtimeConnection.send", hooks.asend),
        ("RealtimeConnection.close", hooks.close),
        ("AsyncRealtimeConnection.close", hooks.aclose),
    )
    for path, wrapper in wrappers:
        patches.wrap_when_imported(_MODULE, path, wrapper)
