"""Dashboards and rule queries: generated from one source, parse in promtool, use documented names."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from stack_openmetrics import series_names
from stack_tools import (
    DATASOURCES,
    PENDING_METRICS,
    ROOT,
    dashboard_queries,
    dashboards,
    documented_series,
    family,
    load_yaml,
    metric_names,
    need,
    panels,
    recorded_names,
    rule_exprs,
    run,
    substitute,
    variable_queries,
)

from firsttoken import semconv as sc

GENERATOR = ROOT / "scripts" / "stack" / "dashboards.py"


def generator() -> Any:
    spec = importlib.util.spec_from_file_location("firsttoken_dashboards", GENERATOR)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_dashboards_are_the_generator_output() -> None:
    rendered = generator().render()
    committed = {p.name: p.read_text() for p in (ROOT / "grafana" / "dashboards").glob("*.json")}
    assert set(committed) == set(rendered), "a dashboard file is missing or not generated"
    stale = [name for name, text in rendered.items() if committed[name] != text]
    assert not stale, f"run python scripts/stack/dashboards.py: {stale} differ from the generator"


def test_dashboard_structure() -> None:
    ds_uids = {d["uid"]: d["type"] for d in load_yaml(DATASOURCES)["datasources"]}
    uids = set()
    for name, dash in dashboards().items():
        assert dash["uid"] not in uids, name
        uids.add(dash["uid"])
        ids = [p["id"] for p in panels(dash)]
        assert len(ids) == len(set(ids)), f"{name}: duplicate panel ids"
        defined = {v["name"] for v in dash["templating"]["list"]}
        for panel in panels(dash):
            where = f"{name} / {panel['title']}"
            pos = panel["gridPos"]
            assert pos["x"] + pos["w"] <= 24, where
            if panel["type"] in ("row", "alertlist"):
                continue
            assert panel["targets"], f"{where}: no query"
            for t in [panel, *panel["targets"]]:
                ref = t["datasource"]
                assert ds_uids.get(ref["uid"]) == ref["type"], f"{where}: unknown datasource {ref}"
            for t in panel["targets"]:
                used = set(re.findall(r"\$(\w+)", t["expr"])) - {"__rate_interval", "__interval", "__range"}
                assert used <= defined, f"{where}: undefined variables {used - defined}"
                # Latency quantiles and heatmaps carry exemplars: a slow point opens its trace.
                latency = "histogram_quantile" in t["expr"] and "_seconds_bucket" in t["expr"]
                unit = panel["fieldConfig"]["defaults"].get("unit")
                if panel["type"] == "heatmap" or (latency and panel["type"] == "timeseries" and unit == "s"):
                    assert t.get("exemplar") is True, f"{where}: latency query without exemplars"
            unit = panel["fieldConfig"]["defaults"].get("unit")
            if panel["type"] != "heatmap":
                assert unit, f"{where}: no unit"


def test_every_shipped_query_parses_in_promtool(tmp_path: Path) -> None:
    """Dashboard (pending panels included), variable and rule queries, as recording rules in promtool."""
    promtool = need("promtool")
    queries = [(w, substitute(e)) for w, e in dashboard_queries()] + rule_exprs()
    for where, q in load_tempo_metric_queries():
        queries.append((where, q.replace("$${__tags}", 'gen_ai_request_model="m"')))
    rules = [{"record": f"check:query_{i}", "expr": expr} for i, (_, expr) in enumerate(queries)]
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "shipped-queries", "rules": rules}]}))
    result = run([promtool, "check", "rules", str(path)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout
    # label_values(metric{...}, label) is Grafana's, not PromQL; its selector must parse.
    for where, definition in variable_queries():
        m = re.fullmatch(r"label_values\((.+), (\w+)\)", definition)
        assert m, where


def test_promtool_rejects_a_broken_query(tmp_path: Path) -> None:
    """The parse check above can fail."""
    promtool = need("promtool")
    path = tmp_path / "bad.yml"
    bad = {"record": "check:bad", "expr": "histogram_quantile(0.95, sum by (le) (rate(x_bucket[5m]))"}
    path.write_text(yaml.safe_dump({"groups": [{"name": "bad", "rules": [bad]}]}))
    assert run([promtool, "check", "rules", str(path)]).returncode != 0


def load_tempo_metric_queries() -> list[tuple[str, str]]:
    tempo = next(d for d in load_yaml(DATASOURCES)["datasources"] if d["type"] == "tempo")
    return [
        (f"tempo tracesToMetrics / {q['name']}", q["query"]) for q in tempo["jsonData"]["tracesToMetrics"]["queries"]
    ]


def test_every_metric_name_is_documented_or_recorded_or_pending() -> None:
    documented = documented_series()
    recorded = recorded_names()
    queries = dashboard_queries() + rule_exprs() + variable_queries() + load_tempo_metric_queries()
    seen = set()
    for where, expr in queries:
        for name in metric_names(expr):
            seen.add(name)
            ok = name in documented or name in recorded or family(name) in PENDING_METRICS
            assert ok, f"{where}: {name} is not in docs/metrics.md, a recording rule or PENDING_METRICS"
    # Every pending entry is still used somewhere (drop it with its panel) and is not documented
    # yet (once it is, the panel is live: remove it from PENDING_METRICS).
    pending_used = {family(n) for n in seen} & set(PENDING_METRICS)
    assert pending_used == set(PENDING_METRICS)
    assert not {n for n in documented if family(n) in PENDING_METRICS}


def _metric_constants() -> dict[str, str]:
    return {k: v for k, v in vars(sc).items() if k.startswith("M_") and isinstance(v, str)}


def test_docs_metrics_table_covers_semconv_and_follows_the_translation() -> None:
    """docs/metrics.md: one row per semconv metric, and its series follow the translation rules."""
    text = (ROOT / "docs" / "metrics.md").read_text()
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[1] in ("histogram", "counter", "gauge"):
            rows[cells[0].strip("`")] = (cells[1], cells[2].strip("`"), re.findall(r"`([^`]+)`", cells[3]))
    missing = set(_metric_constants().values()) - set(rows)
    assert not missing, f"docs/metrics.md lacks {missing}"
    for name, (kind, unit, series) in rows.items():
        assert series == series_names(name, unit, kind), name


@pytest.mark.parametrize(
    ("name", "unit", "kind", "expected"),
    [
        # stack.md §1.4 and docs/metrics.md, UnderscoreEscapingWithSuffixes.
        (sc.M_OPERATION_DURATION, "s", "histogram", "gen_ai_client_operation_duration_seconds_bucket"),
        (sc.M_TOKEN_USAGE, "{token}", "histogram", "gen_ai_client_token_usage_bucket"),
        (sc.M_TIME_TO_FIRST_CHUNK, "s", "histogram", "gen_ai_client_operation_time_to_first_chunk_seconds_bucket"),
        (sc.M_INPUT_TOKENS, "{token}", "counter", "firsttoken_client_input_tokens_total"),
        (sc.M_CACHE_READ_INPUT_TOKENS, "{token}", "counter", "firsttoken_client_cache_read_input_tokens_total"),
        ("llm.requests", "{request}", "counter", "llm_requests_total"),
        ("http.client.request.body.size", "By", "histogram", "http_client_request_body_size_bytes_bucket"),
        ("queue.latency", "ms", "histogram", "queue_latency_milliseconds_bucket"),
        ("already.seconds", "s", "histogram", "already_seconds_bucket"),
        ("cpu.utilization", "1", "gauge", "cpu_utilization_ratio"),
        ("throughput", "By/s", "gauge", "throughput_bytes_per_second"),
        ("jobs.done_total", "1", "counter", "jobs_done_total"),
    ],
)
def test_translation_rules(name: str, unit: str, kind: str, expected: str) -> None:
    assert series_names(name, unit, kind)[0] == expected


def test_datasource_queries_escape_dollars() -> None:
    """Grafana expands $VAR from the environment in provisioning files: literal $ must be $$."""
    text = DATASOURCES.read_text()
    assert "$${__tags}" in text
    assert "$" not in text.replace("$$", ""), "unescaped $ in datasources.yaml"
