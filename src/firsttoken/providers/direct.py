"""LLM calls read on the wire: sent with plain httpx, httpx2 or aiohttp (no SDK, or an SDK firsttoken
does not patch: google-genai, cohere, mistralai, groq), to an endpoint of a known wire format.

This module owns no wire format. Each provider module owns its format once (a
:class:`~firsttoken.providers._hooks.WireFormat`: paths, request reading, result and stream-event
reading, the terminal and the error event), used by its SDK hooks too; :data:`FORMATS` is the
registry. A call is opened exactly as the SDK hooks open theirs (:func:`._hooks.open_call`): the
same capture, chunk gaps, prefix hash, client reuse, traffic class, conversation and action.

The HTTP client adapters (:mod:`firsttoken.transport` for httpx, :mod:`firsttoken.transport_aiohttp`)
hand over a :class:`~firsttoken.transport.WireRequest`, then the status and body bytes; a streamed
SSE body is read as it passes through (first and last token, usage, the terminal or error event).
"""

from __future__ import annotations

import gzip
import json
import logging
import time
from collections.abc import Mapping
from typing import Any

from .. import semconv as sc
from .._internal import internal_error
from ..recorder import Recorder
from ..streams import ERROR_EVENT, end_on_exception, error_type_for_status
from ..timeline import CallStart, Timeline
from ..transport import WireRequest
from . import _common as common
from . import anthropic, bedrock, cohere, gemini, openai
from ._hooks import EVENT_END, EVENT_ERROR, CallDescription, StreamState, WireFormat, open_call

log = logging.getLogger("firsttoken")

FORMATS: tuple[WireFormat, ...] = (anthropic.FORMAT, openai.FORMAT, gemini.FORMAT, cohere.FORMAT, bedrock.FORMAT)
"""The wire formats read on the wire, the most specific paths first: one row per format."""
_BY_FAMILY = {f.family: f for f in FORMATS}


def classify(request: WireRequest) -> tuple[WireFormat, str, str | None] | None:
    """(format, operation, api type) of an LLM API request, else None. Cheap for any request."""
    if request.method != "POST":
        return None
    path = request.path.rstrip("/")
    for fmt in FORMATS:
        found = fmt.match(path)
        if found is not None:
            return fmt, found[0], found[1]
    return None


def _body(request: WireRequest) -> Mapping[str, Any]:
    if request.json is not None:
        return request.json if isinstance(request.json, Mapping) else {}
    raw = request.content
    if raw is None:  # a streaming request body: nothing to read up front
        return {}
    try:
        if request.headers.get("content-encoding", "").lower() == "gzip":
            raw = gzip.decompress(raw)
        kind = request.headers.get("content-type", "")
        if "msgpack" in kind:
            import msgpack  # type: ignore[import-not-found]  # only if the app sends msgpack

            value = msgpack.unpackb(raw)
        else:
            value = json.loads(raw)
    except (ValueError, OSError, EOFError, ImportError):  # not gzip, JSON or msgpack after all
        return {}
    return value if isinstance(value, Mapping) else {}


def _sdk_provider(request: WireRequest) -> str | None:
    """The provider an SDK is made for, from its User-Agent: the name when the host says nothing."""
    agent = request.headers.get("user-agent", "").lower()
    if agent.startswith("mistral-client-python/"):  # mistralai 1.x to 3.x
        return "mistral_ai"
    if agent.startswith(("groq/python", "asyncgroq/python")):
        return "groq"
    return None


def start(
    recorder: Recorder, provider_of: common.ProviderResolver, request: WireRequest, call_start: CallStart | None = None
) -> tuple[Timeline, str] | None:
    """Open the call of an LLM API request read on the wire: (timeline, API family); it starts at
    ``call_start`` when the client adapter stamped the app's call to the client's method, else now."""
    kind = classify(request)
    if kind is None:
        return None
    fmt, operation, api_type = kind
    body = _body(request)
    what: CallDescription = fmt.describe(request.path, body, body.get("stream") is True, operation, api_type)
    default = _sdk_provider(request) or fmt.default_provider(request.path)
    endpoint = provider_of.endpoint(request.host, request.port, default, request.path)
    server = (request.host, request.port, endpoint)
    return open_call(recorder, what, server, request.client, recorder.finish, call_start), fmt.family


class SseReader:
    """Incremental SSE parsing of raw body bytes as the app reads them, through one wire format."""

    __slots__ = ("_buffer", "_error_next", "done", "fmt", "state", "tl")

    def __init__(self, tl: Timeline, fmt: WireFormat) -> None:
        self.tl = tl
        self.fmt = fmt
        self.state = StreamState()
        self._buffer = b""
        self._error_next = False
        """An ``event: error`` line came: its data is an error, whatever it holds (Groq's)."""
        self.done = False
        """Whether the stream's last event has been seen (or it failed): nothing more to read. The
        terminal event sets ``Timeline.terminal_seen`` too, as a Chat Completions chunk finishing
        every choice does, where a usage chunk and ``[DONE]`` may follow."""

    def feed(self, chunk: bytes) -> None:
        if not chunk or self.done:
            return
        try:
            now = time.perf_counter_ns()
            self._buffer += chunk
            *lines, self._buffer = self._buffer.split(b"\n")
            for line in lines:
                if line.startswith(b"event:"):
                    self._error_next = line[6:].strip() == b"error"
                    continue
                if not line.startswith(b"data:"):
                    continue
                self._data(line[5:].strip(), now)
                if self.done:
                    return
        except Exception:
            internal_error("reading a streamed body on the wire failed")

    def _data(self, payload: bytes, now: int) -> None:
        tl = self.tl
        if self._error_next:
            self._error()
            return
        if payload == b"[DONE]":
            self.done = tl.terminal_seen = True
            return
        try:
            event = json.loads(payload)
        except ValueError:  # not JSON: an event this reader does not know
            return
        if isinstance(event, Mapping):
            self.read(event, now)

    def event(self, event: Mapping[str, Any]) -> None:
        """One event of a stream its client parsed itself (botocore's event stream), read as an SSE one."""
        if self.done:
            return
        try:
            self.read(event, time.perf_counter_ns())
        except Exception:
            internal_error("reading a streamed event on the wire failed")

    def read(self, event: Mapping[str, Any], now: int) -> None:
        tl = self.tl
        if tl.first_chunk_ns is None:
            tl.first_chunk_ns = now
        elif tl.chunk_gaps is not None and tl.last_chunk_ns is not None:
            tl.chunk_gaps.append(now - tl.last_chunk_ns)
        tl.last_chunk_ns = now
        seen = self.fmt.read_event(tl, event, now, self.state)
        if seen == EVENT_ERROR:
            self._error()
            return
        tl.chunk_count += 1
        if seen == EVENT_END:
            self.done = tl.terminal_seen = True

    def _error(self) -> None:
        """An error event inside the stream: the call ends with an error now, as the SDKs raise."""
        self.done = True
        self.tl.finish(sc.END_ERROR, time.perf_counter_ns(), ERROR_EVENT)

    def fail(self, exc: BaseException) -> None:
        """The body failed while it was read (connection dropped, timeout, cancellation)."""
        self.done = True
        end_on_exception(self.tl, exc)


def finish_whole(tl: Timeline, family: str, status: int, content: bytes | None, end_ns: int | None = None) -> None:
    """A non-streamed body that has been read (``content``, None when the app did not read it): its
    usage, then the end of the call."""
    if status >= 400:
        tl.finish(sc.END_ERROR, end_ns, error_type_for_status(status))
        return
    try:
        data = json.loads(content) if content else None
    except ValueError:  # not JSON: nothing to read
        data = None
    try:
        if isinstance(data, Mapping):
            _BY_FAMILY[family].read_result(tl, data)
    except Exception:
        internal_error("reading a whole body on the wire failed")
    tl.finish(sc.END_COMPLETED, end_ns)


class DirectCalls:
    """Calls read on the wire, for the client adapters (the ``transport.DirectCalls`` protocol)."""

    def __init__(self, recorder: Recorder, provider_of: common.ProviderResolver) -> None:
        self.recorder = recorder
        self.provider_of = provider_of

    def start(self, request: WireRequest, call_start: CallStart | None = None) -> tuple[Timeline, str] | None:
        return start(self.recorder, self.provider_of, request, call_start)

    def finish_whole(
        self, tl: Timeline, family: str, status: int, content: bytes | None, end_ns: int | None = None
    ) -> None:
        finish_whole(tl, family, status, content, end_ns)

    def sse_reader(self, tl: Timeline, family: str) -> SseReader:
        return SseReader(tl, _BY_FAMILY[family])
