"""A counting OTLP/HTTP receiver for tests that run apps as processes of their own: what arrived, decoded.

Call spans are counted by span id (a span sent twice would show); metric points are cumulative, so the
last point of each series (resource instance and attributes) is what a backend keeps, and their sum over
the processes is what the dashboards add up.
"""

from __future__ import annotations

import gzip
import http.server
import threading
import zlib
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from firsttoken import semconv as sc


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def _attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


class OtlpSink:
    """Listens on 127.0.0.1 (``port``) until closed; thread-safe counts of what was posted, and of what
    was not a valid OTLP export (``invalid``)."""

    def __init__(self, port: int = 0, *, keep_alive: bool = False) -> None:
        self._lock = threading.Lock()
        self.call_span_ids: list[bytes] = []
        self.end_reasons: list[str] = []
        self.instances: set[str] = set()
        self.last: dict[tuple[str, str, tuple[tuple[str, Any], ...]], float] = {}
        """(metric, service.instance.id, attributes) -> the last cumulative value (count or sum)."""
        self.posts = 0
        self.senders: list[tuple[str, int]] = []
        """Per request, in order of arrival: its path and the client's port (its connection)."""
        self.invalid: list[str] = []
        """What was wrong with each request that was not a valid OTLP export (answered 400)."""
        sink = self

        class Handler(http.server.BaseHTTPRequestHandler):
            # Keep-alive, as a collector: exporters reuse their connections (off by default: closing the sink
            # then stops it answering at once, a collector going away).
            protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"

            def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
                with sink._lock:  # a request line or headers that do not parse
                    sink.invalid.append(f"{code} {message}")
                super().send_error(code, message, explain)

            def do_POST(self) -> None:
                with sink._lock:
                    sink.senders.append((self.path, self.client_address[1]))
                try:
                    body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                    encoding = (self.headers.get("Content-Encoding") or "").lower()
                    if encoding == "gzip":
                        body = gzip.decompress(body)
                    elif encoding == "deflate":
                        body = zlib.decompress(body)
                    if self.path.endswith("/v1/traces"):
                        sink._traces(body)
                    elif self.path.endswith("/v1/metrics"):
                        sink._metrics(body)
                    else:
                        raise ValueError(f"unknown path {self.path!r}")
                except Exception as exc:  # a corrupt body: not an OTLP export
                    with sink._lock:
                        sink.invalid.append(f"{self.path}: {exc!r}")
                    self.send_response(400)
                    self.send_header("Content-Length", "0")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.close_connection = True
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> OtlpSink:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _traces(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        with self._lock:
            self.posts += 1
            for resource_spans in request.resource_spans:
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        attributes = _attrs(span.attributes)
                        if sc.GEN_AI_OPERATION_NAME in attributes:
                            self.call_span_ids.append(span.span_id)
                            self.end_reasons.append(str(attributes.get(sc.FT_END_REASON)))

    def _metrics(self, body: bytes) -> None:
        request = ExportMetricsServiceRequest()
        request.ParseFromString(body)
        with self._lock:
            self.posts += 1
            for resource_metrics in request.resource_metrics:
                instance = str(_attrs(resource_metrics.resource.attributes).get("service.instance.id"))
                self.instances.add(instance)
                for scope_metrics in resource_metrics.scope_metrics:
                    for metric in scope_metrics.metrics:
                        kind = metric.WhichOneof("data")
                        points = getattr(metric, kind).data_points if kind in ("histogram", "sum") else []
                        for point in points:
                            key = (metric.name, instance, tuple(sorted(_attrs(point.attributes).items())))
                            value = (
                                float(point.count) if kind == "histogram" else float(point.as_int or point.as_double)
                            )
                            self.last[key] = value

    @property
    def call_spans(self) -> int:
        with self._lock:
            return len(self.call_span_ids)

    @property
    def distinct_call_spans(self) -> int:
        with self._lock:
            return len(set(self.call_span_ids))

    def total(self, metric: str, **where: Any) -> float:
        """The sum over processes and series of the last value of ``metric`` (a histogram's count)."""
        with self._lock:
            return sum(
                value
                for (name, _, attrs), value in self.last.items()
                if name == metric and all(dict(attrs).get(k) == v for k, v in where.items())
            )
