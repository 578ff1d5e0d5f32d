"""Live: a real Prometheus scrapes what firsttoken recorded from real SDK calls to the simulator.

Real ``openai`` and ``anthropic`` SDK calls (streamed and not, chat and responses, prompt-cache
hits, reasoning, cut-offs, retries, errors, actions, traffic classes, conversations) go to
firsttoken's simulator; firsttoken records them into an in-memory reader and span exporter. The
metrics are served as OpenMetrics with exemplars, under the names the Collector path gives
(stack_openmetrics.py), to Debian's Prometheus on loopback, which also loads the shipped rules.
Then every dashboard query, variable and recording rule must return data, and exemplars must point
at spans that were exported.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from stack_openmetrics import OpenMetricsRenderer, serve
from stack_tools import (
    PENDING_METRICS,
    RULE_FILES,
    Prometheus,
    dashboard_queries,
    dashboards,
    documented_series,
    family,
    need,
    panels,
    pending_reason,
    prometheus,
    recorded_names,
    substitute,
    variable_queries,
)

import firsttoken
from firsttoken import semconv as sc

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")
sim = pytest.importorskip("firsttoken.sim")

pytestmark = pytest.mark.prometheus

# Long enough for the simulator's prompt cache (1024 tokens and more).
SYSTEM = " ".join(f"Rule {i}: answer briefly, cite the policy number and never invent prices." for i in range(150))
FAST = {"queue_ms": 5, "prefill_ms_per_1k_tokens": 20, "decode_tokens_per_s": 600, "output_tokens": 12}


@dataclass
class Live:
    prom: Prometheus
    spans: list[ReadableSpan]
    exposition: str


def _stream(stream: Any) -> None:
    for _ in stream:
        pass


def workload(server: Any, round_no: int) -> None:
    """One round of varied calls; a new SDK client per round (a new pool: connection setup again)."""
    client = openai.OpenAI(base_url=server.openai_base_url, api_key="sk-test", max_retries=2)
    claude = anthropic.Anthropic(base_url=server.anthropic_base_url, api_key="sk-test", max_retries=0)
    history: list[dict[str, str]] = [{"role": "system", "content": SYSTEM}]
    with firsttoken.action("answer_question", traffic_class="interactive", conversation_id=f"conv-{round_no}"):
        with firsttoken.phase("retrieve"):
            time.sleep(0.01)
        for turn in range(3):
            history.append({"role": "user", "content": f"Question {turn}: how long does a repair take?"})
            _stream(
                client.chat.completions.create(
                    model="gpt-4o-mini",
                    messages=history,
                    stream=True,
                    stream_options={"include_usage": True},
                )
            )
            history.append({"role": "assistant", "content": "About two days, per policy 3."})
    with firsttoken.traffic_class("batch"):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "Summarize."}])
        _stream(client.responses.create(model="gpt-4o", instructions=SYSTEM, input="List the rules.", stream=True))
    with firsttoken.action("draft_report", traffic_class="async"):
        # A reasoning model: hidden reasoning tokens first.
        _stream(
            client.chat.completions.create(
                model="o3-mini",
                messages=[{"role": "user", "content": "Plan the week."}],
                stream=True,
                stream_options={"include_usage": True},
            )
        )
    # Cut off by max_tokens (finish reason "length"); the server reports its timing Groq's way.
    _stream(
        client.chat.completions.create(
            model="gpt-4o",
            messages=[{"role": "user", "content": "Tell me everything."}],
            max_tokens=3,
            stream=True,
            stream_options={"include_usage": True},
            extra_headers={"x-firsttoken-sim-provider": "groq"},
        )
    )
    # A 429 the SDK retries, and a 500 it may not retry (max_retries=0): an error.
    server.inject(sim.Fault.rate_limit(retry_after=0.01), model="gpt-4o-mini")
    client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "Hi"}])
    server.inject(sim.Fault.server_error(status=500), model="gpt-4o")
    with pytest.raises(openai.InternalServerError):
        client.with_options(max_retries=0).chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "Hi"}]
        )
    # Anthropic with a cache breakpoint: a cache write the first time, reads later.
    for _ in range(2):
        _stream(
            claude.messages.create(
                model="claude-sim",
                max_tokens=32,
                system=[{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
                messages=[{"role": "user", "content": "What is rule 7?"}],
                stream=True,
            )
        )
    if round_no in (0, 2):
        # A distinctly slow first token: its exemplar must lead to such a call. Twice, so that its
        # counters increase between scrapes (a series' first sample has no rate).
        _stream(
            client.chat.completions.create(
                model="slow-model",
                messages=[{"role": "user", "content": "Hi"}],
                stream=True,
                stream_options={"include_usage": True},
            )
        )
    client.close()
    claude.close()


def wait_for_scrape_after(prom: Prometheus, when: float, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = prom.query('timestamp(up{job="firsttoken"} == 1)')
        if result and float(result[0]["value"][1]) > when:
            return
        time.sleep(0.2)
    raise AssertionError(f"Prometheus did not scrape after {when}:\n{prom.logs()}")


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    need("prometheus")
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    renderer = OpenMetricsRenderer(reader)
    models = {
        "gpt-4o-mini": sim.LatencyModel(**FAST, jitter=0.3),
        "gpt-4o": sim.LatencyModel(**FAST, jitter=0.3),
        "o3-mini": sim.LatencyModel(**FAST, jitter=0.3, reasoning_tokens=6),
        "claude-sim": sim.LatencyModel(**FAST, jitter=0.3),
        "slow-model": sim.LatencyModel.fixed(queue_ms=1200, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=600),
    }
    assert firsttoken.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
    try:
        with (
            serve(renderer) as target,
            sim.Simulator(models=models, latency=sim.LatencyModel(**FAST), seed=3) as server,
        ):
            config = {
                "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(p) for p in RULE_FILES],
                "scrape_configs": [{"job_name": "firsttoken", "static_configs": [{"targets": [target]}]}],
            }
            with prometheus(config) as prom:
                for round_no in range(3):
                    workload(server, round_no)
                    wait_for_scrape_after(prom, time.time())
                # Two more scrapes so every series has an increase in its window, then the rules.
                wait_for_scrape_after(prom, time.time() + 1.5)
                deadline = time.monotonic() + 20
                while not prom.query("llm:ttft_seconds:p95_5m") and time.monotonic() < deadline:
                    time.sleep(0.2)
                yield Live(prom, list(spans.get_finished_spans()), renderer.render())
    finally:
        firsttoken.uninstrument()
        meter_provider.shutdown()
        tracer_provider.shutdown()


def finite(result: list[dict[str, Any]]) -> bool:
    return any(math.isfinite(float(r["value"][1])) for r in result)


def test_every_dashboard_query_returns_data(live: Live) -> None:
    empty, pending_with_data = [], []
    for where, expr in dashboard_queries():
        result = live.prom.query(substitute(expr))
        if pending_reason(expr):
            if result:
                pending_with_data.append(where)
        elif not finite(result):
            empty.append(f"{where}: {substitute(expr)} -> {result}")
    assert not empty, "queries without data:\n" + "\n".join(empty)
    assert not pending_with_data, f"now emitted, remove from PENDING_METRICS: {pending_with_data}"


def test_every_dashboard_variable_has_values(live: Live) -> None:
    for where, definition in variable_queries():
        selector, label = definition.removeprefix("label_values(").removesuffix(")").rsplit(", ", 1)
        series = live.prom.get("/api/v1/series", **{"match[]": substitute(selector)})
        values = {s.get(label) for s in series} - {None}
        assert values, f"{where}: no values of {label}"
    classes = {
        s.get("firsttoken_traffic_class")
        for s in live.prom.get("/api/v1/series", **{"match[]": "gen_ai_client_operation_duration_seconds_count"})
    }
    assert {"interactive", "batch", "async", None} <= classes


def test_every_recording_rule_produces_series(live: Live) -> None:
    missing = [name for name in sorted(recorded_names()) if not live.prom.query(name)]
    assert not missing, f"recording rules without series: {missing}"


def test_emitted_names_are_the_documented_ones(live: Live) -> None:
    """What firsttoken emitted, translated, is exactly what docs/metrics.md promises (and pending is not)."""
    documented = documented_series()
    emitted = {
        line.split("{")[0].split(" ")[0] for line in live.exposition.splitlines() if line and not line.startswith("#")
    }
    assert emitted <= documented, f"emitted but not documented: {emitted - documented}"
    assert not {family(n) for n in emitted} & set(PENDING_METRICS)
    for name in ("gen_ai_client_operation_duration_seconds_bucket", "firsttoken_client_input_tokens_total"):
        assert live.prom.query(name), name


def span_index(spans: list[ReadableSpan]) -> dict[tuple[str, str], ReadableSpan]:
    return {(f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}"): s for s in spans}


@pytest.mark.parametrize(
    "metric",
    [
        "firsttoken_client_time_to_first_token_seconds_bucket",
        "gen_ai_client_operation_duration_seconds_bucket",
        "firsttoken_client_time_per_output_token_seconds_bucket",
        "firsttoken_app_action_duration_seconds_bucket",
    ],
)
def test_exemplars_point_at_exported_spans(live: Live, metric: str) -> None:
    end = time.time()
    data = live.prom.get("/api/v1/query_exemplars", query=metric, start=str(end - 600), end=str(end))
    exemplars = [e for series in data for e in series["exemplars"]]
    assert exemplars, f"no exemplars for {metric}"
    spans = span_index(live.spans)
    for e in exemplars:
        key = (e["labels"]["trace_id"], e["labels"]["span_id"])
        assert key in spans, f"{metric}: exemplar {key} is not an exported span"


def test_the_slowest_ttft_exemplar_is_that_very_call(live: Live) -> None:
    end = time.time()
    data = live.prom.get(
        "/api/v1/query_exemplars",
        query="firsttoken_client_time_to_first_token_seconds_bucket",
        start=str(end - 600),
        end=str(end),
    )
    slowest = max((e for series in data for e in series["exemplars"]), key=lambda e: float(e["value"]))
    span = span_index(live.spans)[(slowest["labels"]["trace_id"], slowest["labels"]["span_id"])]
    assert span.name == "chat slow-model"
    assert span.attributes is not None
    assert span.attributes[sc.FT_TIME_TO_FIRST_TOKEN] == pytest.approx(float(slowest["value"]), abs=1e-6)
    assert float(slowest["value"]) >= 1.2


def test_summary_table_has_one_row_per_model_called(live: Live) -> None:
    """The overview's summary table: its instant queries, merged on provider and model as Grafana's merge
    transformation does, give one row per provider/model that was called, every cell a number."""
    overview = dashboards()["llm-latency-overview.json"]
    table = next(p for p in panels(overview) if p["type"] == "table")
    assert [t["id"] for t in table["transformations"]] == ["merge", "organize"]
    rows: dict[tuple[str, str], dict[str, float]] = {}
    for t in table["targets"]:
        assert t["instant"] is True and t["format"] == "table", t["refId"]
        assert "$__range" in t["expr"], f"{t['refId']}: not over the selected range"
        for r in live.prom.query(substitute(t["expr"])):
            # merge joins frames on their label columns: each query must return exactly these.
            assert set(r["metric"]) == {"gen_ai_provider_name", "gen_ai_request_model"}, (t["refId"], r["metric"])
            key = (r["metric"]["gen_ai_provider_name"], r["metric"]["gen_ai_request_model"])
            assert t["legendFormat"] not in rows.get(key, {}), f"two values for {key} in {t['refId']}"
            rows.setdefault(key, {})[t["legendFormat"]] = float(r["value"][1])
    called = {
        (str(s.attributes[sc.GEN_AI_PROVIDER_NAME]), str(s.attributes[sc.GEN_AI_REQUEST_MODEL]))
        for s in live.spans
        if s.attributes and sc.GEN_AI_PROVIDER_NAME in s.attributes and sc.GEN_AI_REQUEST_MODEL in s.attributes
    }
    assert len(called) == 5, called
    assert set(rows) == called
    columns = [t["legendFormat"] for t in table["targets"]]
    for key, row in rows.items():
        assert all(math.isfinite(v) for v in row.values()), (key, row)
        # Every model here streamed, succeeded at least once and reported usage: a full row.
        assert set(row) == set(columns), (key, set(columns) - set(row))
        # No upper bound on cache hits: two counters born at different scrapes extrapolate differently
        # over a window this short (a few scrapes), so their ratio may pass 1 by a little.
        assert row["Calls/s"] > 0 and 0 <= row["Errors"] < 1 and row["Cache hits"] >= 0, (key, row)
        assert row["TTFT p50"] <= row["TTFT p95"] and row["End-to-end p95"] <= row["End-to-end p99"], (key, row)
    assert rows[("openai", "gpt-4o")]["Errors"] > 0  # the injected 500
    assert rows[("openai", "gpt-4o-mini")]["Errors"] == 0  # the 429 was retried: one successful call
    assert rows[("openai", "slow-model")]["TTFT p95"] >= 1.0  # queue_ms=1200
    assert rows[("anthropic", "claude-sim")]["Cache hits"] > 0


class _SpelledHistograms:
    """Histograms whose counts grow with every scrape, ``le`` spelled "1" or "1.0" per model.

    Prometheus 3 scraping a text exposition stores integral bounds as "1.0"; the OTLP receiver
    stores "1". The SLO queries must give the same shares on both.
    """

    TTFT = "firsttoken_client_time_to_first_token_seconds"
    DURATION = "gen_ai_client_operation_duration_seconds"

    def __init__(self) -> None:
        self.scrapes = 0

    @staticmethod
    def ttft_share(bound: float) -> float:
        return min(1.0, bound / 4)

    @staticmethod
    def e2e_share(bound: float) -> float:
        return min(1.0, bound / 40)

    def render(self) -> str:
        self.scrapes += 1
        n = self.scrapes * 100
        lines = [f"# TYPE {self.TTFT} histogram", f"# TYPE {self.DURATION} histogram"]
        for model, spell in (("short", lambda b: f"{b:g}"), ("float", lambda b: repr(float(b)))):
            for traffic_class in ("interactive", "async", "batch", ""):
                base = f'otel_scope_name="firsttoken",gen_ai_provider_name="sim",gen_ai_request_model="{model}"'
                if traffic_class:
                    base += f',firsttoken_traffic_class="{traffic_class}"'
                for metric, buckets, share, labels in (
                    (self.TTFT, sc.TTFT_BUCKETS, self.ttft_share, base),
                    (self.DURATION, sc.DURATION_BUCKETS, self.e2e_share, base + ',error_type=""'),
                ):
                    for b in buckets:
                        lines.append(f'{metric}_bucket{{{labels},le="{spell(b)}"}} {round(n * share(b))}')
                    lines += [
                        f'{metric}_bucket{{{labels},le="+Inf"}} {n}',
                        f"{metric}_count{{{labels}}} {n}",
                        f"{metric}_sum{{{labels}}} {n}",
                    ]
                # Failed calls: in every bucket, never a met end-to-end target.
                failed = base + ',error_type="TimeoutError"'
                lines += [f'{self.DURATION}_bucket{{{failed},le="{spell(b)}"}} {n // 4}' for b in sc.DURATION_BUCKETS]
                lines += [
                    f'{self.DURATION}_bucket{{{failed},le="+Inf"}} {n // 4}',
                    f"{self.DURATION}_count{{{failed}}} {n // 4}",
                    f"{self.DURATION}_sum{{{failed}}} 1",
                ]
        return "\n".join([*lines, "# EOF", ""])


def test_slo_stats_read_le_spelled_1_and_1_0_alike() -> None:
    need("prometheus")
    data = _SpelledHistograms()
    overview = dashboards()["llm-latency-overview.json"]
    slo_targets = [t for p in panels(overview) if p["type"] == "stat" for t in p["targets"]]
    assert slo_targets
    with serve(data) as target:  # type: ignore[arg-type]
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [{"job_name": "spelled", "static_configs": [{"targets": [target]}]}],
        }
        with prometheus(config) as prom:
            # Three scrapes: every series has a rate.
            deadline = time.monotonic() + 30
            samples = f"min(count_over_time({data.TTFT}_count[1m])) >= 3"
            while not prom.query(samples):
                assert time.monotonic() < deadline, prom.logs()
                time.sleep(0.3)
            checked = 0
            for t in slo_targets:
                expr = substitute(t["expr"])
                bound = float(re.search(r'le=~?"([0-9.]+)', expr).group(1))  # type: ignore[union-attr]
                # End-to-end: a failed call is a miss, successes under the bound / (successes + failures).
                want = data.ttft_share(bound) if data.TTFT in expr else data.e2e_share(bound) / 1.25
                assert 'gen_ai_request_model=~".*"' in expr, "one model at a time, below"
                for model in ("short", "float"):
                    result = prom.query(expr.replace('gen_ai_request_model=~".*"', f'gen_ai_request_model="{model}"'))
                    assert len(result) == 1, (model, expr)
                    assert float(result[0]["value"][1]) == pytest.approx(want, abs=0.01), (model, expr)
                    checked += 1
            assert checked == 2 * len(slo_targets)
            # The check can fail: an exact le="1" finds nothing where "1.0" is stored.
            assert prom.query(f'{data.TTFT}_bucket{{gen_ai_request_model="short", le="1"}}')
            assert not prom.query(f'{data.TTFT}_bucket{{gen_ai_request_model="float", le="1"}}')
