"""The official ``anthropic`` SDK: ``messages`` (create, stream helper, parse, count_tokens) and ``beta.messages``.

The same chokepoints as openai (:mod:`firsttoken.providers._hooks`). Two differences matter:

* an anthropic ``Stream`` starts its item generator lazily, on the first read and on a copy of
  itself, so the call is handed to the stream when ``request`` returns and the generator is found
  through the shared HTTP response;
* TTFT is stamped at the first ``content_block_delta`` carrying generated content (text, tool
  input JSON, thinking) as it comes off the wire, whichever helper consumes it (``text_stream``,
  iterating events, ``get_final_message()``, ``until_done()``), never at ``message_start`` and
  never when a helper hands the app an aggregate.

Usage follows the GenAI conventions: ``gen_ai.usage.input_tokens`` = input + cache read + cache
creation tokens (Anthropic's ``input_tokens`` excludes both), which is also what the cache-hit
counters count, so Anthropic and OpenAI ratios mean the same thing.

anthropic 2.x has OpenTelemetry tracing of its own: a CLIENT span per call, a child of whatever span
is current, whose trace context it sends to the API (``traceparent``) whenever that context is
valid. Under firsttoken's call span that made two CLIENT spans per call, and a ``traceparent`` on
every request even where the uninstrumented app sends none. So, for each call (:func:`_sdk_tracing`):

* when the app made no choice about the SDK's tracing (a client given no ``open_telemetry`` option
  while no ``ANTHROPIC_OPEN_TELEMETRY*`` variable is set), the SDK starts no span of its own
  (firsttoken's is the call span), and the request carries firsttoken's call span's trace context
  exactly when the uninstrumented app's would have carried the SDK's: either the app's own span is
  current or the app set a global tracer provider of its own;
* every explicit choice keeps the SDK's span, with the settings the app gave it, nested under
  firsttoken's: a client given any ``open_telemetry`` option (``{}``, ``{"traces": True}``, content
  mode, ``max_content_bytes``, a conversation id, ``propagation``, a ``tracer_provider``; a copy made
  with ``copy``/``with_options`` has its original's choice unless it is given an option of its own),
  or, for a client given none, an ``ANTHROPIC_OPEN_TELEMETRY*`` variable set (the SDK's span is off
  only for ``false``, and then firsttoken leaves the request alone too). The one exception: a span the
  SDK would not have started without firsttoken (no tracer provider of the app's, no valid context).

The variables are read when the SDK reads them: when a client is made (its ``_set_open_telemetry``),
a copy of a client (``copy``/``with_options``, Bedrock's and Vertex's too) having the original's, so
a change after ``import anthropic`` and before the client is made counts for firsttoken as for the
SDK. Where the app's global tracer provider was getting the SDK's spans of a client that made no
choice, a one-line note says once per process that firsttoken's call span takes their place, or,
where firsttoken records into another provider, that the app's provider gets no span for the call
(docs/coexistence.md).
"""

from __future__ import annotations

import contextlib
import logging
import os
import weakref
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from opentelemetry import propagate, trace

from .. import _otlp
from .. import semconv as sc
from .._internal import internal_error
from .._patch import Patches
from ..config import warn
from ..recorder import Recorder
from ..streams import Observer
from ..timeline import Timeline
from . import _common as common
from . import endpoints
from ._hooks import EVENT_END, EVENT_ERROR, EVENT_MORE, CallDescription, CallHooks, StreamState, WireFormat

log = logging.getLogger("firsttoken")

SUPPORTED = ">=2.0,<3"
"""The anthropic versions firsttoken is tested with."""

OP_COUNT_TOKENS = "count_tokens"

_streaming: ModuleType  # anthropic._streaming, imported when patching
g = common.get


def _classify(options: Any) -> str | None:
    if str(getattr(options, "method", "")).lower() != "post":
        return None
    found = match(str(getattr(options, "url", "")).split("?", 1)[0].rstrip("/"))
    return None if found is None else found[0]


def match(path: str) -> tuple[str, str | None] | None:
    """(operation, None) of a POST to ``path``, else None."""
    if path.endswith("/v1/messages"):
        return sc.OP_CHAT, None
    if path.endswith("/v1/messages/count_tokens"):
        return OP_COUNT_TOKENS, None
    return None


def _request_attributes(body: Mapping[str, Any]) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    if isinstance(body.get("max_tokens"), int):
        attrs[sc.GEN_AI_REQUEST_MAX_TOKENS] = body["max_tokens"]
    for key, attr in (("temperature", sc.GEN_AI_REQUEST_TEMPERATURE), ("top_p", sc.GEN_AI_REQUEST_TOP_P)):
        value = body.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            attrs[attr] = float(value)
    if isinstance(body.get("top_k"), int):
        attrs[sc.GEN_AI_REQUEST_TOP_K] = body["top_k"]
    stops = body.get("stop_sequences")
    if isinstance(stops, list) and all(isinstance(s, str) for s in stops):
        attrs[sc.GEN_AI_REQUEST_STOP_SEQUENCES] = list(stops)
    return attrs


def input_content(body: Mapping[str, Any]) -> dict[str, str]:
    """The captured input of a body of ``system`` and ``messages`` (Anthropic's, and Bedrock Converse's)."""
    out: dict[str, str] = {}
    if body.get("system") is not None:
        out[sc.GEN_AI_SYSTEM_INSTRUCTIONS] = common.to_json(body["system"])
    if body.get("messages") is not None:
        out[sc.GEN_AI_INPUT_MESSAGES] = common.to_json(body["messages"])
    return out


def read_usage(tl: Timeline, usage: Any) -> None:
    """Anthropic usage (whole, or cumulative in ``message_delta``) -> GenAI usage."""
    if usage is None:
        return
    uncached = g(usage, "input_tokens")
    read = g(usage, "cache_read_input_tokens")
    created = g(usage, "cache_creation_input_tokens")
    if isinstance(read, int):
        tl.cache_read_tokens = read
    if isinstance(created, int):
        tl.cache_creation_tokens = created
    if isinstance(uncached, int):
        tl.input_tokens = uncached + (tl.cache_read_tokens or 0) + (tl.cache_creation_tokens or 0)
    output = g(usage, "output_tokens")
    if isinstance(output, int):
        tl.output_tokens = output
    thinking = g(g(usage, "output_tokens_details"), "thinking_tokens")
    if isinstance(thinking, int):
        tl.reasoning_tokens = thinking


def read_message(tl: Timeline, message: Any) -> None:
    rid = g(message, "id")
    if isinstance(rid, str) and rid:
        tl.response_id = rid
    model = g(message, "model")
    if isinstance(model, str) and model:
        tl.response_model = model
    reason = g(message, "stop_reason")
    if isinstance(reason, str):
        tl.finish_reasons[0] = reason
    read_usage(tl, g(message, "usage"))


def read_result(tl: Timeline, result: Any) -> None:
    if tl.operation == OP_COUNT_TOKENS:
        tokens = g(result, "input_tokens")
        if isinstance(tokens, int):
            tl.extra[sc.FT_COUNTED_INPUT_TOKENS] = tokens
        return
    read_message(tl, result)
    endpoints.refine(tl, result)
    if tl.capture is not None and g(result, "content") is not None:
        tl.capture[sc.GEN_AI_OUTPUT_MESSAGES] = common.to_json([{"role": "assistant", "content": g(result, "content")}])


_CONTENT_DELTAS = frozenset({"text_delta", "input_json_delta", "thinking_delta", "citations_delta"})


def observe_event(tl: Timeline, event: Any, now: int) -> None:
    kind = event.type
    if kind == "content_block_delta":
        delta = event.delta
        if delta.type in _CONTENT_DELTAS:
            # Timeline.output_token, written out: this runs for nearly every event.
            if tl.first_token_ns is None:
                tl.first_token_ns = now
            tl.last_token_ns = now
            tl.token_chunk_count += 1
            if tl.capture is not None and delta.type == "text_delta":
                common.append_output(tl, delta.text)
    elif kind == "message_start":
        read_message(tl, event.message)
        endpoints.refine(tl)
    elif kind == "message_delta":
        reason = event.delta.stop_reason
        if reason is not None:
            tl.finish_reasons[0] = reason
            # The answer is whole (only message_stop follows): closed after it, the call completed.
            tl.terminal_seen = True
        read_usage(tl, event.usage)
    elif kind == "message_stop":
        tl.terminal_seen = True  # the end of the stream: closed after it, the call completed


def read_event(tl: Timeline, event: Mapping[str, Any], now: int) -> int:
    """One streamed JSON event (the wire path): as :func:`observe_event` reads the SDK's."""
    kind = event.get("type")
    if kind == "content_block_delta":
        delta = event.get("delta") or {}
        kind = delta.get("type")
        if kind in _CONTENT_DELTAS:
            tl.output_token(now)
            if tl.capture is not None and kind == "text_delta":
                common.append_output(tl, str(delta.get("text") or ""))
    elif kind == "message_start":
        read_message(tl, event.get("message") or {})
        endpoints.refine(tl)
    elif kind == "message_delta":
        reason = (event.get("delta") or {}).get("stop_reason")
        if reason:
            tl.finish_reasons[0] = reason
            # The answer is whole: closed after it, the call completed (LiteLLM, for one, stops reading
            # here). The stream still ends at message_stop, which follows (its bytes are the call's too).
            tl.terminal_seen = True
        read_usage(tl, event.get("usage"))
    elif kind == "message_stop":
        return EVENT_END
    elif kind == "error":
        return EVENT_ERROR
    return EVENT_MORE


def _describe(body: Mapping[str, Any], stream: bool, operation: str) -> CallDescription:
    model = body.get("model")
    return CallDescription(
        operation=operation,
        model=model if isinstance(model, str) else None,
        stream=stream and operation == sc.OP_CHAT,
        request=_request_attributes(body) if operation == sc.OP_CHAT else {},
        content=lambda: input_content(body),
        prefix=()
        if body.get("system") is None and body.get("tools") is None
        else (body.get("system"), body.get("tools")),
    )


class AnthropicFormat(WireFormat):
    """Anthropic's Messages API (``/v1/messages``, and its ``count_tokens``), whoever serves it."""

    family = "anthropic"

    def match(self, path: str) -> tuple[str, str | None] | None:
        return match(path)

    def describe(
        self, path: str, body: Mapping[str, Any], stream: bool, operation: str, api_type: str | None
    ) -> CallDescription:
        return _describe(body, stream, operation)

    def read_result(self, tl: Timeline, data: Mapping[str, Any]) -> None:
        read_result(tl, data)

    def read_event(self, tl: Timeline, event: Mapping[str, Any], now: int, stream: StreamState) -> int:
        return read_event(tl, event, now)


FORMAT = AnthropicFormat()


# -- the SDK's own tracing ------------------------------------------------------------------------

ENV_SDK_TRACING = (
    "ANTHROPIC_OPEN_TELEMETRY",
    "ANTHROPIC_OPEN_TELEMETRY_TRACES_CONTENT_MODE",
    "ANTHROPIC_OPEN_TELEMETRY_TRACES_MAX_CONTENT_BYTES",
    "ANTHROPIC_OPEN_TELEMETRY_PROPAGATION",
)
"""The variables the SDK reads for a client given no ``open_telemetry`` option."""
_sdk_tracing_asked = False
"""Whether the environment asked for the SDK's spans when firsttoken patched: for the clients made
before (the SDK read it when they were made, which firsttoken did not see)."""
_asked_by_client: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()
"""Client -> whether the app chose the SDK's tracing for that client: an ``open_telemetry`` option,
or a variable when the SDK read them for it (when it was made; a copy has its original's)."""
_copies: dict[int, tuple[Any, bool]] = {}
"""id(option a copy is about to be given) -> (that option, whether its original was asked)."""
_records_into: Any = None
"""The tracer provider given to ``instrument()`` (or firsttoken's own), None for the global one."""


def _env_asks() -> bool:
    """Whether a variable the SDK reads sets its tracing (``false`` turns the SDK's spans off, and
    then firsttoken leaves the request alone anyway)."""
    return any(os.environ.get(name, "").strip() for name in ENV_SDK_TRACING)


def _asked(client: Any) -> bool:
    """Whether the app chose the SDK's tracing for this client, as the SDK read it."""
    try:
        return _asked_by_client.get(client, _sdk_tracing_asked)
    except TypeError:  # a client class that cannot be a weak dictionary key
        return _sdk_tracing_asked


def _set_open_telemetry(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The SDK resolves a client's ``open_telemetry`` option, reading the environment for ``None``:
    firsttoken reads the variables at the same moment. Any option given is the app's choice, except
    the one a copy given none inherits: that one is its original's choice, or not."""
    try:
        option = args[0] if args else kwargs.get("open_telemetry")
        if option is None:
            asked = _env_asks()
        else:
            copied = _copies.pop(id(option), None)
            asked = copied[1] if copied is not None and copied[0] is option else True
        _asked_by_client[instance] = asked
    except Exception:
        internal_error("could not read ANTHROPIC_OPEN_TELEMETRY as the anthropic SDK does")
    return wrapped(*args, **kwargs)


def _copy_open_telemetry(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The option of a copy of ``instance``: the original's own when the copy is given none."""
    option = wrapped(*args, **kwargs)
    try:
        given = args[0] if args else kwargs.get("open_telemetry")
        if given is None and isinstance(option, dict):
            if len(_copies) >= 64:  # copies the SDK never finished making: start over rather than grow
                _copies.clear()
            _copies[id(option)] = (option, _asked(instance))
    except Exception:
        internal_error("could not follow the anthropic SDK's tracing option to a copy of a client")
    return option


_NOTE_REPLACED = (
    "anthropic's own spans (anthropic.messages.create and the like) are not made while firsttoken is on:"
    " firsttoken's call span takes their place in the app's tracer provider (one span per call);"
    " give the client an open_telemetry option (or set ANTHROPIC_OPEN_TELEMETRY=true before it is made)"
    " to keep them too; see docs/coexistence.md"
)
_NOTE_ELSEWHERE = (
    "anthropic's own spans (anthropic.messages.create and the like) are not made while firsttoken is on,"
    " and firsttoken records into the tracer provider given to instrument(), not the app's global one:"
    " the app's global provider gets no span for anthropic calls; give the client an open_telemetry option"
    " (or set ANTHROPIC_OPEN_TELEMETRY=true before it is made) to keep the SDK's there; see docs/coexistence.md"
)
_noted = False


def _note_replaced() -> None:
    """Say once per process that the SDK's spans the app's global provider was getting are not made
    (for a client that made no choice: any other keeps them)."""
    global _noted
    if _noted:
        return
    _noted = True
    ours = _records_into
    note = _NOTE_REPLACED if ours is None or ours is trace.get_tracer_provider() else _NOTE_ELSEWHERE
    with contextlib.suppress(Exception):  # a warnings filter set to "error" must not fail the app's call
        warn(note)


def _global_provider_records() -> bool:
    """Whether the app set a global tracer provider of its own (firsttoken's own set-up aside)."""
    provider = trace.get_tracer_provider()
    if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        return False
    return not _otlp.is_own_global(provider)


def _shows_a_choice(resolved: Mapping[str, Any], traces: Mapping[str, Any]) -> bool:
    """Whether a client's resolved option differs from the SDK's defaults: a choice the app made,
    seen even on a client made before firsttoken was installed (which firsttoken saw no option for)."""
    return (
        resolved.get("tracer_provider") is not None
        or resolved.get("conversation_id") is not None
        or resolved.get("propagation") is False
        or traces.get("content_mode") == "content"
    )


def _sdk_tracing(tl: Timeline, client: Any, options: Any) -> Any:
    """``options`` for the SDK's ``request``, so that the request goes out as it would without
    firsttoken and the SDK's span is started only when the user asked for it (module docstring).

    The one place firsttoken touches the SDK's tracing. It reads the client's public
    ``open_telemetry`` property and rewrites two fields of the SDK's ``FinalRequestOptions``: an
    empty ``span_name`` is the SDK's own way to say "no span for this request" (``start_api_call_span``
    returns ``None`` for it, in every 2.x), and ``headers`` are the request's extra headers, the
    same as a method's ``extra_headers=``. Anything unexpected leaves ``options`` as they were.
    """
    resolved = getattr(client, "open_telemetry", None)
    if not isinstance(resolved, Mapping) or not getattr(options, "span_name", None):
        return options  # an SDK without tracing, or a request no SDK method made
    traces = resolved.get("traces")
    if not isinstance(traces, Mapping) or traces.get("enabled") is False:
        return options  # the SDK's tracing is off for this client: it neither spans nor propagates
    app_context_valid = bool(trace.get_current_span().get_span_context().is_valid)
    explicit_provider = resolved.get("tracer_provider") is not None
    app_provider = _global_provider_records()
    if _asked(client) or _shows_a_choice(resolved, traces):
        if explicit_provider or app_provider or app_context_valid:
            return options  # the SDK's span, as asked; it propagates its own context
        return _copy_options(options, span_name=None)  # uninstrumented, it would have had no span
    if app_provider:
        _note_replaced()  # the app's provider had the SDK's span for this call without firsttoken
    update: dict[str, Any] = {"span_name": None}
    if resolved.get("propagation", True) and (app_context_valid or app_provider):
        carrier: dict[str, str] = {}
        propagate.inject(carrier, trace.set_span_in_context(tl.span))
        if carrier:
            headers = options.headers if isinstance(options.headers, Mapping) else {}
            update["headers"] = {**headers, **carrier}
    return _copy_options(options, **update)


def _copy_options(options: Any, **update: Any) -> Any:
    copy = getattr(options, "model_copy", None) or options.copy  # pydantic 2, else 1
    return copy(update=update)


class AnthropicHooks(CallHooks):
    provider = "anthropic"
    client_providers = {"BaseBedrockClient": "aws.bedrock", "BaseVertexClient": "gcp.vertex_ai"}

    def prepare(self, tl: Timeline, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
        try:
            if len(args) > 1:
                return (args[0], _sdk_tracing(tl, instance, args[1]), *args[2:]), kwargs
            if "options" in kwargs:
                return args, {**kwargs, "options": _sdk_tracing(tl, instance, kwargs["options"])}
        except Exception:
            internal_error("could not keep the anthropic SDK's tracing as it was")
        return args, kwargs

    def describe(self, options: Any, body: Mapping[str, Any], stream: bool) -> CallDescription | None:
        operation = _classify(options)
        if operation is None:
            return None
        return _describe(body, stream, operation)

    def read_result(self, tl: Timeline, result: Any) -> None:
        read_result(tl, result)

    def observer(self, tl: Timeline) -> Observer:
        return observe_event

    def is_stream(self, result: Any) -> bool:
        return isinstance(result, (_streaming.Stream, _streaming.AsyncStream))


_PUBLIC_METHODS = (
    ("anthropic.resources.messages.messages", "Messages.create"),
    ("anthropic.resources.messages.messages", "Messages.parse"),
    ("anthropic.resources.messages.messages", "Messages.count_tokens"),
    ("anthropic.resources.messages.messages", "AsyncMessages.create"),
    ("anthropic.resources.messages.messages", "AsyncMessages.parse"),
    ("anthropic.resources.messages.messages", "AsyncMessages.count_tokens"),
    ("anthropic.resources.beta.messages.messages", "Messages.create"),
    ("anthropic.resources.beta.messages.messages", "Messages.parse"),
    ("anthropic.resources.beta.messages.messages", "Messages.count_tokens"),
    ("anthropic.resources.beta.messages.messages", "AsyncMessages.create"),
    ("anthropic.resources.beta.messages.messages", "AsyncMessages.parse"),
    ("anthropic.resources.beta.messages.messages", "AsyncMessages.count_tokens"),
    # The stream helpers send their request when their context manager is entered.
    ("anthropic.lib.streaming._messages", "MessageStreamManager.__enter__"),
    ("anthropic.lib.streaming._messages", "AsyncMessageStreamManager.__aenter__"),
    ("anthropic.lib.streaming._beta_messages", "BetaMessageStreamManager.__enter__"),
    ("anthropic.lib.streaming._beta_messages", "BetaAsyncMessageStreamManager.__aenter__"),
)


def patch(
    patches: Patches, recorder: Recorder, provider_of: common.ProviderResolver, tracer_provider: Any = None
) -> bool:
    """Install the anthropic hooks; False (with a warning) when the installed SDK is unsupported.
    ``tracer_provider``: the one firsttoken records into, None for the global one."""
    if not common.check_version("anthropic", SUPPORTED):
        return False
    global _streaming, _sdk_tracing_asked, _records_into
    from anthropic import _streaming

    _sdk_tracing_asked = _env_asks()
    _records_into = tracer_provider
    if not AnthropicHooks(recorder, provider_of).install(patches, _PUBLIC_METHODS):
        return False
    # Where the SDK reads ANTHROPIC_OPEN_TELEMETRY (anthropic 2.x): best effort, as the SDK's tracing is.
    patches.wrap("anthropic._base_client", "BaseClient._set_open_telemetry", _set_open_telemetry)
    patches.wrap("anthropic._base_client", "BaseClient._copy_open_telemetry", _copy_open_telemetry)
    return True
