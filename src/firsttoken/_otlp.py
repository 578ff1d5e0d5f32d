"""Set up export from the standard ``OTEL_*`` variables, for apps that configured nothing.

Only used when ``instrument()`` is given no providers and no global ones are set (then also for
``opentelemetry-instrument`` without ``opentelemetry-distro``), so that one line is enough in
production. Endpoint, headers and compression are read by the OTLP exporters themselves; the service
name and resource by ``Resource.create()``. What firsttoken adds:

- ``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER``: ``otlp`` (default), ``console``, ``none``,
  or a comma list of them, as the specification allows;
- a ``service.instance.id`` (a UUID per process, as the OTel resource detectors make) when the app's
  resource and environment set none, so that replicas of one service stay apart;
- a ``service.name`` from what the process runs (``chat_app`` for ``python chat_app.py``, ``myapp.worker``
  for ``python -m myapp.worker``) when nothing names the service, rather than the SDK's
  ``unknown_service:python``, the same for every app;
- a metric export every 15 s unless ``OTEL_METRIC_EXPORT_INTERVAL`` says otherwise;
- short exporter timeouts (3 s unless ``OTEL_EXPORTER_OTLP[_TRACES|_METRICS]_TIMEOUT``, in seconds, is set) and
  a flush at exit bounded by ``FIRSTTOKEN_SHUTDOWN_TIMEOUT`` (2000 ms), so that a process whose
  collector is down still exits promptly;
- one log line, not one per retry, when the collector does not answer (:class:`UnreachableFilter`).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import logging
import os
import re
import sys
import threading
import time
import uuid
import weakref
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from opentelemetry import metrics, trace

from ._internal import internal_error
from .config import ENV_SHUTDOWN_TIMEOUT, ConfigError, or_default, redact

log = logging.getLogger("firsttoken")

ENV_PROTOCOL = "OTEL_EXPORTER_OTLP_PROTOCOL"
ENV_TRACES_PROTOCOL = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
ENV_METRICS_PROTOCOL = "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"
ENV_ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
ENV_TRACES_ENDPOINT = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
ENV_METRICS_ENDPOINT = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
ENV_TRACES_EXPORTER = "OTEL_TRACES_EXPORTER"
ENV_METRICS_EXPORTER = "OTEL_METRICS_EXPORTER"
ENV_TIMEOUT = "OTEL_EXPORTER_OTLP_TIMEOUT"
ENV_TRACES_TIMEOUT = "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"
ENV_METRICS_TIMEOUT = "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT"
ENV_METRIC_EXPORT_INTERVAL = "OTEL_METRIC_EXPORT_INTERVAL"
ENV_METRIC_EXPORT_TIMEOUT = "OTEL_METRIC_EXPORT_TIMEOUT"

EXPORT_TIMEOUT_S = 3.0
"""Per export, retries included, unless an ``OTEL_EXPORTER_OTLP_*TIMEOUT`` is set (the SDK's is 10 s)."""
METRIC_EXPORT_INTERVAL_MS = 15_000
"""Unless ``OTEL_METRIC_EXPORT_INTERVAL`` is set (the SDK's is 60 s); the dashboards assume 15 s."""
SHUTDOWN_TIMEOUT_MS = 2_000
"""The most the flush at exit may take, unless ``FIRSTTOKEN_SHUTDOWN_TIMEOUT`` says otherwise."""
QUIET_S = 600.0
"""After the one line about an unreachable collector, the next one waits this long (or a success)."""

_PROTOCOLS = ("http/protobuf", "grpc")
_EXPORTERS = ("otlp", "console", "none")
_SERVICE_INSTANCE_ID = "service.instance.id"
_SERVICE_NAME = "service.name"


def globals_unset() -> bool:
    """Whether neither a global tracer provider nor a global meter provider has been set."""
    tracer_unset = isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    meter_unset = type(metrics.get_meter_provider()).__name__ == "_ProxyMeterProvider"
    return tracer_unset and meter_unset


def _protocol(signal_env: str, environ: Mapping[str, str]) -> str:
    for name in (signal_env, ENV_PROTOCOL):
        raw = environ.get(name)
        if raw:
            value = raw.strip().lower()
            if value not in _PROTOCOLS:
                raise ConfigError(f"{name}={raw!r} is not supported: use http/protobuf or grpc")
            return value
    return "http/protobuf"  # the specification's default


def exporter_names(env_name: str, environ: Mapping[str, str]) -> list[str]:
    """``OTEL_TRACES_EXPORTER``-style list: ``otlp`` when unset; ``none`` entries name nothing."""
    raw = environ.get(env_name)
    if raw is None or not raw.strip():
        return ["otlp"]
    names = [part.strip().lower() for part in raw.split(",") if part.strip()]
    unknown = [n for n in names if n not in _EXPORTERS]
    if unknown:
        raise ConfigError(
            f"{env_name}={raw!r}: firsttoken's own set-up knows otlp, console and none "
            "(for other exporters, install opentelemetry-distro or pass your own providers)"
        )
    return list(dict.fromkeys(n for n in names if n != "none"))


def _millis(name: str, environ: Mapping[str, str], default: int) -> int:
    raw = environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a whole number of milliseconds") from None
    if value < 0:
        raise ConfigError(f"{name}={raw!r} must be >= 0 milliseconds")
    return value


def _interval(environ: Mapping[str, str]) -> int:
    interval_ms = _millis(ENV_METRIC_EXPORT_INTERVAL, environ, METRIC_EXPORT_INTERVAL_MS)
    if interval_ms == 0:
        raise ConfigError(f"{ENV_METRIC_EXPORT_INTERVAL}='0': the metric export interval must be > 0 milliseconds")
    return interval_ms


def _timeout(signal_env: str, environ: Mapping[str, str]) -> float:
    """Seconds per export: the signal's variable, else the general one (both in seconds, as the
    Python OTLP exporters read them), else firsttoken's short default."""
    for name in (signal_env, ENV_TIMEOUT):
        raw = environ.get(name, "").strip()
        if raw:
            try:
                value = float(raw)
            except ValueError:
                raise ConfigError(f"{name}={raw!r} is not a number of seconds") from None
            if not value > 0 or value == float("inf"):
                raise ConfigError(f"{name}={raw!r} must be a positive number of seconds")
            return value
    return EXPORT_TIMEOUT_S


# -- what was and was not exported -------------------------------------------------------------------


class ExportTally:
    """Counts of what the OTLP exporters firsttoken set up delivered and failed to deliver.

    Spans are counted one by one; metrics by export (one per reader collection).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.exported: dict[str, int] = {"spans": 0, "metrics": 0}
        self.failed: dict[str, int] = {"spans": 0, "metrics": 0}
        self._on_success: list[Callable[[], None]] = []
        self._on_spans_lost: list[Callable[[int], None]] = []

    def record(self, signal: str, count: int, ok: bool) -> None:
        with self._lock:
            (self.exported if ok else self.failed)[signal] += count
            callbacks = list(self._on_success) if ok else []
            lost = list(self._on_spans_lost) if not ok and signal == "spans" else []
        for callback in callbacks:
            callback()
        for on_lost in lost:
            on_lost(count)

    def on_success(self, callback: Callable[[], None]) -> None:
        with self._lock:
            self._on_success.append(callback)

    def on_spans_lost(self, callback: Callable[[int], None]) -> None:
        """``callback(count)`` whenever spans are given up on (dropped from the held ones, or failed at the end)."""
        with self._lock:
            self._on_spans_lost.append(callback)


RETRY_SPANS = 8192
"""Spans held for another try while the collector does not take them (the oldest are dropped first)."""
RETRY_WINDOW_S = 30.0
"""A held batch is dropped once it has waited this long (a collector restart takes seconds; a batch that
is never taken is not held forever)."""
QUICK_FAILURE_S = 0.5
"""A held batch refused faster than this (connection refused, an error status) does not stop the new batch
from being tried; a slower failure (a collector that does not answer) does, so an export never waits twice."""


class Held:
    """Span batches the collector did not take, held for the next export: a collector restarting (a deploy,
    a crash) is back within seconds, and what the app sent meanwhile then still arrives.

    Bounded in spans (``RETRY_SPANS``, oldest dropped first) and in time (``RETRY_WINDOW_S``); what is
    dropped, and what is still held when the exporter shuts down, is counted as failed in the tally.
    Metrics need no such buffer: their points are cumulative, so the next export carries what a failed one
    did not (with ``OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE=delta`` a failed export's points are lost).
    """

    def __init__(self, tally: ExportTally, max_spans: int | None = None, window_s: float | None = None) -> None:
        self.tally = tally
        self.max_spans = RETRY_SPANS if max_spans is None else max_spans
        self.window_s = RETRY_WINDOW_S if window_s is None else window_s
        self._lock = threading.Lock()
        self._batches: deque[tuple[Sequence[Any], float]] = deque()
        self.spans = 0
        self.dropped = 0

    def hold(self, batch: Sequence[Any], since: float | None = None) -> None:
        """Hold ``batch``, first refused at ``since`` (monotonic seconds; default now)."""
        since = time.monotonic() if since is None else since
        if time.monotonic() - since > self.window_s:
            self._drop(len(batch))
            return
        with self._lock:
            self._batches.append((batch, since))
            self.spans += len(batch)
            dropped = 0
            while self.spans > self.max_spans and self._batches:
                oldest, _ = self._batches.popleft()
                self.spans -= len(oldest)
                dropped += len(oldest)
        if dropped:
            self._drop(dropped)

    def take(self) -> list[tuple[Sequence[Any], float]]:
        """Every batch held, oldest first, and none held any more; those past the window are dropped."""
        with self._lock:
            batches = list(self._batches)
            self._batches.clear()
            self.spans = 0
        now = time.monotonic()
        kept = [(batch, since) for batch, since in batches if now - since <= self.window_s]
        expired = sum(len(batch) for batch, since in batches if now - since > self.window_s)
        if expired:
            self._drop(expired)
        return kept

    def forget(self) -> None:
        """In a forked child: what the parent held is the parent's to send (sent twice otherwise)."""
        self._lock = threading.Lock()
        self._batches = deque()
        self.spans = 0

    def give_up(self) -> None:
        """At shutdown: what is still held is lost."""
        for batch, _ in self.take():
            self._drop(len(batch))

    def _drop(self, count: int) -> None:
        with self._lock:
            self.dropped += count
        self.tally.record("spans", count, False)


def _counted(base: type[Any], signal: str, tally: ExportTally, buffer: Held | None = None) -> type[Any]:
    """A subclass of an SDK exporter class whose ``export`` also counts the outcome in ``tally``; for
    spans, a batch the collector did not take is held in ``buffer`` (:class:`Held`) and sent again, oldest
    first, before the next one."""

    class Counted(base):  # type: ignore[misc]
        held = buffer

        def export(self, batch: Any, *args: Any, **kwargs: Any) -> Any:
            if self.held is None:
                result = super().export(batch, *args, **kwargs)
                tally.record(signal, 1, _succeeded(result))
                return result
            waiting = self.held.take()
            for index, (old, _since) in enumerate(waiting):
                tried = time.monotonic()
                result = super().export(old, *args, **kwargs)
                if _succeeded(result):
                    tally.record(signal, len(old), True)
                    continue
                for rest, rest_since in waiting[index:]:  # still not taken: hold it and the rest again
                    self.held.hold(rest, rest_since)
                if time.monotonic() - tried > QUICK_FAILURE_S:  # no answer: do not wait twice in one export
                    self.held.hold(batch)
                    return result
                break
            result = super().export(batch, *args, **kwargs)
            if _succeeded(result):
                tally.record(signal, len(batch), True)
            else:
                self.held.hold(batch)
            return result

        def shutdown(self, *args: Any, **kwargs: Any) -> Any:
            if self.held is not None:
                for old, _ in self.held.take():  # one last try each (the exit's own bound applies)
                    ok = _succeeded(super().export(old))
                    tally.record(signal, len(old), ok)
            return super().shutdown(*args, **kwargs)

    Counted.__name__ = Counted.__qualname__ = base.__name__
    return Counted


def _succeeded(result: Any) -> bool:
    return getattr(result, "name", "") == "SUCCESS"


# -- one line when the collector does not answer ----------------------------------------------------

# What the OTLP exporters (http and grpc, SDK 1.30 to 1.45) log while a collector refuses, black-holes
# or cannot be resolved: retry notices, the final give-up, and transport errors the SDK's processors log.
_UNREACHABLE = re.compile(
    r"Transient error|due to timeout, max retries or shutdown|Shutdown in progress, aborting retry|"
    r"Connection refused|Failed to establish a new connection|Max retries exceeded|timed out|"
    r"Name or service not known|StatusCode\.(UNAVAILABLE|DEADLINE_EXCEEDED)|ConnectionError|ConnectTimeout|"
    r"ReadTimeout"
)
_REASONS = (
    ("Connection refused", "connection refused"),
    ("ConnectionRefused", "connection refused"),
    ("timed out", "timed out"),
    ("Timeout", "timed out"),
    ("DEADLINE_EXCEEDED", "timed out"),
    ("Name or service not known", "host not found"),
    ("UNAVAILABLE", "unavailable"),
)
_EXPORTER_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.http.metric_exporter",
    "opentelemetry.exporter.otlp.proto.http",
    "opentelemetry.exporter.otlp.common.http",
    "opentelemetry.exporter.otlp.proto.grpc.exporter",
    "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
    "opentelemetry.exporter.otlp.proto.grpc.metric_exporter",
    "opentelemetry.sdk.trace.export",
    "opentelemetry.sdk._shared_internal",
    "opentelemetry.sdk.metrics._internal.export",
)


def _unreachable(record: logging.LogRecord) -> str | None:
    """The short reason when ``record`` says the collector did not answer, else None."""
    try:
        text = record.getMessage()
    except Exception:
        return None
    if record.exc_info and record.exc_info[1] is not None:
        exc = record.exc_info[1]
        if not isinstance(exc, OSError):  # requests', urllib3's and socket's errors all are
            return None
        text += f" {type(exc).__name__} {exc}"
    elif not _UNREACHABLE.search(text):
        return None
    return next((reason for marker, reason in _REASONS if marker in text), "no answer")


class UnreachableFilter(logging.Filter):
    """Turns the exporters' messages about a collector that does not answer into one line.

    The first such message becomes one warning on the ``firsttoken`` logger naming the endpoint;
    the rest are held back until an export succeeds again or ``QUIET_S`` has passed. Every other
    record (a rejected batch, a bad configuration, an encoding error) goes through untouched.
    """

    def __init__(self, endpoint: str, quiet_s: float = QUIET_S) -> None:
        super().__init__()
        self.endpoint = redact(endpoint)
        self.quiet_s = quiet_s
        self.held_back = 0
        self._lock = threading.Lock()
        self._next_line_at: float | None = None
        self._lost = 0

    def rearm(self) -> None:
        """An export succeeded: the outage is over. What it cost, if anything, is said now, once."""
        with self._lock:
            self._next_line_at = None
            lost, self._lost = self._lost, 0
        if lost:
            log.warning(
                "firsttoken: the OTLP collector at %s answers again; %d spans it did not take within %g s were dropped",
                self.endpoint,
                lost,
                RETRY_WINDOW_S,
            )

    def spans_lost(self, count: int) -> None:
        """Spans given up on during the outage: counted, and said when it ends (:meth:`rearm`, :meth:`at_exit`)."""
        with self._lock:
            self._lost += count

    def at_exit(self, done: bool, budget_s: float) -> None:
        """The export shut down: one line when anything was dropped (in an outage, or at the end)."""
        with self._lock:
            lost, self._lost = self._lost, 0
        if lost:
            log.warning(
                "firsttoken: the OTLP collector at %s did not take %d spans before the exit; they were dropped",
                self.endpoint,
                lost,
            )
        elif not done:
            self.report(f"did not take the last spans and metrics within {budget_s:g} s; they were dropped")

    def filter(self, record: logging.LogRecord) -> bool:
        reason = _unreachable(record)
        if reason is None:
            return True
        self.report(
            f"does not answer ({reason}); spans are held for another try (up to {RETRY_SPANS}, "
            f"{RETRY_WINDOW_S:g} s each) until it does"
        )
        return False

    def report(self, what: str) -> bool:
        """Log ``the OTLP collector at <endpoint> <what>`` unless a line was said in this outage."""
        now = time.monotonic()
        with self._lock:
            say = self._next_line_at is None or now >= self._next_line_at
            if say:
                self._next_line_at = now + self.quiet_s
            else:
                self.held_back += 1
        if say:
            log.warning("firsttoken: the OTLP collector at %s %s (said once per outage)", self.endpoint, what)
        return say

    def install(self, names: Sequence[str] = _EXPORTER_LOGGERS) -> None:
        for name in names:
            logging.getLogger(name).addFilter(self)

    def uninstall(self, names: Sequence[str] = _EXPORTER_LOGGERS) -> None:
        """The exporters are shut down: a later set-up's filter (another endpoint) says the lines."""
        for name in names:
            logging.getLogger(name).removeFilter(self)


# -- providers ---------------------------------------------------------------------------------------


def _endpoint(environ: Mapping[str, str], protocol: str, signal_env: str) -> str:
    for name in (signal_env, ENV_ENDPOINT):
        raw = environ.get(name, "").strip()
        if raw:
            return raw
    return "http://localhost:4317" if protocol == "grpc" else "http://localhost:4318"


_SIGNAL_PATHS = {ENV_TRACES_ENDPOINT: "v1/traces", ENV_METRICS_ENDPOINT: "v1/metrics"}


def check_endpoint(
    signal_env: str, protocol: str, environ: Mapping[str, str], problems: list[str] | None = None
) -> str | None:
    """An OTLP/HTTP endpoint must be a URL: ``localhost:4318`` (a gRPC-style address, the usual
    slip) makes the exporter fail every export with "No connection adapters were found".

    The variable checked is the one the exporter reads: the signal's, else the general one. Over
    gRPC an address without a scheme is valid (TLS unless ``OTEL_EXPORTER_OTLP_INSECURE=true``).
    Without ``problems`` such an address raises; with, the intent is plain: the signal's full URL,
    with ``http://`` (and the signal's path for the general variable, as the exporter adds it), is
    returned for the exporter to use, and ``problems`` says so. None when the exporter's own reading is right.
    """
    if protocol != "http/protobuf":
        return None
    for name in (signal_env, ENV_ENDPOINT):
        raw = environ.get(name, "").strip()
        if not raw:
            continue
        if raw.lower().startswith(("http://", "https://")):
            return None
        grpc = f"(for a gRPC collector, set {ENV_PROTOCOL}=grpc)"
        shown = redact(raw)
        if problems is None:
            raise ConfigError(
                f"{name}={shown!r} has no scheme: OTLP over HTTP needs a URL such as http://{shown} {grpc}"
            )
        url = f"http://{raw}"
        if name == ENV_ENDPOINT:  # the exporter appends the signal's path to the general endpoint
            url = f"{url.rstrip('/')}/{_SIGNAL_PATHS[signal_env]}"
        problems.append(f"{name}={shown!r} has no scheme: using http://{shown} (OTLP over HTTP needs a URL) {grpc}")
        return url
    return None


# The SDK's OTLP exporter class of each (signal, protocol), imported only when one is made.
_OTLP_EXPORTERS = {
    ("spans", "grpc"): ("opentelemetry.exporter.otlp.proto.grpc.trace_exporter", "OTLPSpanExporter"),
    ("spans", "http"): ("opentelemetry.exporter.otlp.proto.http.trace_exporter", "OTLPSpanExporter"),
    ("metrics", "grpc"): ("opentelemetry.exporter.otlp.proto.grpc.metric_exporter", "OTLPMetricExporter"),
    ("metrics", "http"): ("opentelemetry.exporter.otlp.proto.http.metric_exporter", "OTLPMetricExporter"),
}


def _otlp_exporter(
    signal: str,
    protocol: str,
    timeout: float,
    tally: ExportTally,
    endpoint: str | None = None,
    held: Held | None = None,
) -> Any:
    """The SDK's OTLP exporter of ``signal`` ("spans" or "metrics"), over gRPC or else HTTP, counted in ``tally``
    (spans the collector did not take held in ``held``). Imports the exporter stack: see :class:`Deferred`."""
    kwargs: dict[str, Any] = {"timeout": timeout}
    if endpoint is not None:
        kwargs["endpoint"] = endpoint
    module, name = _OTLP_EXPORTERS[(signal, "grpc" if protocol == "grpc" else "http")]
    return _counted(getattr(importlib.import_module(module), name), signal, tally, held)(**kwargs)


ENV_TEMPORALITY = "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE"
ENV_HISTOGRAM_AGGREGATION = "OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION"


def _temporality(environ: Mapping[str, str], problems: list[str] | None) -> dict[type, Any]:
    """What the OTLP metric exporter prefers, read from ``environ`` as it reads it (the metric reader needs
    it when it is made, before the exporter is): cumulative, unless ``delta`` or ``lowmemory``."""
    from opentelemetry.sdk.metrics import (
        Counter,
        Histogram,
        ObservableCounter,
        ObservableGauge,
        ObservableUpDownCounter,
        UpDownCounter,
    )
    from opentelemetry.sdk.metrics.export import AggregationTemporality

    raw = environ.get(ENV_TEMPORALITY, "CUMULATIVE")
    value = raw.upper().strip()
    delta, cumulative = AggregationTemporality.DELTA, AggregationTemporality.CUMULATIVE
    if value not in ("CUMULATIVE", "DELTA", "LOWMEMORY") and problems is not None:
        problems.append(
            f"{ENV_TEMPORALITY}={raw!r} is not supported: use cumulative, delta or lowmemory; using cumulative"
        )
    return {
        Counter: delta if value in ("DELTA", "LOWMEMORY") else cumulative,
        UpDownCounter: cumulative,
        Histogram: delta if value in ("DELTA", "LOWMEMORY") else cumulative,
        ObservableCounter: delta if value == "DELTA" else cumulative,
        ObservableUpDownCounter: cumulative,
        ObservableGauge: cumulative,
    }


def _aggregation(environ: Mapping[str, str], problems: list[str] | None) -> dict[type, Any]:
    """The histogram aggregation the OTLP metric exporter prefers, read from ``environ`` as it reads it."""
    from opentelemetry.sdk.metrics import Histogram
    from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, ExponentialBucketHistogramAggregation

    raw = environ.get(ENV_HISTOGRAM_AGGREGATION, "explicit_bucket_histogram")
    if raw == "base2_exponential_bucket_histogram":
        return {Histogram: ExponentialBucketHistogramAggregation()}
    if raw != "explicit_bucket_histogram" and problems is not None:
        problems.append(
            f"{ENV_HISTOGRAM_AGGREGATION}={raw!r} is not supported: use explicit_bucket_histogram or "
            "base2_exponential_bucket_histogram; using explicit_bucket_histogram"
        )
    return {Histogram: ExplicitBucketHistogramAggregation()}


# -- exporters made on the app's own thread ------------------------------------------------------------

PENDING_BATCHES = 256
"""Exports held per exporter until it is made (the oldest are dropped first and counted as failed)."""
_IMPORTED_AT_FIRST_EXPORT = ("netrc",)
"""What the exporters would import at their first export, on an export thread, imported when they are made:
``requests`` looks for a ``~/.netrc`` at each request, importing ``netrc`` (and ``shlex``) the first time."""
FORK_WAIT_S = 30.0
"""The most a fork waits for the exporters being made on another thread (an import, well under a second)."""
_OWN_THREADS = ("firsttoken", "Otel")
"""Name prefixes of firsttoken's threads and the SDK's export threads: no exporter is ever made on them."""


def _may_import_here() -> bool:
    """Whether this thread is the app's own (not firsttoken's, not the SDK's export threads)."""
    return not threading.current_thread().name.startswith(_OWN_THREADS)


class Lazy:
    """An OTLP exporter made by its :class:`Deferred`; what the SDK hands it before that is held (bounded)
    and handed on once it is made: spans back to their batch processor, metric exports before the next."""

    def __init__(self, make: Callable[[], Any], signal: str, tally: ExportTally, success: Any, failure: Any) -> None:
        self._make = make
        self.signal = signal
        self.tally = tally
        self._success = success
        self._failure = failure
        self.held: Held | None = None
        """Spans the collector did not take, held for another try (spans only)."""
        self.processor: Any = None
        """The batch span processor the held spans go back to once made (spans only)."""
        self._exporter: Any = None
        self._broken = False
        self._pending: deque[Any] = deque(maxlen=PENDING_BATCHES)
        self._preferred_temporality: dict[type, Any] = {}
        self._preferred_aggregation: dict[type, Any] = {}

    def make(self) -> None:
        """Import and make the exporter (:meth:`Deferred.make`, once); when that fails, say so once and count
        every export as failed. Nothing is raised into the app."""
        try:
            self._exporter = self._make()
        except Exception as exc:
            self._broken = True
            log.warning(
                "firsttoken: the OTLP %s exporter could not be made (%r); nothing is exported", self.signal, exc
            )
        if self.signal == "spans" and self.processor is not None:
            for batch in self._take():  # back in the queue, to the export thread
                for span in batch:
                    type(self.processor).on_end(self.processor, span)
        # held metric exports go before the next export, on the reader's thread

    def export(self, batch: Any, *args: Any, **kwargs: Any) -> Any:
        if self._exporter is None and not self._broken:
            if len(self._pending) == self._pending.maxlen:
                self._lost([self._pending[0]])
            self._pending.append(batch)
            if self._exporter is None and not self._broken:
                return self._success
            batch = None  # made meanwhile: it is among the held ones, sent below
        exporter = self._exporter
        held = self._take()
        if exporter is None:
            self._lost(held if batch is None else [*held, batch])
            return self._failure
        result = self._success
        for old in held:
            result = exporter.export(old, *args, **kwargs)
        return result if batch is None else exporter.export(batch, *args, **kwargs)

    def _take(self) -> list[Any]:
        """Every export held, and none held any more (another thread may take at the same time)."""
        taken = []
        while True:
            try:
                taken.append(self._pending.popleft())
            except IndexError:
                return taken

    def _lost(self, batches: Sequence[Any]) -> None:
        count = sum(len(batch) for batch in batches) if self.signal == "spans" else len(batches)
        if count:
            self.tally.record(self.signal, count, False)

    def force_flush(self, timeout_millis: float = 30_000, **kwargs: Any) -> bool:
        exporter = self._exporter
        return True if exporter is None else bool(exporter.force_flush(timeout_millis=timeout_millis, **kwargs))

    def shutdown(self, *args: Any, **kwargs: Any) -> None:
        """Shuts the exporter down if it was made (one never made sent nothing); what it still holds is lost."""
        exporter = self._exporter
        if exporter is not None:
            exporter.shutdown(*args, **kwargs)
        self._lost(self._take())

    @property
    def exporter(self) -> Any:
        """The SDK's exporter, once made (else None)."""
        return self._exporter

    def pending(self) -> int:
        """Exports held until the exporter is made."""
        return len(self._pending)

    def in_child(self) -> None:
        """In a forked child: what the parent held is the parent's to send; the connections are the parent's."""
        self._pending.clear()
        if self._exporter is not None:
            _fresh_connections(self._exporter)


class Deferred:
    """The OTLP exporters of one set-up, made together on the app's own thread when it first records: the
    first span it ends or measurement it records (else before a flush or at exit, when anything is held).

    Their import (protobuf, requests, urllib3 or grpc: most of what ``instrument()`` cost, #41) is then an
    ordinary lazy import on the thread calling the SDK, never on a thread of firsttoken's or the SDK's: a
    process forked while a background thread imports inherits that import's module locks, held by a thread
    the child does not have, and hangs at its next import of them (iloveitaly/celery-healthcheck#45). A fork
    while the app's own thread makes them waits until they are made (``FORK_WAIT_S`` at most).
    """

    def __init__(self) -> None:
        self.exporters: list[Lazy] = []
        self.made = False
        self.recorded = False
        """Whether anything was recorded (a span ended, a measurement) since the set-up."""
        self._lock = threading.Lock()
        self._maker: int | None = None
        self._forking = False
        self._undo: list[Callable[[], None]] = []

    def watch(self, tracer_provider: Any, meter_provider: Any) -> None:
        """Make the exporters at the first span ended or measurement recorded, then stop watching (an
        attribute set on the SDK's objects and deleted: nothing is left on the path of later calls)."""
        targets = [
            (getattr(tracer_provider, "_active_span_processor", None), "on_end"),
            (getattr(meter_provider, "_measurement_consumer", None), "consume_measurement"),
        ]
        for target, method in targets:
            if target is None or not callable(getattr(target, method, None)):
                continue

            def first(*args: Any, _target: Any = target, _method: str = method) -> Any:
                try:
                    self.record()
                except Exception:  # inside the app's span.end() or counter.add(): never raised there
                    internal_error("making the OTLP exporters failed")
                return getattr(type(_target), _method)(_target, *args)

            setattr(target, method, first)
            self._undo.append(partial(_unwatch, target, method))
        os.register_at_fork(
            before=partial(_before_fork, weakref.ref(self)),
            after_in_parent=partial(_after_fork, weakref.ref(self)),
            after_in_child=partial(_after_fork, weakref.ref(self), child=True),
        )

    def record(self) -> None:
        """Something was recorded on this thread: the exporters are made now if it is the app's own."""
        self.recorded = True
        if _may_import_here():
            self.make()

    def make(self) -> None:
        """Import and make every exporter, on this thread, once."""
        if self.made:
            return
        with self._lock:
            if self.made:
                return
            self._maker = threading.get_ident()
            try:
                for exporter in self.exporters:
                    exporter.make()
                for name in _IMPORTED_AT_FIRST_EXPORT:
                    with contextlib.suppress(ImportError):
                        importlib.import_module(name)
            finally:
                self._maker = None
            self.made = True
        for undo in self._undo:
            undo()
        self._undo.clear()

    def before_flush(self) -> None:
        """Before a flush or the exit, on the app's thread: made now if anything waits for them."""
        waiting = self.recorded or any(exporter.pending() for exporter in self.exporters)
        if not self.made and waiting and _may_import_here():
            self.make()


def _unwatch(target: Any, method: str) -> None:
    vars(target).pop(method, None)  # the class's own method again


def _before_fork(ref: weakref.ref[Deferred]) -> None:
    deferred = ref()
    if deferred is not None and not deferred.made and deferred._maker != threading.get_ident():
        deferred._forking = deferred._lock.acquire(timeout=FORK_WAIT_S)


def _after_fork(ref: weakref.ref[Deferred], child: bool = False) -> None:
    deferred = ref()
    if deferred is None:
        return
    forking, deferred._forking = deferred._forking, False
    if child:
        deferred._lock = threading.Lock()  # else perhaps held at the fork by a thread the child does not have
        deferred._maker = None
        deferred.recorded = False  # what the parent recorded is the parent's to send
    elif forking:
        deferred._lock.release()


def _lazy_exporter(
    deferred: Deferred,
    signal: str,
    protocol: str,
    timeout: float,
    tally: ExportTally,
    endpoint: str | None,
    environ: Mapping[str, str],
    problems: list[str] | None,
) -> Lazy:
    """The OTLP exporter of ``signal`` (:func:`_otlp_exporter`), made by ``deferred``; a metric exporter
    carries the temporality and histogram aggregation it will prefer (its reader is made before it)."""
    if signal == "spans":
        from opentelemetry.sdk.trace.export import SpanExportResult

        held = Held(tally)
        lazy = Lazy(
            lambda: _otlp_exporter(signal, protocol, timeout, tally, endpoint, held),
            signal,
            tally,
            SpanExportResult.SUCCESS,
            SpanExportResult.FAILURE,
        )
        lazy.held = held
    else:
        from opentelemetry.sdk.metrics.export import MetricExportResult

        lazy = Lazy(
            lambda: _otlp_exporter(signal, protocol, timeout, tally, endpoint),
            signal,
            tally,
            MetricExportResult.SUCCESS,
            MetricExportResult.FAILURE,
        )
        lazy._preferred_temporality = _temporality(environ, problems)
        lazy._preferred_aggregation = _aggregation(environ, problems)
    deferred.exporters.append(lazy)
    return lazy


class Export:
    """The SDK providers firsttoken set up, what they exported, and a bounded shutdown."""

    def __init__(
        self,
        tracer_provider: Any,
        meter_provider: Any,
        *,
        tally: ExportTally,
        endpoint: str | None,
        shutdown_timeout_s: float,
        quiet: UnreachableFilter | None = None,
        metric_readers: Sequence[Any] = (),
        held: Sequence[Held] = (),
        deferred: Deferred | None = None,
    ) -> None:
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self.tally = tally
        self.endpoint = endpoint
        """Where OTLP goes, or None when no OTLP exporter was set up."""
        self.shutdown_timeout_s = shutdown_timeout_s
        self.quiet = quiet
        self.metric_readers = list(metric_readers)
        """The periodic readers firsttoken made (not the ones passed in)."""
        self.held = list(held)
        """The span batches the OTLP exporters hold for another try."""
        self.deferred = deferred
        """The OTLP exporters, made on the app's thread when it first records (None: no OTLP)."""
        self._lock = threading.Lock()
        self._closed: bool | None = None

    def undelivered(self) -> tuple[int, int, int]:
        """Spans and metric exports failed so far, and spans held for another try: a flush that leaves
        these as they were delivered everything it handed over."""
        with self.tally._lock:
            failed = (self.tally.failed["spans"], self.tally.failed["metrics"])
        return (*failed, sum(buffer.spans for buffer in self.held))

    def make_exporters(self) -> None:
        """The OTLP exporters made now, on this thread, if anything recorded waits for them (see
        :meth:`Deferred.before_flush`)."""
        if self.deferred is not None:
            self.deferred.before_flush()

    def flush(self, timeout_s: float | None = None) -> bool:
        """Force-flush both providers (see :func:`force_flush`) within ``timeout_s`` (default:
        ``FIRSTTOKEN_SHUTDOWN_TIMEOUT``). May be called any number of times."""
        self.make_exporters()
        return force_flush(
            self.shutdown_timeout_s if timeout_s is None else timeout_s, self.tracer_provider, self.meter_provider
        )

    def close(self, timeout_s: float | None = None, *, shutdown: bool = True) -> bool:
        """Flush and shut both providers down, concurrently, giving up after ``timeout_s``
        (default: ``FIRSTTOKEN_SHUTDOWN_TIMEOUT``). True when both finished in time. Idempotent.

        ``shutdown=False`` only flushes, for a process about to exit with threads that may still end
        spans (they are then dropped quietly instead of each logging that the provider is shut down).
        """
        with self._lock:
            if self._closed is not None:
                return self._closed
            self._closed = False
        self.make_exporters()
        budget = self.shutdown_timeout_s if timeout_s is None else timeout_s
        millis = max(int(budget * 1000), 1)
        if shutdown:
            done = run_bounded(
                [
                    lambda: self.tracer_provider.shutdown() or True,
                    lambda: _shut_down(self.meter_provider, millis),
                ],
                budget,
            )
        else:
            done = self.flush(budget)
        if not done:
            log.debug("firsttoken: the flush at exit gave up after %.1f s", budget)
        if self.quiet is not None:
            self.quiet.at_exit(done, budget)
            if shutdown and done:  # else an exporter still running may log: its lines stay one
                self.quiet.uninstall()
        self._closed = done
        return done


def _shut_down(meter_provider: Any, millis: int) -> bool:
    """The SDK's meter provider, shut down; the API's no-op one (metrics off) has nothing to shut down."""
    shutdown = getattr(meter_provider, "shutdown", None)
    if callable(shutdown):
        shutdown(timeout_millis=millis)
    return True


def force_flush(timeout_s: float, *providers: Any) -> bool:
    """Force-flush the providers (spans; a final metric collection and export) concurrently, within
    ``timeout_s``: True when each finished in time and said it succeeded. A provider without
    ``force_flush`` (the API's no-op ones) is skipped."""
    millis = max(int(timeout_s * 1000), 1)
    jobs = [
        (lambda p=provider: p.force_flush(timeout_millis=millis))
        for provider in providers
        if callable(getattr(provider, "force_flush", None))
    ]
    return run_bounded(jobs, timeout_s)


def run_bounded(jobs: Sequence[Callable[[], object]], timeout_s: float) -> bool:
    """Run ``jobs`` concurrently, each in a daemon thread, waiting at most ``timeout_s`` in all. True when
    every job finished in time and returned something true; a job that raised is logged at debug level.
    Inline, one after the other, where no thread can be started (late in the interpreter's shutdown)."""
    results: list[bool] = []

    def quietly(job: Callable[[], object]) -> Callable[[], None]:
        def run() -> None:
            try:
                results.append(bool(job()))
            except Exception:
                log.debug("firsttoken: flushing or shutting an OpenTelemetry provider down failed", exc_info=True)
                results.append(False)

        return run

    deadline = time.monotonic() + timeout_s
    threads = [threading.Thread(target=quietly(job), name="firsttoken-flush", daemon=True) for job in jobs]
    started = 0
    try:
        for thread in threads:
            thread.start()
            started += 1
    except RuntimeError:  # no new threads this late in the interpreter's shutdown: the rest inline
        for job in jobs[started:]:
            quietly(job)()
    for thread in threads[:started]:
        thread.join(max(deadline - time.monotonic(), 0.0))
    return not any(thread.is_alive() for thread in threads) and len(results) == len(jobs) and all(results)


_instance: tuple[int, str] | None = None


def _instance_id() -> str:
    """A random UUID for this process (a forked worker gets its own), as the SDK's detector makes."""
    global _instance
    if _instance is None or _instance[0] != os.getpid():
        _instance = (os.getpid(), str(uuid.uuid4()))
    return _instance[1]


def _script_name() -> str | None:
    """What this process runs: the module of ``python -m pkg.mod`` (``pkg`` for ``python -m pkg``), else
    the script's or command's file name without ``.py``; ``None`` for ``python -c`` or a prompt."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    module = getattr(spec, "name", None)
    if isinstance(module, str) and module and module != "__main__":
        return module.removesuffix(".__main__")
    script = sys.argv[0] if sys.argv else ""
    if script in ("", "-c", "-"):
        return None
    return Path(script).name.removesuffix(".py") or None


def providers(
    environ: Mapping[str, str] | None = None,
    *,
    resource_attributes: Mapping[str, str] | None = None,
    traces: Sequence[str] | None = None,
    metrics_: Sequence[str] | None = None,
    span_processors: Sequence[Any] = (),
    metric_readers: Sequence[Any] = (),
    problems: list[str] | None = None,
) -> Export:
    """SDK providers exporting as the environment says, with batching (export never blocks a call)
    and a bounded flush at exit. ``traces`` / ``metrics_`` override ``OTEL_TRACES_EXPORTER`` /
    ``OTEL_METRICS_EXPORTER``; extra span processors and metric readers are added as given.
    A malformed variable raises :class:`ConfigError`, or, given a list of ``problems``, falls back
    to its default and is said there (see :func:`firsttoken.config.or_default`)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    env = os.environ if environ is None else environ
    p = problems

    def names(variable: str) -> list[str]:
        return or_default(p, partial(exporter_names, variable, env), ["otlp"], "otlp")

    trace_names = list(traces) if traces is not None else names(ENV_TRACES_EXPORTER)
    metric_names = list(metrics_) if metrics_ is not None else names(ENV_METRICS_EXPORTER)
    traces_protocol = or_default(p, partial(_protocol, ENV_TRACES_PROTOCOL, env), "http/protobuf")
    metrics_protocol = or_default(p, partial(_protocol, ENV_METRICS_PROTOCOL, env), "http/protobuf")
    traces_url = check_endpoint(ENV_TRACES_ENDPOINT, traces_protocol, env, p) if "otlp" in trace_names else None
    metrics_url = check_endpoint(ENV_METRICS_ENDPOINT, metrics_protocol, env, p) if "otlp" in metric_names else None
    interval_ms = or_default(p, partial(_interval, env), METRIC_EXPORT_INTERVAL_MS)
    shutdown_ms = or_default(p, partial(_millis, ENV_SHUTDOWN_TIMEOUT, env, SHUTDOWN_TIMEOUT_MS), SHUTDOWN_TIMEOUT_MS)
    tally = ExportTally()
    deferred = Deferred()

    resource = Resource.create(dict(resource_attributes or {}))
    if str(resource.attributes.get(_SERVICE_NAME, "")).startswith("unknown_service"):  # the SDK's default
        script = _script_name()
        if script is not None:
            resource = resource.merge(Resource({_SERVICE_NAME: script}))
    if not resource.attributes.get(_SERVICE_INSTANCE_ID):  # older SDKs add none of their own (1.45 does)
        resource = resource.merge(Resource({_SERVICE_INSTANCE_ID: _instance_id()}))

    tracer_provider = SdkTracerProvider(resource=resource, shutdown_on_exit=False)
    span_exporters: list[Any] = []
    for processor in span_processors:
        tracer_provider.add_span_processor(processor)
    for name in trace_names:
        span_exporter: Any = (
            _lazy_exporter(
                deferred,
                "spans",
                traces_protocol,
                or_default(p, partial(_timeout, ENV_TRACES_TIMEOUT, env), EXPORT_TIMEOUT_S),
                tally,
                traces_url,
                env,
                p,
            )
            if name == "otlp"
            else ConsoleSpanExporter()
        )
        processor = BatchSpanProcessor(span_exporter)
        if isinstance(span_exporter, Lazy):
            span_exporter.processor = processor
        tracer_provider.add_span_processor(processor)
        span_exporters.append(span_exporter)

    readers: list[Any] = []
    metric_exporters: list[Any] = []
    meter_provider: Any = metrics.NoOpMeterProvider()  # metrics off: the metrics SDK is not even imported
    if metric_names or metric_readers:
        from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, PeriodicExportingMetricReader

        metrics_timeout = or_default(p, partial(_timeout, ENV_METRICS_TIMEOUT, env), EXPORT_TIMEOUT_S)
        timeout_ms = int(metrics_timeout * 1000)
        export_timeout_ms = or_default(p, partial(_millis, ENV_METRIC_EXPORT_TIMEOUT, env, timeout_ms), timeout_ms)
        for name in metric_names:
            metric_exporter: Any = (
                _lazy_exporter(deferred, "metrics", metrics_protocol, metrics_timeout, tally, metrics_url, env, p)
                if name == "otlp"
                else ConsoleMetricExporter()
            )
            metric_exporters.append(metric_exporter)
            readers.append(
                PeriodicExportingMetricReader(
                    metric_exporter, export_interval_millis=interval_ms, export_timeout_millis=export_timeout_ms
                )
            )
        meter_provider = SdkMeterProvider(
            resource=resource, metric_readers=[*metric_readers, *readers], shutdown_on_exit=False
        )
    if deferred.exporters:
        deferred.watch(tracer_provider, meter_provider)

    endpoint = quiet = None
    if "otlp" in trace_names or "otlp" in metric_names:
        endpoint = (
            (traces_url or _endpoint(env, traces_protocol, ENV_TRACES_ENDPOINT))
            if "otlp" in trace_names
            else (metrics_url or _endpoint(env, metrics_protocol, ENV_METRICS_ENDPOINT))
        )
        quiet = UnreachableFilter(endpoint)
        quiet.install()
        tally.on_success(quiet.rearm)
        tally.on_spans_lost(quiet.spans_lost)
    _start_afresh_in_children(meter_provider, span_exporters, metric_exporters)
    export = Export(
        tracer_provider,
        meter_provider,
        tally=tally,
        endpoint=endpoint,
        shutdown_timeout_s=shutdown_ms / 1000,
        quiet=quiet,
        metric_readers=readers,
        held=held_by(span_exporters),
        deferred=deferred if deferred.exporters else None,
    )
    atexit.register(export.close)
    return export


def held_by(span_exporters: Sequence[Any]) -> list[Held]:
    buffers = [getattr(exporter, "held", None) for exporter in span_exporters]
    return [buffer for buffer in buffers if isinstance(buffer, Held)]


def _start_afresh_in_children(
    meter_provider: Any, span_exporters: Sequence[Any], metric_exporters: Sequence[Any] = ()
) -> None:
    """A forked child (a pool worker, a pre-forking server's worker) starts its metrics from zero, holds
    no span batches of the parent's, and opens its own connections to the collector.

    The OTLP exporters keep their connections open between exports, and a child inherits them: the child's
    requests went out on the parent's socket, interleaving with the parent's own (a receiver saw a request
    now and then made of both). The child closes its copies (the parent's stay open: closing a forked
    descriptor closes it in the child only) and connects afresh at its first export (:func:`_fresh_connections`).

    The SDK restarts its export threads in a forked child and gives it its own ``service.instance.id``, but
    keeps the parent's cumulative sums (open-telemetry/opentelemetry-python#2767, #4767): every worker
    forked after the parent recorded calls exported them again as its own, so dashboards added the parent's
    calls once per worker, and a worker that recorded nothing republished a frozen copy. The SDK has no
    public way to reset a provider, so the child drops the per-reader storage (made again, empty, at the
    next measurement), as a provider built in the child would start. Our own providers only: an app's
    providers are the app's (docs/deploy.md)."""
    provider = weakref.ref(meter_provider)
    held = [weakref.ref(buffer) for buffer in held_by(span_exporters)]
    exporters = [weakref.ref(exporter) for exporter in [*span_exporters, *metric_exporters]]

    def in_child() -> None:
        try:
            for ref in held:
                buffer = ref()
                if buffer is not None:
                    buffer.forget()
            for ref in exporters:
                exporter = ref()
                if isinstance(exporter, Lazy):
                    exporter.in_child()
                elif exporter is not None:
                    _fresh_connections(exporter)
            consumer = getattr(provider(), "_measurement_consumer", None)  # none: metrics are off
            if consumer is None:
                return
            consumer._lock = threading.Lock()  # another thread of the parent may have held it at the fork
            for storage in consumer._reader_storages.values():
                storage._lock = threading.RLock()
                storage._instrument_view_instrument_matches = {}
        except Exception:
            internal_error("starting metrics afresh in a forked child failed")

    os.register_at_fork(after_in_child=in_child)


def _fresh_connections(exporter: Any) -> None:
    """In a forked child: the OTLP/HTTP exporter's pooled connections to the collector are the parent's;
    close the child's copies, so that its next export connects afresh. (A gRPC channel needs nothing:
    grpcio's own fork handling gives the child a connection of its own.)

    Where the pool lives depends on the SDK: ``exporter._session`` (a ``requests`` session, up to 1.44),
    ``exporter._client._transport._session`` or ``._pool`` (urllib3's, 1.45)."""
    transport = getattr(getattr(exporter, "_client", None), "_transport", None)
    for holder in (exporter, transport):
        close: Any = getattr(getattr(holder, "_session", None), "close", None)
        if callable(close):
            close()  # closes each pooled connection; the session stays usable
        clear: Any = getattr(getattr(holder, "_pool", None), "clear", None)
        if callable(clear):
            clear()


_own: Export | None = None


def own_export() -> Export | None:
    """The export firsttoken set up as the process's global providers, if it did."""
    return _own


def is_own_global(tracer_provider: object) -> bool:
    """Whether ``tracer_provider`` is the global one firsttoken's own set-up installed (so the app,
    uninstrumented, would have had no global provider at all)."""
    return _own is not None and tracer_provider is _own.tracer_provider


def setup(environ: Mapping[str, str] | None = None, problems: list[str] | None = None) -> Export:
    """Global SDK providers from the environment (see the module's docstring and :func:`providers`)."""
    global _own
    export = providers(environ, problems=problems)
    _own = export
    trace.set_tracer_provider(export.tracer_provider)
    metrics.set_meter_provider(export.meter_provider)
    return export
