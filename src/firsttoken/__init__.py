"""firsttoken: LLM latency observability with OpenTelemetry.

One line measures every call the official ``openai`` SDK makes, with time to first token, time per
output token and end-to-end latency as spans and metrics::

    import firsttoken
    firsttoken.instrument()
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

from . import _install
from ._version import __version__
from .app import action, conversation, phase, traffic_class
from .config import ConfigError, FirstTokenWarning
from .race import RaceResult, arace, race  # noqa: F401  (public: firsttoken.race / firsttoken.arace)

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

    from .instrumentor import FirstTokenInstrumentor

__all__ = [
    "ConfigError",
    "FirstTokenInstrumentor",
    "FirstTokenWarning",
    "__version__",
    "action",
    "conversation",
    "flush",
    "instrument",
    "is_instrumented",
    "phase",
    "shutdown",
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
    """Measure every supported LLM SDK the app uses, and plain httpx calls to LLM APIs. Idempotent.

    Imports nothing the app has not: an SDK (or httpx) already imported is patched now, one the
    app imports later is patched when it does. With no providers passed and none set globally,
    OTLP export is set up from the standard ``OTEL_*`` environment variables. ``capture_content``
    (default: from ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``, else off) records
    prompts and completions on spans. Other options: ``chunk_metrics``, ``phase_spans``,
    ``tail_share``, ``targets``, ``wire_phases``, ``provider_hosts``, ``content_max_length``, ``redact``,
    ``metric_value_limit`` (see docs/configuration.md).

    Returns whether firsttoken is active. A bad setting gives one :class:`FirstTokenWarning` naming
    the problem and falls back to its default; the others work.
    """
    kwargs: dict[str, Any] = dict(options)
    if tracer_provider is not None:
        kwargs["tracer_provider"] = tracer_provider
    if meter_provider is not None:
        kwargs["meter_provider"] = meter_provider
    if capture_content is not None:
        kwargs["capture_content"] = capture_content
    return _install.install(**kwargs)


def uninstrument() -> None:
    """Restore every patched function to its original. Safe to call when not instrumented."""
    # Installed through ``opentelemetry-instrument``: let the instrumentor know it is undone too.
    instrumentor = sys.modules.get(f"{__name__}.instrumentor")
    if instrumentor is not None and instrumentor.FirstTokenInstrumentor().is_instrumented_by_opentelemetry:
        instrumentor.FirstTokenInstrumentor().uninstrument()
    _install.uninstall()


def flush(timeout: float | None = None) -> bool:
    """Hand over everything recorded so far, waiting at most ``timeout`` seconds (default:
    ``FIRSTTOKEN_SHUTDOWN_TIMEOUT``, 2 s): the calls whose streams were dropped are recorded, then the
    providers firsttoken records into (its own or the app's) flush their spans and make a final metric
    collection and export. Returns whether everything was handed over in time.

    Call it where a process may be frozen or killed without exiting: at the end of a serverless handler,
    in a worker's exit hook (docs/deploy.md). Never raises.
    """
    return _install.flush(timeout)


def shutdown(timeout: float | None = None) -> bool:
    """Flush (as :func:`flush`), stop measuring (as :func:`uninstrument`) and, when firsttoken set up
    export itself, shut its providers down. Providers the app passed or set stay the app's to shut down.
    Returns whether everything was handed over in time. Never raises. ``timeout`` (seconds; default
    ``FIRSTTOKEN_SHUTDOWN_TIMEOUT``) bounds the whole call, the flush and the shutdown together.

    Not needed for exits firsttoken sees (normal exit, SIGTERM/SIGINT, worker pools): see docs/deploy.md.
    """
    # One budget for the whole call: the shutdown gets what the flush left of it.
    budget = _install.shutdown_budget(timeout)
    deadline = time.monotonic() + budget
    done = _install.flush(budget)
    uninstrument()
    return _install.close_own(max(deadline - time.monotonic(), 0.001)) and done


def is_instrumented() -> bool:
    return _install.is_installed()


def __getattr__(name: str) -> Any:
    # The instrumentor pulls in opentelemetry-instrumentation, slow to import: only on demand.
    if name == "FirstTokenInstrumentor":
        from .instrumentor import FirstTokenInstrumentor

        return FirstTokenInstrumentor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
