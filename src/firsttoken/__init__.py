"""firsttoken: LLM latency observability with OpenTelemetry.

One line measures every call the official ``openai`` SDK makes, with time to first token, time per
output token and end-to-end latency as spans and metrics::

    import firsttoken
    firsttoken.instrument()
"""

from __future__ import annotations

from typing import Any

from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider

from ._version import __version__
from .app import action, conversation, phase, traffic_class
from .config import ConfigError, FirstTokenWarning
from .instrumentor import FirstTokenInstrumentor
from .race import RaceResult, arace, race  # noqa: F401  (public: firsttoken.race / firsttoken.arace)

__all__ = [
    "ConfigError",
    "FirstTokenInstrumentor",
    "FirstTokenWarning",
    "__version__",
    "action",
    "conversation",
    "instrument",
    "is_instrumented",
    "phase",
    "traffic_class",
    "uninstrument",
]


def instrument(
    *,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    capture_content: bool | None = None,
    **options: Any,
) -> bool:
    """Measure every supported LLM SDK that is installed. Idempotent.

    With no providers passed and none set globally, OTLP export is set up from the standard
    ``OTEL_*`` environment variables. ``capture_content`` (default: from
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``, else off) records prompts and
    completions on spans. Other options: ``chunk_metrics``, ``phase_spans``, ``provider_hosts``,
    ``content_max_length``, ``redact`` (see docs/configuration.md).

    Returns whether anything is instrumented. Bad settings give one :class:`FirstTokenWarning`
    naming the problem, and the app runs on uninstrumented.
    """
    instrumentor = FirstTokenInstrumentor()
    if instrumentor.is_instrumented_by_opentelemetry:
        return True
    kwargs: dict[str, Any] = dict(options)
    if tracer_provider is not None:
        kwargs["tracer_provider"] = tracer_provider
    if meter_provider is not None:
        kwargs["meter_provider"] = meter_provider
    if capture_content is not None:
        kwargs["capture_content"] = capture_content
    result = instrumentor.instrument(**kwargs)
    if result is False:
        # BaseInstrumentor marks itself instrumented whatever _instrument returned.
        instrumentor._is_instrumented_by_opentelemetry = False
        return False
    return True


def uninstrument() -> None:
    """Restore every patched function to its original. Safe to call when not instrumented."""
    instrumentor = FirstTokenInstrumentor()
    if instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.uninstrument()


def is_instrumented() -> bool:
    return bool(FirstTokenInstrumentor().is_instrumented_by_opentelemetry)
