"""Beside another GenAI instrumentation, in the real Collector and the real Prometheus.

One process runs firsttoken and opentelemetry-instrumentation-genai-openai (then OpenLLMetry's openai
instrumentation) on the same openai calls against the simulator, and exports its metrics once, over
OTLP/HTTP, to the shipped Collector config, which pushes them to Prometheus' OTLP receiver (the
shipped prometheus.yml: its translation strategy, its promoted attributes). The test reads which
labels arrive: both instrumentations record ``gen_ai.client.operation.duration`` with the same
attribute names, so only the instrumentation scope tells them apart reliably, and it must arrive
as a label for a query to select firsttoken's own points (issue 29).

Found here on the real Prometheus 3.14: without ``promote_scope_metadata: true`` in prometheus.yml's
``otlp:`` block (off by default) no scope label arrives at all; the shipped config sets it, and
``otel_scope_name`` (with ``otel_scope_version`` and ``otel_scope_schema_url``) arrives on every
series. test_stack_coexist_queries.py runs every shipped query beside these instrumentations.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from stack_tools import ROOT, Process, Prometheus, binary, collector_env
from test_stack_real import prometheus_config
from tests.servers import free_port

from firsttoken import __version__
from firsttoken.semconv import SCHEMA_URL

CALLS = 3
SCOPE = "firsttoken"
SELECTOR = 'otel_scope_name="firsttoken"'
"""What a query needs to count firsttoken's points only (what this test establishes)."""

CHILD = textwrap.dedent(
    """
    import sys
    from opentelemetry import metrics, trace
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    import firsttoken
    from firsttoken.sim import Simulator

    endpoint, service, other, calls = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=endpoint + "/v1/metrics"), export_interval_millis=600_000
    )
    meters = MeterProvider(metric_readers=[reader], resource=Resource.create({"service.name": service}))
    metrics.set_meter_provider(meters)
    trace.set_tracer_provider(TracerProvider())
    firsttoken.instrument()
    if other == "genai-openai":
        from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor

        OpenAIInstrumentor().instrument()
    elif other == "openllmetry":
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor

        OpenAIInstrumentor().instrument()
    import openai

    with Simulator(seed=1) as sim:
        client = openai.OpenAI(base_url=sim.openai_base_url, api_key="anything")
        for _ in range(calls):
            client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
    meters.shutdown()  # one export, now
    """
)

OTHERS = {
    "genai-openai": "opentelemetry.instrumentation.genai.openai",
    "openllmetry": "opentelemetry.instrumentation.openai",
}
SCOPES = {
    "genai-openai": "opentelemetry.instrumentation.genai.openai",
    "openllmetry": "opentelemetry.instrumentation.openai.v1",
}
"""The instrumentation scope each records its metrics under (its meter's name)."""


@pytest.fixture(scope="module")
def collector_and_prometheus() -> Iterator[tuple[str, Prometheus]]:
    bins = {c: binary(c) for c in ("otelcol", "prometheus")}
    with tempfile.TemporaryDirectory(prefix="firsttoken-coexist-") as tmpdir:
        tmp = Path(tmpdir)
        ports = {name: free_port() for name in ("prom", "am", "grpc", "http", "health", "telemetry", "tempo")}
        procs: list[Process] = []
        try:
            cfg = prometheus_config(tmp, ports["prom"], ports["am"], ports["telemetry"])
            prom_proc = Process(
                "prometheus",
                [
                    bins["prometheus"],
                    f"--config.file={cfg}",
                    f"--storage.tsdb.path={tmp / 'prom'}",
                    f"--web.listen-address=127.0.0.1:{ports['prom']}",
                    "--web.enable-otlp-receiver",
                    "--enable-feature=exemplar-storage",
                ],
                tmp / "prometheus.log",
            )
            procs.append(prom_proc)
            prom = Prometheus(f"http://127.0.0.1:{ports['prom']}", prom_proc.process, prom_proc.log)
            prom_proc.wait_ready(f"{prom.url}/-/ready")
            otelcol = Process(
                "otelcol",
                [bins["otelcol"], f"--config={ROOT / 'collector-config' / 'otelcol.yaml'}"],
                tmp / "otelcol.log",
                env={
                    **collector_env(ports),
                    "FIRSTTOKEN_TEMPO_OTLP_ENDPOINT": f"127.0.0.1:{ports['tempo']}",  # no traces sent here
                    "FIRSTTOKEN_PROMETHEUS_OTLP_URL": f"{prom.url}/api/v1/otlp/v1/metrics",
                },
            )
            procs.append(otelcol)
            health = f"http://127.0.0.1:{ports['health']}/"
            otelcol.wait_ready(health)
            yield f"http://127.0.0.1:{ports['http']}", prom
        finally:
            for p in reversed(procs):
                p.stop()


def run_app(collector: str, service: str, other: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = str(ROOT / "src")
    subprocess.run(
        [sys.executable, "-c", CHILD, collector, service, other, str(CALLS)], env=env, check=True, timeout=120
    )


def counts(prom: Prometheus, service: str, selector: str = "") -> list[dict[str, object]]:
    """The series of ``gen_ai_client_operation_duration_seconds_count`` of one app run, once they arrived."""
    expr = f'gen_ai_client_operation_duration_seconds_count{{job="{service}"{"," + selector if selector else ""}}}'
    deadline = time.monotonic() + 60  # the Collector's batch, then Prometheus' OTLP write
    while True:
        result = prom.query(expr)
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.5)


def points(series: list[dict[str, object]]) -> float:
    return sum(float(s["value"][1]) for s in series)  # type: ignore[index]


@pytest.mark.parametrize("other", sorted(OTHERS))
def test_another_instrumentation_doubles_the_count_and_the_scope_label_separates_them(
    collector_and_prometheus: tuple[str, Prometheus], other: str
) -> None:
    if importlib.util.find_spec(OTHERS[other]) is None:
        pytest.skip(f"{other} is not installed (the dev extra installs it)")
    collector, prom = collector_and_prometheus
    run_app(collector, f"alone-{other}", "")
    run_app(collector, f"beside-{other}", other)
    alone = counts(prom, f"alone-{other}")
    beside = counts(prom, f"beside-{other}")
    assert points(alone) == CALLS
    # The issue: the standard name without a scope counts every call twice.
    assert points(beside) == 2 * CALLS
    # The scope arrives as labels (the shipped prometheus.yml), and selecting it counts each call once.
    scopes = {s["metric"].get("otel_scope_name") for s in beside}  # type: ignore[attr-defined]
    assert scopes == {SCOPE, SCOPES[other]}
    own = {k: v for s in alone for k, v in s["metric"].items() if k.startswith("otel_scope_")}  # type: ignore[attr-defined]
    assert own == {"otel_scope_name": SCOPE, "otel_scope_version": __version__, "otel_scope_schema_url": SCHEMA_URL}
    assert points(counts(prom, f"beside-{other}", SELECTOR)) == CALLS
    assert points(counts(prom, f"alone-{other}", SELECTOR)) == CALLS
