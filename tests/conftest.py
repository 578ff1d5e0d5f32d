"""Shared fixtures: in-memory OpenTelemetry, firsttoken instrumented around each test, a simulator."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import firsttoken
from firsttoken import semconv as sc
from firsttoken import streams
from firsttoken.sim import LatencyModel, Simulator

# An error inside firsttoken fails the test that met it (firsttoken._internal.internal_error re-raises),
# rather than showing only as a missing attribute; subprocesses the tests start inherit it.
os.environ["FIRSTTOKEN_INTERNAL_ERRORS"] = "raise"

if os.environ.get("FIRSTTOKEN_TEST_INSTALLED"):  # scripts/test_release.sh: the wheel, never src/
    assert firsttoken.__file__ and firsttoken.__file__.startswith(os.environ["FIRSTTOKEN_TEST_INSTALLED"]), (
        f"testing {firsttoken.__file__}, not the wheel installed in {os.environ['FIRSTTOKEN_TEST_INSTALLED']}"
    )


RECORDED = Path(os.environ.get("FIRSTTOKEN_RECORDINGS", Path(__file__).resolve().parents[2] / "shared" / "recorded"))
"""Responses recorded against the real services: shared/recorded beside the checkout, or $FIRSTTOKEN_RECORDINGS."""


def recorded_cassettes(provider: str) -> list[Path]:
    """``provider``'s cassettes under :data:`RECORDED`; without any, the calling module is skipped (an error in CI)."""
    cassettes = sorted((RECORDED / provider).glob("*.yaml"))
    if not cassettes:
        if os.environ.get("CI"):
            raise RuntimeError(f"no recordings under {RECORDED}: CI must have shared/recorded beside the checkout")
        pytest.skip(f"no recordings under {RECORDED} (set FIRSTTOKEN_RECORDINGS)", allow_module_level=True)
    return cassettes


class Telemetry:
    """What firsttoken exported during a test."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def calls(self) -> list[ReadableSpan]:
        """The call spans (CLIENT spans carrying gen_ai.operation.name), in end order."""
        return [s for s in self.spans() if s.attributes and sc.GEN_AI_OPERATION_NAME in s.attributes]

    def call(self) -> ReadableSpan:
        calls = self.calls()
        assert len(calls) == 1, f"expected exactly one call span, got {[s.name for s in calls]}"
        return calls[0]

    def children(self, parent: ReadableSpan) -> list[ReadableSpan]:
        pid = parent.context.span_id
        return sorted(
            (s for s in self.spans() if s.parent is not None and s.parent.span_id == pid),
            key=lambda s: s.start_time or 0,
        )

    def metrics(self) -> dict[str, list[Any]]:
        """Metric name -> data points (cumulative, since the start of the test)."""
        out: dict[str, list[Any]] = {}
        data = self.reader.get_metrics_data()
        if data is None:
            return out
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    out.setdefault(metric.name, []).extend(metric.data.data_points)
        return out

    def settle_abandoned(self) -> None:
        """Collect garbage and record the abandoned calls it found, as the worker thread would."""
        gc.collect()
        streams.flush_abandoned(timeout=30.0)


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    t = Telemetry()
    # Every call's waterfall, so that tests can look at any call's phases (the default is the tail only).
    assert firsttoken.instrument(
        tracer_provider=t.tracer_provider, meter_provider=t.meter_provider, phase_spans="always"
    )
    try:
        yield t
    finally:
        firsttoken.uninstrument()


FAST = LatencyModel(queue_ms=1, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=2000, jitter=0, output_tokens=12)
"""A quick, exact latency model for tests that check what is recorded rather than how long it took."""


@pytest.fixture
def sim() -> Iterator[Simulator]:
    with Simulator(latency=FAST, seed=1) as s:
        yield s
