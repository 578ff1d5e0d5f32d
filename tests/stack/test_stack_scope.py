"""Every shipped query counts firsttoken's own points only (issue 29).

Another GenAI instrumentation of the same calls (openai-v2, OpenLLMetry, OpenLIT, logfire) records
``gen_ai.client.operation.duration`` and ``gen_ai.client.token.usage`` under the same names and
attribute keys; only the instrumentation scope tells the sources apart. prometheus.yml promotes
it to the label ``otel_scope_name`` (with ``otel_scope_version`` and ``otel_scope_schema_url``),
and every selector of a ``gen_ai_*`` or ``firsttoken_*`` series in the dashboards, their
variables, the recording rules, the alerts and their annotations must say
``otel_scope_name="firsttoken"``. The selectors are read by stack_tools.selectors, which the last
test holds to the real Prometheus parser on every one of those expressions.
test_stack_coexist_queries.py shows the values are then the same beside the official ones and OpenLLMetry.
"""

from __future__ import annotations

import json
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from stack_tools import ROOT, generator, selectors, shipped_exprs
from tests.servers import free_port

from firsttoken import semconv as sc

SCOPE = ("otel_scope_name", "=", sc.SCOPE_NAME)
OWN = ("gen_ai_", "firsttoken_")


def unscoped(expr: str) -> list[str]:
    """The selectors of firsttoken's series in `expr` that do not select firsttoken's scope."""
    return [name for name, matchers in selectors(expr) if name.startswith(OWN) and SCOPE not in matchers]


def test_prometheus_promotes_the_scope_to_labels() -> None:
    otlp = yaml.safe_load((ROOT / "prometheus" / "prometheus.yml").read_text())["otlp"]
    assert otlp["promote_scope_metadata"] is True


def test_every_selector_of_firsttoken_series_selects_firsttoken_scope() -> None:
    exprs = shipped_exprs()
    checked = [(where, name) for where, expr in exprs for name, _ in selectors(expr) if name.startswith(OWN)]
    missing = [f"{where}: {name}" for where, expr in exprs for name in unscoped(expr)]
    assert not missing, f"{len(missing)} selectors count other instrumentations' points too:\n" + "\n".join(missing)
    # Not vacuous: the dashboards, their variables and the rules were all read.
    wheres = {where.split(" / ")[0] for where, _ in checked}
    assert len(checked) > 150, len(checked)
    assert {"llm-latency-overview.json", "recording.yml", "slo-recording.yml"} <= wheres, wheres


def test_no_selector_of_a_recorded_series_asks_for_a_scope() -> None:
    """The rules sum the scope labels away: llm:* series have none, and such a matcher finds nothing."""
    scoped = [
        f"{where}: {name}"
        for where, expr in shipped_exprs()
        for name, matchers in selectors(expr)
        if not name.startswith(OWN) and any(label.startswith("otel_scope_") for label, _, _ in matchers)
    ]
    assert not scoped, scoped


def test_the_generators_select_the_semconv_scope() -> None:
    scopes = {generator("dashboards").SCOPE, generator("slo").SCOPE}
    assert scopes == {f'otel_scope_name="{sc.SCOPE_NAME}"'}


@pytest.mark.parametrize(
    ("expr", "missing"),
    [
        ("sum by (le) (rate(gen_ai_client_operation_duration_seconds_bucket[5m]))", 1),
        ('rate(firsttoken_client_input_tokens_total{gen_ai_request_model="x"}[5m])', 1),
        ('rate(firsttoken_client_input_tokens_total{otel_scope_name=~"firsttoken"}[5m])', 1),
        ('{__name__="gen_ai_client_token_usage_sum"}', 1),
        (
            'sum(rate(gen_ai_client_token_usage_sum{otel_scope_name="firsttoken"}[1m]))'
            " / sum(rate(gen_ai_client_token_usage_count[1m]))",
            1,
        ),
        ('sum by (a) (rate(gen_ai_client_token_usage_sum{otel_scope_name="firsttoken", a="b"}[1m] @ end()))', 0),
        ("llm:calls:rate5m / on (gen_ai_request_model) group_left (firsttoken_traffic_class) llm:errors:rate5m", 0),
    ],
)
def test_the_check_finds_a_selector_without_the_scope(expr: str, missing: int) -> None:
    assert len(unscoped(expr)) == missing


def _parsed_selectors(node: Any) -> list[tuple[str, frozenset[tuple[str, str, str]]]]:
    """The vector selectors of Prometheus' /api/v1/parse_query tree (matrix selectors carry theirs too)."""
    found = []
    if isinstance(node, dict):
        if node.get("type") in ("vectorSelector", "matrixSelector") and "matchers" in node:
            matchers = frozenset((m["name"], m["type"], m["value"]) for m in node["matchers"])
            names = [v for n, op, v in matchers if n == "__name__" and op == "="]
            found.append((names[0] if names else "", frozenset(m for m in matchers if m[0] != "__name__")))
        for value in node.values():
            found += _parsed_selectors(value)
    elif isinstance(node, list):
        for item in node:
            found += _parsed_selectors(item)
    return found


def test_the_selector_reader_agrees_with_prometheus_parser() -> None:
    """stack_tools.selectors against Prometheus 3.14's own parser, on every shipped expression."""
    from stack_tools import Process, binary

    prometheus = binary("prometheus")
    with tempfile.TemporaryDirectory(prefix="firsttoken-parse-") as tmpdir:
        tmp = Path(tmpdir)
        (tmp / "prometheus.yml").write_text("global: {}\n")
        port = free_port()
        proc = Process(
            "prometheus",
            [
                prometheus,
                f"--config.file={tmp / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            tmp / "prometheus.log",
        )
        try:
            url = f"http://127.0.0.1:{port}"
            proc.wait_ready(f"{url}/-/ready")
            exprs = shipped_exprs()
            for where, expr in exprs:
                body = urllib.parse.urlencode({"query": expr}).encode()
                with urllib.request.urlopen(f"{url}/api/v1/parse_query", data=body, timeout=30) as resp:
                    tree = json.loads(resp.read())["data"]
                assert sorted(selectors(expr)) == sorted(_parsed_selectors(tree)), f"{where}: {expr}"
            assert len(exprs) > 200
        finally:
            proc.stop()
