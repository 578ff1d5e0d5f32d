"""Set up OTLP export from the standard ``OTEL_*`` variables, for apps that configured nothing.

Only used when ``instrument()`` is given no providers and no global ones are set, so that one line
is enough in production. Endpoint, headers, timeouts and compression are read by the OTLP
exporters themselves; the service name and resource by ``Resource.create()``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from opentelemetry import metrics, trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider

from .config import ConfigError

ENV_PROTOCOL = "OTEL_EXPORTER_OTLP_PROTOCOL"
ENV_TRACES_PROTOCOL = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
ENV_METRICS_PROTOCOL = "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"
_PROTOCOLS = ("http/protobuf", "grpc")


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


def setup(environ: Mapping[str, str] | None = None) -> tuple[TracerProvider, MeterProvider]:
    """Global SDK providers exporting over OTLP with batching (export never blocks a call)."""
    from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    env = os.environ if environ is None else environ
    traces_protocol = _protocol(ENV_TRACES_PROTOCOL, env)
    metrics_protocol = _protocol(ENV_METRICS_PROTOCOL, env)
    if traces_protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpans

        span_exporter: object = GrpcSpans()
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpans

        span_exporter = HttpSpans()
    if metrics_protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetrics

        metric_exporter: object = GrpcMetrics()
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetrics

        metric_exporter = HttpMetrics()

    resource = Resource.create()
    tracer_provider = SdkTracerProvider(resource=resource)
    tracer_provider.add_span_processor(BatchSpanProcessor(span_exporter))  # type: ignore[arg-type]
    meter_provider = SdkMeterProvider(
        resource=resource,
        metric_readers=[PeriodicExportingMetricReader(metric_exporter)],  # type: ignore[arg-type]
    )
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)
    return tracer_provider, meter_provider
