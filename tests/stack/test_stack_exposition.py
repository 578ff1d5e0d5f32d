"""The OpenMetrics exposition the live test scrapes, on hand-built OpenTelemetry SDK data."""

from __future__ import annotations

import urllib.request

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from stack_openmetrics import CONTENT_TYPE, OpenMetricsRenderer, exemplar_labels, format_le, serve


@pytest.fixture
def sdk() -> tuple[InMemoryMetricReader, TracerProvider, MeterProvider]:
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    yield reader, TracerProvider(), meters
    meters.shutdown()


def record(sdk: tuple[InMemoryMetricReader, TracerProvider, MeterProvider]) -> tuple[str, str]:
    """One histogram sample and one counter add inside a span; returns its (trace id, span id)."""
    _, tracer_provider, meters = sdk
    meter = meters.get_meter("t", "1.2", schema_url="https://example.com/s/1", attributes={"team.name": "ml"})
    ttft = meter.create_histogram(
        "firsttoken.client.time_to_first_token", unit="s", explicit_bucket_boundaries_advisory=(0.5, 1.0, 2.5)
    )
    tokens = meter.create_counter("firsttoken.client.input_tokens", unit="{token}")
    attrs = {"gen_ai.request.model": 'gpt-4o "big"', "gen_ai.request.stream": True, "server.port": 443}
    ttft.record(0.2, attrs)  # outside any span: counted, no exemplar
    with tracer_provider.get_tracer("t").start_as_current_span("chat gpt-4o") as span:
        ttft.record(1.7, attrs)
        tokens.add(120, attrs)
        ctx = span.get_span_context()
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


def test_names_labels_buckets_and_exemplars(sdk: tuple[InMemoryMetricReader, TracerProvider, MeterProvider]) -> None:
    trace_id, span_id = record(sdk)
    text = OpenMetricsRenderer(sdk[0]).render()
    lines = text.splitlines()
    # The scope's labels (prometheus.yml's promote_scope_metadata), sorted in with the attributes'.
    labels = (
        'gen_ai_request_model="gpt-4o \\"big\\"",gen_ai_request_stream="true",otel_scope_name="t",'
        'otel_scope_schema_url="https://example.com/s/1",otel_scope_team_name="ml",otel_scope_version="1.2",'
        'server_port="443"'
    )
    bucket = "firsttoken_client_time_to_first_token_seconds_bucket"
    assert f'{bucket}{{{labels},le="0.5"}} 1' in lines
    assert f'{bucket}{{{labels},le="1"}} 1' in lines  # 1.0 is written "1", as Prometheus does
    slow = next(line for line in lines if line.startswith(f'{bucket}{{{labels},le="2.5"}} 2 #'))
    assert exemplar_labels(slow) == {"trace_id": trace_id, "span_id": span_id}
    assert slow.split("} ")[2].split()[0] == "1.7"
    assert f'{bucket}{{{labels},le="+Inf"}} 2' in lines
    assert f"firsttoken_client_time_to_first_token_seconds_count{{{labels}}} 2" in lines
    counter = next(line for line in lines if line.startswith("firsttoken_client_input_tokens_total{"))
    assert counter.startswith(f"firsttoken_client_input_tokens_total{{{labels}}} 120 # ")
    assert exemplar_labels(counter)["trace_id"] == trace_id
    assert "# TYPE firsttoken_client_input_tokens counter" in lines
    assert "# UNIT firsttoken_client_time_to_first_token_seconds seconds" in lines
    assert lines[-1] == "# EOF"
    # A strict, independent OpenMetrics parser accepts it and sees the exemplar.
    families = {f.name: f for f in text_string_to_metric_families(text)}
    samples = families["firsttoken_client_time_to_first_token_seconds"].samples
    exemplars = [s.exemplar for s in samples if s.exemplar]
    assert [e.labels["trace_id"] for e in exemplars] == [trace_id]


def test_exemplars_survive_later_collections(sdk: tuple[InMemoryMetricReader, TracerProvider, MeterProvider]) -> None:
    """The SDK hands an exemplar out once; the exposition keeps showing it, as Prometheus would keep it."""
    trace_id, _ = record(sdk)
    renderer = OpenMetricsRenderer(sdk[0])
    first, second = renderer.render(), renderer.render()
    assert trace_id in first and trace_id in second


def test_served_over_http_as_openmetrics(sdk: tuple[InMemoryMetricReader, TracerProvider, MeterProvider]) -> None:
    record(sdk)
    with serve(OpenMetricsRenderer(sdk[0])) as address:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as resp:
            assert resp.headers["Content-Type"] == CONTENT_TYPE
            assert resp.read().decode().endswith("# EOF\n")
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"http://{address}/other", timeout=10)


@pytest.mark.parametrize(
    ("bound", "text"),
    [(1.0, "1"), (2.5, "2.5"), (0.001, "0.001"), (0.0025, "0.0025"), (67108864, "67108864"), (1e-05, "0.00001")],
)
def test_le_is_shortest_decimal(bound: float, text: str) -> None:
    assert format_le(bound) == text
