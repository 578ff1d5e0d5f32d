"""LLM calls made with plain ``httpx`` (no SDK, or an SDK firsttoken does not patch): a POST to an
OpenAI-, Anthropic- or Gemini-style endpoint (``google-genai`` is measured this way).

Apps that talk to an LLM API directly (to send a compressed or binary body, say) are measured too:
the call span starts when ``Client.send`` is called, the wire phases come from the same trace
events, a streamed SSE body is read as it passes through the transport (first and last token,
usage), and a whole body is read once it has arrived. Any other request is left alone.
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
from ..context import CONVERSATION_ID, CURRENT_ACTION, TRAFFIC_CLASS
from ..recorder import Recorder
from ..timeline import Timeline
from ..transport import WireRequest
from . import _common as common
from . import _levers as levers
from . import anthropic as anthropic_hooks
from . import cohere, endpoints, gemini, server_timing
from . import openai as openai_hooks

log = logging.getLogger("firsttoken")

# (path suffix, operation, API family, openai.api.type); the most specific first.
_ENDPOINTS = (
    ("/v1/messages", sc.OP_CHAT, "anthropic", None),
    ("/chat/completions", sc.OP_CHAT, "openai", "chat_completions"),
    ("/responses", sc.OP_CHAT, "openai", "responses"),
    ("/completions", sc.OP_TEXT_COMPLETION, "openai", None),
    ("/embeddings", sc.OP_EMBEDDINGS, "openai", None),
)


def classify(request: WireRequest) -> tuple[str, str, str | None] | None:
    """(operation, API family, api type) of an LLM API request, else None. Cheap for any request."""
    if request.method != "POST":
        return None
    path = request.path.rstrip("/")
    for suffix, operation, family, api_type in _ENDPOINTS:
        if path.endswith(suffix):
            return operation, family, api_type
    if path.endswith((gemini.GENERATE, gemini.STREAM)):
        return sc.OP_GENERATE_CONTENT, GEMINI, None
    if path.endswith(cohere.CHAT_PATH):
        return sc.OP_CHAT, COHERE, None
    return None


COHERE = "cohere"
"""The API family of Cohere's v2 Chat API (``/v2/chat``); also the provider name the conventions give it."""


GEMINI = "gemini"
"""The API family of Gemini's native ``models/*:generateContent``."""


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
    recorder: Recorder, provider_of: common.ProviderResolver, request: WireRequest
) -> tuple[Timeline, str] | None:
    """Start the call of an LLM API request sent without an SDK hook: (timeline, API family)."""
    kind = classify(request)
    if kind is None:
        return None
    operation, family, api_type = kind
    body = _body(request)
    host = request.host
    port = request.port
    model = body.get("model")
    stream = body.get("stream") is True
    default = _sdk_provider(request) or family
    if family == GEMINI:  # the model and the streaming are in the path
        found = gemini.match(request.path.rstrip("/"))
        model, stream = found if found is not None else (None, False)
        default = gemini.provider_default(request.path)
    endpoint = provider_of.endpoint(host, port, default, request.path)
    tl = Timeline(
        provider=endpoint.provider,
        operation=operation,
        request_model=model if isinstance(model, str) else None,
        server_address=host,
        server_port=port,
        stream=stream,
        on_finish=recorder.finish,
    )
    if family == GEMINI:
        _read_gemini_request(tl, body)
    tl.api_type = api_type
    tl.endpoint = endpoint
    tl.extra[sc.FT_PROVIDER_SOURCE] = endpoint.source
    tl.traffic_class = TRAFFIC_CLASS.get()
    tl.conversation_id = CONVERSATION_ID.get()
    if tl.conversation_id is not None:
        tl.conversation_turn = levers.conversation_turn(tl.conversation_id)
    tl.action = CURRENT_ACTION.get()
    recorder.start(tl)
    return tl, family


# -- reading what comes back -------------------------------------------------------------------


def _read_gemini_request(tl: Timeline, body: Mapping[str, Any]) -> None:
    config = body.get("generationConfig")
    if isinstance(config, Mapping):
        limit = config.get("maxOutputTokens")
        if isinstance(limit, int):
            tl.extra[sc.GEN_AI_REQUEST_MAX_TOKENS] = limit
        temperature = config.get("temperature")
        if isinstance(temperature, (int, float)) and not isinstance(temperature, bool):
            tl.extra[sc.GEN_AI_REQUEST_TEMPERATURE] = float(temperature)


def _read_whole(tl: Timeline, data: Mapping[str, Any], family: str) -> None:
    if family == GEMINI:
        gemini.read_response(tl, data)
    elif family == COHERE:
        cohere.read_result(tl, data)
    elif family == "anthropic":
        anthropic_hooks.read_result(tl, data)
    else:
        openai_hooks.read_result(tl, data)


def _observe_event(tl: Timeline, family: str, event: Mapping[str, Any], now: int) -> bool:
    """One parsed SSE event; returns whether it was the stream's terminal event."""
    if family == COHERE:
        return cohere.read_event(tl, event, now)
    kind = event.get("type")
    if family == "anthropic":
        if kind == "content_block_delta":
            tl.output_token(now)
        elif kind == "message_start":
            anthropic_hooks.read_message(tl, event.get("message") or {})
            endpoints.refine(tl)
        elif kind == "message_delta":
            reason = (event.get("delta") or {}).get("stop_reason")
            if reason:
                tl.finish_reasons[0] = reason
            anthropic_hooks.read_usage(tl, event.get("usage"))
        return kind == "message_stop"
    if isinstance(kind, str):  # Responses API events
        if kind.endswith(".delta"):
            tl.output_token(now)
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            response = event.get("response") or {}
            openai_hooks.read_identity(tl, response)
            openai_hooks.read_usage(tl, response.get("usage"))
            endpoints.refine(tl, response)
            reason = openai_hooks.responses_finish_reason(response)
            if reason:
                tl.finish_reasons[0] = reason
            return True
        return False
    produced = False
    final = not event.get("choices")
    for choice in event.get("choices") or ():
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("tool_calls") or delta.get("refusal") or delta.get("reasoning_content"):
            produced = True
        if choice.get("text"):
            produced = True
        if choice.get("finish_reason"):
            tl.finish_reasons[choice.get("index", 0)] = choice["finish_reason"]
            final = True
    if produced:
        tl.output_token(now)
    if event.get("usage"):
        openai_hooks.read_usage(tl, event["usage"])
    if tl.response_id is None:
        openai_hooks.read_identity(tl, event)
    server_timing.read(tl, event)
    if final:
        endpoints.refine(tl, event)
    return False


class SseReader:
    """Incremental SSE parsing of raw body bytes as the app reads them."""

    __slots__ = ("_buffer", "_thoughts", "done", "family", "tl")

    def __init__(self, tl: Timeline, family: str) -> None:
        self.tl = tl
        self.family = family
        self._buffer = b""
        self._thoughts = False
        """Gemini: whether thought parts were streamed (then thinking tokens are not hidden output)."""
        self.done = False

    def feed(self, chunk: bytes) -> None:
        if not chunk:
            return
        try:
            now = time.perf_counter_ns()
            self._buffer += chunk
            *lines, self._buffer = self._buffer.split(b"\n")
            for line in lines:
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                tl = self.tl
                if tl.first_chunk_ns is None:
                    tl.first_chunk_ns = now
                tl.last_chunk_ns = now
                if payload == b"[DONE]":
                    self.done = True
                    continue
                tl.chunk_count += 1
                try:
                    event = json.loads(payload)
                except ValueError:  # not JSON: an event this reader does not know
                    continue
                if not isinstance(event, Mapping):
                    continue
                if self.family == GEMINI:
                    seen = gemini.read_response(tl, event, now, thoughts=self._thoughts)
                    self._thoughts = bool(seen & gemini.THOUGHTS)
                    if seen & gemini.FINISHED:
                        self.done = True
                elif _observe_event(tl, self.family, event, now):
                    self.done = True
        except Exception:
            internal_error("reading a direct SSE stream failed")


def finish_whole(tl: Timeline, family: str, status: int, content: bytes | None, end_ns: int | None = None) -> None:
    """A non-streamed body that has been read (``content``, None when the app did not read it): its
    usage, then the end of the call."""
    try:
        data = json.loads(content) if content else None
    except ValueError:  # not JSON: nothing to read
        data = None
    try:
        if isinstance(data, Mapping) and status < 400:
            _read_whole(tl, data, family)
    except Exception:
        internal_error("reading a direct response failed")
    if status >= 400:  # the HTTP conventions' error.type for a status error
        tl.finish(sc.END_ERROR, end_ns, error_type=str(status))
    else:
        tl.finish(sc.END_COMPLETED, end_ns)


class DirectCalls:
    """Plain-httpx LLM calls, for :func:`firsttoken.transport.patch` (its ``DirectCalls`` protocol)."""

    def __init__(self, recorder: Recorder, provider_of: common.ProviderResolver) -> None:
        self.recorder = recorder
        self.provider_of = provider_of

    def start(self, request: WireRequest) -> tuple[Timeline, str] | None:
        return start(self.recorder, self.provider_of, request)

    def finish_whole(
        self, tl: Timeline, family: str, status: int, content: bytes | None, end_ns: int | None = None
    ) -> None:
        finish_whole(tl, family, status, content, end_ns)

    def sse_reader(self, tl: Timeline, family: str) -> SseReader:
        return SseReader(tl, family)
