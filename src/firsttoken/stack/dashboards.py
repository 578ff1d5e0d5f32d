"""firsttoken's Grafana dashboards (grafana/dashboards/*.json), generated: the one source of truth.

Classic dashboard JSON (schemaVersion 39), file-provisioned by
grafana/provisioning/dashboards/dashboards.yaml; Grafana 11-13 load it (13 migrates it on load), and
it imports into an existing Grafana: every panel uses the ``$datasource`` variable (a Prometheus
datasource picked at the top), never a fixed uid.
Every query uses the Prometheus names of docs/metrics.md (UnderscoreEscapingWithSuffixes) and
selects firsttoken's own points (``otel_scope_name="firsttoken"``, SCOPE below): each call counts
once whatever other GenAI instrumentation records the same calls (docs/coexistence.md).
Latency panels ask for exemplars: a point or heatmap cell links to the trace of that very call in
Tempo through the Prometheus datasource's exemplarTraceIdDestinations.
Thresholds and SLO targets are the targets of prometheus/slos.yml (and the error-ratio limit is
read from prometheus/rules/alerts.yml) when this runs: the dashboards colour what the alerts fire on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .. import semconv as sc
from .. import targets as tg
from .slo import SLOS, Config
from .slo import load as load_slos

# Relative to the checkout.
OUT_DIR = Path("grafana/dashboards")
ALERTS_FILE = Path("prometheus/rules/alerts.yml")

# Every panel and query uses the dashboard's datasource variables, so that the JSON imports into
# any Grafana whatever its datasources are called.
PROMETHEUS = {"type": "prometheus", "uid": "${datasource}"}
TEMPO = {"type": "tempo", "uid": "${tempo}"}
JAEGER = {"type": "jaeger", "uid": "${jaeger}"}
# The interval the SDKs export metrics at (OTEL_METRIC_EXPORT_INTERVAL, 15 s by default in firsttoken):
# every panel's minimum interval (no step finer than one export). $__rate_interval is at least four
# times the datasource's scrape interval (timeInterval, also 15 s in grafana/provisioning/).
MIN_INTERVAL = "15s"

# firsttoken's own points. Another GenAI instrumentation of the same calls (openai-v2, OpenLLMetry,
# OpenLIT, logfire) records under the same standard names with the same attribute keys; only the
# instrumentation scope tells them apart. prometheus.yml (otlp: promote_scope_metadata) makes it the
# label otel_scope_name (with otel_scope_version and otel_scope_schema_url, which every query sums
# away, so that a new firsttoken version does not split a line). Every selector of a gen_ai_* or
# firsttoken_* series has this matcher (tests/stack/test_stack_scope.py checks), so each call counts once.
SCOPE = f'otel_scope_name="{sc.SCOPE_NAME}"'
# Label selectors built from the dashboard variables: PICKED for recorded series (llm:*, which the
# rules aggregated over the scope already), CALL and CLASS for firsttoken's raw series.
PICKED = 'gen_ai_provider_name=~"$provider", gen_ai_request_model=~"$model", firsttoken_traffic_class=~"$traffic_class"'
CALL = f"{SCOPE}, {PICKED}"
CLASS = f'{SCOPE}, firsttoken_traffic_class=~"$traffic_class"'
RI = "$__rate_interval"
RANGE = "$__range"
BY_MODEL = "gen_ai_provider_name, gen_ai_request_model"
MODEL = "{{gen_ai_provider_name}}/{{gen_ai_request_model}}"
PREFIX_BY = "gen_ai_provider_name, gen_ai_request_model, firsttoken_prompt_prefix_hash"
# Finish reasons of an answer cut off by the token budget: OpenAI "length", Anthropic "max_tokens".
CUT_OFF = 'gen_ai_response_finish_reason=~"length|max_tokens"'

# Prometheus names of the instruments (docs/metrics.md).
DURATION = "gen_ai_client_operation_duration_seconds"
TTFC = "gen_ai_client_operation_time_to_first_chunk_seconds"
TTFT = "firsttoken_client_time_to_first_token_seconds"
TPOT = "firsttoken_client_time_per_output_token_seconds"
TOKEN_USAGE = "gen_ai_client_token_usage"
INPUT = "firsttoken_client_input_tokens_total"
CACHE_READ = "firsttoken_client_cache_read_input_tokens_total"
CACHE_CREATION = "firsttoken_client_cache_creation_input_tokens_total"
OUTPUT = "firsttoken_client_output_tokens_total"
REASONING = "firsttoken_client_reasoning_output_tokens_total"
FINISH = "firsttoken_client_finish_reasons_total"
PREFIX_INPUT = "firsttoken_client_prompt_prefix_input_tokens_total"
PREFIX_CACHE_READ = "firsttoken_client_prompt_prefix_cache_read_input_tokens_total"
CONV_INPUT = "firsttoken_client_conversation_input_tokens"
CONV_TTFT = "firsttoken_client_conversation_time_to_first_token_seconds"
SDK_CLIENTS = "firsttoken_client_sdk_clients_total"
ACTION = "firsttoken_app_action_duration_seconds"
ACTION_LLM_BUSY = "firsttoken_app_action_llm_busy_time_seconds"
APP_PHASE = "firsttoken_app_phase_duration_seconds"
WIRE_PHASE = "firsttoken_client_phase_time_seconds_total"  # seconds per phase, summed over calls
CONNECTIONS = "firsttoken_client_connections_total"
REQUEST_BYTES = "firsttoken_client_request_bytes_total"
RESPONSE_BYTES = "firsttoken_client_response_bytes_total"
RETRIES = "firsttoken_client_retries_total"
# Provider-reported server time (OpenAI processing time, Groq and Cerebras queue/prompt/completion).
SERVER_TIME = "firsttoken_client_server_timing_time_seconds_total"
SERVER_REPORTS = "firsttoken_client_server_timing_reports_total"

# Units: Grafana's ids, and custom suffixes for tokens (Grafana has no token unit).
TOKENS_PER_S = "suffix: tokens/s"
TOKENS = "suffix: tokens"
# Colours of the quantiles of one model's family (Grafana named colours).
QUANTILE_COLORS = {0.5: "green", 0.95: "orange", 0.99: "red"}


# -- targets: of prometheus/slos.yml, read at generation time -------------------------------------


@dataclass(frozen=True)
class Target:
    """One latency target of slos.yml: a percentile of a histogram, per traffic class."""

    record: str  # llm:target:ttft_p95_seconds
    signal: str  # "ttft" or "e2e"
    quantile: float  # 0.95: at least 95% of the calls must be under the target
    seconds: dict[str, float]  # traffic class -> seconds; "" is the default

    def for_class(self, traffic_class: str) -> float:
        return self.seconds.get(traffic_class, self.seconds[""])


_TARGET_RECORD = re.compile(r"llm:target:(ttft|e2e)_p(\d\d)_seconds")


def load_targets(values: dict[str, dict[str, float]]) -> list[Target]:
    """The targets of slos.yml (:func:`firsttoken.targets.check`'s values), in their order."""
    targets = []
    for name, seconds in values.items():
        m = _TARGET_RECORD.fullmatch(tg.record(name))
        assert m
        targets.append(Target(tg.record(name), m.group(1), int(m.group(2)) / 100, seconds))
    return targets


@dataclass(frozen=True)
class Inputs:
    """What the dashboards are generated from: the targets, the error-ratio alert's limit, the SLOs."""

    targets: list[Target]
    error_limit: float
    config: Config


def load_error_ratio_limit(path: Path) -> float:
    """The error ratio LLMErrorRatioHigh fires over."""
    for group in yaml.safe_load(path.read_text())["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == "LLMErrorRatioHigh":
                m = re.search(r"llm:error_ratio:rate5m\s*>\s*([0-9.]+)", rule["expr"])
                if m:
                    return float(m.group(1))
    raise ValueError(f"{path}: no LLMErrorRatioHigh alert of the form llm:error_ratio:rate5m > <ratio>")


def traffic_classes(targets: Sequence[Target]) -> list[str]:
    """The classes the targets name, in file order, then "" (the default: every other class)."""
    named: list[str] = []
    for t in targets:
        named += [c for c in t.seconds if c and c not in named]
    return [*named, ""]


def class_selector(traffic_class: str, named: Sequence[str]) -> str:
    """The calls a class's targets apply to; the default covers no class and classes not listed."""
    if traffic_class:
        return f'firsttoken_traffic_class="{traffic_class}"'
    return f'firsttoken_traffic_class!~"{"|".join(c for c in named if c)}"'


def class_title(traffic_class: str) -> str:
    return traffic_class or "other (default targets)"


HISTOGRAMS = {"ttft": (TTFT, sc.TTFT_BUCKETS), "e2e": (DURATION, sc.DURATION_BUCKETS)}


def slo_bound(seconds: float, buckets: Sequence[float], what: str) -> float:
    """The bucket bound a target is checked at: the target itself when it is a bound (slos.yml keeps
    them so), else the largest bound under it, so that "under the bound" still means "met the target"."""
    under = [b for b in buckets if b <= seconds]
    if not under:
        raise ValueError(f"{what}: target {seconds} s is under the first bucket bound of its histogram {buckets[0]}")
    return max(under)


def le_matcher(bound: float) -> str:
    """``le`` of one bucket, matching both spellings Prometheus may store: "1" and "1.0".

    The OTLP receiver writes the shortest form ("1"); Prometheus 3 scraping a text exposition
    normalises integral bounds to "1.0". A non-integral bound has one spelling.
    """
    text = repr(float(bound)).removesuffix(".0")
    if "." in text or "e" in text:
        return f'le="{text}"'
    return f'le=~"{text}(\\\\.0)?"'


def seconds_text(seconds: float) -> str:
    return f"{seconds:g} s"


# -- thresholds --------------------------------------------------------------------------------


def thresholds_over(limit: float) -> dict[str, Any]:
    """Green under a limit (latency, error ratio), red from it."""
    return {"mode": "absolute", "steps": [{"color": "green", "value": None}, {"color": "red", "value": limit}]}


def thresholds_under(objective: float) -> dict[str, Any]:
    """Red under an objective (share of calls within target), green from it."""
    return {"mode": "absolute", "steps": [{"color": "red", "value": None}, {"color": "green", "value": objective}]}


# A value with no target (a rate, a count): no colour that would read as good or bad.
NEUTRAL = {"mode": "absolute", "steps": [{"color": "text", "value": None}]}


# -- building blocks ---------------------------------------------------------------------------


def target(
    expr: str,
    legend: str = "",
    *,
    exemplar: bool = False,
    heatmap: bool = False,
    instant: bool = False,
    table: bool = False,
) -> dict[str, Any]:
    t: dict[str, Any] = {"datasource": PROMETHEUS, "expr": expr, "legendFormat": legend or "__auto"}
    if instant:
        t["instant"] = True
        t["range"] = False
    else:
        t["range"] = True
    if exemplar:
        t["exemplar"] = True
    if heatmap:
        t["format"] = "heatmap"
    if table:
        t["format"] = "table"
    return t


def quantile(q: float, metric: str, by: str, selector: str = CALL, window: str = RI) -> str:
    return f"histogram_quantile({q}, sum by (le, {by}) (rate({metric}_bucket{{{selector}}}[{window}])))"


def mean(metric: str, by: str, selector: str = CALL) -> str:
    return (
        f"sum by ({by}) (rate({metric}_sum{{{selector}}}[{RI}]))"
        f" / sum by ({by}) (rate({metric}_count{{{selector}}}[{RI}]))"
    )


def server_mean(by: str, selector: str = CALL) -> str:
    """Mean provider-reported server seconds over the calls that reported them (two counters)."""
    return (
        f"sum by ({by}) (rate({SERVER_TIME}{{{selector}}}[{RI}]))"
        f" / sum by ({by}) (rate({SERVER_REPORTS}{{{selector}}}[{RI}]))"
    )


def per_call(counter: str, by: str, selector: str = CALL) -> str:
    """A counter summed over calls, per call: its rate over the rate of calls."""
    return (
        f"sum by ({by}) (rate({counter}{{{selector}}}[{RI}]))"
        f" / sum by ({by}) (rate({DURATION}_count{{{selector}}}[{RI}]))"
    )


def by_ref(ref: str, **props: Any) -> dict[str, Any]:
    """An override of the fields one query (refId) returned."""
    return {
        "matcher": {"id": "byFrameRefID", "options": ref},
        "properties": [{"id": key, "value": value} for key, value in props.items()],
    }


def by_name(name: str, **props: Any) -> dict[str, Any]:
    return {
        "matcher": {"id": "byName", "options": name},
        "properties": [{"id": key, "value": value} for key, value in props.items()],
    }


def dashed(ref: str) -> dict[str, Any]:
    """Draw one query's series dashed: the second of two series of one model (a target, a p95)."""
    return by_ref(ref, **{"custom.lineStyle": {"fill": "dash", "dash": [10, 10]}})


class Layout:
    """Places panels left to right in a 24-column grid and numbers them."""

    def __init__(self, min_interval: str) -> None:
        self.min_interval = min_interval
        self.panels: list[dict[str, Any]] = []
        self.x = 0
        self.y = 0
        self.row_h = 0
        self._ids = 0
        self._collapsed: dict[str, Any] | None = None

    def _place(self, panel: dict[str, Any], w: int, h: int) -> None:
        if self.x + w > 24:
            self.x, self.y = 0, self.y + self.row_h
            self.row_h = 0
        panel["gridPos"] = {"h": h, "w": w, "x": self.x, "y": self.y}
        self._ids += 1
        panel["id"] = self._ids
        # A collapsed row holds its panels itself (Grafana's schema); every other panel is the dashboard's.
        if self._collapsed is not None and panel["type"] != "row":
            self._collapsed["panels"].append(panel)
        else:
            self.panels.append(panel)
        self.x += w
        self.row_h = max(self.row_h, h)

    def _query_panel(self, kind: str, title: str, description: str, targets: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "type": kind,
            "title": title,
            "description": description,
            "datasource": PROMETHEUS,
            "interval": self.min_interval,
            "targets": _ref_ids(targets),
        }

    def row(self, title: str, *, repeat: str | None = None, collapsed: bool = False) -> None:
        """A row; a collapsed one holds the panels placed after it, until the next row."""
        if self.x:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        row: dict[str, Any] = {"type": "row", "title": title, "collapsed": collapsed, "panels": []}
        if repeat:
            row["repeat"] = repeat
        self._place(row, 24, 1)
        self._collapsed = row if collapsed else None
        self.x, self.y, self.row_h = 0, self.y + 1, 0

    def timeseries(
        self,
        title: str,
        targets: list[dict[str, Any]],
        *,
        unit: str,
        description: str,
        w: int = 12,
        h: int = 9,
        stack: bool = False,
        max_value: float | None = None,
        overrides: list[dict[str, Any]] | None = None,
        threshold_line: dict[str, Any] | None = None,
    ) -> None:
        custom: dict[str, Any] = {
            "drawStyle": "line",
            "lineWidth": 1,
            "fillOpacity": 20 if stack else 0,
            "showPoints": "never",
            # A gap is an outage or an idle period: never draw a line across it.
            "spanNulls": False,
            "stacking": {"mode": "normal" if stack else "none", "group": "A"},
            "thresholdsStyle": {"mode": "line" if threshold_line else "off"},
        }
        defaults: dict[str, Any] = {
            "unit": unit,
            # One colour per series name, the same on every panel: a model keeps its colour.
            "color": {"mode": "palette-classic-by-name"},
            "custom": custom,
            "thresholds": threshold_line or NEUTRAL,
        }
        if max_value is not None:
            defaults["min"] = 0
            defaults["max"] = max_value
        panel = self._query_panel("timeseries", title, description, targets)
        panel["fieldConfig"] = {"defaults": defaults, "overrides": overrides or []}
        panel["options"] = {
            "legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull", "max"]},
            "tooltip": {"mode": "multi", "sort": "desc"},
        }
        self._place(panel, w, h)

    def quantiles(self, title: str, metric: str, *, selector: str, description: str, w: int = 8) -> None:
        """p50 / p95 / p99 of one model (a repeated row): one colour per quantile, the same everywhere."""
        targets = [
            target(quantile(q, metric, BY_MODEL, selector), f"p{round(q * 100)} {MODEL}", exemplar=True)
            for q in QUANTILE_COLORS
        ]
        overrides = [
            by_ref(chr(ord("A") + i), color={"mode": "fixed", "fixedColor": color})
            for i, color in enumerate(QUANTILE_COLORS.values())
        ]
        self.timeseries(title, targets, unit="s", description=description, w=w, overrides=overrides)

    def heatmap(self, title: str, expr: str, *, description: str, w: int = 12, h: int = 9) -> None:
        panel = self._query_panel("heatmap", title, description, [target(expr, "{{le}}", exemplar=True, heatmap=True)])
        panel["fieldConfig"] = {"defaults": {"unit": "reqps"}, "overrides": []}
        panel["options"] = {
            "calculate": False,
            "cellGap": 1,
            "cellValues": {"unit": "reqps"},
            "color": {"mode": "scheme", "scheme": "Oranges", "exponent": 0.5, "steps": 64},
            "exemplars": {"color": "rgba(255,0,255,0.7)"},
            "legend": {"show": True},
            "rowsFrame": {"layout": "auto"},
            "tooltip": {"mode": "single", "yHistogram": True},
            "yAxis": {"unit": "s"},
        }
        self._place(panel, w, h)

    def stat(
        self,
        title: str,
        targets: list[dict[str, Any]],
        *,
        unit: str,
        description: str,
        thresholds: dict[str, Any],
        overrides: list[dict[str, Any]] | None = None,
        w: int = 4,
        h: int = 4,
    ) -> None:
        neutral = thresholds is NEUTRAL and not overrides
        panel = self._query_panel("stat", title, description, targets)
        panel["fieldConfig"] = {
            "defaults": {
                "unit": unit,
                "decimals": 2,
                "color": {"mode": "thresholds"},
                "thresholds": thresholds,
            },
            "overrides": overrides or [],
        }
        panel["options"] = {
            "colorMode": "none" if neutral else "background",
            "graphMode": "none",
            "justifyMode": "auto",
            "orientation": "auto",
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "textMode": "value_and_name" if len(targets) > 1 else "value",
        }
        self._place(panel, w, h)

    def table(
        self,
        title: str,
        targets: list[dict[str, Any]],
        *,
        columns: dict[str, str],
        overrides: list[dict[str, Any]],
        description: str,
        sort_by: str,
        w: int = 24,
        h: int = 8,
    ) -> None:
        """Instant queries in table format, merged into one row per label set (Grafana's merge)."""
        panel = self._query_panel("table", title, description, targets)
        panel["fieldConfig"] = {
            "defaults": {
                "color": {"mode": "thresholds"},
                "thresholds": NEUTRAL,
                "custom": {"align": "auto", "cellOptions": {"type": "auto"}},
            },
            "overrides": overrides,
        }
        panel["options"] = {
            "showHeader": True,
            "cellHeight": "sm",
            "footer": {"show": False, "reducer": ["sum"], "fields": "", "countRows": False},
            "sortBy": [{"displayName": sort_by, "desc": True}],
        }
        panel["transformations"] = [
            {"id": "merge", "options": {}},
            {
                "id": "organize",
                "options": {
                    "excludeByName": {"Time": True},
                    "indexByName": {name: i for i, name in enumerate(columns)},
                    "renameByName": columns,
                },
            },
        ]
        self._place(panel, w, h)

    def jaeger_traces(
        self, title: str, searches: list[dict[str, str]], *, repeat: str, description: str, w: int = 12, h: int = 8
    ) -> None:
        """Jaeger searches (service, tags in logfmt, minDuration: the fields of Grafana's Jaeger query,
        pkg/tsdb/jaeger), one panel per value of the variable ``repeat`` (Jaeger matches a tag only to
        one exact value, so a multi-value variable is taken one value per panel)."""
        panel = self._query_panel("table", title, description, [])
        panel["datasource"] = JAEGER
        panel["targets"] = [
            {"datasource": JAEGER, "refId": chr(ord("A") + i), "queryType": "search", **search, "limit": 20}
            for i, search in enumerate(searches)
        ]
        panel["repeat"], panel["repeatDirection"], panel["maxPerRow"] = repeat, "h", 2
        panel["fieldConfig"] = {"defaults": {"thresholds": NEUTRAL}, "overrides": []}
        panel["options"] = {"showHeader": True, "cellHeight": "sm"}
        self._place(panel, w, h)

    def traces(self, title: str, traceql: str, *, description: str, w: int = 24, h: int = 8) -> None:
        """A Tempo search: the traces themselves, one click from the span tree."""
        panel = self._query_panel("table", title, description, [])
        panel["datasource"] = TEMPO
        panel["targets"] = [
            {
                "datasource": TEMPO,
                "refId": "A",
                "queryType": "traceql",
                "query": traceql,
                "limit": 20,
                "tableType": "traces",
            }
        ]
        panel["fieldConfig"] = {"defaults": {"thresholds": NEUTRAL}, "overrides": []}
        panel["options"] = {"showHeader": True, "cellHeight": "sm"}
        self._place(panel, w, h)

    def alert_list(self, title: str, *, description: str, w: int = 12, h: int = 9) -> None:
        panel = {
            "type": "alertlist",
            "title": title,
            "description": description,
            "options": {
                "alertName": "LLM",
                "dashboardAlerts": False,
                "groupMode": "default",
                "maxItems": 20,
                "sortOrder": 1,
                "stateFilter": {"firing": True, "pending": True, "normal": False, "error": True, "noData": False},
                "viewMode": "list",
            },
        }
        self._place(panel, w, h)


def _ref_ids(targets: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**t, "refId": chr(ord("A") + i)} for i, t in enumerate(targets)]


def datasource_variable(name: str, label: str, plugin: str, default_uid: str) -> dict[str, Any]:
    """Pick a datasource of one type; the stack's provisioned uid is only the first choice."""
    return {
        "name": name,
        "label": label,
        "type": "datasource",
        "query": plugin,
        "regex": "",
        "refresh": 1,
        "includeAll": False,
        "multi": False,
        "hide": 0,
        "current": {"selected": True, "text": default_uid, "value": default_uid},
        "options": [],
    }


def query_variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": PROMETHEUS,
        "definition": query,
        "query": {"query": query, "refId": f"{name}-variable"},
        "refresh": 2,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 1,
    }


def single_variable(name: str, label: str, query: str, regex: str = "") -> dict[str, Any]:
    """One value at a time (Jaeger's search takes one service)."""
    return {**query_variable(name, label, query), "includeAll": False, "multi": False, "regex": regex, "current": {}}


CALL_VARIABLES = [
    datasource_variable("datasource", "Prometheus", "prometheus", "prometheus"),
    datasource_variable("tempo", "Tempo", "tempo", "tempo"),
    query_variable("provider", "Provider", f"label_values({DURATION}_count{{{SCOPE}}}, gen_ai_provider_name)"),
    query_variable(
        "model",
        "Model",
        f'label_values({DURATION}_count{{{SCOPE}, gen_ai_provider_name=~"$provider"}}, gen_ai_request_model)',
    ),
    query_variable(
        "traffic_class", "Traffic class", f"label_values({DURATION}_count{{{SCOPE}}}, firsttoken_traffic_class)"
    ),
]
# For the "Traces in Jaeger" rows: Jaeger's datasource, the service (Prometheus' job label is
# service.name, or service.namespace/service.name: Jaeger's service is the part after the slash), and
# the error types the calls failed with (Jaeger finds a failed call by its error.type, docs/trace-stores.md).
JAEGER_VARIABLES = [
    datasource_variable("jaeger", "Jaeger", "jaeger", "jaeger"),
    single_variable("service", "Service (Jaeger)", f"label_values({DURATION}_count{{{SCOPE}}}, job)", "/([^/]+)$/"),
    query_variable(
        "error_type", "Error type (Jaeger)", f'label_values({DURATION}_count{{{SCOPE}, error_type!=""}}, error_type)'
    ),
]
JAEGER_ROW = "Traces in Jaeger (docker-compose.jaeger.yml; docs/trace-stores.md)"
JAEGER_NOTE = (
    " Jaeger compares attributes only as equal strings and has no TTFT condition: the calls slower than the target "
    "in all, a superset (a call lasts at least its time to first token); failed calls by their error.type."
)


def jaeger_slow(traffic_class: str, seconds: float) -> dict[str, str]:
    """The Jaeger search for the calls of ``$model`` and a class slower than ``seconds`` in all; the default
    class ("") is searched without a class tag (Jaeger cannot ask for a missing attribute): a superset."""
    tags = f"{sc.GEN_AI_REQUEST_MODEL}=$model"
    if traffic_class:
        tags += f" {sc.FT_TRAFFIC_CLASS}={traffic_class}"
    return {"service": "$service", "tags": tags, "minDuration": f"{seconds:g}s"}


def jaeger_failed(traffic_class: str) -> dict[str, str]:
    """The Jaeger search for the calls of a class (the default: any) that failed with ``$error_type``."""
    tags = f"{sc.ERROR_TYPE}=$error_type"
    if traffic_class:
        tags += f" {sc.FT_TRAFFIC_CLASS}={traffic_class}"
    return {"service": "$service", "tags": tags}


def dashboard(
    uid: str, title: str, description: str, layout: Layout, variables: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["firsttoken", "llm", "latency"],
        "schemaVersion": 39,
        "version": 1,
        "editable": False,
        "graphTooltip": 1,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "timepicker": {},
        "timezone": "browser",
        "annotations": {"list": []},
        "links": [
            {
                "title": "LLM dashboards",
                "type": "dashboards",
                "tags": ["firsttoken"],
                "asDropdown": False,
                "includeVars": True,
                "keepTime": True,
            }
        ],
        "templating": {"list": variables},
        "panels": layout.panels,
    }


# -- 1. LLM latency overview -------------------------------------------------------------------


def summary_table(lay: Layout, targets: Sequence[Target], error_limit: float) -> None:
    """Per provider/model over the picked range: the first question, which model is slow or failing."""
    calls = f"sum by ({BY_MODEL}) (rate({DURATION}_count{{{CALL}}}[{RANGE}]))"

    def q(qq: float, metric: str, selector: str = CALL) -> str:
        # ">= 0" drops the NaN of a model without such calls: an empty cell, not "NaN".
        return f"{quantile(qq, metric, BY_MODEL, selector, RANGE)} >= 0"

    def share(part: str, whole: str) -> str:
        # "or 0 * whole": 0, not an empty cell, for a model with calls and none of the part.
        return f"({part} or 0 * {whole}) / {whole}"

    errors = f'sum by ({BY_MODEL}) (rate({DURATION}_count{{{CALL}, error_type!=""}}[{RANGE}]))'
    cached = f"sum by ({BY_MODEL}) (rate({CACHE_READ}{{{CALL}}}[{RANGE}]))"
    inputs = f"sum by ({BY_MODEL}) (rate({INPUT}{{{CALL}}}[{RANGE}]))"
    ok = f'{CALL}, error_type=""'
    queries = [
        ("Calls/s", calls, "reqps", NEUTRAL),
        ("Errors", share(errors, calls), "percentunit", thresholds_over(error_limit)),
        ("TTFT p50", q(0.5, TTFT), "s", NEUTRAL),
        ("TTFT p95", q(0.95, TTFT), "s", _default_threshold(targets, "ttft", 0.95)),
        ("TPOT p95", q(0.95, TPOT), "s", NEUTRAL),
        ("End-to-end p95", q(0.95, DURATION, ok), "s", NEUTRAL),
        ("End-to-end p99", q(0.99, DURATION, ok), "s", _default_threshold(targets, "e2e", 0.99)),
        ("Cache hits", share(cached, inputs), "percentunit", NEUTRAL),
    ]
    columns = {"gen_ai_provider_name": "Provider", "gen_ai_request_model": "Model"}
    overrides = []
    for i, (name, _, unit, limits) in enumerate(queries):
        value = f"Value #{chr(ord('A') + i)}"
        columns[value] = name
        props: dict[str, Any] = {"unit": unit, "decimals": 3 if unit == "s" else 2, "thresholds": limits}
        if limits is not NEUTRAL:
            props["custom.cellOptions"] = {"type": "color-text"}
        overrides.append(by_name(value, **props))
    default_ttft = _default_target(targets, "ttft", 0.95)
    default_e2e = _default_target(targets, "e2e", 0.99)
    lay.table(
        "Summary by provider and model, over the selected time range",
        [target(expr, name, instant=True, table=True) for name, expr, _, _ in queries],
        columns=columns,
        overrides=overrides,
        sort_by="Calls/s",
        description="One row per provider and model, over the time range picked at the top (instant queries over "
        "$__range). Errors: failed calls / calls. TTFT: time to first token of streamed calls. TPOT: time per "
        "output token. End-to-end: successful calls, SDK call to last byte. Cache hits: cached input tokens / input "
        f"tokens. Red: errors over {error_limit:.0%} (alerts.yml), TTFT p95 over {seconds_text(default_ttft)} or "
        f"end-to-end p99 over {seconds_text(default_e2e)} (the default targets of prometheus/slos.yml; the "
        "SLO row below holds each traffic class to its own).",
    )


def _default_target(targets: Sequence[Target], signal: str, q: float) -> float:
    return next(t.seconds[""] for t in targets if t.signal == signal and t.quantile == q)


def _default_threshold(targets: Sequence[Target], signal: str, q: float) -> dict[str, Any]:
    return thresholds_over(_default_target(targets, signal, q))


def slo_expr(t: Target, traffic_class: str, named: Sequence[str], window: str) -> str:
    """Share of calls of a class under the class's target. End-to-end: a failed call never meets it."""
    metric, buckets = HISTOGRAMS[t.signal]
    selector = f"{CALL}, {class_selector(traffic_class, named)}"
    le = le_matcher(slo_bound(t.for_class(traffic_class), buckets, f"{t.record} ({class_title(traffic_class)})"))
    good = f'{selector}, error_type=""' if t.signal == "e2e" else selector
    return (
        f"(sum(rate({metric}_bucket{{{good}, {le}}}[{window}])) or vector(0))"
        f" / sum(rate({metric}_count{{{selector}}}[{window}]))"
    )


def slo_under(t: Target, traffic_class: str) -> str:
    """ "≤ 1 s", or "≤ 10.24 s (target 20 s)" when the target is not a bucket bound."""
    seconds = t.for_class(traffic_class)
    bound = slo_bound(seconds, HISTOGRAMS[t.signal][1], t.record)
    if bound == seconds:
        return f"≤ {seconds_text(seconds)}"
    return f"≤ {seconds_text(bound)} (target {seconds_text(seconds)})"


def slo_label(t: Target, traffic_class: str) -> str:
    what = "TTFT" if t.signal == "ttft" else "end-to-end, succeeded,"
    return f"{what} {slo_under(t, traffic_class)} (objective {t.quantile:.0%})"


def slo_rows(lay: Layout, targets: Sequence[Target]) -> None:
    named = traffic_classes(targets)
    lay.row("SLOs by traffic class: targets from prometheus/slos.yml")
    w = max(24 // len(named), 4)
    for traffic_class in named:
        queries = [
            target(slo_expr(t, traffic_class, named, RANGE), slo_label(t, traffic_class), instant=True) for t in targets
        ]
        overrides = [by_ref(chr(ord("A") + i), thresholds=thresholds_under(t.quantile)) for i, t in enumerate(targets)]
        lay.stat(
            class_title(traffic_class),
            queries,
            unit="percentunit",
            thresholds=thresholds_under(targets[0].quantile),
            overrides=overrides,
            w=w,
            h=6,
            description=(
                f"Calls of traffic class {traffic_class}" if traffic_class else "Calls outside the classes listed"
            )
            + ", over the selected range: the share under each target of prometheus/slos.yml. A p95 target "
            "is met when 95% of the calls are under it (green), the alert's own condition. End-to-end counts failed "
            "calls as misses, however fast they failed.",
        )
    for t in targets:
        lay.timeseries(
            f"{'TTFT' if t.signal == 'ttft' else 'End-to-end'} under its p{round(t.quantile * 100)} target, by class",
            [target(slo_expr(t, c, named, RI), f"{class_title(c)} {slo_under(t, c)}") for c in named],
            unit="percentunit",
            max_value=1,
            w=24 // len(targets),
            threshold_line=thresholds_under(t.quantile),
            description=f"Share of calls under the class's target of {t.record} (the line: the {t.quantile:.0%} "
            "objective)." + (" Failed calls count as misses." if t.signal == "e2e" else ""),
        )


def latency_overview(min_interval: str, inputs: Inputs) -> dict[str, Any]:
    targets = inputs.targets
    error_limit = inputs.error_limit
    lay = Layout(min_interval)
    summary_table(lay, targets, error_limit)
    slo_rows(lay, targets)

    lay.row("Calls and errors")
    lay.timeseries(
        "Calls per second by model",
        [target(f"sum by ({BY_MODEL}) (rate({DURATION}_count{{{CALL}}}[{RI}]))", MODEL)],
        unit="reqps",
        w=8,
        description="Instrumented LLM calls per second, by provider and model.",
    )
    lay.timeseries(
        "Error ratio by model",
        [
            target(
                f'(sum by ({BY_MODEL}) (rate({DURATION}_count{{{CALL}, error_type!=""}}[{RI}]))'
                f" or 0 * sum by ({BY_MODEL}) (rate({DURATION}_count{{{CALL}}}[{RI}])))"
                f" / sum by ({BY_MODEL}) (rate({DURATION}_count{{{CALL}}}[{RI}]))",
                MODEL,
            )
        ],
        unit="percentunit",
        w=8,
        threshold_line=thresholds_over(error_limit),
        description=f"Failed calls / calls. The line: {error_limit:.0%}, where LLMErrorRatioHigh fires "
        "(over 5 minutes).",
    )
    lay.timeseries(
        "Errors per second by model and error type",
        [
            target(
                f'sum by ({BY_MODEL}, error_type) (rate({DURATION}_count{{{CALL}, error_type!=""}}[{RI}]))',
                f"{MODEL} {{{{error_type}}}}",
            )
        ],
        unit="reqps",
        w=8,
        description="Failed calls by the exception's class name (error.type). Retries inside the SDK are one call.",
    )

    lay.row("Latency by model (p95)")
    lay.timeseries(
        "Time to first token p95 by model",
        [target(quantile(0.95, TTFT, BY_MODEL), MODEL, exemplar=True)],
        unit="s",
        w=8,
        description="SDK call to the first chunk carrying output (streamed calls). A model has the same colour on "
        "every panel. Exemplar dots open the trace.",
    )
    lay.timeseries(
        "Time per output token p95 by model",
        [target(quantile(0.95, TPOT, BY_MODEL), MODEL, exemplar=True)],
        unit="s",
        w=8,
        description="(last token - first token) / (output tokens - 1), streamed calls with two or more tokens.",
    )
    lay.timeseries(
        "End-to-end p95 by model (successful calls)",
        [target(quantile(0.95, DURATION, BY_MODEL, f'{CALL}, error_type=""'), MODEL, exemplar=True)],
        unit="s",
        w=8,
        description="SDK call to the last byte or the end of the stream, successful calls.",
    )
    lay.heatmap(
        "Time to first token heatmap",
        f"sum by (le) (rate({TTFT}_bucket{{{CALL}}}[{RI}]))",
        description="Calls per second in each TTFT bucket. Click an exemplar in a slow cell to open that call's trace.",
    )
    lay.heatmap(
        "End-to-end heatmap",
        f"sum by (le) (rate({DURATION}_bucket{{{CALL}}}[{RI}]))",
        description="Calls per second in each end-to-end bucket, failed calls included. Exemplars open the trace.",
    )
    lay.timeseries(
        "Time to first chunk vs first token (p95)",
        [
            target(quantile(0.95, TTFC, BY_MODEL), f"first chunk {MODEL}", exemplar=True),
            target(quantile(0.95, TTFT, BY_MODEL), f"first token {MODEL}", exemplar=True),
        ],
        unit="s",
        w=8,
        description="The semantic conventions' time to first chunk counts role-only chunks; time to first token "
        "waits for generated output. A gap between them is a provider sending empty chunks first.",
    )
    lay.timeseries(
        "TTFT p95 as the alert sees it, and its target",
        [
            target(
                'llm:ttft_seconds:p95_5m{gen_ai_provider_name=~"$provider", gen_ai_request_model=~"$model", '
                'firsttoken_traffic_class=~"$traffic_class"}',
                f"{MODEL} {{{{firsttoken_traffic_class}}}}",
            ),
            target(
                'llm:target:ttft_p95_seconds{firsttoken_traffic_class=~"$traffic_class"}',
                "target {{firsttoken_traffic_class}}",
            ),
        ],
        unit="s",
        w=8,
        overrides=[dashed("B")],
        description="The recording rule llm:ttft_seconds:p95_5m (5 minute window) that LLMTimeToFirstTokenP95High "
        "compares with llm:target:ttft_p95_seconds (dashed; no class: the default target).",
    )
    lay.alert_list(
        "Firing and pending LLM alerts",
        description="Alerts from prometheus/rules/alerts.yml (names start with LLM).",
        w=8,
    )
    tightest = min(t.seconds[c] for t in targets if t.signal == "ttft" for c in t.seconds)
    lay.traces(
        f"Failed calls and calls over {seconds_text(tightest)} to first token (traces in Tempo)",
        # Raw strings (backticks): Grafana's :regex format escapes dots (gpt-4\.1), and in a
        # double-quoted TraceQL string a backslash-dot is not an escape Tempo's lexer accepts.
        f"{{ span.{sc.GEN_AI_PROVIDER_NAME} =~ `${{provider:regex}}` && span.{sc.GEN_AI_REQUEST_MODEL} =~ "
        # A float literal: Tempo 3 scans the column of the literal's type (an int would never match).
        f"`${{model:regex}}` && (status = error || span.{sc.FT_TIME_TO_FIRST_TOKEN} > {float(tightest)!r}) }}",
        description=f"Tempo search over the selected range: call spans that failed or waited longer than "
        f"{seconds_text(tightest)} (the tightest TTFT target of prometheus/slos.yml) for the first token. "
        "The Collector's tail sampling keeps every such trace. Click a trace id to open its spans.",
    )

    lay.row("Time to first token p95 by traffic class")
    lay.timeseries(
        "Time to first token p95 by traffic class",
        [target(quantile(0.95, TTFT, "firsttoken_traffic_class"), "{{firsttoken_traffic_class}}", exemplar=True)],
        unit="s",
        w=24,
        h=7,
        description="Interactive traffic is held to a tighter target than batch (prometheus/slos.yml).",
    )

    lay.row("$model: p50 / p95 / p99", repeat="model")
    lay.quantiles(
        "Time to first token p50 / p95 / p99",
        TTFT,
        selector=CALL,
        description="One model (this row repeats per model picked at the top): green p50, orange p95, red p99. "
        "Exemplar dots open the trace.",
    )
    lay.quantiles(
        "Time per output token p50 / p95 / p99",
        TPOT,
        selector=CALL,
        description="Decode time per output token after the first: green p50, orange p95, red p99.",
    )
    lay.quantiles(
        "End-to-end p50 / p95 / p99 (successful calls)",
        DURATION,
        selector=f'{CALL}, error_type=""',
        description="SDK call to the last byte or the end of the stream: green p50, orange p95, red p99.",
    )

    lay.row("Application end-to-end")
    lay.timeseries(
        "User action p50 / p95 / p99",
        [
            target(
                quantile(q, ACTION, "firsttoken_action_name", CLASS),
                f"p{round(q * 100)} {{{{firsttoken_action_name}}}}",
                exemplar=True,
            )
            for q in QUANTILE_COLORS
        ],
        unit="s",
        description="firsttoken.action(): from the user's action to the rendered result, LLM calls and app work.",
    )
    lay.timeseries(
        "LLM share of action time",
        [
            target(
                f"sum by (firsttoken_action_name) (rate({ACTION_LLM_BUSY}_sum{{{CLASS}}}[{RI}]))"
                f" / sum by (firsttoken_action_name) (rate({ACTION}_sum{{{CLASS}}}[{RI}]))",
                "{{firsttoken_action_name}}",
            )
        ],
        unit="percentunit",
        max_value=1,
        description="Time at least one LLM call was in flight / action duration. Near 1: the LLM is the critical "
        "path; far below: look at the app's own phases.",
    )
    lay.timeseries(
        "Application phases p95",
        [
            target(
                quantile(0.95, APP_PHASE, "firsttoken_action_name, firsttoken_app_phase", CLASS),
                "{{firsttoken_action_name}} / {{firsttoken_app_phase}}",
                exemplar=True,
            )
        ],
        unit="s",
        description="firsttoken.phase() steps inside an action (retrieval, tool calls, rendering...).",
    )
    lay.timeseries(
        "Actions per second",
        [
            target(
                f"sum by (firsttoken_action_name, firsttoken_traffic_class) (rate({ACTION}_count{{{CLASS}}}[{RI}]))",
                "{{firsttoken_action_name}} ({{firsttoken_traffic_class}})",
            )
        ],
        unit="reqps",
        description="Completed user actions by name and traffic class.",
    )
    ttft_targets = [t for t in targets if t.signal == "ttft"]
    stem = f"Failed calls and calls over {seconds_text(tightest)} to first token (traces in Jaeger)"
    lay.row(JAEGER_ROW, collapsed=True)
    lay.jaeger_traces(
        f"{stem}: $model, slower than its class's TTFT target",
        [jaeger_slow(c, min(t.for_class(c) for t in ttft_targets)) for c in traffic_classes(targets)],
        repeat="model",
        description="The Jaeger form of the Tempo panel: per traffic class (A, B, ...; the last, every class), the "
        "calls of this model slower in all than the class's tightest TTFT target." + JAEGER_NOTE,
    )
    lay.jaeger_traces(
        f"{stem}: failed with $error_type",
        [jaeger_failed("")],
        repeat="error_type",
        description="The Jaeger form of the Tempo panel's failed calls: those that failed with this error type, "
        "any model." + JAEGER_NOTE,
    )
    return dashboard(
        "firsttoken-latency",
        "LLM latency overview",
        "Which provider and model is slow or failing, on which signal: a summary table, SLOs by traffic class, then "
        "time to first token, time per output token and end-to-end latency, with exemplars linking to the traces "
        "in Tempo or Jaeger.",
        lay,
        [*CALL_VARIABLES, *JAEGER_VARIABLES],
    )


# -- 2. Where the time goes --------------------------------------------------------------------


def where_the_time_goes(min_interval: str, inputs: Inputs) -> dict[str, Any]:
    lay = Layout(min_interval)
    streamed = f'{CALL}, gen_ai_request_stream="true", error_type=""'
    lay.timeseries(
        "Streamed call: waiting vs generating (mean)",
        [
            target(mean(TTFT, BY_MODEL), f"to first token {MODEL}"),
            target(f"{mean(DURATION, BY_MODEL, streamed)} - {mean(TTFT, BY_MODEL)}", f"first token to end {MODEL}"),
        ],
        unit="s",
        overrides=[dashed("B")],
        description="Mean seconds per streamed call before the first token (solid: connection, upload, queue, "
        "prefill) and after it (dashed: decode, trailing usage chunk), per provider and model.",
    )
    lay.timeseries(
        "Decode speed p50 (output tokens per second)",
        [target(f"1 / {quantile(0.5, TPOT, BY_MODEL)}", MODEL)],
        unit=TOKENS_PER_S,
        w=6,
        description="1 / median time per output token.",
    )
    lay.timeseries(
        "New SDK clients per 100 calls",
        [
            target(
                f"100 * sum by (gen_ai_provider_name) (rate({SDK_CLIENTS}{{{CALL}}}[{RI}]))"
                f" / sum by (gen_ai_provider_name) (rate({DURATION}_count{{{CALL}}}[{RI}]))",
                "{{gen_ai_provider_name}}",
            )
        ],
        unit="none",
        w=6,
        description="A new client has a new connection pool: every call pays DNS, TCP and TLS again. Near 100 means "
        "a client per call; create one client and reuse it.",
    )

    lay.row("Phases")
    lay.timeseries(
        "Where the time goes: mean seconds per call by phase",
        [
            target(
                f"sum by (firsttoken_phase) (rate({WIRE_PHASE}{{{CALL}}}[{RI}]))"
                f" / scalar(sum(rate({DURATION}_count{{{CALL}}}[{RI}])))",
                "{{firsttoken_phase}}",
            )
        ],
        unit="s",
        stack=True,
        description="The phases tile each call (prepare, pool wait, DNS, TCP connect, TLS handshake, upload, "
        "server wait, download or first token and decode, retry waits, finish); stacked, they add up to the mean "
        "end-to-end of the calls selected at the top (pick one model to see that model's). Setup phases only "
        "occur on new connections, so their mean is their cost spread over all calls.",
    )
    lay.timeseries(
        "Share of the time by phase",
        [
            target(
                f"sum by (firsttoken_phase) (rate({WIRE_PHASE}{{{CALL}}}[{RI}]))"
                f" / scalar(sum(rate({WIRE_PHASE}{{{CALL}}}[{RI}])))",
                "{{firsttoken_phase}}",
            )
        ],
        unit="percentunit",
        max_value=1,
        stack=True,
        description="Of all the time the selected calls took, the part spent in each phase. A slow call's own "
        "phases: open it from an exemplar of the latency panels; its span has firsttoken.phase_duration.* "
        "attributes, and calls in the slow tail have their phases as child spans.",
    )
    lay.timeseries(
        "Connection reuse ratio",
        [
            target(
                f"sum by (gen_ai_provider_name) "
                f'(rate({CONNECTIONS}{{{CALL}, firsttoken_connection_outcome="reused"}}[{RI}]))'
                f" / sum by (gen_ai_provider_name) (rate({CONNECTIONS}{{{CALL}}}[{RI}]))",
                "{{gen_ai_provider_name}}",
            )
        ],
        unit="percentunit",
        max_value=1,
        w=6,
        description="Requests sent on a pooled connection / all requests. Low: connections are not kept alive "
        "(a client per call, a proxy closing them, HTTP/1.1 with too small a pool).",
    )
    lay.timeseries(
        "Bytes on the wire per call (mean)",
        [
            target(per_call(REQUEST_BYTES, BY_MODEL), f"sent {MODEL}"),
            target(per_call(RESPONSE_BYTES, BY_MODEL), f"received {MODEL}"),
        ],
        unit="bytes",
        w=6,
        overrides=[dashed("B")],
        description="Request (solid) and response (dashed) bodies as they crossed the wire (compressed size when "
        "compressed).",
    )
    lay.timeseries(
        "Retries per second",
        [target(f"sum by ({BY_MODEL}) (rate({RETRIES}{{{CALL}}}[{RI}]))", MODEL)],
        unit="reqps",
        w=6,
        description="Requests the SDK sent again (429s, 5xx, dropped connections).",
    )
    lay.timeseries(
        "Retry wait per call (mean)",
        [
            target(
                f'sum by ({BY_MODEL}) (rate({WIRE_PHASE}{{{CALL}, firsttoken_phase="retry_wait"}}[{RI}]))'
                f" / sum by ({BY_MODEL}) (rate({DURATION}_count{{{CALL}}}[{RI}]))",
                MODEL,
            )
        ],
        unit="s",
        w=6,
        description="Seconds per call spent between attempts (back-off, Retry-After): rate-limit latency that is "
        "not model latency.",
    )
    lay.timeseries(
        "Server-reported time by phase (mean)",
        [
            target(
                server_mean(f"{BY_MODEL}, firsttoken_server_timing_phase"),
                f"{MODEL} {{{{firsttoken_server_timing_phase}}}}",
            )
        ],
        unit="s",
        w=24,
        description="What the provider reports, never measured by the client: OpenAI's processing time "
        "(openai-processing-ms), Groq and Cerebras queue, prompt and completion times, llama.cpp's prompt and "
        "generation times, TGI's queue and inference times, vLLM's queue, first-token and generation times. "
        "Compare with the server wait phase above: the difference is the network and the provider's front end.",
    )
    prefill = f'{CALL}, firsttoken_server_timing_phase="prompt"'
    lay.timeseries(
        "Time to first token: server prefill vs the rest (mean)",
        [
            target(server_mean(BY_MODEL, prefill), f"server prefill {MODEL}"),
            target(f"{mean(TTFT, BY_MODEL)} - {server_mean(BY_MODEL, prefill)}", f"network + queue {MODEL}"),
        ],
        unit="s",
        stack=True,
        w=24,
        description="Where the server reports its prompt (prefill) time (Groq, Cerebras, llama.cpp): client TTFT "
        "minus the server's prefill is what the network, the server's queue and its front end added.",
    )
    return dashboard(
        "firsttoken-wire",
        "LLM: where the time goes",
        "The phases of an LLM call before and after the first token: connection setup, upload, server wait, decode.",
        lay,
        list(CALL_VARIABLES),
    )


# -- 3. Tokens and cache -----------------------------------------------------------------------


def tokens_and_cache(min_interval: str, inputs: Inputs) -> dict[str, Any]:
    lay = Layout(min_interval)
    lay.stat(
        "Input tokens per second",
        [target(f"sum(rate({INPUT}{{{CALL}}}[{RANGE}]))", instant=True)],
        unit=TOKENS_PER_S,
        thresholds=NEUTRAL,
        w=6,
        description="Over the selected range, cached tokens included.",
    )
    lay.stat(
        "Output tokens per second",
        [target(f"sum(rate({OUTPUT}{{{CALL}}}[{RANGE}]))", instant=True)],
        unit=TOKENS_PER_S,
        thresholds=NEUTRAL,
        w=6,
        description="Over the selected range, reasoning tokens included.",
    )
    lay.stat(
        "Prompt-cache hit ratio",
        [target(f"sum(rate({CACHE_READ}{{{CALL}}}[{RANGE}])) / sum(rate({INPUT}{{{CALL}}}[{RANGE}]))", instant=True)],
        unit="percentunit",
        thresholds=NEUTRAL,
        w=6,
        description="Over the selected range: cached input tokens / input tokens. No fixed target: the alert "
        "watches for a drop against an hour before (see the panels below).",
    )
    lay.stat(
        "Calls stopped by max_tokens",
        [
            target(
                f"(sum(rate({FINISH}{{{CALL}, {CUT_OFF}}}[{RANGE}])) or vector(0))"
                f" / sum(rate({FINISH}{{{CALL}}}[{RANGE}]))",
                instant=True,
            )
        ],
        unit="percentunit",
        thresholds=NEUTRAL,
        w=6,
        description="Over the selected range: finish reason length (OpenAI) or max_tokens (Anthropic), the answer "
        "was cut off.",
    )
    lay.timeseries(
        "Input tokens per second by model",
        [
            target(f"sum by ({BY_MODEL}) (rate({INPUT}{{{CALL}}}[{RI}]))", f"input {MODEL}"),
            target(f"sum by ({BY_MODEL}) (rate({CACHE_READ}{{{CALL}}}[{RI}]))", f"cache read {MODEL}"),
            target(f"sum by ({BY_MODEL}) (rate({CACHE_CREATION}{{{CALL}}}[{RI}]))", f"cache write {MODEL}"),
        ],
        unit=TOKENS_PER_S,
        description="Input tokens (cached included), of which read from and written to the provider's prompt cache.",
    )
    lay.timeseries(
        "Output tokens per second by model",
        [
            target(f"sum by ({BY_MODEL}) (rate({OUTPUT}{{{CALL}}}[{RI}]))", f"output {MODEL}"),
            target(f"sum by ({BY_MODEL}) (rate({REASONING}{{{CALL}}}[{RI}]))", f"reasoning {MODEL}"),
        ],
        unit=TOKENS_PER_S,
        description="Output tokens (reasoning included) and the reasoning part alone.",
    )

    lay.row("Prompt cache")
    lay.timeseries(
        "Prompt-cache hit ratio by model",
        [
            target(
                f"sum by ({BY_MODEL}) (rate({CACHE_READ}{{{CALL}}}[{RI}]))"
                f" / sum by ({BY_MODEL}) (rate({INPUT}{{{CALL}}}[{RI}]))",
                MODEL,
            ),
            target(
                'llm:cache_hit_ratio:ratio_rate15m{gen_ai_provider_name=~"$provider", gen_ai_request_model=~"$model"}',
                f"15m, as the alert sees it: {MODEL}",
            ),
        ],
        unit="percentunit",
        max_value=1,
        overrides=[dashed("B")],
        description="Cached input tokens / input tokens. LLMPromptCacheHitRatioDrop fires when the 15 minute ratio "
        "(dashed) falls under half of what it was an hour before.",
    )
    lay.timeseries(
        "Prompt-cache hit ratio by prompt prefix (top 10 by input over the range)",
        [
            target(
                f"(sum by ({PREFIX_BY}) (rate({PREFIX_CACHE_READ}{{{CALL}}}[{RI}]))"
                f" / sum by ({PREFIX_BY}) (rate({PREFIX_INPUT}{{{CALL}}}[{RI}])))"
                f" and on ({PREFIX_BY})"
                f" topk(10, sum by ({PREFIX_BY}) (increase({PREFIX_INPUT}{{{CALL}}}[{RANGE}] @ end())))",
                f"{MODEL} {{{{firsttoken_prompt_prefix_hash}}}}",
            )
        ],
        unit="percentunit",
        max_value=1,
        description="firsttoken.prompt.prefix_hash is a short hash of the stable prompt prefix (system instructions, "
        "tools). The ten prefixes with the most input tokens over the whole selected range (the same ten at every "
        "point). A new hash with a low hit ratio is a prompt change that broke the cache.",
    )
    lay.timeseries(
        "Input tokens per call p50 / p95",
        [
            target(
                quantile(q, TOKEN_USAGE, BY_MODEL, f'{CALL}, gen_ai_token_type="input"'),
                f"p{round(q * 100)} {MODEL}",
            )
            for q in (0.5, 0.95)
        ],
        unit=TOKENS,
        overrides=[dashed("B")],
        description="gen_ai.client.token.usage, input: p50 solid, p95 dashed. Token buckets grow by 4x, so "
        "percentiles are coarse.",
    )
    lay.timeseries(
        "Output tokens per call p50 / p95",
        [
            target(
                quantile(q, TOKEN_USAGE, BY_MODEL, f'{CALL}, gen_ai_token_type="output"'),
                f"p{round(q * 100)} {MODEL}",
            )
            for q in (0.5, 0.95)
        ],
        unit=TOKENS,
        overrides=[dashed("B")],
        description="gen_ai.client.token.usage, output: p50 solid, p95 dashed.",
    )

    lay.row("Context growth and stops")
    lay.timeseries(
        "Context growth: mean input tokens by conversation turn",
        [target(mean(CONV_INPUT, "firsttoken_conversation_turns"), "turns {{firsttoken_conversation_turns}}")],
        unit=TOKENS,
        description="Calls inside firsttoken.conversation(), by turn bucket (1, 2-3, 4-7, ...): every turn resends "
        "the history.",
    )
    lay.timeseries(
        "What context growth costs: TTFT p95 by conversation turn",
        [
            target(
                quantile(0.95, CONV_TTFT, "firsttoken_conversation_turns"),
                "turns {{firsttoken_conversation_turns}}",
                exemplar=True,
            )
        ],
        unit="s",
        description="Time to first token by turn bucket: prefill time grows with the context.",
    )
    lay.timeseries(
        "Finish reasons per second",
        [
            target(
                f"sum by ({BY_MODEL}, gen_ai_response_finish_reason) (rate({FINISH}{{{CALL}}}[{RI}]))",
                f"{MODEL} {{{{gen_ai_response_finish_reason}}}}",
            )
        ],
        unit="reqps",
        description="Why generations ended: stop, length / max_tokens, tool_calls, content_filter...",
    )
    lay.timeseries(
        "Share of calls stopped by max_tokens",
        [
            target(
                f"(sum by ({BY_MODEL}) (rate({FINISH}{{{CALL}, {CUT_OFF}}}[{RI}]))"
                f" or 0 * sum by ({BY_MODEL}) (rate({FINISH}{{{CALL}}}[{RI}])))"
                f" / sum by ({BY_MODEL}) (rate({FINISH}{{{CALL}}}[{RI}]))",
                MODEL,
            )
        ],
        unit="percentunit",
        max_value=1,
        description="Cut-off answers: the user waited for the whole budget and got a truncated result.",
    )
    return dashboard(
        "firsttoken-tokens",
        "LLM tokens and cache",
        "Token rates, prompt-cache hit ratio by model and by prompt prefix, context growth and max_tokens stops.",
        lay,
        list(CALL_VARIABLES),
    )


# -- 4. LLM SLOs -------------------------------------------------------------------------------


YEAR_S = 365 * 86400
SLO_BY = "gen_ai_provider_name, gen_ai_request_model, firsttoken_traffic_class"
SLO_ROW = "{{gen_ai_provider_name}}/{{gen_ai_request_model}} {{firsttoken_traffic_class}}"


def slo_trace_search(slo: Any, classes: Sequence[str]) -> str:
    """TraceQL: this SLO's bad calls of the picked models and classes, each class at its own threshold."""
    picked = (
        f"span.{sc.GEN_AI_PROVIDER_NAME} =~ `${{provider:regex}}` && span.{sc.GEN_AI_REQUEST_MODEL} =~ "
        f"`${{model:regex}}` && span.{sc.FT_TRAFFIC_CLASS} =~ `${{traffic_class:regex}}`"
    )
    if slo.sli == "availability":
        return f"{{ {picked} && status = error }}"
    named = [c for c in classes if c]
    per_class = []
    for traffic_class in classes:
        threshold = float(slo.threshold_for(traffic_class))
        if slo.sli == "ttft":
            over = f"span.{sc.FT_TIME_TO_FIRST_TOKEN} > {threshold!r}"
        else:
            over = f"(status = error || duration > {threshold:g}s)"
        if traffic_class:
            which = f'span.{sc.FT_TRAFFIC_CLASS} = "{traffic_class}"'
        else:
            which = " && ".join(f'span.{sc.FT_TRAFFIC_CLASS} != "{c}"' for c in named)
        per_class.append(f"({which} && {over})")
    return f"{{ {picked} && ({' || '.join(per_class)}) }}"


def slo_section(lay: Layout, config: Any, slo: Any) -> None:
    classes = config.classes()
    window = config.window
    sel = f'slo="{slo.name}", {PICKED}'

    def by(expr: str) -> str:
        return f"max by ({SLO_BY}) ({expr})"

    objectives = ", ".join(
        f"{class_title(c)} {slo.objective_for(c):.4g}"
        + (f" within {seconds_text(slo.threshold_for(c))}" if slo.threshold_for(c) is not None else "")
        for c in classes
    )
    what = {
        "ttft": "streamed calls whose time to first token is within the class's target",
        "e2e": "calls that succeeded within the class's end-to-end target",
        "availability": "calls that did not fail",
    }[slo.sli]
    lay.row(f"SLO {slo.name}: {what}")
    budget_s = config.window_seconds
    queries = [
        ("SLI", by(f"1 - llm:slo_bad:rate{window}{{{sel}}} / llm:slo_calls:rate{window}{{{sel}}}"), "percentunit"),
        ("Objective", by(f"1 - llm:slo_error_budget{{{sel}}}"), "percentunit"),
        ("Budget left", by(f"llm:slo_budget_remaining:{window}{{{sel}}}"), "percentunit"),
        ("Burn 1h", by(f"llm:slo_burn_rate:1h{{{sel}}}"), "none"),
        ("Burn 6h", by(f"llm:slo_burn_rate:6h{{{sel}}}"), "none"),
        (
            "Budget lasts",
            # Capped at a year: no burn at all would be +Inf.
            by(
                f"clamp_max(clamp_min(llm:slo_budget_remaining:{window}{{{sel}}}, 0) * {budget_s}"
                f" / llm:slo_burn_rate:1h{{{sel}}}, {YEAR_S})"
            ),
            "s",
        ),
        (
            "Alerts firing",
            f'count by ({SLO_BY}) (ALERTS{{alertstate="firing", {sel}}}) or 0 * {by(f"llm:slo_calls:rate5m{{{sel}}}")}',
            "none",
        ),
    ]
    columns = {
        "gen_ai_provider_name": "Provider",
        "gen_ai_request_model": "Model",
        "firsttoken_traffic_class": "Class",
    }
    overrides = []
    for i, (name, _, unit) in enumerate(queries):
        value = f"Value #{chr(ord('A') + i)}"
        columns[value] = name
        props: dict[str, Any] = {"unit": unit, "decimals": 4 if unit == "percentunit" else 1}
        if name == "Budget left":
            # Red once the budget is spent (under 0).
            props["thresholds"] = {
                "mode": "absolute",
                "steps": [{"color": "red", "value": None}, {"color": "green", "value": 0}],
            }
            props["custom.cellOptions"] = {"type": "color-background"}
        if name == "Alerts firing":
            props["thresholds"] = thresholds_over(1)
            props["custom.cellOptions"] = {"type": "color-background"}
        overrides.append(by_name(value, **props))
    lay.table(
        f"SLO {slo.name} per model and class, now",
        [target(expr, name, instant=True, table=True) for name, expr, _ in queries],
        columns=columns,
        overrides=overrides,
        sort_by="Burn 1h",
        w=24,
        h=7,
        description=f"SLO {slo.name} (prometheus/slos.yml): {objectives}, over {window}. SLI: the share of good "
        f"calls over {window}. Budget left: 1 - the bad share over {window} / the error budget (1 - objective); "
        "negative once spent. Burn: the bad share over 1 h / 6 h divided by the budget (1 = spending it exactly "
        f"over {window}). Budget lasts: what is left, at the 1 h burn rate (at most a year). Alerts firing: "
        "LLMErrorBudgetBurn* of this SLO (docs/alerts.md). From the recording rules of "
        "prometheus/rules/slo-recording.yml.",
    )
    pages = sorted({a.burn for a in config.burn_alerts if a.severity == "page"})
    steps = [{"color": "green", "value": None}, {"color": "orange", "value": 1.0}]
    steps += [{"color": "red", "value": burn} for burn in pages[-1:]]
    lay.timeseries(
        f"SLO {slo.name}: burn rate over 1 h and 6 h",
        [
            target(by(f"llm:slo_burn_rate:1h{{{sel}}}"), f"1h {SLO_ROW}"),
            target(by(f"llm:slo_burn_rate:6h{{{sel}}}"), f"6h {SLO_ROW}"),
        ],
        unit="none",
        w=12,
        threshold_line={"mode": "absolute", "steps": steps},
        overrides=[dashed("B")],
        description="How many times faster than the SLO allows the error budget burns (dashed: 6 h). The lines: 1 "
        f"(the whole budget spent over {window}) and {pages[-1]:g} (the fast page, over "
        f"{next(a.long for a in config.burn_alerts if a.burn == pages[-1])} and "
        f"{next(a.short for a in config.burn_alerts if a.burn == pages[-1])}).",
    )
    lay.traces(
        f"SLO {slo.name}: the bad calls (traces in Tempo)",
        slo_trace_search(slo, classes),
        w=12,
        h=9,
        description="Tempo search over the selected range: the call spans this SLO counts as bad ("
        + ("failed" if slo.sli == "availability" else "over the threshold of their class, or failed")
        + "), for the picked provider, model and class. Kept by tail sampling (every call over its class's TTFT p95 "
        "target or end-to-end target, and every error).",
    )


def llm_slos(min_interval: str, inputs: Inputs) -> dict[str, Any]:
    config = inputs.config
    lay = Layout(min_interval)
    for slo in config.slos:
        slo_section(lay, config, slo)
    lay.row(JAEGER_ROW, collapsed=True)
    for slo in config.slos:
        stem = f"SLO {slo.name}: the bad calls (traces in Jaeger)"
        if slo.sli == "availability":
            lay.jaeger_traces(
                f"{stem}: failed with $error_type",
                [jaeger_failed(c) for c in config.classes()],
                repeat="error_type",
                description="The Jaeger form of the Tempo panel: per traffic class (A, B, ...; the last, every "
                "class), the calls that failed with this error type, any model." + JAEGER_NOTE,
            )
        else:
            lay.jaeger_traces(
                f"{stem}: $model over its class's threshold",
                [jaeger_slow(c, slo.threshold.get(c, slo.threshold[""])) for c in config.classes()],
                repeat="model",
                description="The Jaeger form of the Tempo panel: per traffic class (A, B, ...), the calls of this "
                "model slower in all than the class's threshold of this SLO." + JAEGER_NOTE,
            )
    return dashboard(
        "llm-slos",
        "LLM SLOs and error budgets",
        "Per SLO of prometheus/slos.yml, per provider, model and traffic class: the SLI over the SLO window, the "
        "error budget left, burn rates over 1 h and 6 h, how long the budget lasts at the current burn, the "
        "burn-rate alerts' state, and the traces of the calls that spent it.",
        lay,
        [*CALL_VARIABLES, *JAEGER_VARIABLES],
    )


# -- output ------------------------------------------------------------------------------------

BUILDERS = {
    "llm-latency-overview.json": latency_overview,
    "where-the-time-goes.json": where_the_time_goes,
    "tokens-and-cache.json": tokens_and_cache,
    "llm-slos.json": llm_slos,
}
"""File name -> the function building it."""


def render(root: Path, min_interval: str = MIN_INTERVAL) -> dict[str, str]:
    """File name -> JSON text, exactly as committed (with the default minimum interval), from the
    checkout at ``root``."""
    config = load_slos(root / SLOS)
    inputs = Inputs(load_targets(config.targets), load_error_ratio_limit(root / ALERTS_FILE), config)
    return {name: json.dumps(build(min_interval, inputs), indent=2) + "\n" for name, build in BUILDERS.items()}
