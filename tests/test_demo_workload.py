"""What the demo's workload gives the dashboards: failed calls, calls outside a traffic class, a
server-reported prefill phase, and conversations that grow through the turn buckets.

The workload runs in this process, through the real SDKs against the simulator, with fast latency
profiles under the demo's model names (the shape of the workload, not its timings, is checked),
and firsttoken recording into an in-memory metric reader, as the docker compose stack's load
generator (``firsttoken demo --continuous``) feeds the Collector.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import firsttoken
from firsttoken import semconv as sc
from firsttoken.cli import demo
from firsttoken.providers import _levers
from firsttoken.sim import LatencyModel, Simulator
from firsttoken.timeline import turn_bucket

ACTIONS = 2 * demo.FAIL_EVERY
FAST = {"queue_ms": 2, "prefill_ms_per_1k_tokens": 2, "decode_tokens_per_s": 4000, "jitter": 0.1}


@dataclass
class Run:
    workload: demo._Workload
    spans: list[ReadableSpan]
    points: dict[str, list[dict[str, Any]]]
    """Metric name -> the attributes of each of its data points."""


@pytest.fixture(scope="module")
def run() -> Iterator[Run]:
    _levers.reset()
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    names = [*demo.OPENAI_MODELS, *demo.ANTHROPIC_MODELS]
    with Simulator(models={name: LatencyModel(**FAST) for name in names}, seed=7) as sim:
        assert firsttoken.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
        try:
            clients = demo._Clients(sim)
            workload = demo._Workload(clients, sim, seed=7)
            with ThreadPoolExecutor(4) as pool:
                list(pool.map(lambda _: workload.run(), range(ACTIONS)))
            clients.close()
        finally:
            firsttoken.uninstrument()
    points: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    data = reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points[metric.name] += [dict(p.attributes or {}) for p in metric.data.data_points]
    yield Run(workload, list(spans.get_finished_spans()), points)
    meter_provider.shutdown()
    tracer_provider.shutdown()


def _calls(spans: list[ReadableSpan]) -> list[ReadableSpan]:
    return [
        s
        for s in spans
        if s.attributes and sc.GEN_AI_OPERATION_NAME in s.attributes and sc.FT_PHASE not in s.attributes
    ]


def test_some_calls_stay_failed_after_the_sdks_retries(run: Run) -> None:
    """Error panels, LLMErrorRatioHigh's ratio and the errors sampling policy need calls that fail
    for the app, not 503s the SDK retries away."""
    failed = [s for s in _calls(run.spans) if sc.ERROR_TYPE in (s.attributes or {})]
    said = [((s.attributes or {})[sc.ERROR_TYPE], (s.attributes or {}).get(sc.FT_ATTEMPTS)) for s in failed]
    assert run.workload.outcomes.failed == {}, (run.workload.outcomes.first, said)  # nothing else failed
    assert run.workload.outcomes.planned == ACTIONS // demo.FAIL_EVERY, said
    assert len(failed) == ACTIONS // demo.FAIL_EVERY, said
    for span in failed:
        attrs = span.attributes or {}
        assert span.status.status_code is StatusCode.ERROR
        assert attrs[sc.FT_ATTEMPTS] == 3  # the first try and the SDK's two retries, all answered 503
        assert attrs[sc.FT_TRAFFIC_CLASS] == "interactive"
    models = [(s.attributes or {})[sc.GEN_AI_REQUEST_MODEL] for s in failed]
    assert len(set(models)) == len(models), models  # the models take turns
    errors = [p for p in run.points["gen_ai.client.operation.duration"] if sc.ERROR_TYPE in p]
    assert errors and all(p[sc.FT_TRAFFIC_CLASS] == "interactive" for p in errors)
    # Rate limits are retried away: retries without an error.
    assert run.points["firsttoken.client.retries"]


def test_the_share_of_failed_calls_stays_far_below_the_error_alert(run: Run) -> None:
    """LLMErrorRatioHigh fires over 5% of a model's calls in a traffic class: the planned failures
    are about 1.5% of the interactive calls (all of them in that class, the largest)."""
    calls = [s for s in _calls(run.spans) if (s.attributes or {}).get(sc.FT_TRAFFIC_CLASS) == "interactive"]
    failed = [s for s in calls if sc.ERROR_TYPE in (s.attributes or {})]
    assert 0.005 < len(failed) / len(calls) < 0.03, (len(failed), len(calls))


def test_some_calls_have_no_traffic_class(run: Run) -> None:
    classes = collections.Counter(p.get(sc.FT_TRAFFIC_CLASS) for p in run.points["gen_ai.client.operation.duration"])
    assert {"interactive", "async", "batch", None} <= set(classes), classes
    actions = {p.get(sc.FT_TRAFFIC_CLASS) for p in run.points["firsttoken.app.action.duration"]}
    assert None in actions


def test_a_model_reports_its_server_prefill(run: Run) -> None:
    """The "server prefill vs the rest" panel reads firsttoken.client.server_timing.time{phase="prompt"}."""
    phases = {
        (p[sc.GEN_AI_REQUEST_MODEL], p[sc.FT_SERVER_TIMING_PHASE])
        for p in run.points["firsttoken.client.server_timing.time"]
    }
    assert {("llama-3.3-70b", phase) for phase in ("queue", "prompt", "completion")} <= phases, phases
    spans = [s for s in _calls(run.spans) if (s.attributes or {}).get(sc.GEN_AI_REQUEST_MODEL) == "llama-3.3-70b"]
    assert spans and all(
        sc.FT_SERVER_PROMPT_TIME in (s.attributes or {}) for s in spans if not s.attributes.get(sc.ERROR_TYPE)
    )  # type: ignore[union-attr]


def test_conversations_grow_through_the_turn_buckets(run: Run) -> None:
    """Each conversation ends after its own number of turns; its prompts carry the history."""
    buckets = {p[sc.FT_CONVERSATION_TURNS] for p in run.points["firsttoken.client.conversation.input_tokens"]}
    assert {"1", "2-3", "4-7", "8-15", "16-31"} <= buckets, buckets
    by_conversation: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)
    for span in _calls(run.spans):
        attrs = span.attributes or {}
        if sc.GEN_AI_CONVERSATION_ID in attrs and sc.ERROR_TYPE not in attrs:
            by_conversation[str(attrs[sc.GEN_AI_CONVERSATION_ID])].append(
                (int(attrs[sc.FT_CONVERSATION_TURN]), int(attrs[sc.GEN_AI_USAGE_INPUT_TOKENS]))
            )
    assert len(by_conversation) >= 10  # conversations end and new ones start
    # So that every bucket keeps being fed in a long run (``--continuous``), not only at its start:
    calls = sorted(_calls(run.spans), key=lambda s: s.start_time or 0)
    late = [s for s in calls[len(calls) // 2 :] if sc.FT_CONVERSATION_TURN in (s.attributes or {})]
    late_buckets = {turn_bucket(int((s.attributes or {})[sc.FT_CONVERSATION_TURN])) for s in late}
    assert {"1", "2-3", "4-7", "8-15"} <= late_buckets, late_buckets
    grew = 0
    for turns in by_conversation.values():
        turns.sort()
        numbers = [t for t, _ in turns]
        assert numbers == sorted(set(numbers)), numbers  # one call per turn: no two actions share one at once
        grew += sum(b > a for (_, a), (_, b) in itertools.pairwise(turns))
    # Context growth: a later turn's prompt holds the earlier turns (the system prompt is the same).
    pairs = sum(len(t) - 1 for t in by_conversation.values())
    assert grew == pairs, (grew, pairs)


def test_the_html_report_times_only_the_calls_that_succeeded(run: Run) -> None:
    """The demo's HTML report (built from the same spans) counts the failed calls apart, as the
    terminal report does, and leaves them out of its percentiles and charts."""
    from firsttoken.cli.bench_out import document_from_spans

    document = document_from_spans(run.spans, tool="firsttoken demo")
    summaries = document["summaries"].values()
    errors = [s["errors"] for s in summaries]
    assert sum(sum(e.values()) for e in errors) == ACTIONS // demo.FAIL_EVERY, errors
    for s in summaries:
        assert s["quantiles"]["e2e_s"]["n"] == s["ok"] <= s["n"], s
    failed = [r for r in document["requests"] if not r["ok"]]
    assert len(failed) == ACTIONS // demo.FAIL_EVERY, [(r["error"], r["end_reason"]) for r in failed]
