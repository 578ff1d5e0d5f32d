"""The official ``openai`` SDK: every chat, responses, completions and embeddings call.

Class-level patches catch every way an app can reach those APIs (``create``, ``parse``, the
``stream()`` helpers, ``with_raw_response``, ``with_streaming_response``, sync and async):

* the public methods stamp the moment the app called them: the call's start;
* ``SyncAPIClient.request`` / ``AsyncAPIClient.request``, the SDK's chokepoint, start the call span
  and end a non-streamed call (:mod:`firsttoken.providers._hooks`);
* ``Stream.__stream__`` / ``AsyncStream.__stream__``, the generator under every SSE stream, are
  swapped for an observer (:mod:`firsttoken.streams`) that stamps the first and last token.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from .. import semconv as sc
from .._patch import Patches
from ..recorder import Recorder
from ..streams import ERROR_EVENT, Observer
from ..timeline import Timeline
from . import _common as common
from . import _levers as levers
from . import endpoints, server_timing
from ._hooks import EVENT_END, EVENT_ERROR, EVENT_MORE, CallDescription, CallHooks, StreamState, WireFormat

log = logging.getLogger("firsttoken")

SUPPORTED = ">=3.0,<4"
"""The openai versions firsttoken is tested with."""

_streaming: ModuleType  # openai._streaming, imported when patching

_API_CHAT = "chat_completions"
_API_RESPONSES = "responses"


def _classify(options: Any) -> tuple[str, str | None] | None:
    """(operation, openai.api.type) of an SDK request for the endpoints we measure, else None."""
    if str(getattr(options, "method", "")).lower() != "post":
        return None
    return match(str(getattr(options, "url", "")).split("?", 1)[0].rstrip("/"))


def match(path: str) -> tuple[str, str | None] | None:
    """(operation, openai.api.type) of a POST to ``path``, else None."""
    if path.endswith("/chat/completions"):
        return sc.OP_CHAT, _API_CHAT
    if path.endswith("/responses"):
        return sc.OP_CHAT, _API_RESPONSES
    if path.endswith("/completions"):
        return sc.OP_TEXT_COMPLETION, None
    if path.endswith("/embeddings"):
        return sc.OP_EMBEDDINGS, None
    return None


def _request_attributes(body: Mapping[str, Any]) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    for key in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        if isinstance(body.get(key), int):
            attrs[sc.GEN_AI_REQUEST_MAX_TOKENS] = body[key]
            break
    for key, attr in (
        ("temperature", sc.GEN_AI_REQUEST_TEMPERATURE),
        ("top_p", sc.GEN_AI_REQUEST_TOP_P),
        ("frequency_penalty", sc.GEN_AI_REQUEST_FREQUENCY_PENALTY),
        ("presence_penalty", sc.GEN_AI_REQUEST_PRESENCE_PENALTY),
    ):
        value = body.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            attrs[attr] = float(value)
    if isinstance(body.get("seed"), int):
        attrs[sc.GEN_AI_REQUEST_SEED] = body["seed"]
    n = body.get("n")
    if isinstance(n, int) and n != 1:
        attrs[sc.GEN_AI_REQUEST_CHOICE_COUNT] = n
    stop = body.get("stop")
    if isinstance(stop, str):
        attrs[sc.GEN_AI_REQUEST_STOP_SEQUENCES] = [stop]
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        attrs[sc.GEN_AI_REQUEST_STOP_SEQUENCES] = list(stop)
    fmt = body.get("response_format")
    if isinstance(fmt, Mapping):
        kind = fmt.get("type")
        if kind in ("json_object", "json_schema"):
            attrs[sc.GEN_AI_OUTPUT_TYPE] = "json"
        elif kind == "text":
            attrs[sc.GEN_AI_OUTPUT_TYPE] = "text"
    text = body.get("text")
    if isinstance(text, Mapping) and isinstance(text.get("format"), Mapping):
        kind = text["format"].get("type")
        attrs[sc.GEN_AI_OUTPUT_TYPE] = "json" if kind in ("json_object", "json_schema") else "text"
    tier = body.get("service_tier")
    if isinstance(tier, str) and tier != "auto":
        attrs[sc.OPENAI_REQUEST_SERVICE_TIER] = tier
    fmt_enc = body.get("encoding_format")
    if isinstance(fmt_enc, str):
        attrs[sc.GEN_AI_REQUEST_ENCODING_FORMATS] = [fmt_enc]
    return attrs


def _input_content(operation: str, api_type: str | None, body: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    if api_type == _API_RESPONSES:
        if body.get("instructions") is not None:
            out[sc.GEN_AI_SYSTEM_INSTRUCTIONS] = common.to_json(body["instructions"])
        if body.get("input") is not None:
            out[sc.GEN_AI_INPUT_MESSAGES] = common.to_json(body["input"])
    elif operation == sc.OP_CHAT and body.get("messages") is not None:
        out[sc.GEN_AI_INPUT_MESSAGES] = common.to_json(body["messages"])
    elif operation == sc.OP_TEXT_COMPLETION and body.get("prompt") is not None:
        out[sc.GEN_AI_INPUT_MESSAGES] = common.to_json(body["prompt"])
    return out


def _prefix(api_type: str | None, body: Mapping[str, Any]) -> tuple[Any, ...]:
    """The part of the prompt a provider can cache across calls: instructions and tools."""
    tools = body.get("tools")
    if api_type == _API_RESPONSES:
        instructions = body.get("instructions")
        return () if instructions is None and tools is None else (instructions, tools)
    return levers.chat_prefix(body.get("messages"), tools)


# -- reading results (models or, for raw responses, plain dicts) -----------------------------

g = common.get


def read_usage(tl: Timeline, usage: Any) -> None:
    if usage is None:
        return
    prompt = g(usage, "prompt_tokens")
    if prompt is None:
        prompt = g(usage, "input_tokens")
    completion = g(usage, "completion_tokens")
    if completion is None:
        completion = g(usage, "output_tokens")
    if isinstance(prompt, int):
        tl.input_tokens = prompt
    if isinstance(completion, int):
        tl.output_tokens = completion
    details = g(usage, "prompt_tokens_details") or g(usage, "input_tokens_details")
    cached = g(details, "cached_tokens")
    if isinstance(cached, int):
        tl.cache_read_tokens = cached
    written = g(details, "cache_write_tokens")
    if isinstance(written, int):
        tl.cache_creation_tokens = written
    out_details = g(usage, "completion_tokens_details") or g(usage, "output_tokens_details")
    reasoning = g(out_details, "reasoning_tokens")
    if isinstance(reasoning, int):
        tl.reasoning_tokens = reasoning
        # OpenAI never streams reasoning tokens: they are spent before the first visible token.
        tl.hidden_output_tokens = reasoning


def read_identity(tl: Timeline, obj: Any) -> None:
    rid = g(obj, "id")
    if isinstance(rid, str) and rid:
        tl.response_id = rid
    model = g(obj, "model")
    if isinstance(model, str) and model:
        tl.response_model = model
    tier = g(obj, "service_tier")
    if isinstance(tier, str):
        tl.extra[sc.OPENAI_RESPONSE_SERVICE_TIER] = tier
    fingerprint = g(obj, "system_fingerprint")
    if isinstance(fingerprint, str):
        tl.extra[sc.OPENAI_RESPONSE_SYSTEM_FINGERPRINT] = fingerprint


def responses_finish_reason(response: Any) -> str | None:
    status = g(response, "status")
    if status == "completed":
        for item in g(response, "output") or ():
            if g(item, "type") == "function_call":
                return "tool_calls"
        return "stop"
    if status == "incomplete":
        reason = g(g(response, "incomplete_details"), "reason")
        return "length" if reason == "max_output_tokens" else str(reason or "incomplete")
    if status in ("failed", "cancelled"):
        return "error" if status == "failed" else "cancelled"
    return None


def base64_float32_count(encoded: str) -> int | None:
    """How many float32 values a base64 embedding holds (``encoding_format="base64"``, which the
    SDK asks for by default and which raw responses keep), from its length alone: nothing decoded,
    nothing kept. None for a string that is not whole base64 of whole float32s."""
    length = len(encoded)
    if length == 0 or length % 4:
        return None
    size = length // 4 * 3 - (2 if encoded.endswith("==") else 1 if encoded.endswith("=") else 0)
    return size // 4 if size % 4 == 0 else None


def read_result(tl: Timeline, result: Any) -> None:
    """Facts from a whole (non-streamed) result of any of the four APIs."""
    read_identity(tl, result)
    read_usage(tl, g(result, "usage"))
    server_timing.read(tl, result)
    endpoints.refine(tl, result)
    if tl.api_type == _API_RESPONSES:
        reason = responses_finish_reason(result)
        if reason:
            tl.finish_reasons[0] = reason
        if tl.capture is not None and g(result, "output") is not None:
            tl.capture[sc.GEN_AI_OUTPUT_MESSAGES] = common.to_json(g(result, "output"))
        return
    if tl.operation == sc.OP_EMBEDDINGS:
        data = g(result, "data") or ()
        first = g(data[0], "embedding") if data else None
        if isinstance(first, list):
            tl.embedding_dimensions = len(first)
        elif isinstance(first, str):
            dimensions = base64_float32_count(first)
            if dimensions is not None:
                tl.embedding_dimensions = dimensions
        return
    choices = g(result, "choices") or ()
    for position, choice in enumerate(choices):
        reason = g(choice, "finish_reason")
        index = g(choice, "index")
        if reason is not None:
            tl.finish_reasons[index if isinstance(index, int) else position] = str(reason)
    if tl.capture is not None and choices:
        outputs = [g(c, "message") if tl.operation == sc.OP_CHAT else g(c, "text") for c in choices]
        tl.capture[sc.GEN_AI_OUTPUT_MESSAGES] = common.to_json(outputs)


# -- streamed items --------------------------------------------------------------------------


def _delta_has_output(delta: Any) -> bool:
    # ChoiceDelta.audio is a field from openai 3.25; before, it is an attribute only when sent. groq's
    # ChoiceDelta has no refusal.
    if delta.content or delta.tool_calls or delta.function_call or getattr(delta, "refusal", None):
        return True
    if getattr(delta, "audio", None):
        return True
    extra = delta.model_extra
    return bool(extra and (extra.get("reasoning_content") or extra.get("reasoning")))


def _all_finished(tl: Timeline) -> bool:
    """Whether every choice the request asked for (``n``) has its finish reason: the answer's end,
    the terminal event of a Chat Completions or Completions stream (a usage chunk and ``[DONE]``
    may follow, but a stream closed from here on completed)."""
    asked = tl.request.get(sc.GEN_AI_REQUEST_CHOICE_COUNT)
    return len(tl.finish_reasons) >= (asked if isinstance(asked, int) and asked > 1 else 1)


def observe_chat_chunk(tl: Timeline, chunk: Any, now: int) -> None:
    choices = chunk.choices
    # Almost every chunk: one choice with text and nothing else to read.
    if len(choices) == 1 and tl.response_id is not None and tl.capture is None and chunk.usage is None:
        choice = choices[0]
        delta = choice.delta
        if choice.finish_reason is None and delta is not None and delta.content:
            # Timeline.output_token, written out: this runs for nearly every chunk.
            if tl.first_token_ns is None:
                tl.first_token_ns = now
            tl.last_token_ns = now
            tl.token_chunk_count += 1
            return
    final = not choices
    if choices:
        produced = False
        for choice in choices:
            delta = choice.delta
            if not produced and delta is not None and _delta_has_output(delta):
                produced = True
                if tl.capture is not None and delta.content:
                    common.append_output(tl, delta.content)
            if choice.finish_reason is not None:
                tl.finish_reasons[choice.index] = choice.finish_reason
                final = True
        if produced:
            tl.output_token(now)
        if final and _all_finished(tl):
            tl.terminal_seen = True
    usage = chunk.usage
    if usage is not None:
        read_usage(tl, usage)
    if final:
        if chunk.model_extra:  # provider timing rides on the last chunks (Groq, Cerebras, llama.cpp)
            server_timing.read(tl, chunk)
        endpoints.refine(tl, chunk)
    if tl.response_id is None:  # the first chunk (or one of a server that sends no id)
        read_identity(tl, chunk)
        if _unasked:
            _check_usage_unasked(tl)


def observe_completion_chunk(tl: Timeline, chunk: Any, now: int) -> None:
    choices = chunk.choices
    if choices:
        produced = False
        for choice in choices:
            if choice.text:
                if not produced and tl.capture is not None:
                    common.append_output(tl, choice.text)
                produced = True
            if choice.finish_reason is not None:
                tl.finish_reasons[choice.index] = choice.finish_reason
                tl.terminal_seen = _all_finished(tl)
        if produced:
            tl.output_token(now)
    usage = chunk.usage
    if usage is not None:
        read_usage(tl, usage)
    if tl.response_id is None:  # the first chunk (or one of a server that sends no id)
        read_identity(tl, chunk)
        if _unasked:
            _check_usage_unasked(tl)


_RESPONSE_OUTPUT_EVENTS = frozenset(
    {
        "response.output_text.delta",
        "response.refusal.delta",
        "response.reasoning_text.delta",
        "response.reasoning_summary_text.delta",
        "response.function_call_arguments.delta",
        "response.custom_tool_call_input.delta",
        "response.code_interpreter_call_code.delta",
        "response.mcp_call_arguments.delta",
        "response.audio.delta",
        "response.audio.transcript.delta",
    }
)
_RESPONSE_LIFECYCLE_EVENTS = frozenset({"response.created", "response.in_progress", "response.queued"})
_RESPONSE_TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})


def read_response_event(tl: Timeline, kind: str, event: Any, now: int) -> int:
    """One streamed Responses API event, on both paths: the SDK's model (:func:`observe_response_event`)
    or its JSON on the wire (:func:`read_event`). ``EVENT_END`` for the terminal events (the
    finish reason says how it ended: ``response.incomplete`` a length stop, ``response.failed`` an
    error), ``EVENT_ERROR`` for the ``error`` event and for ``response.failed`` (read first: a failed
    response is the answer's end and a failure, counted in the error rate as the ``error`` event is)."""
    if kind in _RESPONSE_OUTPUT_EVENTS:
        tl.output_token(now)
        if tl.capture is not None and kind == "response.output_text.delta":
            common.append_output(tl, str(g(event, "delta") or ""))
        return EVENT_MORE
    if kind in _RESPONSE_TERMINAL_EVENTS:
        tl.terminal_seen = True
        response = g(event, "response") or {}
        read_identity(tl, response)
        read_usage(tl, g(response, "usage"))
        endpoints.refine(tl, response)
        reason = responses_finish_reason(response)
        if reason:
            tl.finish_reasons[0] = reason
        return EVENT_ERROR if kind == "response.failed" else EVENT_END
    if kind == "error":
        return EVENT_ERROR
    if kind in _RESPONSE_LIFECYCLE_EVENTS and tl.response_id is None:
        read_identity(tl, g(event, "response"))
    return EVENT_MORE


def observe_response_event(tl: Timeline, event: Any, now: int) -> None:
    """A Responses event the openai SDK hands the app. Its ``error`` event (``ResponseErrorEvent``) and
    ``response.failed`` are handed over without raising: the call fails there, as on the wire, the event
    not counted as a chunk."""
    if read_response_event(tl, event.type, event, now) == EVENT_ERROR:
        tl.chunk_count -= 1
        tl.finish(sc.END_ERROR, now, ERROR_EVENT)


def _produced(choice: Mapping[str, Any]) -> bool:
    """Whether a streamed choice (JSON) carries output: as :func:`_delta_has_output` on the SDK's models."""
    if choice.get("text"):
        return True
    delta = choice.get("delta")
    if not isinstance(delta, Mapping):
        return False
    return bool(
        delta.get("content")
        or delta.get("tool_calls")
        or delta.get("refusal")
        or delta.get("function_call")
        or delta.get("audio")
        or delta.get("reasoning_content")
        or delta.get("reasoning")
    )


def read_event(tl: Timeline, event: Mapping[str, Any], now: int) -> int:
    """One streamed JSON event of chat completions, completions or Responses (the wire path)."""
    kind = event.get("type")
    if isinstance(kind, str):  # Responses API events
        return read_response_event(tl, kind, event, now)
    if event.get("error") is not None:  # an error object in a chat stream (the SDK raises APIError)
        return EVENT_ERROR
    produced = False
    choices = event.get("choices") or ()
    final = not choices
    for position, choice in enumerate(choices):
        if not isinstance(choice, Mapping):
            continue
        if _produced(choice):
            if not produced and tl.capture is not None:
                delta = choice.get("delta")
                text = delta.get("content") if isinstance(delta, Mapping) else choice.get("text")
                if isinstance(text, str):
                    common.append_output(tl, text)
            produced = True
        reason = choice.get("finish_reason")
        if reason:
            index = choice.get("index")
            tl.finish_reasons[index if isinstance(index, int) else position] = reason
            final = True
    if produced:
        tl.output_token(now)
    if final and choices and _all_finished(tl):
        tl.terminal_seen = True  # the answer's end; the reader goes on for usage and [DONE]
    if event.get("usage"):
        read_usage(tl, event["usage"])
    if tl.response_id is None:  # the first chunk (or one of a server that sends no id)
        read_identity(tl, event)
        if _unasked:
            _check_usage_unasked(tl)
    if final:
        server_timing.read(tl, event)
        endpoints.refine(tl, event)
    return EVENT_MORE


class OpenAIFormat(WireFormat):
    """OpenAI's chat completions, completions, embeddings and Responses, whoever serves them."""

    family = "openai"

    def match(self, path: str) -> tuple[str, str | None] | None:
        return match(path)

    def describe(
        self, path: str, body: Mapping[str, Any], stream: bool, operation: str, api_type: str | None
    ) -> CallDescription:
        return _describe(body, stream, operation, api_type)

    def read_result(self, tl: Timeline, data: Mapping[str, Any]) -> None:
        read_result(tl, data)

    def read_event(self, tl: Timeline, event: Mapping[str, Any], now: int, stream: StreamState) -> int:
        return read_event(tl, event, now)


FORMAT = OpenAIFormat()


NO_USAGE_WARNING = (
    "a streamed chat or completions call asked for no usage: its input and output tokens are not counted "
    '(pass stream_options={"include_usage": True}; the openai SDK\'s chat.completions.stream() helper and '
    "some frameworks do not). Said once per process; docs/semantics.md#streams-without-usage"
)
USAGE_UNASKED = frozenset({"mistral_ai", "groq"})
"""Providers whose Chat Completions streams carry usage though the request asked for none: Mistral's
API (``usage`` on the final chunk) and Groq's (``x_groq.usage`` on the final chunk). Every other
server of the format (OpenAI and those that follow its rule) sends usage only when asked."""
_warned_no_usage = False
_unasked: dict[int, dict[str, Any]] = {}
"""The streamed chat and completions calls that asked for no usage, by ``id`` of their request
attributes (held here, so the ids stay theirs; ``Timeline.request`` is the same dict): kept from
the request until its first chunk, when the provider who served it is known. Only until the
warning has been given; a call failing before its first chunk is forgotten with the rest at 64."""


def _usage_unasked(request: dict[str, Any], body: Mapping[str, Any], api_type: str | None) -> None:
    """A streamed Chat Completions or Completions request reports usage only when it asks for it (the
    Responses API always does): without it, tokens go uncounted where the provider follows OpenAI's
    rule, which its first chunk tells (:func:`_check_usage_unasked`)."""
    if _warned_no_usage or api_type == _API_RESPONSES:
        return
    options = body.get("stream_options")
    if isinstance(options, Mapping) and options.get("include_usage"):
        return
    if len(_unasked) >= 64:
        _unasked.clear()
    _unasked[id(request)] = request


def _check_usage_unasked(tl: Timeline) -> None:
    """On a stream's first chunk: the call asked for no usage and its provider sends none unasked,
    so say once that its tokens go uncounted (at the app's line reading the stream)."""
    global _warned_no_usage
    if _unasked.pop(id(tl.request), None) is None or _warned_no_usage or tl.provider in USAGE_UNASKED:
        return
    _warned_no_usage = True
    _unasked.clear()
    from ..config import warn

    warn(NO_USAGE_WARNING)


def _describe(body: Mapping[str, Any], stream: bool, operation: str, api_type: str | None) -> CallDescription:
    request = _request_attributes(body)
    if stream and operation in (sc.OP_CHAT, sc.OP_TEXT_COMPLETION):
        _usage_unasked(request, body, api_type)
    model = body.get("model")
    return CallDescription(
        operation=operation,
        model=model if isinstance(model, str) else None,
        stream=stream,
        api_type=api_type,
        request=request,
        content=lambda: _input_content(operation, api_type, body),
        prefix=_prefix(api_type, body),
    )


def _observer(tl: Timeline) -> Observer:
    if tl.api_type == _API_RESPONSES:
        return observe_response_event
    if tl.operation == sc.OP_TEXT_COMPLETION:
        return observe_completion_chunk
    return observe_chat_chunk


# -- the patches ------------------------------------------------------------------------------


class OpenAIHooks(CallHooks):
    provider = "openai"
    client_providers = {"BaseAzureClient": "azure.ai.openai"}

    def describe(self, options: Any, body: Mapping[str, Any], stream: bool) -> CallDescription | None:
        kind = _classify(options)
        if kind is None:
            return None
        operation, api_type = kind
        return _describe(body, stream, operation, api_type)

    def read_result(self, tl: Timeline, result: Any) -> None:
        read_result(tl, result)

    def observer(self, tl: Timeline) -> Observer:
        return _observer(tl)

    def is_stream(self, result: Any) -> bool:
        return isinstance(result, (_streaming.Stream, _streaming.AsyncStream))


_PUBLIC_METHODS = (
    ("openai.resources.chat.completions.completions", "Completions.create"),
    ("openai.resources.chat.completions.completions", "Completions.parse"),
    ("openai.resources.chat.completions.completions", "AsyncCompletions.create"),
    ("openai.resources.chat.completions.completions", "AsyncCompletions.parse"),
    ("openai.resources.responses.responses", "Responses.create"),
    ("openai.resources.responses.responses", "Responses.parse"),
    ("openai.resources.responses.responses", "AsyncResponses.create"),
    ("openai.resources.responses.responses", "AsyncResponses.parse"),
    ("openai.resources.completions", "Completions.create"),
    ("openai.resources.completions", "AsyncCompletions.create"),
    ("openai.resources.embeddings", "Embeddings.create"),
    ("openai.resources.embeddings", "AsyncEmbeddings.create"),
)
"""Public methods whose call marks the start of an LLM call (the SDK's own work counts)."""


def patch(patches: Patches, recorder: Recorder, provider_of: common.ProviderResolver) -> bool:
    """Install the openai hooks; False (with a warning) when the installed SDK is unsupported."""
    if not common.check_version("openai", SUPPORTED):
        return False
    global _streaming
    from openai import _streaming

    return OpenAIHooks(recorder, provider_of).install(patches, _PUBLIC_METHODS)


# -- groq: the same Stainless chokepoints, OpenAI's chat completions under /openai/v1 -----------------

GROQ_SUPPORTED = ">=0.13.1,<2"
"""The groq versions firsttoken is tested with."""

_groq_streaming: ModuleType  # groq._streaming, imported when patching


def observe_groq_chunk(tl: Timeline, chunk: Any, now: int) -> None:
    """A groq chunk: as an OpenAI one, and Groq's ``x_groq`` (a declared field of groq's models, not
    an extra) read on the final chunk, where Groq puts its usage and timing."""
    observe_chat_chunk(tl, chunk, now)
    if chunk.x_groq is not None and (not chunk.choices or chunk.choices[0].finish_reason is not None):
        server_timing.read(tl, chunk)


class GroqHooks(OpenAIHooks):
    """The groq SDK, generated as openai's is: a call and its retries are one call span there, and a
    failure is the SDK's exception, as for openai (on the wire, each attempt was a call)."""

    provider = "groq"

    def observer(self, tl: Timeline) -> Observer:
        return observe_groq_chunk if tl.api_type == _API_CHAT else _observer(tl)

    def is_stream(self, result: Any) -> bool:
        return isinstance(result, (_groq_streaming.Stream, _groq_streaming.AsyncStream))


_GROQ_PUBLIC_METHODS = (
    ("groq.resources.chat.completions", "Completions.create"),
    ("groq.resources.chat.completions", "AsyncCompletions.create"),
)


def patch_groq(patches: Patches, recorder: Recorder, provider_of: common.ProviderResolver) -> bool:
    """Install the groq hooks; False (with a warning) when the installed SDK is unsupported."""
    if not common.check_version("groq", GROQ_SUPPORTED):
        return False
    global _groq_streaming
    from groq import _streaming as _groq_streaming

    return GroqHooks(recorder, provider_of).install(patches, _GROQ_PUBLIC_METHODS)
