"""The application's telemetry: the spans and metrics of ``firsttoken.action`` and ``firsttoken.phase``.

:mod:`firsttoken.app` opens and closes the scopes; this module records them: an action's span and
its end-to-end duration, how many LLM calls it made and how long at least one was in flight (its
``llm.*`` attributes and the busy-time histogram), and an app phase's span and duration. The calls
themselves are recorded by :class:`firsttoken.recorder.Recorder`, which makes the one
:class:`AppRecorder` of an installation and shares with it its tracer and the bounds of the metric
attribute values (a traffic class counts once against its limit, whether a call or an action
brought it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opentelemetry import trace
from opentelemetry.metrics import Histogram, Meter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.util.types import AttributeValue

from . import instruments
from . import semconv as sc
from .context import ActionState
from .timeline import is_cancellation


class AppRecorder:
    """Action and app-phase spans and metrics; one per :class:`~firsttoken.recorder.Recorder`."""

    # The instruments of the rows of instruments.INSTRUMENTS it owns (instruments.APP), made in __init__.
    _action_duration: Histogram
    _action_llm_busy: Histogram
    _phase_duration: Histogram

    def __init__(self, tracer: Tracer, meter: Meter, settings: Any, bound: Callable[[str, str], str]) -> None:
        self.tracer = tracer
        self._bound = bound
        for attr, instrument in instruments.make_all(meter, settings, instruments.APP).items():
            setattr(self, "_" + attr, instrument)

    # -- actions (firsttoken.action) ---------------------------------------------------------

    def start_action(self, state: ActionState, attributes: dict[str, Any]) -> Span:
        attrs: dict[str, AttributeValue] = {sc.FT_ACTION_NAME: state.name}
        if state.traffic_class:
            attrs[sc.FT_TRAFFIC_CLASS] = state.traffic_class
        for key, value in attributes.items():
            if isinstance(value, (str, bool, int, float)):
                attrs[key] = value
        return self.tracer.start_span(state.name, kind=SpanKind.INTERNAL, attributes=attrs)

    def finish_action(self, state: ActionState, end_ns: int, exc: BaseException | None) -> None:
        span: Span = state.span
        duration = (end_ns - state.start_ns) / 1e9
        calls, total_ns, busy_ns = state.llm_summary(end_ns)
        bound = self._bound
        metric_attrs: dict[str, AttributeValue] = {sc.FT_ACTION_NAME: bound(sc.FT_ACTION_NAME, state.name)}
        if state.traffic_class:
            metric_attrs[sc.FT_TRAFFIC_CLASS] = bound(sc.FT_TRAFFIC_CLASS, state.traffic_class)
        try:
            attrs: dict[str, AttributeValue] = {
                sc.FT_ACTION_LLM_CALLS: calls,
                sc.FT_ACTION_LLM_TIME: total_ns / 1e9,
                sc.FT_ACTION_LLM_BUSY_TIME: busy_ns / 1e9,
            }
            if duration > 0:
                attrs[sc.FT_ACTION_LLM_SHARE] = min(1.0, busy_ns / 1e9 / duration)
            if busy_ns > 0:
                attrs[sc.FT_ACTION_LLM_PARALLELISM] = total_ns / busy_ns
            # Leaving a generator early, cancellation and Ctrl-C are not errors (as for calls).
            if exc is not None and not isinstance(exc, GeneratorExit) and not is_cancellation(exc):
                error = type(exc).__qualname__
                attrs[sc.ERROR_TYPE] = error
                metric_attrs[sc.ERROR_TYPE] = error
                span.set_status(Status(StatusCode.ERROR, error))
            span.set_attributes(attrs)
            ctx = trace.set_span_in_context(span)
            self._action_duration.record(duration, metric_attrs, context=ctx)
            self._action_llm_busy.record(busy_ns / 1e9, metric_attrs, context=ctx)
        finally:
            span.end()

    # -- app phases (firsttoken.phase) -------------------------------------------------------

    def start_app_phase(self, name: str, state: ActionState | None) -> Span:
        attrs: dict[str, AttributeValue] = {sc.FT_APP_PHASE: name}
        if state is not None:
            attrs[sc.FT_ACTION_NAME] = state.name
        return self.tracer.start_span(name, kind=SpanKind.INTERNAL, attributes=attrs)

    def finish_app_phase(
        self, span: Span, name: str, state: ActionState | None, duration: float, exc: BaseException | None
    ) -> None:
        bound = self._bound
        attrs: dict[str, AttributeValue] = {sc.FT_APP_PHASE: bound(sc.FT_APP_PHASE, name)}
        if state is not None:
            attrs[sc.FT_ACTION_NAME] = bound(sc.FT_ACTION_NAME, state.name)
            if state.traffic_class:
                attrs[sc.FT_TRAFFIC_CLASS] = bound(sc.FT_TRAFFIC_CLASS, state.traffic_class)
        try:
            if exc is not None:
                attrs[sc.ERROR_TYPE] = type(exc).__qualname__
                span.set_status(Status(StatusCode.ERROR, type(exc).__qualname__))
            self._phase_duration.record(duration, attrs, context=trace.set_span_in_context(span))
        finally:
            span.end()
