"""Dashboards and rule queries: generated from one source, parse in promtool, use documented names."""

from __future__ import annotations

import json
import re
import sys
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
from firsttoken.stack import dashboards as dashboards_generator


def test_committed_dashboards_are_the_generator_output() -> None:
    rendered = dashboards_generator.render(ROOT)
    committed = {p.name: p.read_text() for p in (ROOT / "grafana" / "dashboards").glob("*.json")}
    assert set(committed) == set(rendered), "a dashboard file is missing or not generated"
    stale = [name for name, text in rendered.items() if committed[name] != text]
    assert not stale, f"run firsttoken stack generate: {stale} differ from the generator"


PROMETHEUS_VARIABLE = {"type": "prometheus", "uid": "${datasource}"}
TEMPO_VARIABLE = {"type": "tempo", "uid": "${tempo}"}
JAEGER_VARIABLE = {"type": "jaeger", "uid": "${jaeger}"}


def test_dashboard_structure() -> None:
    uids = set()
    for name, dash in dashboards().items():
        assert dash["uid"] not in uids, name
        uids.add(dash["uid"])
        ids = [p["id"] for p in panels(dash)]
        assert len(ids) == len(set(ids)), f"{name}: duplicate panel ids"
        variables = {v["name"]: v for v in dash["templating"]["list"]}
        # Imported into any Grafana: the Prometheus datasource is a variable, never a fixed uid.
        assert variables["datasource"]["type"] == "datasource", name
        assert variables["datasource"]["query"] == "prometheus", name
        assert variables["tempo"]["type"] == "datasource" and variables["tempo"]["query"] == "tempo", name
        for var in variables.values():
            if var["type"] == "query":
                assert var["datasource"] == PROMETHEUS_VARIABLE, f"{name} / ${var['name']}"
        for panel in panels(dash):
            where = f"{name} / {panel['title']}"
            pos = panel["gridPos"]
            assert pos["x"] + pos["w"] <= 24, where
            if panel["type"] in ("row", "alertlist"):
                assert "targets" not in panel, where
                continue
            assert panel["targets"], f"{where}: no query"
            # The SDKs export every 15 s (OTEL_METRIC_EXPORT_INTERVAL): a rate window spans >= 4 exports.
            assert panel["interval"] == "15s", where
            ds = panel["datasource"]
            assert ds in (PROMETHEUS_VARIABLE, TEMPO_VARIABLE, JAEGER_VARIABLE), f"{where}: datasource {ds}"
            for t in panel["targets"]:
                assert t["datasource"] == ds, f"{where}: datasource {t['datasource']}"
                if ds == JAEGER_VARIABLE:
                    text = " ".join(
                        t[k] for k in ("service", "operation", "tags", "minDuration", "maxDuration") if k in t
                    )
                else:
                    text = t["expr"] if ds == PROMETHEUS_VARIABLE else t["query"]
                used = set(re.findall(r"\$\{?(\w+)", text)) - {"__rate_interval", "__interval", "__range"}
                assert used <= set(variables), f"{where}: undefined variables {used - set(variables)}"
                # Latency quantiles and heatmaps carry exemplars: a slow point opens its trace.
                latency = "histogram_quantile" in text and "_seconds_bucket" in text
                unit = panel["fieldConfig"]["defaults"].get("unit")
                if panel["type"] == "heatmap" or (latency and panel["type"] == "timeseries" and unit == "s"):
                    assert t.get("exemplar") is True, f"{where}: latency query without exemplars"
            unit = panel["fieldConfig"]["defaults"].get("unit")
            if panel["type"] not in ("heatmap", "table"):
                assert unit, f"{where}: no unit"
            if panel["type"] == "timeseries":
                # A gap is an outage or an idle period: no line drawn across it.
                assert panel["fieldConfig"]["defaults"]["custom"]["spanNulls"] is False, where


def _query_panels(datasource: dict[str, str] = PROMETHEUS_VARIABLE) -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{name} / {panel['title']}", panel)
        for name, dash in dashboards().items()
        for panel in panels(dash)
        if panel.get("targets") and panel["datasource"] == datasource
    ]


def test_trace_searches_use_the_attributes_firsttoken_records() -> None:
    """The Tempo panels' TraceQL: span attributes of semconv, the dashboard's variables as regexes."""
    names = {v for v in vars(sc).values() if isinstance(v, str)}
    searches = [(where, t["query"]) for where, panel in _query_panels(TEMPO_VARIABLE) for t in panel["targets"]]
    assert searches
    for where, traceql in searches:
        attributes = re.findall(r"span\.([\w.]+)", traceql)
        assert attributes and set(attributes) <= names, f"{where}: {set(attributes) - names}"
        assert traceql.count("{") == traceql.count("}") and traceql.count("(") == traceql.count(")"), where
        # Multi-value variables as one regex (a|b), All as .*: the :regex format.
        assert all(f == "regex" for f in re.findall(r"\$\{\w+:(\w+)\}", traceql)), where
        assert not re.search(r"\$\w", traceql), f"{where}: a bare $variable is not a TraceQL regex"


def test_every_tempo_trace_panel_has_its_jaeger_form() -> None:
    """#36: each Tempo panel has a Jaeger twin (titled as it, "in Jaeger"), in a collapsed row: Jaeger
    searches as Grafana's Jaeger query holds them (queryType search; service, tags in logfmt,
    minDuration), on span attributes firsttoken records, one panel per value of the one multi-value
    variable they use (Jaeger compares a tag with one exact value). tests/stack/test_stack_real.py sends
    them to a real Jaeger."""
    names = {v for v in vars(sc).values() if isinstance(v, str)}
    for name, dash in dashboards().items():
        tempo = [p["title"] for p in panels(dash) if p.get("datasource") == TEMPO_VARIABLE]
        jaeger = [p for p in panels(dash) if p.get("datasource") == JAEGER_VARIABLE]
        collapsed = [p for p in dash["panels"] if p["type"] == "row" and p["collapsed"]]
        assert all(p in row["panels"] for p in jaeger for row in collapsed[-1:]), (
            f"{name}: Jaeger panels outside the row"
        )
        for title in tempo:
            stem = title.replace("(traces in Tempo)", "(traces in Jaeger)")
            assert stem != title and any(p["title"].startswith(stem) for p in jaeger), (
                f"{name} / {title}: no Jaeger form"
            )
        multi = {v["name"] for v in dash["templating"]["list"] if v.get("multi")}
        for panel in jaeger:
            where = f"{name} / {panel['title']}"
            assert panel["repeat"] in multi, where
            for t in panel["targets"]:
                assert t["queryType"] == "search" and t["service"] == "$service", where
                tags = dict(pair.split("=", 1) for pair in t["tags"].split())
                assert tags and set(tags) <= names, f"{where}: {set(tags) - names}"
                used = set(re.findall(r"\$(\w+)", t["tags"])) & multi
                assert used == {panel["repeat"]}, (
                    f"{where}: multi-value variables {used}, repeated by {panel['repeat']}"
                )
                assert re.fullmatch(r"\d+(\.\d+)?s", t.get("minDuration", "0s")), where


# Span attributes firsttoken records as doubles (seconds).
FLOAT_ATTRIBUTES = {sc.FT_TIME_TO_FIRST_TOKEN, sc.FT_TIME_PER_OUTPUT_TOKEN, sc.FT_TIME_TO_RESPONSE_HEADERS}


def test_trace_searches_compare_float_attributes_with_float_literals() -> None:
    """Tempo 3 picks the parquet column to scan from the literal's type, not the attribute's: in
    tempodb/encoding/vparquet5/block_traceql.go at v3.0.3, createAttributeIterator switches on
    cond.Operands[0].Type and an int literal builds only the int-column predicate. So
    `span.firsttoken.time_to_first_token > 1` never matches the float attribute (grafana/tempo issue
    4332): slow successful calls never showed. Tempo is not run here (docs/stack.md), so the rule is
    checked on the query text: a float attribute is compared with a literal written with a point."""
    searches = [(where, t["query"]) for where, panel in _query_panels(TEMPO_VARIABLE) for t in panel["targets"]]
    checked = 0
    for where, traceql in searches:
        for attribute, literal in re.findall(r"span\.([\w.]+)\s*(?:>=|<=|!=|=|>|<)\s*(-?[0-9][0-9.eE+-]*)", traceql):
            if attribute in FLOAT_ATTRIBUTES:
                checked += 1
                assert "." in literal or "e" in literal.lower(), (
                    f"{where}: span.{attribute} (a float) compared with the int literal {literal}: Tempo 3 "
                    f"scans only its int column and never matches; write {literal}.0"
                )
    assert checked, "no float attribute compared in any trace search"


def grafana_regex(value: str) -> str:
    r"""Grafana's `:regex` format of one value: escapeRegex of @grafana/data (packages/grafana-data
    src/text/string.ts), a backslash before each of \ ^ $ * + ? . ( ) | [ ] { } /."""
    return re.sub(r"([\\^$*+?.()|\[\]{}/])", r"\\\1", value)


# The escapes Go's strconv.Unquote accepts in a double-quoted string (Tempo's TraceQL lexer,
# pkg/traceql/lexer.go at v3.0.3, unquotes every string token with it; a failure is a parse error).
_GO_ESCAPE = re.compile(r'\\(?:[abfnrtv\\"]|x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[0-7]{3})')


def traceql_strings(traceql: str) -> list[str]:
    """The string literals of a TraceQL query as Tempo's lexer unquotes them; AssertionError where
    Go's strconv.Unquote would refuse one."""
    out = []
    for quoted, raw in re.findall(r'"((?:[^"\\]|\\.)*)"|`([^`]*)`', traceql):
        if raw:
            out.append(raw)
            continue
        text, i = [], 0
        while i < len(quoted):
            if quoted[i] != "\\":
                text.append(quoted[i])
                i += 1
                continue
            escape = _GO_ESCAPE.match(quoted, i)
            assert escape, (
                f"TraceQL string {quoted!r}: {quoted[i : i + 2]!r} is not a Go escape, Tempo fails to parse the query"
            )
            text.append(escape.group()[1] if escape.group()[1] in '\\"' else escape.group())
            i = escape.end()
        out.append("".join(text))
    return out


@pytest.mark.parametrize("model", ["gpt-4.1", "claude-3.5-sonnet", "gpt-4o-mini"])
def test_trace_searches_parse_with_a_model_name_grafana_escapes(model: str) -> None:
    r"""A model named with dots, chosen in the $model variable: Grafana's :regex format escapes the dots
    (gpt-4\.1); inside a double-quoted TraceQL string that backslash is not a Go escape and Tempo
    refuses the whole query. The search must parse and its regex match that model only."""
    searches = [(where, t["query"]) for where, panel in _query_panels(TEMPO_VARIABLE) for t in panel["targets"]]
    for where, traceql in searches:
        expanded = traceql.replace("${model:regex}", grafana_regex(model)).replace("${provider:regex}", "openai")
        literals = traceql_strings(expanded)
        patterns = [s for s in literals if model.split(".")[0].split("-")[0] in s]
        assert patterns, f"{where}: no model regex in {expanded}"
        for pattern in patterns:
            # RE2 and Python's re agree on these patterns.
            assert re.search(pattern, model), (where, pattern)
            if "." in model:
                assert not re.search(pattern, model.replace(".", "x")), (where, pattern)


def test_no_heatmap_counts_a_call_twice() -> None:
    """increase() over $__rate_interval at a 15 s step counts each call in 2-4 overlapping windows."""
    for where, panel in _query_panels():
        for t in panel["targets"]:
            assert not re.search(r"increase\([^\[]*\[\$__rate_interval\]", t["expr"]), where
            if panel["type"] == "heatmap":
                assert "increase(" not in t["expr"] and "rate(" in t["expr"], where
                assert panel["options"]["cellValues"]["unit"] == "reqps", where


def test_legends_and_groupings_keep_the_provider() -> None:
    """A model name alone is ambiguous (the same model through two providers or gateways)."""
    for where, panel in _query_panels():
        for t in panel["targets"]:
            for by in re.findall(r"by \(([^)]*)\)", t["expr"]):
                labels = {label.strip() for label in by.split(",")}
                if "gen_ai_request_model" in labels:
                    assert "gen_ai_provider_name" in labels, f"{where}: by ({by}) merges providers"
            if "{{gen_ai_request_model}}" in t["legendFormat"]:
                assert "{{gen_ai_provider_name}}" in t["legendFormat"], where


def test_token_panels_have_token_units() -> None:
    token_metrics = ("_tokens_total", "token_usage_bucket", "conversation_input_tokens")
    for where, panel in _query_panels():
        if any(m in t["expr"] for t in panel["targets"] for m in token_metrics) and panel["type"] != "table":
            unit = panel["fieldConfig"]["defaults"]["unit"]
            ratio = unit == "percentunit"
            assert ratio or "token" in unit, f"{where}: token counts with unit {unit}"


def test_topk_is_one_set_over_the_range() -> None:
    """topk evaluated per step picks a different top 10 at every step: more than 10 lines."""
    for where, panel in _query_panels():
        for t in panel["targets"]:
            for m in re.finditer(r"topk\(", t["expr"]):
                assert "[$__range] @ end()" in t["expr"][m.end() :], where


def test_le_matchers_match_both_spellings() -> None:
    """le="1" finds nothing where Prometheus stored "1.0" (Prometheus 3 scraping text): match both."""
    for where, panel in _query_panels():
        for t in panel["targets"]:
            for op, value in re.findall(r'le(=~?)"([^"]*)"', t["expr"]):
                if op == "=":
                    assert not re.fullmatch(r"[0-9]+", value), f"{where}: le={value!r} misses {value}.0"
                else:
                    m = re.fullmatch(r"([0-9]+)\(\\\\\.0\)\?", value)
                    assert m, f"{where}: le=~{value!r}"


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
            # ALERTS: the series Prometheus writes for every pending and firing alert.
            ok = name in documented or name in recorded or family(name) in PENDING_METRICS or name == "ALERTS"
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


# -- thresholds: from prometheus/rules/targets.yml, read here independently of the generator ----------

TARGETS_YML = ROOT / "prometheus" / "rules" / "targets.yml"
ALERTS_YML = ROOT / "prometheus" / "rules" / "alerts.yml"


def targets_yml() -> dict[str, dict[str, float]]:
    """llm:target:* record -> traffic class ("" = default) -> seconds."""
    out: dict[str, dict[str, float]] = {}
    for group in load_yaml(TARGETS_YML)["groups"]:
        for rule in group["rules"]:
            if rule.get("record", "").startswith("llm:target:"):
                seconds = float(re.fullmatch(r"vector\((.+)\)", rule["expr"].strip()).group(1))
                cls = (rule.get("labels") or {}).get("firsttoken_traffic_class", "")
                out.setdefault(rule["record"], {})[cls] = seconds
    return out


def error_ratio_limit() -> float:
    rule = next(r for g in load_yaml(ALERTS_YML)["groups"] for r in g["rules"] if r.get("alert") == "LLMErrorRatioHigh")
    return float(re.search(r"llm:error_ratio:rate5m > ([0-9.]+)", rule["expr"]).group(1))


def objective(record: str) -> float:
    return int(re.fullmatch(r"llm:target:\w+_p(\d\d)_seconds", record).group(1)) / 100


def threshold_values(panel: dict[str, Any]) -> list[float]:
    steps = list(panel["fieldConfig"]["defaults"]["thresholds"]["steps"])
    for override in panel["fieldConfig"]["overrides"]:
        for prop in override["properties"]:
            if prop["id"] == "thresholds":
                steps += prop["value"]["steps"]
    return [s["value"] for s in steps if s["value"] is not None]


def test_stat_gauge_and_table_thresholds_come_from_targets_yml() -> None:
    """No Grafana default (red at 80): a value is coloured against a target the alerts use, or not at all."""
    targets = targets_yml()
    allowed = {objective(r) for r in targets} | {s for by in targets.values() for s in by.values()}
    allowed.add(error_ratio_limit())
    allowed.add(0)  # the SLO dashboard: an error budget spent (budget left under 0)
    coloured = 0
    for where, panel in _query_panels():
        if panel["type"] not in ("stat", "gauge", "bargauge", "table"):
            continue
        assert "thresholds" in panel["fieldConfig"]["defaults"], f"{where}: Grafana's default thresholds apply"
        values = threshold_values(panel)
        assert set(values) <= allowed, f"{where}: thresholds {values} are not targets of targets.yml {allowed}"
        if values:
            coloured += 1
        elif panel["type"] != "table":
            assert panel["options"]["colorMode"] == "none", f"{where}: coloured without a target"
    # Every traffic class's SLO stat, and the summary table.
    classes = {c for by in targets.values() for c in by}
    assert coloured >= len(classes) + 1


def test_slo_stats_hold_each_class_to_its_own_targets() -> None:
    """Each class's stat checks each target of targets.yml at that class's bound, against its objective."""
    targets = targets_yml()
    named = sorted({c for by in targets.values() for c in by if c})
    histograms = {"ttft": ("firsttoken_client_time_to_first_token_seconds", sc.TTFT_BUCKETS)}
    histograms["e2e"] = ("gen_ai_client_operation_duration_seconds", sc.DURATION_BUCKETS)
    overview = dashboards()["llm-latency-overview.json"]
    stats = [p for p in panels(overview) if p["type"] == "stat"]
    seen = set()
    for panel in stats:
        refs = {o["matcher"]["options"]: o for o in panel["fieldConfig"]["overrides"]}
        for t in panel["targets"]:
            cls_m = re.search(r'firsttoken_traffic_class(=|!~)"([^"]*)"', t["expr"])
            assert cls_m, panel["title"]
            if cls_m.group(1) == "=":
                cls = cls_m.group(2)
            else:
                assert sorted(cls_m.group(2).split("|")) == named, "the default covers every class not listed"
                cls = ""
            metric, le = re.search(r'(\w+)_bucket\{[^}]*le=~?"([^"(]*)', t["expr"]).groups()
            record = next(
                r
                for r in targets
                if histograms[r.split(":")[2].split("_")[0]][0] == metric
                and objective(r) == refs[t["refId"]]["properties"][0]["value"]["steps"][1]["value"]
            )
            want = targets[record].get(cls, targets[record][""])
            buckets = histograms[record.split(":")[2].split("_")[0]][1]
            bound = want if want in buckets else max(b for b in buckets if b <= want)
            assert float(le) == bound, f"{panel['title']}: {record} checked at {le}, target {want}"
            if record.startswith("llm:target:e2e"):
                assert 'error_type=""' in t["expr"].split(" / ")[0], "a failed call never meets the e2e SLO"
                assert "error_type" not in t["expr"].split(" / ")[1], "failed calls count in the denominator"
            seen.add((cls, record))
    assert seen == {(c, r) for c in [*named, ""] for r in targets}


# -- grafana-foundation-sdk: Grafana's own models of the dashboard schema ----------------------------

# What the pinned SDK's models do not keep: a query variable's "definition" (the query text the
# variable editor shows; "query" carries the query itself). Anything else lost or changed fails.
SDK_DROPS = {".templating.list[].definition"}


def _diff(a: Any, b: Any, path: str, dropped: set[str], changed: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key, value in a.items():
            if key not in b:
                dropped.add(re.sub(r"\[\d+\]", "[]", f"{path}.{key}"))
            else:
                _diff(value, b[key], f"{path}.{key}", dropped, changed)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _diff(x, y, f"{path}[{i}]", dropped, changed)
    elif a != b:
        changed.append(f"{path}: {a!r} -> {b!r}")


@pytest.mark.skipif(sys.version_info < (3, 11), reason="grafana-foundation-sdk needs Python 3.11 (typing.Self)")
def test_dashboards_round_trip_through_grafana_foundation_sdk() -> None:
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models.dashboard import Dashboard

    register_default_plugins()  # panel options, field config and queries as typed models
    for name, data in dashboards().items():
        model = Dashboard.from_json(data)
        back = json.loads(json.dumps(model, cls=JSONEncoder))
        dropped: set[str] = set()
        changed: list[str] = []
        _diff(data, back, "", dropped, changed)
        assert not changed, f"{name}: {changed}"
        assert dropped == SDK_DROPS, f"{name}: the SDK's models drop {dropped}"
        assert len(back["panels"]) == len(data["panels"]) > 5, name


def test_the_round_trip_check_sees_a_dropped_key() -> None:
    dropped: set[str] = set()
    changed: list[str] = []
    _diff({"panels": [{"a": 1, "b": 2}]}, {"panels": [{"a": 1}]}, "", dropped, changed)
    _diff({"x": [1]}, {"x": [2]}, "", dropped, changed)
    assert dropped == {".panels[].b"} and changed == [".x[0]: 1 -> 2"]
