"""Timeline -> OpenTelemetry: the call span's attributes, its phase spans, and every metric of a call.

The Recorder is the only code that touches the OpenTelemetry span and metric APIs for calls (the
hooks only ask it to start a call span, so that HTTP work nests under it; the app's actions and
phases are recorded by :mod:`firsttoken.actions`, whose recorder it makes). It runs once per call,
when the call ends, and records every metric in the call span's context so that the SDK attaches
exemplars linking a histogram bucket to the trace that filled it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from contextvars import Token
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.metrics import Histogram, Meter
from opentelemetry.trace import NonRecordingSpan, Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.util.types import AttributeValue

from . import instruments, tail
from . import semconv as sc
from ._internal import internal_error
from ._sums import Key, SummedCounter, add_all
from .actions import AppRecorder
from .config import PHASE_SPANS_ALWAYS, PHASE_SPANS_TAIL, Settings, warn
from .timeline import STREAM_TEXT_KEY, Timeline, turn_bucket

log = logging.getLogger("firsttoken")

_SUPPRESS = otel_context._SUPPRESS_INSTRUMENTATION_KEY
_SUPPRESS_PLAIN = "suppress_instrumentation"
"""These two: the context keys by which code asks instrumentation to make no telemetry (OpenTelemetry's, and the
older plain one some instrumentations still read): ``opentelemetry.instrumentation.utils.
suppress_instrumentation()`` and logfire's set both. The OpenTelemetry SDK records spans under them;
logfire's tracer provider records none."""


def _on(context: Context) -> bool:
    return bool(context.get(_SUPPRESS) or context.get(_SUPPRESS_PLAIN))


_suppressible_in_use = False
"""Whether a recorder in this process has a tracer that may honour suppression (see Recorder)."""


def app_suppressed() -> bool | None:
    """For a call's start: whether the app's context suppresses instrumentation; None (not read, a
    context lookup saved per call) while no recorder's tracer may honour suppression, where it decides nothing."""
    return _on(otel_context.get_current()) if _suppressible_in_use else None


def _plain(tracer_or_meter: object) -> bool:
    """The OpenTelemetry SDK's tracer or meter, or the API's no-op one: neither honours suppression nor
    adds to spans (checked by module, so that the SDK is not imported for an app that has none)."""
    cls = type(tracer_or_meter)
    if "Proxy" in cls.__name__:  # the API's proxy for a global provider set later, maybe logfire's
        return False
    return cls.__module__.startswith("opentelemetry.sdk.") or cls.__module__ in _API_MODULES


_API_MODULES = ("opentelemetry.trace", "opentelemetry.metrics", "opentelemetry.metrics._internal")


def _set_aside() -> Token[Context] | None:
    """Attach the current context with the suppression keys off, when it has them on (else None)."""
    current = otel_context.get_current()
    if not _on(current):
        return None
    current = otel_context.set_value(_SUPPRESS_PLAIN, False, otel_context.set_value(_SUPPRESS, False, current))
    return otel_context.attach(current)


_MAX_SERIES = 1024
"""Attribute sets kept for reuse; past that the cache starts over (it only saves building them)."""


class _Bounds:
    """The values each unbounded metric attribute may take: the first ``limit`` distinct ones seen
    (per attribute, for the life of the Recorder), then :data:`semconv.METRIC_VALUE_OTHER`.

    Counters are cumulative, so a value once exported keeps its series; a value refused once is
    refused for good. One warning per attribute when it first overflows. Spans keep real values.
    """

    __slots__ = ("_kept", "_limit", "_lock")

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._kept: dict[str, set[str]] = {}
        self._lock = threading.Lock()

    def __call__(self, key: str, value: str) -> str:
        kept = self._kept.get(key)
        if kept is not None and value in kept:
            return value
        with self._lock:
            kept = self._kept.setdefault(key, set())
            if value in kept:
                return value
            if len(kept) < self._limit:
                kept.add(value)
                return value
            first = sc.METRIC_VALUE_OTHER not in kept
            kept.add(sc.METRIC_VALUE_OTHER)  # marks the warning as given; never a kept value
        if first:
            # A warning turned into an error must not cost the call's telemetry.
            with contextlib.suppress(Exception):
                warn(
                    f"{key} took more than {self._limit} distinct values; metrics record further ones "
                    f"as {sc.METRIC_VALUE_OTHER} (spans keep them). Raise metric_value_limit "
                    "(FIRSTTOKEN_METRIC_VALUE_LIMIT) if they are few and meant"
                )
        return sc.METRIC_VALUE_OTHER


class _Series:
    """The metric attributes of one series of calls (same operation, provider, model, class, stream,
    response model, server, error and upstream provider), as dicts for the SDK's instruments and as keys for the summed
    counters. Built on the first call of the series and never changed afterwards."""

    __slots__ = (
        "call",
        "call_key",
        "finish_keys",
        "input_usage",
        "lever",
        "lever_key",
        "output_usage",
        "phase_keys",
        "wire_key",
    )

    def __init__(self, tl: Timeline, bound: _Bounds) -> None:
        # Values an app may have without end (a model per fine-tuned id, a server per gateway
        # upstream, a class per tenant) are bounded; operation, provider, stream, error type (the
        # exception classes of the code) and the ones of fixed sets are not.
        model = bound(sc.GEN_AI_REQUEST_MODEL, tl.request_model) if tl.request_model else None
        traffic_class = bound(sc.FT_TRAFFIC_CLASS, tl.traffic_class) if tl.traffic_class else None
        server = bound(sc.SERVER_ADDRESS, tl.server_address) if tl.server_address else None
        # The lever metrics' attributes are a subset: operation, provider, model, traffic class.
        lever: dict[str, AttributeValue] = {
            sc.GEN_AI_OPERATION_NAME: tl.operation,
            sc.GEN_AI_PROVIDER_NAME: tl.provider,
        }
        if model:
            lever[sc.GEN_AI_REQUEST_MODEL] = model
        if traffic_class:
            lever[sc.FT_TRAFFIC_CLASS] = traffic_class
        call: dict[str, AttributeValue] = {**lever, sc.GEN_AI_REQUEST_STREAM: tl.stream}
        if tl.response_model:
            call[sc.GEN_AI_RESPONSE_MODEL] = bound(sc.GEN_AI_RESPONSE_MODEL, tl.response_model)
        if server:
            call[sc.SERVER_ADDRESS] = server
            if tl.server_port is not None and server != sc.METRIC_VALUE_OTHER:
                call[sc.SERVER_PORT] = tl.server_port
        if tl.error_type:
            call[sc.ERROR_TYPE] = tl.error_type
        upstream = tl.extra.get(sc.FT_UPSTREAM_PROVIDER)
        if upstream:  # behind a gateway: the providers it routes to, a handful per gateway
            call[sc.FT_UPSTREAM_PROVIDER] = bound(sc.FT_UPSTREAM_PROVIDER, str(upstream))
        wire: dict[str, AttributeValue] = {sc.GEN_AI_PROVIDER_NAME: tl.provider}
        if model:
            wire[sc.GEN_AI_REQUEST_MODEL] = model
        if server:
            wire[sc.SERVER_ADDRESS] = server
        if traffic_class:
            wire[sc.FT_TRAFFIC_CLASS] = traffic_class
        self.lever = lever
        self.lever_key: Key = tuple(lever.items())
        self.call = call
        self.call_key: Key = tuple(call.items())
        self.input_usage: dict[str, AttributeValue] = {**call, sc.GEN_AI_TOKEN_TYPE: sc.TOKEN_TYPE_INPUT}
        self.output_usage: dict[str, AttributeValue] = {**call, sc.GEN_AI_TOKEN_TYPE: sc.TOKEN_TYPE_OUTPUT}
        self.wire_key: Key = tuple(wire.items())
        self.phase_keys: dict[str, Key] = {}
        self.finish_keys: dict[str, Key] = {}


class Recorder:
    """Owns the tracer and the instruments; turns finished Timelines into telemetry."""

    # The instruments, one per row of instruments.INSTRUMENTS it owns (instruments.CALL), made in __init__.
    _duration: Histogram
    _ttfc: Histogram
    _ttft: Histogram
    _tpot: Histogram
    _token_usage: Histogram
    _chunk_gap: Histogram | None
    _input_tokens: SummedCounter
    _cache_read: SummedCounter
    _cache_creation: SummedCounter
    _output_tokens: SummedCounter
    _reasoning_tokens: SummedCounter
    _phase: SummedCounter
    _connections: SummedCounter
    _request_bytes: SummedCounter
    _response_bytes: SummedCounter
    _retries: SummedCounter
    _server_time: SummedCounter
    _server_reports: SummedCounter
    _finish_reasons: SummedCounter
    _sdk_clients: SummedCounter
    _prefix_input: SummedCounter
    _prefix_cache_read: SummedCounter
    _conversation_input: Histogram
    _conversation_ttft: Histogram

    def __init__(self, tracer: Tracer, meter: Meter, settings: Settings) -> None:
        self.tracer = tracer
        self._suppressible = not _plain(tracer)
        """Whether the tracer may honour suppression (logfire's does; the SDK's and the no-op one do not)."""
        if self._suppressible:
            global _suppressible_in_use
            _suppressible_in_use = True
        self._sums_onto_spans = not _plain(meter)
        """Whether the meter may be one that adds what it records to the current span (logfire's)."""
        self.settings = settings
        self._slow = tail.SlowTail()
        self._budget = tail.Budget(settings.tail_share)
        self._phase_keys: dict[str, str] = {}
        self._series_cache: dict[tuple[Any, ...], _Series] = {}
        self._bound = _Bounds(settings.metric_value_limit)
        for attr, instrument in instruments.make_all(meter, settings, instruments.CALL).items():
            setattr(self, "_" + attr, instrument)
        self.actions = AppRecorder(tracer, meter, settings, self._bound)
        """The spans and metrics of the app's actions and phases (``firsttoken.action``/``phase``)."""

    # -- start -----------------------------------------------------------------------------

    def start(self, tl: Timeline, app_suppressed: bool | None = None) -> Span:
        """Start the call span with the attributes a head sampler needs.

        ``app_suppressed``: whether the app's context suppressed instrumentation when it called the
        SDK (None: not known). When it did not, suppression on now was set inside the SDK call by
        another instrumentation for those below it (``logfire.instrument_openai()`` does by default):
        the span is started as the app's context would have it, and recorded in every provider. When
        the app did, or it is not known, the span is started under the context as it is.
        """
        attrs: dict[str, AttributeValue] = {
            sc.GEN_AI_OPERATION_NAME: tl.operation,
            sc.GEN_AI_PROVIDER_NAME: tl.provider,
        }
        if tl.request_model:
            attrs[sc.GEN_AI_REQUEST_MODEL] = tl.request_model
        if tl.server_address:
            attrs[sc.SERVER_ADDRESS] = tl.server_address
            if tl.server_port is not None:
                attrs[sc.SERVER_PORT] = tl.server_port
        name = f"{tl.operation} {tl.request_model}" if tl.request_model else tl.operation
        token = _set_aside() if app_suppressed is False and self._suppressible else None
        try:
            span = self.tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attrs, start_time=tl.start_wall_ns)
        finally:
            if token is not None:
                otel_context.detach(token)
        tl.span = span
        return span

    # -- sessions: a websocket's life, parent of its calls (OpenAI Realtime) -----------------

    def start_session(self, name: str, attributes: dict[str, AttributeValue], start_wall_ns: int) -> Span:
        """Start a session span (CLIENT) under the app's current context."""
        return self.tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attributes, start_time=start_wall_ns)

    def start_in(self, tl: Timeline, session: Span) -> Span:
        """Start a call span as a child of a session span, whatever context is current."""
        token = otel_context.attach(trace.set_span_in_context(session))
        try:
            return self.start(tl)
        finally:
            otel_context.detach(token)

    def end_session(
        self,
        span: Span,
        attributes: dict[str, AttributeValue],
        events: list[tuple[int, str, dict[str, AttributeValue]]],
        error_type: str | None,
    ) -> None:
        """End a session span with what was learnt of it: attributes, (epoch ns, name, attributes)
        events, and ``error_type`` when it failed. Never raises."""
        try:
            if span.is_recording():
                span.set_attributes(attributes)
                for at, name, attrs in events:
                    span.add_event(name, attrs, timestamp=at)
                if error_type is not None:
                    span.set_attribute(sc.ERROR_TYPE, error_type)
                    span.set_status(Status(StatusCode.ERROR, error_type))
        except Exception:
            internal_error("recording a session failed")
        finally:
            span.end()

    # -- end -------------------------------------------------------------------------------

    def finish(self, tl: Timeline) -> None:
        """Record everything about a finished call. Never raises."""
        if tl.span is None:
            return
        # A span that was recorded at its start is ended with suppression set aside too, wherever the
        # call ends: a provider that honours suppression would otherwise never export it.
        token = _set_aside() if self._suppressible and tl.span.is_recording() else None
        try:
            self._finish(tl, tl.span)
        finally:
            if token is not None:
                otel_context.detach(token)

    def _finish(self, tl: Timeline, span: Span) -> None:
        try:
            phases = tl.phases()
            totals: dict[str, int] = {}
            for start, end, name in phases:
                totals[name] = totals.get(name, 0) + end - start
            if span.is_recording():
                self._annotate(span, tl, totals)
                mode = self.settings.phase_spans
                if mode == PHASE_SPANS_TAIL:
                    budget = self._budget
                    budget.credit()
                    if tail.in_tail(tl, totals, self._slow, self.settings.targets):
                        if budget.take():
                            self._phase_spans(span, tl, phases)
                        else:
                            span.set_attribute(sc.FT_WATERFALL_CAPPED, True)
                elif mode == PHASE_SPANS_ALWAYS:
                    self._phase_spans(span, tl, phases)
            # Metrics in the context of the span's identity: exemplars link to it. Not the span object
            # itself: logfire's meter sums gen_ai.client.token.usage onto the current span and its
            # ancestors (its own spans' totals), where firsttoken's tokens are not theirs to count.
            ctx = trace.set_span_in_context(
                NonRecordingSpan(span.get_span_context()) if self._sums_onto_spans else span
            )
            sums: list[tuple[SummedCounter, float, Key]] = []
            series = self._series(tl)
            self._metrics(tl, series, ctx, sums)
            self._wire_metrics(tl, series, totals, sums)
            add_all(sums)
        except Exception:  # never let telemetry break the app
            internal_error("recording a call failed")
        finally:
            end_ns = tl.end_ns if tl.end_ns is not None else tl.last_observed_ns()
            span.end(end_time=tl.wall_ns(end_ns))
            if tl.action is not None:
                tl.action.add_call(tl.start_ns, end_ns)

    def _annotate(self, span: Span, tl: Timeline, totals: dict[str, int]) -> None:
        attrs: dict[str, AttributeValue] = dict(tl.request)
        keys = self._phase_keys
        for name, ns in totals.items():
            key = keys.get(name)
            if key is None:
                key = keys[name] = sc.FT_PHASE_DURATION_PREFIX + name
            attrs[key] = ns / 1e9
        if tl.stream:
            attrs[sc.GEN_AI_REQUEST_STREAM] = True
        if tl.api_type:
            attrs[sc.OPENAI_API_TYPE] = tl.api_type
        if tl.conversation_id:
            attrs[sc.GEN_AI_CONVERSATION_ID] = tl.conversation_id
        if tl.traffic_class:
            attrs[sc.FT_TRAFFIC_CLASS] = tl.traffic_class
        if tl.prefix_hash:
            attrs[sc.FT_PREFIX_HASH] = tl.prefix_hash
        if tl.conversation_turn is not None:
            attrs[sc.FT_CONVERSATION_TURN] = tl.conversation_turn
        if tl.new_client:
            attrs[sc.FT_SDK_CLIENT_NEW] = True
        if tl.response_id:
            attrs[sc.GEN_AI_RESPONSE_ID] = tl.response_id
        if tl.response_model:
            attrs[sc.GEN_AI_RESPONSE_MODEL] = tl.response_model
        if tl.finish_reasons:
            attrs[sc.GEN_AI_RESPONSE_FINISH_REASONS] = [tl.finish_reasons[i] for i in sorted(tl.finish_reasons)]
        for key, value in (
            (sc.GEN_AI_USAGE_INPUT_TOKENS, tl.input_tokens),
            (sc.GEN_AI_USAGE_OUTPUT_TOKENS, tl.output_tokens),
            (sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, tl.cache_read_tokens),
            (sc.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS, tl.cache_creation_tokens),
            (sc.GEN_AI_EMBEDDINGS_DIMENSION_COUNT, tl.embedding_dimensions),
            (sc.HTTP_RESPONSE_STATUS_CODE, tl.status_code),
        ):
            if value is not None:
                attrs[key] = value
        if tl.reasoning_tokens:  # absent: none reported (zero, or a model that does not reason)
            attrs[sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] = tl.reasoning_tokens
        if tl.stream:
            attrs[sc.FT_CHUNK_COUNT] = tl.chunk_count
            ttfc = tl.time_to_first_chunk_s
            if ttfc is not None:
                attrs[sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] = ttfc
            ttft = tl.time_to_first_token_s
            if ttft is not None:
                attrs[sc.FT_TIME_TO_FIRST_TOKEN] = ttft
            tpot = tl.time_per_output_token_s
            counted = tl.decode_tokens()
            if tpot is not None and counted is not None:
                attrs[sc.FT_TIME_PER_OUTPUT_TOKEN] = tpot
                if counted[1] != sc.TOKEN_SOURCE_USAGE:  # absent: from the provider's usage
                    attrs[sc.FT_DECODE_TOKEN_SOURCE] = counted[1]
                if tpot > 0:
                    attrs[sc.FT_OUTPUT_TOKENS_PER_SECOND] = 1.0 / tpot
        if tl.headers_ns is not None:
            attrs[sc.FT_TIME_TO_RESPONSE_HEADERS] = (tl.headers_ns - tl.start_ns) / 1e9
        if tl.request_id:
            attrs[sc.FT_REQUEST_ID] = tl.request_id
        if tl.new_connections or tl.reused_connections:
            attrs[sc.FT_CONNECTION_REUSED] = tl.connect_ns is None
        if tl.request_bytes is not None:
            attrs[sc.FT_REQUEST_BODY_SIZE] = tl.request_bytes
        if tl.response_bytes is not None:
            attrs[sc.FT_RESPONSE_BODY_SIZE] = tl.response_bytes
        if tl.attempts > 1:  # absent: one attempt (or none sent), as http.request.resend_count's absence says
            attrs[sc.FT_ATTEMPTS] = tl.attempts
            attrs[sc.HTTP_REQUEST_RESEND_COUNT] = tl.attempts - 1
        if tl.end_reason:
            attrs[sc.FT_END_REASON] = tl.end_reason
        attrs.update(tl.extra)
        if tl.capture:
            attrs.update(self._content(tl.capture))
        if tl.error_type:
            attrs[sc.ERROR_TYPE] = tl.error_type
            span.set_status(Status(StatusCode.ERROR, tl.error_message or tl.error_type))
        span.set_attributes(attrs)
        if len(tl.attempt_log) > 1:  # retries: each attempt's outcome, when it came back
            for number, (at_ns, status) in enumerate(tl.attempt_log, start=1):
                event: dict[str, AttributeValue] = {sc.FT_ATTEMPT: number}
                if status is not None:
                    event[sc.HTTP_RESPONSE_STATUS_CODE] = status
                span.add_event(sc.EVENT_ATTEMPT, event, timestamp=tl.wall_ns(at_ns))

    def _content(self, capture: dict[str, str]) -> dict[str, AttributeValue]:
        out: dict[str, AttributeValue] = {}
        limit = self.settings.content_max_length
        redact = self.settings.redact
        capture = dict(capture)
        streamed = capture.pop(STREAM_TEXT_KEY, None)
        if streamed is not None and sc.GEN_AI_OUTPUT_MESSAGES not in capture:
            capture[sc.GEN_AI_OUTPUT_MESSAGES] = json.dumps(
                [{"role": "assistant", "content": streamed}], ensure_ascii=False
            )
        for key, text in capture.items():
            value: str | None = text
            if redact is not None:
                try:
                    value = redact(key, text)
                except Exception:  # the app's redact hook: its error, dropped with the value
                    log.debug("firsttoken: the redact hook raised; dropping %s", key, exc_info=True)
                    value = None
            if value is None:
                continue
            if len(value) > limit:
                value = value[: limit - 14] + "...[truncated]"
            out[key] = value
        return out

    def _phase_spans(self, span: Span, tl: Timeline, phases: list[tuple[int, int, str]]) -> None:
        parent = trace.set_span_in_context(span)
        for start, end, name in phases:
            child = self.tracer.start_span(
                sc.PHASE_SPAN_PREFIX + name,
                context=parent,
                kind=SpanKind.INTERNAL,
                attributes={sc.FT_PHASE: name},
                start_time=tl.wall_ns(start),
            )
            child.end(end_time=tl.wall_ns(end))

    def _series(self, tl: Timeline) -> _Series:
        """The attribute sets of a call's metrics, built once per series and reused."""
        ident = (
            tl.operation,
            tl.provider,
            tl.request_model,
            tl.traffic_class,
            tl.stream,
            tl.response_model,
            tl.server_address,
            tl.server_port,
            tl.error_type,
            tl.extra.get(sc.FT_UPSTREAM_PROVIDER),
        )
        series = self._series_cache.get(ident)
        if series is None:
            if len(self._series_cache) >= _MAX_SERIES:  # models or errors named per call: start over
                self._series_cache = {}
            series = self._series_cache[ident] = _Series(tl, self._bound)
        return series

    def _metrics(self, tl: Timeline, series: _Series, ctx: Any, sums: list[tuple[SummedCounter, float, Key]]) -> None:
        attrs = series.call
        duration = tl.duration_s
        if duration is not None:
            self._duration.record(duration, attrs, context=ctx)
        if tl.stream:
            ttfc = tl.time_to_first_chunk_s
            if ttfc is not None:
                self._ttfc.record(ttfc, attrs, context=ctx)
            ttft = tl.time_to_first_token_s
            if ttft is not None:
                self._ttft.record(ttft, attrs, context=ctx)
            tpot = tl.time_per_output_token_s
            if tpot is not None:
                self._tpot.record(tpot, attrs, context=ctx)
            if self._chunk_gap is not None and tl.chunk_gaps:
                for gap in tl.chunk_gaps:
                    self._chunk_gap.record(gap / 1e9, attrs, context=ctx)
        key = series.call_key
        if tl.input_tokens is not None:
            self._token_usage.record(tl.input_tokens, series.input_usage, context=ctx)
            # Zero is counted too, so that the cache-hit ratio has a denominator and a numerator
            # for every model that reported usage.
            sums.append((self._input_tokens, tl.input_tokens, key))
            sums.append((self._cache_read, tl.cache_read_tokens or 0, key))
            sums.append((self._cache_creation, tl.cache_creation_tokens or 0, key))
        if tl.output_tokens is not None:
            self._token_usage.record(tl.output_tokens, series.output_usage, context=ctx)
            sums.append((self._output_tokens, tl.output_tokens, key))
            if tl.reasoning_tokens:
                sums.append((self._reasoning_tokens, tl.reasoning_tokens, key))
        self._lever_metrics(tl, series, ctx, sums)

    def _wire_metrics(
        self, tl: Timeline, series: _Series, totals: dict[str, int], sums: list[tuple[SummedCounter, float, Key]]
    ) -> None:
        """Where the time went: phase durations, connection reuse, bytes on the wire."""
        key = series.wire_key
        phase = self._phase
        phase_keys = series.phase_keys
        for name, ns in totals.items():
            phase_key = phase_keys.get(name)
            if phase_key is None:
                phase_key = phase_keys[name] = (*key, (sc.FT_PHASE, name))
            sums.append((phase, ns / 1e9, phase_key))
        if tl.new_connections:
            sums.append((self._connections, tl.new_connections, (*key, (sc.FT_CONNECTION_OUTCOME, "new"))))
        if tl.reused_connections:
            sums.append((self._connections, tl.reused_connections, (*key, (sc.FT_CONNECTION_OUTCOME, "reused"))))
        if tl.request_bytes is not None:
            sums.append((self._request_bytes, tl.request_bytes, key))
        if tl.response_bytes is not None:
            sums.append((self._response_bytes, tl.response_bytes, key))
        if tl.attempts > 1:
            sums.append((self._retries, tl.attempts - 1, key))
        for name, seconds in tl.server_timing.items():
            timed = (*key, (sc.FT_SERVER_TIMING_PHASE, name))
            sums.append((self._server_time, seconds, timed))
            sums.append((self._server_reports, 1, timed))

    def _lever_metrics(
        self, tl: Timeline, series: _Series, ctx: Any, sums: list[tuple[SummedCounter, float, Key]]
    ) -> None:
        """The signals behind latency levers: stop reasons, prefixes, context growth, client reuse."""
        key = series.lever_key
        finish_keys = series.finish_keys
        for reason in tl.finish_reasons.values():
            finish_key = finish_keys.get(reason)
            if finish_key is None:
                finish_key = finish_keys[reason] = (*key, (sc.FT_FINISH_REASON, reason))
            sums.append((self._finish_reasons, 1, finish_key))
        if tl.new_client:
            sums.append((self._sdk_clients, 1, key))
        if tl.prefix_hash and tl.input_tokens is not None:
            prefixed = (*key, (sc.FT_PREFIX_HASH, tl.prefix_hash))
            sums.append((self._prefix_input, tl.input_tokens, prefixed))
            sums.append((self._prefix_cache_read, tl.cache_read_tokens or 0, prefixed))
        if tl.conversation_turn is not None:
            turns = {**series.lever, sc.FT_CONVERSATION_TURNS: turn_bucket(tl.conversation_turn)}
            if tl.input_tokens is not None:
                self._conversation_input.record(tl.input_tokens, turns, context=ctx)
            ttft = tl.time_to_first_token_s
            if ttft is not None:
                self._conversation_ttft.record(ttft, turns, context=ctx)
