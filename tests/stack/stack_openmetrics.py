"""Test support: OpenTelemetry SDK metric data as OpenMetrics text, with exemplars.

The stack's path is SDK -> OTLP -> Collector -> Prometheus' OTLP receiver, which names series with
the UnderscoreEscapingWithSuffixes strategy and stores exemplars. Debian's Prometheus 2.42 has no
OTLP receiver, and the Python Prometheus exporter writes no exemplars, so the live test serves the
SDK's data here, translated by the same rules, and lets a real Prometheus scrape it.

The rules (docs/metrics.md): every character that is not a letter or digit separates words, which
are joined with ``_``; the unit is appended in words (``s`` -> ``seconds``, ``By`` -> ``bytes``,
``X/Y`` -> ``X_per_Y``) unless the name already ends with it, and annotations in braces
(``{token}``) are dropped; monotonic counters end in ``_total``; histograms give ``_bucket`` (with
``le`` in shortest decimal form: ``1``, ``2.5``), ``_sum`` and ``_count``; attribute keys become label
names the same way. The instrumentation scope becomes ``otel_scope_name``, ``otel_scope_version``,
``otel_scope_schema_url`` (and ``otel_scope_<key>`` per scope attribute), as the OTLP receiver writes
it with prometheus.yml's ``promote_scope_metadata: true``; an empty one is no label.
"""

from __future__ import annotations

import re
import threading
from bisect import bisect_left
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.sdk.metrics.export import Gauge, Histogram, MetricReader, Sum

CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"

UNIT_WORDS = {
    "d": "days",
    "h": "hours",
    "min": "minutes",
    "s": "seconds",
    "ms": "milliseconds",
    "us": "microseconds",
    "ns": "nanoseconds",
    "By": "bytes",
    "KiBy": "kibibytes",
    "MiBy": "mebibytes",
    "GiBy": "gibibytes",
    "KBy": "kilobytes",
    "MBy": "megabytes",
    "GBy": "gigabytes",
    "bit": "bits",
    "%": "percent",
}
PER_UNIT_WORDS = {"s": "second", "m": "minute", "h": "hour", "d": "day", "w": "week", "mo": "month", "y": "year"}

_WORD_SEP = re.compile(r"[^A-Za-z0-9]+")


def unit_suffix(unit: str, *, gauge: bool = False) -> str:
    """The words a unit appends to a metric name ("" for none)."""
    unit = re.sub(r"\{[^}]*\}", "", unit).strip()
    if not unit:
        return ""
    if unit == "1":
        return "ratio" if gauge else ""
    main, _, per = unit.partition("/")
    words = [UNIT_WORDS.get(main, main)] if main else []
    if per:
        words += ["per", PER_UNIT_WORDS.get(per, per)]
    return "_".join(w for part in words for w in _WORD_SEP.split(part) if w)


def metric_family(name: str, unit: str, *, gauge: bool = False) -> str:
    """The Prometheus metric family name of an OTel instrument (no ``_total``/``_bucket``)."""
    words = [w for w in _WORD_SEP.split(name) if w]
    suffix = unit_suffix(unit, gauge=gauge)
    if suffix:
        tail = suffix.split("_")
        if words[-len(tail) :] != tail:
            words += tail
    family = "_".join(words)
    if family[0].isdigit():
        family = "_" + family
    return family


def counter_name(name: str, unit: str) -> str:
    family = metric_family(name, unit)
    return family if family.endswith("_total") else family + "_total"


def label_name(key: str) -> str:
    label = re.sub(r"[^A-Za-z0-9_]", "_", key)
    return "key_" + label if label[0].isdigit() else label


def format_le(bound: float) -> str:
    """Shortest decimal without exponent, as Prometheus writes bucket bounds: 1, 2.5, 0.001."""
    if bound == float("inf"):
        return "+Inf"
    text = format(Decimal(repr(float(bound))), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def format_value(value: float | int) -> str:
    if isinstance(value, int):
        return str(value)
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def label_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(f'"{v}"' if isinstance(v, str) else label_value(v) for v in value) + "]"
    return str(value)


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: Sequence[tuple[str, str]]) -> str:
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in pairs) + "}"


def scope_labels(scope: Any) -> dict[str, str]:
    """The labels of an instrumentation scope (Prometheus 3.14 setScopeContext and createAttributes:
    scope attributes as ``otel_scope_<key>``, then name, version and schema URL; none without a name)."""
    if scope is None or not scope.name:
        return {}
    labels = {label_name(f"otel_scope_{k}"): label_value(v) for k, v in (scope.attributes or {}).items()}
    labels |= {
        "otel_scope_name": scope.name,
        "otel_scope_version": scope.version or "",
        "otel_scope_schema_url": scope.schema_url or "",
    }
    return {k: v for k, v in labels.items() if v}


class OpenMetricsRenderer:
    """Renders what a MetricReader collects; remembers the last exemplar of every bucket and counter.

    The SDK hands out an exemplar once (its reservoir resets at each collection), while a scrape
    should keep showing it, as the Collector's Prometheus path keeps what it was sent.
    """

    def __init__(self, reader: MetricReader) -> None:
        self.reader = reader
        self._lock = threading.Lock()
        self._exemplars: dict[tuple[str, tuple[tuple[str, str], ...], str], str] = {}

    def render(self) -> str:
        with self._lock:
            data = self.reader.get_metrics_data()  # type: ignore[attr-defined]
            families: dict[str, tuple[str, str, str, list[str]]] = {}
            if data is not None:
                for rm in data.resource_metrics:
                    for sm in rm.scope_metrics:
                        scope = scope_labels(sm.scope)
                        for metric in sm.metrics:
                            self._family(metric, families, scope)
            out: list[str] = []
            for family, (kind, unit_word, help_text, lines) in sorted(families.items()):
                out.append(f"# TYPE {family} {kind}")
                if unit_word:
                    out.append(f"# UNIT {family} {unit_word}")
                if help_text:
                    out.append(f"# HELP {family} {_escape(help_text)}")
                out.extend(lines)
            out.append("# EOF")
            return "\n".join(out) + "\n"

    def _family(self, metric: Any, families: dict[str, tuple[str, str, str, list[str]]], scope: dict[str, str]) -> None:
        data = metric.data
        if isinstance(data, Histogram):
            kind, family = "histogram", metric_family(metric.name, metric.unit or "")
        elif isinstance(data, Sum) and data.is_monotonic:
            kind = "counter"
            family = counter_name(metric.name, metric.unit or "").removesuffix("_total")
        elif isinstance(data, (Sum, Gauge)):
            kind, family = "gauge", metric_family(metric.name, metric.unit or "", gauge=True)
        else:  # exponential histograms are not part of this project's metrics
            raise TypeError(f"{metric.name}: unsupported metric data {type(data).__name__}")
        suffix = unit_suffix(metric.unit or "", gauge=kind == "gauge")
        unit_word = suffix if suffix and family.endswith("_" + suffix) else ""
        entry = families.setdefault(family, (kind, unit_word, metric.description or "", []))
        lines = entry[3]
        for point in data.data_points:
            labels = {label_name(k): label_value(v) for k, v in (point.attributes or {}).items()}
            pairs = tuple(sorted({**labels, **scope}.items()))
            if kind == "histogram":
                lines.extend(self._histogram(family, pairs, point))
            elif kind == "counter":
                ex = self._exemplar(family, pairs, "total", point.exemplars)
                lines.append(f"{family}_total{_labels(pairs)} {format_value(point.value)}{ex}")
            else:
                lines.append(f"{family}{_labels(pairs)} {format_value(point.value)}")

    def _histogram(self, family: str, pairs: tuple[tuple[str, str], ...], point: Any) -> Iterator[str]:
        bounds = list(point.explicit_bounds)
        by_bucket: dict[int, list[Any]] = {}
        for ex in point.exemplars:
            by_bucket.setdefault(bisect_left(bounds, ex.value), []).append(ex)
        cumulative = 0
        for i, count in enumerate(point.bucket_counts):
            cumulative += count
            le = format_le(bounds[i]) if i < len(bounds) else "+Inf"
            ex = self._exemplar(family, pairs, le, by_bucket.get(i, ()))
            yield f"{family}_bucket{_labels((*pairs, ('le', le)))} {cumulative}{ex}"
        yield f"{family}_count{_labels(pairs)} {point.count}"
        yield f"{family}_sum{_labels(pairs)} {format_value(point.sum)}"

    def _exemplar(self, family: str, pairs: tuple[tuple[str, str], ...], slot: str, exemplars: Sequence[Any]) -> str:
        key = (family, pairs, slot)
        traced = [e for e in exemplars if e.trace_id and e.span_id]
        if traced:
            ex = max(traced, key=lambda e: e.time_unix_nano)
            labels = _labels((("trace_id", f"{ex.trace_id:032x}"), ("span_id", f"{ex.span_id:016x}")))
            self._exemplars[key] = f" # {labels} {format_value(ex.value)} {ex.time_unix_nano / 1e9:.3f}"
        return self._exemplars.get(key, "")


@contextmanager
def serve(renderer: OpenMetricsRenderer, host: str = "127.0.0.1") -> Iterator[str]:
    """Serve ``/metrics`` on a free loopback port; yields the ``host:port`` to scrape."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            body = renderer.render().encode()
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer((host, 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="openmetrics-exposition", daemon=True)
    thread.start()
    try:
        yield f"{host}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def series_names(name: str, unit: str, instrument: str) -> list[str]:
    """The Prometheus series names an instrument yields (instrument: histogram, counter, gauge)."""
    if instrument == "histogram":
        family = metric_family(name, unit)
        return [f"{family}_bucket", f"{family}_sum", f"{family}_count"]
    if instrument == "counter":
        return [counter_name(name, unit)]
    return [metric_family(name, unit, gauge=True)]


def exemplar_labels(text: str) -> Mapping[str, str]:
    """The labels of the exemplar on one exposition line ({} if it has none)."""
    _, sep, rest = text.partition(" # {")
    if not sep:
        return {}
    body = rest.split("}", 1)[0]
    return dict(re.findall(r'(\w+)="([^"]*)"', body))
