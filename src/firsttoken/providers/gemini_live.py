"""Gemini Live sessions: google-genai's ``client.aio.live.connect()`` (the SDK has no sync one).

A session is a websocket speaking ``BidiGenerateContent``; its latency lives in its model turns. The
hooks wrap ``AsyncLive.connect`` (its context manager is entered inside one of ours, of the same type,
which hands the app the SDK's own session) and the session's ``send_*`` methods, its ``_receive``
(the one method every message comes through: ``receive()`` and ``start_stream()`` both use it) and
``close``, reading what goes by, never changing it:

- a **session span** (``realtime_session {model}``), from the manager entered to the websocket's end:
  connect time (TCP, TLS, the upgrade and the ``setup`` → ``setupComplete`` round trip), turns,
  ``goAway`` (an event), how it ended (closed, the server's close code, dropped, collected unclosed);
- a **call per model turn** (operation ``realtime``, as OpenAI Realtime's responses), parented to it:
  its clock starts at the turn's *hand-off* (the app's ``send_client_content`` with ``turn_complete``,
  ``send_realtime_input`` with ``activity_end``, ``send_tool_response``, or
  the server VAD's ``voiceActivity`` end), the first chunk is the turn's first server message, a
  token each message with output (audio, text, output transcription, a tool call), the end
  ``turnComplete`` (``interrupted``: cancelled, the user barged in; a ``toolCall``: the turn handed
  the model's tools to the app), with the ``usageMetadata`` seen in the turn.

The API key travels in a header (``x-goog-api-key``; google-genai 1.x puts it in the URL's query)
or, for ephemeral tokens, ``Authorization``: none of them is read (only the base URL's host and
port). Per message: a clock read and a few field reads (an audio part adds its length).
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections.abc import AsyncIterator
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

_MODULE = "google.genai.live"

_MAX_EVENTS = 32
"""Span events (``goAway``) on a session, at most."""

_CLEAN_CLOSES = frozenset({1000, 1001})
"""Close codes of a session that ended as agreed (normal closure, going away)."""
_NO_CLOSE_FRAME = 1006

_DEFAULT_AUDIO_BYTES_PER_S = 2 * 24_000
"""Gemini Live's output audio: PCM16 at 24 kHz, unless the part's MIME type names another rate."""

_USAGE_BY_MODALITY = (
    ("prompt_tokens_details", "AUDIO", sc.GEN_AI_USAGE_AUDIO_INPUT_TOKENS),
    ("response_tokens_details", "AUDIO", sc.GEN_AI_USAGE_AUDIO_OUTPUT_TOKENS),
    ("response_tokens_details", "TEXT", sc.GEN_AI_USAGE_TEXT_OUTPUT_TOKENS),
)


def _value(enum: Any) -> Any:
    """An SDK enum's string (its members are ``str`` subclasses whose ``str()`` is the member's name)."""
    return getattr(enum, "value", enum)


_EMPTY: dict[str, Any] = {}

_RATES: dict[str, int] = {}
"""Audio MIME type -> bytes per second, as parsed (a session sends one or two types)."""


def _audio_bytes_per_s(mime: str) -> int:
    """Bytes per second of PCM16 audio of a MIME type like ``audio/pcm;rate=24000``."""
    known = _RATES.get(mime)
    if known is not None:
        return known
    rate = _DEFAULT_AUDIO_BYTES_PER_S
    for param in mime.split(";")[1:]:
        name, _, value = param.strip().partition("=")
        if name == "rate" and value.isdigit() and int(value) > 0:
            rate = 2 * int(value)
    if len(_RATES) < 64:
        _RATES[mime] = rate
    return rate


def _fields(model: Any) -> dict[str, Any]:
    """An SDK model's fields (pydantic keeps them in ``__dict__``): read per message without
    ``getattr`` on each."""
    return getattr(model, "__dict__", _EMPTY)


def _seconds(duration: Any) -> float | None:
    """A protobuf ``Duration`` in its JSON form (``"1.500s"``)."""
    if isinstance(duration, str) and duration.endswith("s"):
        with contextlib.suppress(ValueError):
            return float(duration[:-1])
    return None


class _Handoff:
    """A turn handed to the model and not answered yet."""

    __slots__ = ("at_ns", "source", "tool_wait_ns", "wall_ns")

    def __init__(self, at_ns: int, source: str, tool_wait_ns: int | None = None) -> None:
        self.at_ns, self.wall_ns = at_ns, time.time_ns()
        self.source = source
        self.tool_wait_ns = tool_wait_ns


class _Turn:
    """One model turn's extra marks (the Timeline holds the rest)."""

    __slots__ = ("audio_bytes_s", "first_audio_ns", "first_text_ns", "first_tool_ns", "generated_ns", "tl")

    def __init__(self, tl: Timeline) -> None:
        self.tl = tl
        self.first_audio_ns: int | None = None
        self.first_text_ns: int | None = None
        self.first_tool_ns: int | None = None
        self.generated_ns: int | None = None
        self.audio_bytes_s = 0.0
        """Seconds of output audio so far (each part's bytes over its own rate)."""


class _Session:
    """One websocket: its span and its model turn."""

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
        self.events: list[tuple[int, str, dict[str, AttributeValue]]] = []
        self.lock = threading.Lock()
        self.capture = recorder.settings.capture_content
        self.traffic_class = TRAFFIC_CLASS.get()
        """The app's traffic class where it connected: every turn of the session is of it."""
        self.handoff: _Handoff | None = None
        self.tools_called_ns: int | None = None
        """When the last turn ended in a tool call: the app runs its tools, then answers."""
        self.turn: _Turn | None = None
        self.turns = 0
        self.ended = False

    # -- the app's side --------------------------------------------------------------------

    def opened(self) -> None:
        self.facts[sc.FT_REALTIME_CONNECT_TIME] = (time.perf_counter_ns() - self.start_ns) / 1e9

    def hand_off(self, source: str, now: int) -> None:
        with self.lock:
            tool_wait = None
            if source == "tool_response" and self.tools_called_ns is not None:
                tool_wait = now - self.tools_called_ns
            self.tools_called_ns = None
            self.handoff = _Handoff(now, source, tool_wait)

    # -- the server's side -----------------------------------------------------------------

    def received(self, message: Any, now: int) -> None:
        fields = _fields(message)
        content = fields.get("server_content")
        tool_call = fields.get("tool_call")
        usage = fields.get("usage_metadata")
        if content is not None:
            self._content(content, usage, now)
        elif tool_call is not None:
            self._tool_call(tool_call, usage, now)
        elif usage is not None and self.turn is not None:
            _read_usage(self.turn.tl, usage)
        if fields.get("voice_activity") is not None:
            if _value(common.get(fields["voice_activity"], "voice_activity_type")) == "ACTIVITY_END":
                self.hand_off("voice_activity_end", now)
        elif fields.get("voice_activity_detection_signal") is not None:
            signal = _value(common.get(fields["voice_activity_detection_signal"], "vad_signal_type"))
            if signal == "VAD_SIGNAL_TYPE_EOS":
                self.hand_off("voice_activity_end", now)
        if fields.get("go_away") is not None:
            self._go_away(fields["go_away"])

    def _begin(self, now: int) -> _Turn:
        """The turn's first server message: its call, started at the hand-off (or now, none seen)."""
        with self.lock:
            handoff, self.handoff = self.handoff, None
        handoff = handoff or _Handoff(now, "server_content")
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
        if self.capture:
            tl.capture = {}
        self.recorder.start_in(tl, self.span)
        tl.first_chunk_ns = now
        self.turn = _Turn(tl)
        self.turns += 1
        return self.turn

    def _content(self, content: Any, usage: Any, now: int) -> None:
        fields = _fields(content)
        model_turn, transcript = fields.get("model_turn"), fields.get("output_transcription")
        turn = self.turn
        if turn is None:
            if model_turn is None and transcript is None and not fields.get("turn_complete"):
                return  # not the model's output: input transcription, an interruption of nothing
            if model_turn is None and transcript is None and self.handoff is None:
                return  # a turn_complete closing nothing
            turn = self._begin(now)
        tl = turn.tl
        tl.chunk_count += 1
        tl.last_chunk_ns = now
        output = False
        for part in _fields(model_turn).get("parts") or ():
            part_fields = _fields(part)
            blob = part_fields.get("inline_data")
            text = part_fields.get("text")
            if blob is not None:
                blob_fields = _fields(blob)
                data, mime = blob_fields.get("data"), blob_fields.get("mime_type")
                if isinstance(mime, str) and mime.startswith("audio/"):
                    output = True
                    if turn.first_audio_ns is None:
                        turn.first_audio_ns = now
                    if isinstance(data, bytes):
                        turn.audio_bytes_s += len(data) / _audio_bytes_per_s(mime)
            elif isinstance(text, str) and text:
                output = True
                if turn.first_text_ns is None:
                    turn.first_text_ns = now
                if tl.capture is not None:
                    common.append_output(tl, text)
        text = _fields(transcript).get("text")
        if isinstance(text, str) and text:
            output = True
            if turn.first_text_ns is None:
                turn.first_text_ns = now
            if tl.capture is not None:
                common.append_output(tl, text)
        if output:
            tl.output_token(now)
        if fields.get("generation_complete") and turn.generated_ns is None:
            turn.generated_ns = now
        if usage is not None:
            _read_usage(tl, usage)
        if fields.get("interrupted"):
            tl.extra[sc.FT_REALTIME_STATUS] = "interrupted"
            tl.finish_reasons[0] = "interrupted"
            self._finish(sc.END_CANCELLED, now)
        elif fields.get("turn_complete"):
            tl.terminal_seen = True
            tl.extra[sc.FT_REALTIME_STATUS] = "completed"
            reason = _value(fields.get("turn_complete_reason"))
            if isinstance(reason, str) and reason and reason != "TURN_COMPLETE_REASON_UNSPECIFIED":
                tl.extra[sc.FT_REALTIME_STATUS_REASON] = reason.lower()
                tl.finish_reasons[0] = reason.lower()
            else:
                tl.finish_reasons[0] = "completed"
            self._finish(sc.END_COMPLETED, now)

    def _tool_call(self, tool_call: Any, usage: Any, now: int) -> None:
        """The model calls the app's functions: its turn is over until the app answers them."""
        turn = self.turn or self._begin(now)
        tl = turn.tl
        tl.chunk_count += 1
        tl.last_chunk_ns = now
        tl.output_token(now)
        turn.first_tool_ns = turn.first_tool_ns or now
        calls = common.get(tool_call, "function_calls")
        tl.extra[sc.FT_REALTIME_TOOL_CALLS] = len(calls) if isinstance(calls, list) else 1
        tl.extra[sc.FT_REALTIME_STATUS] = "tool_call"
        tl.finish_reasons[0] = "tool_call"
        tl.terminal_seen = True
        if usage is not None:
            _read_usage(tl, usage)
        with self.lock:
            self.tools_called_ns = now
        self._finish(sc.END_COMPLETED, now)

    def _go_away(self, go_away: Any) -> None:
        attrs: dict[str, AttributeValue] = {}
        left = _seconds(common.get(go_away, "time_left"))
        if left is not None:
            attrs[sc.FT_REALTIME_GO_AWAY_TIME_LEFT] = left
        if len(self.events) < _MAX_EVENTS:
            self.events.append((time.time_ns(), sc.EVENT_REALTIME_GO_AWAY, attrs))

    def _finish(self, reason: str, now: int, error_type: str | None = None, message: str | None = None) -> None:
        turn, self.turn = self.turn, None
        if turn is None:
            return
        tl = turn.tl
        extra = tl.extra
        for key, mark in (
            (sc.FT_REALTIME_TIME_TO_FIRST_AUDIO, turn.first_audio_ns),
            (sc.FT_REALTIME_TIME_TO_FIRST_TEXT, turn.first_text_ns),
            (sc.FT_REALTIME_TIME_TO_FIRST_TOOL_CALL, turn.first_tool_ns),
            (sc.FT_REALTIME_TIME_TO_LAST_DELTA, tl.last_token_ns),
            (sc.FT_REALTIME_TIME_TO_GENERATION_COMPLETE, turn.generated_ns),
        ):
            if mark is not None:
                extra[key] = (mark - tl.start_ns) / 1e9
        if turn.audio_bytes_s:
            extra[sc.FT_REALTIME_AUDIO_DURATION] = turn.audio_bytes_s
        tl.finish(reason, now, error_type, message)

    # -- the end ---------------------------------------------------------------------------

    def end(
        self, reason: str, error_type: str | None = None, close_code: int | None = None, message: str | None = None
    ) -> None:
        """The websocket is over: end the turn still open (or, when the session failed, the turn
        handed off and not answered), then the session span. Once. ``message``: the close's reason."""
        with self.lock:
            if self.ended:
                return
            self.ended = True
            handoff, self.handoff = self.handoff, None
        now = time.perf_counter_ns()
        failed = reason in (sc.END_DROPPED, sc.END_ERROR)
        if self.turn is None and handoff is not None and failed:
            self.handoff = handoff
            self._begin(now).tl.first_chunk_ns = None  # answered by nothing
        if failed:
            self._finish(sc.END_ERROR, now, error_type or "error", message)
        else:
            self._finish(sc.END_CLOSED if reason != sc.END_ABANDONED else reason, now)
        facts = self.facts
        facts[sc.FT_END_REASON] = reason
        facts[sc.FT_REALTIME_RESPONSES] = self.turns
        if close_code is not None:
            facts[sc.FT_REALTIME_CLOSE_CODE] = close_code
        self.recorder.end_session(self.span, facts, self.events, error_type)


def _read_usage(tl: Timeline, usage: Any) -> None:
    """``usageMetadata``, as gemini.py reads a ``generateContent`` response's (snake_case here)."""
    prompt = common.get(usage, "prompt_token_count")
    if isinstance(prompt, int):
        tool_prompt = common.get(usage, "tool_use_prompt_token_count")
        tl.input_tokens = prompt + (tool_prompt if isinstance(tool_prompt, int) else 0)
    response = common.get(usage, "response_token_count")
    thoughts = common.get(usage, "thoughts_token_count")
    thoughts = thoughts if isinstance(thoughts, int) else 0
    if isinstance(response, int) or thoughts:
        tl.output_tokens = (response if isinstance(response, int) else 0) + thoughts
    if thoughts:
        tl.reasoning_tokens = thoughts
        tl.hidden_output_tokens = thoughts
    cached = common.get(usage, "cached_content_token_count")
    if isinstance(cached, int):
        tl.cache_read_tokens = cached
    for details, modality, key in _USAGE_BY_MODALITY:
        for count in common.get(usage, details) or ():
            tokens = common.get(count, "token_count")
            if _value(common.get(count, "modality")) == modality and isinstance(tokens, int):
                tl.extra[key] = tokens


def _abandoned(session: _Session) -> None:
    """The SDK's session was collected unclosed (a finalizer: it must not raise)."""
    try:
        session.end(sc.END_ABANDONED)
    except Exception:
        internal_error("ending an abandoned Gemini Live session failed")


# -- the hooks -------------------------------------------------------------------------------


class GeminiLiveHooks:
    """The wrappers, sharing one recorder; sessions are found by the SDK's session object (weakly)."""

    def __init__(self, recorder: Recorder, provider_of: common.ProviderResolver) -> None:
        self.recorder = recorder
        self.provider_of = provider_of
        self.sessions: weakref.WeakKeyDictionary[Any, _Session] = weakref.WeakKeyDictionary()

    def connect(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        manager = wrapped(*args, **kwargs)
        try:
            where = self._where(instance, kwargs)
        except Exception:
            internal_error("reading a Gemini Live connect() failed")
            return manager
        return self._observed(manager, where)

    def _where(self, live: Any, kwargs: dict[str, Any]) -> tuple[str, str | None, str | None, int | None]:
        """(provider, model, host, port) of a ``connect()``: the session's own base URL, else the client's."""
        client = live._api_client
        model = kwargs.get("model")
        model = (model.removeprefix("models/") or None) if isinstance(model, str) else None
        config = kwargs.get("config")
        http = config.get("http_options") if isinstance(config, dict) else common.get(config, "http_options")
        base = (http.get("base_url") if isinstance(http, dict) else common.get(http, "base_url")) or common.get(
            client._http_options, "base_url"
        )
        parts = urlsplit(str(base or ""))
        host = parts.hostname
        port = parts.port or (443 if host else None)
        default = "gcp.vertex_ai" if client.vertexai else "gcp.gemini"
        return self.provider_of(host, default), model, host, port

    @contextlib.asynccontextmanager
    async def _observed(
        self, manager: Any, where: tuple[str, str | None, str | None, int | None]
    ) -> AsyncIterator[Any]:
        """The SDK's manager, entered and exited inside this one: the app gets the SDK's session."""
        session = self._begin(where)
        entered = False
        try:
            async with manager as live:
                entered = True
                self._entered(session, live)
                yield live
        except BaseException as exc:
            if not entered:
                self._failed(session, exc)
            raise
        finally:
            self._end(session, sc.END_CLOSED)

    def _begin(self, where: tuple[str, str | None, str | None, int | None]) -> _Session | None:
        try:
            return _Session(self.recorder, *where)
        except Exception:
            internal_error("starting a Gemini Live session failed")
            return None

    def _entered(self, session: _Session | None, live: Any) -> None:
        if session is None:
            return
        try:
            session.opened()
            self.sessions[live] = session
            weakref.finalize(live, _abandoned, session)
        except Exception:
            internal_error("opening a Gemini Live session failed")

    @staticmethod
    def _failed(session: _Session | None, exc: BaseException) -> None:
        """Connecting failed (the app gets its exception, never one of ours)."""
        if session is None:
            return
        try:
            if is_cancellation(exc):
                session.end(sc.END_CANCELLED)
            else:
                code = getattr(exc, "code", None)
                session.end(sc.END_ERROR, str(code) if isinstance(code, int) else type(exc).__qualname__)
        except Exception:
            internal_error("ending a Gemini Live session failed")

    @staticmethod
    def _end(session: _Session | None, reason: str) -> None:
        if session is not None:
            try:
                session.end(reason)
            except Exception:
                internal_error("ending a Gemini Live session failed")

    # -- the session's methods -------------------------------------------------------------

    def _handed_off(self, instance: Any, source: str | None) -> None:
        if source is None:
            return
        session = self.sessions.get(instance)
        if session is not None:
            try:
                session.hand_off(source, time.perf_counter_ns())
            except Exception:
                internal_error("reading a Gemini Live client message failed")

    async def send_client_content(
        self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        self._handed_off(instance, "client_content" if kwargs.get("turn_complete", True) else None)
        return await wrapped(*args, **kwargs)

    async def send_realtime_input(
        self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        # Not audio_stream_end: the microphone turned off need not end a turn, and a hand-off left
        # pending would start the clock of a turn much later.
        self._handed_off(instance, "activity_end" if kwargs.get("activity_end") is not None else None)
        return await wrapped(*args, **kwargs)

    async def send_tool_response(
        self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        self._handed_off(instance, "tool_response")
        return await wrapped(*args, **kwargs)

    async def send(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The deprecated ``send(input=..., end_of_turn=...)``: a turn handed off when it ends one."""
        self._handed_off(instance, "client_content" if kwargs.get("end_of_turn") else None)
        return await wrapped(*args, **kwargs)

    async def receive(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            message = await wrapped(*args, **kwargs)
        except BaseException as exc:
            self._receive_failed(instance, exc)
            raise
        session = self.sessions.get(instance)
        if session is not None and not session.ended:
            try:
                session.received(message, time.perf_counter_ns())
            except Exception:
                internal_error("reading a Gemini Live message failed")
        return message

    def _receive_failed(self, instance: Any, exc: BaseException) -> None:
        """The websocket closed: google-genai 1.x lets websockets' ``ConnectionClosed`` through, later
        ones raise their ``APIError`` from it (with its close code, 1006 when no close frame came)."""
        session = self.sessions.get(instance)
        if session is None or session.ended or is_cancellation(exc):
            return
        try:
            from websockets.exceptions import ConnectionClosed  # google.genai.live imported it

            closed = exc if isinstance(exc, ConnectionClosed) else exc.__context__
            if not isinstance(closed, ConnectionClosed):
                return  # not the socket's end (a message it could not parse, say)
            code = closed.rcvd.code if closed.rcvd is not None else _NO_CLOSE_FRAME
            if code in _CLEAN_CLOSES:
                session.end(sc.END_CLOSED, close_code=code)
            elif code == _NO_CLOSE_FRAME:
                session.end(sc.END_DROPPED, str(code), code)
            else:
                session.end(sc.END_ERROR, str(code), code, closed.rcvd.reason if closed.rcvd is not None else None)
        except Exception:
            internal_error("ending a Gemini Live session failed")

    async def close(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            return await wrapped(*args, **kwargs)
        finally:
            self._end(self.sessions.get(instance), sc.END_CLOSED)


def patch(patches: Patches, recorder: Recorder, provider_of: common.ProviderResolver) -> bool:
    """Wrap google-genai's Live API, just imported (``google.genai.live``)."""
    hooks = GeminiLiveHooks(recorder, provider_of)
    mark = len(patches)
    ok = all(
        [
            patches.wrap(_MODULE, "AsyncLive.connect", hooks.connect),
            patches.wrap(_MODULE, "AsyncSession._receive", hooks.receive),
            patches.wrap(_MODULE, "AsyncSession.send_client_content", hooks.send_client_content),
            patches.wrap(_MODULE, "AsyncSession.send_realtime_input", hooks.send_realtime_input),
            patches.wrap(_MODULE, "AsyncSession.send_tool_response", hooks.send_tool_response),
            patches.wrap(_MODULE, "AsyncSession.send", hooks.send),
            patches.wrap(_MODULE, "AsyncSession.close", hooks.close),
        ]
    )
    if not ok:
        patches.unwrap_to(mark)
    return ok
