"""Counters summed in-process: what the SDK exports from them."""

from __future__ import annotations

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from firsttoken._sums import SummedCounter, add_all


def _points(reader: InMemoryMetricReader) -> dict[frozenset[tuple[str, object]], float]:
    data = reader.get_metrics_data()
    assert data is not None
    return {
        frozenset(point.attributes.items()): point.value
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
        if metric.name == "t.tokens"
        for point in metric.data.data_points
    }


def test_sums_by_series_whatever_the_attribute_order() -> None:
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("t")
    tokens = SummedCounter(meter, "t.tokens", unit="{token}", description="tokens")
    other = SummedCounter(meter, "t.other", unit="{token}", description="other")
    add_all(
        [
            (tokens, 10, (("model", "a"), ("provider", "p"))),
            (tokens, 5, (("provider", "p"), ("model", "a"))),  # the same series, built in another order
            (tokens, 7, (("model", "b"), ("provider", "p"))),
            (tokens, -3, (("model", "b"), ("provider", "p"))),  # a counter only goes up: ignored
            (other, 1, (("model", "a"),)),
        ]
    )
    a = frozenset({("model", "a"), ("provider", "p")})
    b = frozenset({("model", "b"), ("provider", "p")})
    assert _points(reader) == {a: 15, b: 7}
    add_all([(tokens, 1, (("model", "a"), ("provider", "p")))])
    assert _points(reader) == {a: 16, b: 7}, "cumulative"
