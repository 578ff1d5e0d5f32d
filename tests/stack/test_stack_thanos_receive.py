"""Metrics pushed to Thanos Receive's OTLP endpoint, for real: the scope trap and its shipped fix
(issue #39 item 2; docs/stack.md, "Past one Prometheus").

    firsttoken demo (real openai/anthropic SDKs -> simulator; firsttoken's own OTLP set-up)
      --OTLP/HTTP--> the real Collector: collector-config/otelcol.yaml + otelcol-thanos-receive.yaml
        metrics            --transform/otel_scope--> Thanos Receive, tenant default-tenant (the shipped path)
        metrics/no_scope   --(no transform)-------> Thanos Receive, tenant no-scope (the trap)
        metrics/prometheus --(no transform)-------> Prometheus' OTLP receiver (the reference)
      Thanos Query (--query.enforce-tenancy: a request sees one tenant) over Receive's StoreAPI

The same data points reach all three, so through Thanos Query the shipped path must hold Prometheus'
series and give every shipped query Prometheus' values, and the path without the transform must give
every query that selects the scope nothing. Queries over recorded series (llm:...) are left out:
Receive evaluates no rules (a Thanos Ruler would); the rules' own expressions are checked instead.

Without the built binaries the tests skip with one line; with FIRSTTOKEN_STACK=required they fail.
"""

from __future__ import annotations

import json
import math
import re
import signal
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from stack_tools import (
    ROOT,
    Process,
    binary,
    collector_env,
    dashboard_queries,
    demo_command,
    rule_exprs,
    selectors,
    substitute,
)
from tests.servers import free_port

RUN_S = 20.0
"""How long the demo runs: enough for two rate() samples at the 2 s export interval in every series
the demo's first seconds create, far below test_stack_real.py's 90 s."""
NO_SCOPE = "no-scope"
"""The Receive tenant that gets the same metrics without the transform."""
SCOPE = 'otel_scope_name="firsttoken"'


@dataclass
class Api:
    """A Prometheus-compatible query API; `tenant` is sent in Thanos' tenant header."""

    url: str
    tenant: str | None = None

    def get(self, path: str, **params: str) -> Any:
        headers = {"THANOS-TENANT": self.tenant} if self.tenant else {}
        request = urllib.request.Request(f"{self.url}{path}?{urllib.parse.urlencode(params)}", headers=headers)
        with urllib.request.urlopen(request, timeout=30) as resp:
            body = json.loads(resp.read())
        assert body["status"] == "success", body
        return body["data"]

    def values(self, expr: str, at: float) -> dict[frozenset[tuple[str, str]], float]:
        """An instant query's result at `at`: its series' labels (without the labels Receive adds)
        to values."""
        data = self.get("/api/v1/query", query=expr, time=str(at))
        result = data["result"] if data["resultType"] == "vector" else [{"metric": {}, "value": data["result"]}]
        return {labels(r["metric"]): float(r["value"][1]) for r in result}

    def lit(self, expr: str, at: float) -> bool:
        """Whether an instant query returns at least one finite value at `at`."""
        return any(math.isfinite(v) for v in self.values(expr, at).values())


def labels(series: dict[str, str]) -> frozenset[tuple[str, str]]:
    """A series' labels without the two Receive adds: its tenant and its replica (external labels)."""
    return frozenset((k, v) for k, v in series.items() if k not in ("tenant_id", "receive_replica"))


@dataclass
class Run:
    prometheus: Api
    shipped: Api
    no_scope: Api
    started: float
    at: float
    """When the queries are evaluated: after the last export, so both stores hold the same points."""


def collector_test_overlay(tmp: Path, receive_otlp: str) -> Path:
    """The test's additions to the shipped files: the same metrics to a second tenant without the
    transform, and to Prometheus as the reference. The traces pipeline is otelcol.yaml's, unchanged."""
    overlay = {
        "exporters": {
            "otlp_http/no_scope": {
                "metrics_endpoint": receive_otlp,
                "headers": {"THANOS-TENANT": NO_SCOPE},
                "tls": {"insecure": True},
                "sending_queue": {"batch": {}},
            }
        },
        "service": {
            "pipelines": {
                "metrics/no_scope": {
                    "receivers": ["otlp"],
                    "processors": ["memory_limiter"],
                    "exporters": ["otlp_http/no_scope"],
                },
                "metrics/prometheus": {
                    "receivers": ["otlp"],
                    "processors": ["memory_limiter"],
                    "exporters": ["otlp_http/prometheus"],
                },
            }
        },
    }
    path = tmp / "otelcol-test.yaml"
    path.write_text(yaml.safe_dump(overlay))
    return path


@pytest.fixture(scope="module")
def run() -> Iterator[Run]:
    bins = {c: binary(c) for c in ("otelcol", "prometheus", "thanos")}
    otlp = yaml.safe_load((ROOT / "prometheus" / "prometheus.yml").read_text())["otlp"]
    with tempfile.TemporaryDirectory(prefix="firsttoken-thanos-receive-") as tmpdir:
        tmp = Path(tmpdir)
        names = ("rw", "rhttp", "rgrpc", "qhttp", "qgrpc", "prom", "grpc", "http", "health", "telemetry")
        ports = {n: free_port() for n in names}
        procs: list[Process] = []
        try:
            procs.append(
                Process(
                    "thanos-receive",
                    [
                        bins["thanos"],
                        "receive",
                        f"--tsdb.path={tmp / 'receive'}",
                        f"--remote-write.address=127.0.0.1:{ports['rw']}",
                        f"--http-address=127.0.0.1:{ports['rhttp']}",
                        f"--grpc-address=127.0.0.1:{ports['rgrpc']}",
                        '--label=receive_replica="0"',
                        # Off (0) by default in Receive; Prometheus' default storage holds 100000.
                        "--tsdb.max-exemplars=100000",
                        # The resource attributes the shipped prometheus.yml promotes to labels.
                        *(
                            f"--receive.otlp-promote-resource-attributes={a}"
                            for a in otlp["promote_resource_attributes"]
                        ),
                        "--log.level=warn",
                    ],
                    tmp / "receive.log",
                    ready=f"http://127.0.0.1:{ports['rhttp']}/-/ready",
                )
            )
            query_url = f"http://127.0.0.1:{ports['qhttp']}"
            procs.append(
                Process(
                    "thanos-query",
                    [
                        bins["thanos"],
                        "query",
                        f"--http-address=127.0.0.1:{ports['qhttp']}",
                        f"--grpc-address=127.0.0.1:{ports['qgrpc']}",
                        f"--endpoint=127.0.0.1:{ports['rgrpc']}",
                        "--query.enforce-tenancy",
                        "--log.level=warn",
                    ],
                    tmp / "query.log",
                    ready=f"{query_url}/-/ready",
                )
            )
            prom_url = f"http://127.0.0.1:{ports['prom']}"
            (tmp / "prometheus.yml").write_text(yaml.safe_dump({"otlp": otlp}))
            procs.append(
                Process(
                    "prometheus",
                    [
                        bins["prometheus"],
                        f"--config.file={tmp / 'prometheus.yml'}",
                        f"--storage.tsdb.path={tmp / 'prom'}",
                        f"--web.listen-address=127.0.0.1:{ports['prom']}",
                        "--web.enable-otlp-receiver",
                        "--enable-feature=exemplar-storage",
                        "--log.level=warn",
                    ],
                    tmp / "prometheus.log",
                    ready=f"{prom_url}/-/ready",
                )
            )
            receive_otlp = f"http://127.0.0.1:{ports['rw']}/api/v1/otlp"
            collector = ROOT / "collector-config"
            procs.append(
                Process(
                    "otelcol",
                    [
                        bins["otelcol"],
                        f"--config={collector / 'otelcol.yaml'}",
                        f"--config={collector / 'otelcol-thanos-receive.yaml'}",
                        f"--config={collector_test_overlay(tmp, receive_otlp)}",
                    ],
                    tmp / "otelcol.log",
                    env={
                        **collector_env(ports),
                        # No trace store here: the tail-sampled traces' exports fail and are dropped.
                        "FIRSTTOKEN_TEMPO_OTLP_ENDPOINT": f"127.0.0.1:{free_port()}",
                        "FIRSTTOKEN_PROMETHEUS_OTLP_URL": f"{prom_url}/api/v1/otlp/v1/metrics",
                        "FIRSTTOKEN_THANOS_RECEIVE_OTLP_URL": receive_otlp,
                    },
                    ready=f"http://127.0.0.1:{ports['health']}/",
                )
            )
            # Query must have found Receive's StoreAPI before it is asked (its endpoint check runs every 5 s).
            deadline = time.monotonic() + 30
            while not Api(query_url).get("/api/v1/stores"):
                assert time.monotonic() < deadline, f"Query found no store in 30 s:\n{procs[1].logs()}"
                time.sleep(0.5)
            started = time.time()
            demo = Process(
                "demo",
                demo_command(RUN_S / 3),
                tmp / "demo.log",
                env={
                    "OTEL_SERVICE_NAME": "firsttoken-demo",
                    # Values for the resource attributes both promote, so the label sets compare them too.
                    "OTEL_RESOURCE_ATTRIBUTES": "service.namespace=shop,deployment.environment.name=test",
                    "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{ports['http']}",
                    "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                    "OTEL_METRIC_EXPORT_INTERVAL": "2000",
                    "PYTHONUNBUFFERED": "1",
                },
            )
            procs.append(demo)
            time.sleep(RUN_S)
            # SIGINT: the demo flushes its last metrics and exits; then the Collector exports them.
            demo.stop(signal.SIGINT)
            delivered(f"http://127.0.0.1:{ports['telemetry']}/metrics")
            yield Run(Api(prom_url), Api(query_url), Api(query_url, NO_SCOPE), started, time.time())
        finally:
            for p in reversed(procs):
                p.stop()


EXPORTERS = ("otlp_http/thanos_receive", "otlp_http/no_scope", "otlp_http/prometheus")


def counter(text: str, name: str, exporter: str | None = None) -> float:
    """The sum of a Collector counter's series in its telemetry (named with or without `_total`)."""
    total = 0.0
    for line in text.splitlines():
        series, _, value = line.rpartition(" ")
        if re.match(rf"{name}(_total)?{{", series) and (exporter is None or f'exporter="{exporter}"' in series):
            total += float(value)
    return total


def delivered(telemetry: str, timeout_s: float = 30) -> None:
    """Waits until each of the three exporters has sent every metric point the Collector accepted (its
    own counters), so that Prometheus and both tenants hold the same points when they are compared."""
    deadline = time.monotonic() + timeout_s
    while True:
        with urllib.request.urlopen(telemetry, timeout=10) as resp:
            text = resp.read().decode()
        accepted = counter(text, "otelcol_receiver_accepted_metric_points")
        sent = {e: counter(text, "otelcol_exporter_sent_metric_points", e) for e in EXPORTERS}
        if accepted and all(v == accepted for v in sent.values()):
            return
        assert time.monotonic() < deadline, f"the Collector accepted {accepted} points, its exporters sent {sent}"
        time.sleep(0.5)


def raw_queries(queries: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The queries over series the Collector sends (not llm:... recorded by rules), variables substituted."""
    return [(where, substitute(expr)) for where, expr in queries if "llm:" not in expr]


def test_the_shipped_dashboards_work_through_thanos_receive_and_query(run: Run) -> None:
    """Every dashboard query with data on Prometheus has data through Thanos Query on the shipped path."""
    queries = raw_queries(dashboard_queries())
    on_prometheus = [(where, expr) for where, expr in queries if run.prometheus.lit(expr, run.at)]
    dark = [f"{where}: {expr}" for where, expr in on_prometheus if not run.shipped.lit(expr, run.at)]
    print(
        f"dashboard queries with data on Prometheus: {len(on_prometheus)}/{len(queries)}, dark on Thanos: {len(dark)}"
    )
    assert not dark, f"{len(dark)} of {len(on_prometheus)} lit on Prometheus, dark through Thanos:\n" + "\n".join(dark)
    # The demo's 20 s light most of them: a vacuous pass (nothing reached Prometheus) is a failure.
    assert len(on_prometheus) >= len(queries) // 2, f"only {len(on_prometheus)} of {len(queries)} lit on Prometheus"


def test_the_shipped_rules_work_through_thanos_receive_and_query(run: Run) -> None:
    """The recording and alerting rules' expressions over the Collector's series, the same way."""
    queries = raw_queries(rule_exprs())
    on_prometheus = [(where, expr) for where, expr in queries if run.prometheus.lit(expr, run.at)]
    dark = [f"{where}: {expr}" for where, expr in on_prometheus if not run.shipped.lit(expr, run.at)]
    print(f"rule expressions with data on Prometheus: {len(on_prometheus)}/{len(queries)}; dark on Thanos: {len(dark)}")
    assert not dark, f"{len(dark)} of {len(on_prometheus)} lit on Prometheus, dark through Thanos:\n" + "\n".join(dark)
    assert on_prometheus, "no rule expression has data on Prometheus"


def test_the_same_series_and_values_as_prometheus(run: Run) -> None:
    """Receive's translator and the transform make the very series Prometheus makes from the same data
    points (names and labels, otel_scope_* included), and every shipped query over them gives the same
    values at the same evaluation time: the dashboards read the same through Thanos as on Prometheus."""
    # job is service.namespace/service.name.
    match = {"match[]": '{job="shop/firsttoken-demo"}', "start": str(run.started - 60), "end": str(run.at)}
    on_prometheus = {labels(s) for s in run.prometheus.get("/api/v1/series", **match)}
    on_thanos = {labels(s) for s in run.shipped.get("/api/v1/series", **match)}
    assert ("deployment_environment_name", "test") in set().union(*on_prometheus), "no series with the promoted labels"
    assert on_thanos == on_prometheus, (
        f"only on Prometheus: {sorted(map(sorted, on_prometheus - on_thanos))[:3]}; "
        f"only through Thanos: {sorted(map(sorted, on_thanos - on_prometheus))[:3]}"
    )
    differ = []
    for where, expr in raw_queries(dashboard_queries() + rule_exprs()):
        want, got = run.prometheus.values(expr, run.at), run.shipped.values(expr, run.at)
        # The same samples; the engines may add them in another order (Thanos' engine sums by series
        # as they stream in), which moves the last bits: 0.08225000000000002 vs 0.08224999999999999 in
        # one run. Relative 1e-9 is far above that rounding (~1e-16 per addition, a few hundred terms)
        # and far below any real difference. NaN (0/0 on an idle series) equals NaN.
        same = want.keys() == got.keys() and all(
            math.isclose(want[k], got[k], rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(want[k]) and math.isnan(got[k]))
            for k in want
        )
        if not same:
            differ.append(f"{where}: Prometheus {want} != Thanos {got}")
    assert not differ, f"{len(differ)} queries differ:\n" + "\n".join(differ[:5])


def test_without_the_transform_every_scoped_query_returns_nothing(run: Run) -> None:
    """The trap: the same data points without the transform reach Receive (the series are there), but
    carry no otel_scope_name, so every dashboard query and rule that selects it is dark."""
    series = run.no_scope.get("/api/v1/series", **{"match[]": '{__name__=~"gen_ai_.+|firsttoken_.+"}'})
    assert series, "the no-scope tenant received nothing: the trap would be unproven"
    assert not any("otel_scope_name" in s for s in series), "Receive now promotes the scope: revisit docs/stack.md"
    scoped = [
        (where, expr)
        for where, expr in raw_queries(dashboard_queries() + rule_exprs())
        if any(("otel_scope_name", "=", "firsttoken") in matchers for _, matchers in selectors(expr))
    ]
    assert len(scoped) >= 50, f"only {len(scoped)} queries select the scope: is the selector still shipped?"
    lit = [where for where, expr in scoped if run.no_scope.lit(expr, run.at)]
    assert not lit, f"scoped queries with data without the transform: {lit}"


def exemplar_spans(api: Api, query: str, since: float) -> set[tuple[str, str]]:
    data = api.get("/api/v1/query_exemplars", query=query, start=str(since), end=str(time.time()))
    return {(e["labels"]["trace_id"], e["labels"]["span_id"]) for s in data for e in s["exemplars"]}


def test_exemplars_come_back_through_thanos_query(run: Run) -> None:
    """Exemplars survive the transform and Receive: they come back through Query, scoped, and point at the
    same spans as the exemplars Prometheus kept from the same data points."""
    query = f"gen_ai_client_operation_duration_seconds_bucket{{{SCOPE}}}"
    thanos = exemplar_spans(run.shipped, query, run.started - 60)
    prometheus = exemplar_spans(run.prometheus, query, run.started - 60)
    print(f"exemplars through Thanos Query: {len(thanos)}; on Prometheus: {len(prometheus)}")
    assert thanos, "no exemplars through Thanos Query"
    assert thanos <= prometheus, f"exemplars not on Prometheus from the same data: {sorted(thanos - prometheus)[:5]}"
