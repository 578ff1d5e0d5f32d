"""Generate firsttoken's Grafana dashboards (grafana/dashboards/*.json): the one source of truth.

    python scripts/stack/dashboards.py          # write the JSON files
    python scripts/stack/dashboards.py --check  # exit 1 if a committed file differs

Classic dashboard JSON (schemaVersion 39), file-provisioned by
grafana/provisioning/dashboards/dashboards.yaml; Grafana 11-13 load it (13 migrates it on load).
Every query uses the Prometheus names of docs/metrics.md (UnderscoreEscapingWithSuffixes).
Latency panels ask for exemplars: a point or heatmap cell links to the trace of that very call in
Tempo through the Prometheus datasource's exemplarTraceIdDestinations.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OUT_DIR = ROOT / "grafana" / "dashboards"

PROMETHEUS = {"type": "prometheus", "uid": "prometheus"}

# Label selectors built from the dashboard variables.
CALL = 'gen_ai_provider_name=~"$provider", gen_ai_request_model=~"$model", firsttoken_traffic_class=~"$traffic_class"'
CLASS = 'firsttoken_traffic_class=~"$traffic_class"'
RI = "$__rate_interval"
PREFIX_BY = "gen_ai_request_model, firsttoken_prompt_prefix_hash"
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
WIRE_PHASE = "firsttoken_client_phase_duration_seconds"
CONNECTIONS = "firsttoken_client_connections_total"
REQUEST_BYTES = "firsttoken_client_request_body_size_bytes"
RESPONSE_BYTES = "firsttoken_client_response_body_size_bytes"
RETRIES = "firsttoken_client_retries_total"
# Not emitted yet (tests/stack/stack_tools.py PENDING_METRICS): a name proposed for the
# provider-reported split of server wait into queue and processing.
SERVER_TIMING = "firsttoken_client_server_timing_duration_seconds"

TTFT_TARGETS = ("0.5", "1", "1.5", "2", "2.5", "5", "10")  # TTFT bucket bounds
E2E_TARGETS = ("1.28", "2.56", "5.12", "10.24", "20.48", "40.96")  # duration bucket bounds


# -- building blocks ---------------------------------------------------------------------------


def target(expr: str, legend: str = "", *, exemplar: bool = False, heatmap: bool = False) -> dict[str, Any]:
    t: dict[str, Any] = {"datasource": PROMETHEUS, "expr": expr, "legendFormat": legend or "__auto", "range": True}
    if exemplar:
        t["exemplar"] = True
    if heatmap:
        t["format"] = "heatmap"
    return t


def quantile(q: float, metric: str, by: str, selector: str = CALL) -> str:
    return f"histogram_quantile({q}, sum by (le, {by}) (rate({metric}_bucket{{{selector}}}[{RI}])))"


def quantile_targets(metric: str, by: str, legend: str, selector: str = CALL) -> list[dict[str, Any]]:
    return [
        target(quantile(q, metric, by, selector), f"p{round(q * 100)} {legend}", exemplar=True)
        for q in (0.5, 0.95, 0.99)
    ]


def mean(metric: str, by: str, selector: str = CALL) -> str:
    return (
        f"sum by ({by}) (rate({metric}_sum{{{selector}}}[{RI}]))"
        f" / sum by ({by}) (rate({metric}_count{{{selector}}}[{RI}]))"
    )


class Layout:
    """Places panels left to right in a 24-column grid and numbers them."""

    def __init__(self) -> None:
        self.panels: list[dict[str, Any]] = []
        self.x = 0
        self.y = 0
        self.row_h = 0

    def _place(self, panel: dict[str, Any], w: int, h: int) -> None:
        if self.x + w > 24:
            self.x, self.y = 0, self.y + self.row_h
            self.row_h = 0
        panel["gridPos"] = {"h": h, "w": w, "x": self.x, "y": self.y}
        panel["id"] = len(self.panels) + 1
        self.panels.append(panel)
        self.x += w
        self.row_h = max(self.row_h, h)

    def row(self, title: str) -> None:
        if self.x:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        self._place({"type": "row", "title": title, "collapsed": False, "panels": []}, 24, 1)
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
    ) -> None:
        defaults: dict[str, Any] = {
            "unit": unit,
            "custom": {
                "drawStyle": "line",
                "lineWidth": 1,
                "fillOpacity": 20 if stack else 0,
                "showPoints": "never",
                "spanNulls": True,
                "stacking": {"mode": "normal" if stack else "none", "group": "A"},
            },
        }
        if max_value is not None:
            defaults["min"] = 0
            defaults["max"] = max_value
        panel = {
            "type": "timeseries",
            "title": title,
            "description": description,
            "datasource": PROMETHEUS,
            "fieldConfig": {"defaults": defaults, "overrides": []},
            "options": {
                "legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull", "max"]},
                "tooltip": {"mode": "multi", "sort": "desc"},
            },
            "targets": _ref_ids(targets),
        }
        self._place(panel, w, h)

    def heatmap(self, title: str, expr: str, *, description: str, w: int = 12, h: int = 9) -> None:
        panel = {
            "type": "heatmap",
            "title": title,
            "description": description,
            "datasource": PROMETHEUS,
            "fieldConfig": {"defaults": {}, "overrides": []},
            "options": {
                "calculate": False,
                "cellGap": 1,
                "color": {"mode": "scheme", "scheme": "Oranges", "exponent": 0.5, "steps": 64},
                "exemplars": {"color": "rgba(255,0,255,0.7)"},
                "legend": {"show": True},
                "rowsFrame": {"layout": "auto"},
                "tooltip": {"mode": "single", "yHistogram": True},
                "yAxis": {"unit": "s"},
            },
            "targets": _ref_ids([target(expr, "{{le}}", exemplar=True, heatmap=True)]),
        }
        self._place(panel, w, h)

    def stat(self, title: str, expr: str, *, unit: str, description: str, w: int = 4, h: int = 4) -> None:
        panel = {
            "type": "stat",
            "title": title,
            "description": description,
            "datasource": PROMETHEUS,
            "fieldConfig": {"defaults": {"unit": unit, "decimals": 2}, "overrides": []},
            "options": {
                "colorMode": "value",
                "graphMode": "area",
                "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                "textMode": "auto",
            },
            "targets": _ref_ids([target(expr)]),
        }
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


def custom_variable(name: str, label: str, values: tuple[str, ...], default: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "description": description,
        "type": "custom",
        "query": ",".join(values),
        "current": {"selected": True, "text": default, "value": default},
        "options": [{"selected": v == default, "text": v, "value": v} for v in values],
        "includeAll": False,
        "multi": False,
    }


CALL_VARIABLES = [
    query_variable("provider", "Provider", f"label_values({DURATION}_count, gen_ai_provider_name)"),
    query_variable(
        "model", "Model", f'label_values({DURATION}_count{{gen_ai_provider_name=~"$provider"}}, gen_ai_request_model)'
    ),
    query_variable("traffic_class", "Traffic class", f"label_values({DURATION}_count, firsttoken_traffic_class)"),
]


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


def latency_overview() -> dict[str, Any]:
    lay = Layout()
    by_model = "gen_ai_provider_name, gen_ai_request_model"
    lay.stat(
        "Calls per second",
        f"sum(rate({DURATION}_count{{{CALL}}}[{RI}]))",
        unit="reqps",
        description="Every instrumented LLM call, streamed or not, failed or not.",
    )
    lay.stat(
        "Error ratio",
        f'sum(rate({DURATION}_count{{{CALL}, error_type!=""}}[{RI}]) or vector(0))'
        f" / sum(rate({DURATION}_count{{{CALL}}}[{RI}]))",
        unit="percentunit",
        description="Share of calls that raised (error.type set).",
    )
    lay.stat(
        "TTFT p95",
        f"histogram_quantile(0.95, sum by (le) (rate({TTFT}_bucket{{{CALL}}}[{RI}])))",
        unit="s",
        description="Time to first token: SDK call to the first streamed chunk carrying output.",
    )
    lay.stat(
        "Time per output token p95",
        f"histogram_quantile(0.95, sum by (le) (rate({TPOT}_bucket{{{CALL}}}[{RI}])))",
        unit="s",
        description="Decode time per output token after the first.",
    )
    lay.stat(
        "End-to-end p99",
        f'histogram_quantile(0.99, sum by (le) (rate({DURATION}_bucket{{{CALL}, error_type=""}}[{RI}])))',
        unit="s",
        description="SDK call to the last byte, successful calls.",
    )
    lay.stat(
        "Prompt-cache hit ratio",
        f"sum(rate({CACHE_READ}{{{CALL}}}[{RI}])) / sum(rate({INPUT}{{{CALL}}}[{RI}]))",
        unit="percentunit",
        description="Cached input tokens / input tokens.",
    )
    lay.timeseries(
        "Calls per second by model",
        [target(f"sum by ({by_model}) (rate({DURATION}_count{{{CALL}}}[{RI}]))", "{{gen_ai_request_model}}")],
        unit="reqps",
        description="Instrumented LLM calls per second, by provider and model.",
    )
    lay.timeseries(
        "Errors per second by model and error type",
        [
            target(
                f'sum by (gen_ai_request_model, error_type) (rate({DURATION}_count{{{CALL}, error_type!=""}}[{RI}]))',
                "{{gen_ai_request_model}} {{error_type}}",
            )
        ],
        unit="reqps",
        description="Failed calls by the exception's class name (error.type). Retries inside the SDK are one call.",
    )

    lay.row("Time to first token")
    lay.timeseries(
        "Time to first token p50 / p95 / p99",
        quantile_targets(TTFT, by_model, "{{gen_ai_request_model}}"),
        unit="s",
        description="SDK call to the first chunk carrying output (streamed calls). Exemplar dots open the trace.",
    )
    lay.heatmap(
        "Time to first token heatmap",
        f"sum by (le) (increase({TTFT}_bucket{{{CALL}}}[{RI}]))",
        description="Calls per TTFT bucket over time. Click an exemplar in a slow cell to open that call's trace.",
    )
    lay.timeseries(
        "Time to first chunk vs first token (p95)",
        [
            target(quantile(0.95, TTFC, by_model), "first chunk {{gen_ai_request_model}}", exemplar=True),
            target(quantile(0.95, TTFT, by_model), "first token {{gen_ai_request_model}}", exemplar=True),
        ],
        unit="s",
        description="The semantic conventions' time to first chunk counts role-only chunks; time to first token "
        "waits for generated output. A gap between them is a provider sending empty chunks first.",
    )
    lay.timeseries(
        "TTFT p95 as the alert sees it",
        [
            target(
                'llm:ttft_seconds:p95_5m{gen_ai_provider_name=~"$provider", gen_ai_request_model=~"$model", '
                'firsttoken_traffic_class=~"$traffic_class"}',
                "{{gen_ai_request_model}} {{firsttoken_traffic_class}}",
            )
        ],
        unit="s",
        description="The recording rule llm:ttft_seconds:p95_5m (5 minute window) that LLMTimeToFirstTokenP95High "
        "compares with prometheus/rules/targets.yml.",
    )

    lay.row("Decode and end-to-end")
    lay.timeseries(
        "Time per output token p50 / p95 / p99",
        quantile_targets(TPOT, by_model, "{{gen_ai_request_model}}"),
        unit="s",
        description="(last token - first token) / (output tokens - 1), streamed calls with two or more tokens.",
    )
    lay.timeseries(
        "End-to-end p50 / p95 / p99",
        quantile_targets(DURATION, by_model, "{{gen_ai_request_model}}", f'{CALL}, error_type=""'),
        unit="s",
        description="SDK call to the last byte or the end of the stream, successful calls.",
    )
    lay.heatmap(
        "End-to-end heatmap",
        f"sum by (le) (increase({DURATION}_bucket{{{CALL}}}[{RI}]))",
        description="Calls per end-to-end bucket, failed calls included. Exemplars open the trace.",
    )
    lay.alert_list(
        "Firing and pending LLM alerts",
        description="Alerts from prometheus/rules/alerts.yml (names start with LLM).",
    )

    lay.row("SLOs by traffic class")
    lay.timeseries(
        "Share of calls with TTFT under $ttft_target s",
        [
            target(
                f'sum by (firsttoken_traffic_class) (rate({TTFT}_bucket{{{CALL}, le="$ttft_target"}}[{RI}]))'
                f" / sum by (firsttoken_traffic_class) (rate({TTFT}_count{{{CALL}}}[{RI}]))",
                "{{firsttoken_traffic_class}}",
            )
        ],
        unit="percentunit",
        max_value=1,
        w=8,
        description="Streamed calls whose time to first token met the target chosen above, by traffic class "
        "(empty class: calls outside any traffic class).",
    )
    lay.timeseries(
        "Share of calls with end-to-end under $e2e_target s",
        [
            target(
                f'sum by (firsttoken_traffic_class) (rate({DURATION}_bucket{{{CALL}, le="$e2e_target"}}[{RI}]))'
                f" / sum by (firsttoken_traffic_class) (rate({DURATION}_count{{{CALL}}}[{RI}]))",
                "{{firsttoken_traffic_class}}",
            )
        ],
        unit="percentunit",
        max_value=1,
        w=8,
        description="Calls (failed ones count as misses only if slow) finishing under the chosen end-to-end target.",
    )
    lay.timeseries(
        "Time to first token p95 by traffic class",
        [
            target(
                quantile(0.95, TTFT, "firsttoken_traffic_class"),
                "{{firsttoken_traffic_class}}",
                exemplar=True,
            )
        ],
        unit="s",
        w=8,
        description="Interactive traffic is held to a tighter target than batch (prometheus/rules/targets.yml).",
    )

    lay.row("Application end-to-end")
    lay.timeseries(
        "User action p50 / p95 / p99",
        quantile_targets(ACTION, "firsttoken_action_name", "{{firsttoken_action_name}}", CLASS),
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
    variables = [
        *CALL_VARIABLES,
        custom_variable(
            "ttft_target", "TTFT target (s)", TTFT_TARGETS, "1", "A bucket bound of the time-to-first-token histogram"
        ),
        custom_variable(
            "e2e_target", "End-to-end target (s)", E2E_TARGETS, "10.24", "A bucket bound of the duration histogram"
        ),
    ]
    return dashboard(
        "firsttoken-latency",
        "LLM latency overview",
        "Time to first token, time per output token and end-to-end latency of every instrumented LLM call, with "
        "exemplars linking to the traces in Tempo.",
        lay,
        variables,
    )


# -- 2. Where the time goes --------------------------------------------------------------------


def where_the_time_goes() -> dict[str, Any]:
    lay = Layout()
    streamed = f'{CALL}, gen_ai_request_stream="true", error_type=""'
    lay.timeseries(
        "Streamed call: waiting vs generating (mean)",
        [
            target(mean(TTFT, "gen_ai_request_model"), "to first token {{gen_ai_request_model}}"),
            target(
                f"{mean(DURATION, 'gen_ai_request_model', streamed)} - {mean(TTFT, 'gen_ai_request_model')}",
                "first token to end {{gen_ai_request_model}}",
            ),
        ],
        unit="s",
        stack=True,
        description="Mean seconds per streamed call spent before the first token (connection, upload, queue, "
        "prefill) and after it (decode, trailing usage chunk).",
    )
    lay.timeseries(
        "Decode speed p50 (output tokens per second)",
        [
            target(
                f"1 / {quantile(0.5, TPOT, 'gen_ai_provider_name, gen_ai_request_model')}",
                "{{gen_ai_request_model}}",
            )
        ],
        unit="none",
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
        description="A new client has a new connection pool: every call pays DNS, TCP and TLS again. Near 100 means "
        "a client per call; create one client and reuse it.",
    )

    lay.row("Phases")
    lay.timeseries(
        "Where the time goes: mean seconds per call by phase",
        [
            target(
                f"sum by (firsttoken_phase) (rate({WIRE_PHASE}_sum{{{CALL}}}[{RI}]))"
                f" / scalar(sum(rate({DURATION}_count{{{CALL}}}[{RI}])))",
                "{{firsttoken_phase}}",
            )
        ],
        unit="s",
        stack=True,
        description="The phases tile each call (prepare, pool wait, DNS, TCP connect, TLS handshake, upload, "
        "server wait, download or first token and decode, retry waits, finish); stacked, they add up to the mean "
        "end-to-end. Setup phases only occur on new connections, so their mean is their cost spread over all calls.",
    )
    lay.timeseries(
        "Phase p95",
        [target(quantile(0.95, WIRE_PHASE, "firsttoken_phase"), "{{firsttoken_phase}}", exemplar=True)],
        unit="s",
        description="The slow tail of each phase, over the calls that had it; exemplars open such a call.",
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
        w=8,
        description="Requests sent on a pooled connection / all requests. Low: connections are not kept alive "
        "(a client per call, a proxy closing them, HTTP/1.1 with too small a pool).",
    )
    lay.timeseries(
        "Bytes on the wire per call (mean)",
        [
            target(mean(REQUEST_BYTES, "gen_ai_request_model"), "sent {{gen_ai_request_model}}"),
            target(mean(RESPONSE_BYTES, "gen_ai_request_model"), "received {{gen_ai_request_model}}"),
        ],
        unit="bytes",
        w=8,
        description="Request and response bodies as they crossed the wire (compressed size when compressed).",
    )
    lay.timeseries(
        "Retries and retry waits",
        [
            target(
                f"sum by (gen_ai_request_model) (rate({RETRIES}{{{CALL}}}[{RI}]))",
                "retries/s {{gen_ai_request_model}}",
            ),
            target(
                f"sum by (gen_ai_request_model) "
                f'(rate({WIRE_PHASE}_sum{{{CALL}, firsttoken_phase="retry_wait"}}[{RI}]))',
                "seconds waiting/s {{gen_ai_request_model}}",
            ),
        ],
        unit="none",
        w=8,
        description="Requests the SDK sent again (429s, 5xx, dropped connections) and the seconds per second spent "
        "between attempts: rate-limit latency that is not model latency.",
    )
    lay.timeseries(
        "Server-reported queue vs processing (mean)",
        [
            target(
                mean(SERVER_TIMING, "gen_ai_provider_name, gen_ai_request_model, firsttoken_server_timing_phase"),
                "{{gen_ai_request_model}} {{firsttoken_server_timing_phase}}",
            )
        ],
        unit="s",
        w=24,
        description="Where the provider reports it (OpenAI processing time, Groq and Cerebras queue/prompt/completion "
        "times): the server wait split into queueing and processing.",
    )
    return dashboard(
        "firsttoken-wire",
        "LLM: where the time goes",
        "The phases of an LLM call before and after the first token: connection setup, upload, server wait, decode.",
        lay,
        list(CALL_VARIABLES),
    )


# -- 3. Tokens and cache -----------------------------------------------------------------------


def tokens_and_cache() -> dict[str, Any]:
    lay = Layout()
    lay.stat(
        "Input tokens per second",
        f"sum(rate({INPUT}{{{CALL}}}[{RI}]))",
        unit="none",
        w=6,
        description="Cached tokens included.",
    )
    lay.stat(
        "Output tokens per second",
        f"sum(rate({OUTPUT}{{{CALL}}}[{RI}]))",
        unit="none",
        w=6,
        description="Reasoning tokens included.",
    )
    lay.stat(
        "Prompt-cache hit ratio",
        f"sum(rate({CACHE_READ}{{{CALL}}}[{RI}])) / sum(rate({INPUT}{{{CALL}}}[{RI}]))",
        unit="percentunit",
        w=6,
        description="Cached input tokens / input tokens.",
    )
    lay.stat(
        "Calls stopped by max_tokens",
        f"sum(rate({FINISH}{{{CALL}, {CUT_OFF}}}[{RI}]) or vector(0)) / sum(rate({FINISH}{{{CALL}}}[{RI}]))",
        unit="percentunit",
        w=6,
        description="Finish reason length (OpenAI) or max_tokens (Anthropic): the answer was cut off.",
    )
    lay.timeseries(
        "Input tokens per second by model",
        [
            target(f"sum by (gen_ai_request_model) (rate({INPUT}{{{CALL}}}[{RI}]))", "input {{gen_ai_request_model}}"),
            target(
                f"sum by (gen_ai_request_model) (rate({CACHE_READ}{{{CALL}}}[{RI}]))",
                "cache read {{gen_ai_request_model}}",
            ),
            target(
                f"sum by (gen_ai_request_model) (rate({CACHE_CREATION}{{{CALL}}}[{RI}]))",
                "cache write {{gen_ai_request_model}}",
            ),
        ],
        unit="none",
        description="Input tokens (cached included), of which read from and written to the provider's prompt cache.",
    )
    lay.timeseries(
        "Output tokens per second by model",
        [
            target(
                f"sum by (gen_ai_request_model) (rate({OUTPUT}{{{CALL}}}[{RI}]))", "output {{gen_ai_request_model}}"
            ),
            target(
                f"sum by (gen_ai_request_model) (rate({REASONING}{{{CALL}}}[{RI}]))",
                "reasoning {{gen_ai_request_model}}",
            ),
        ],
        unit="none",
        description="Output tokens (reasoning included) and the reasoning part alone.",
    )

    lay.row("Prompt cache")
    lay.timeseries(
        "Prompt-cache hit ratio by model",
        [
            target(
                f"sum by (gen_ai_provider_name, gen_ai_request_model) (rate({CACHE_READ}{{{CALL}}}[{RI}]))"
                f" / sum by (gen_ai_provider_name, gen_ai_request_model) (rate({INPUT}{{{CALL}}}[{RI}]))",
                "{{gen_ai_request_model}}",
            ),
            target(
                'llm:cache_hit_ratio:ratio_rate15m{gen_ai_provider_name=~"$provider", gen_ai_request_model=~"$model"}',
                "15m, as the alert sees it: {{gen_ai_request_model}}",
            ),
        ],
        unit="percentunit",
        max_value=1,
        description="Cached input tokens / input tokens. LLMPromptCacheHitRatioDrop fires when the 15 minute ratio "
        "falls under half of what it was an hour before.",
    )
    lay.timeseries(
        "Prompt-cache hit ratio by prompt prefix (top 10 by input)",
        [
            target(
                f"(sum by ({PREFIX_BY}) (rate({PREFIX_CACHE_READ}{{{CALL}}}[{RI}]))"
                f" / sum by ({PREFIX_BY}) (rate({PREFIX_INPUT}{{{CALL}}}[{RI}])))"
                f" and on ({PREFIX_BY}) topk(10, sum by ({PREFIX_BY}) (rate({PREFIX_INPUT}{{{CALL}}}[{RI}])))",
                "{{gen_ai_request_model}} {{firsttoken_prompt_prefix_hash}}",
            )
        ],
        unit="percentunit",
        max_value=1,
        description="firsttoken.prompt.prefix_hash is a short hash of the stable prompt prefix (system instructions, "
        "tools). A new hash with a low hit ratio is a prompt change that broke the cache.",
    )
    lay.timeseries(
        "Input tokens per call p50 / p95",
        [
            target(
                f"histogram_quantile({q}, sum by (le, gen_ai_request_model) "
                f'(rate({TOKEN_USAGE}_bucket{{{CALL}, gen_ai_token_type="input"}}[{RI}])))',
                f"p{round(q * 100)} {{{{gen_ai_request_model}}}}",
            )
            for q in (0.5, 0.95)
        ],
        unit="none",
        description="gen_ai.client.token.usage, input. Token buckets grow by 4x, so percentiles are coarse.",
    )
    lay.timeseries(
        "Output tokens per call p50 / p95",
        [
            target(
                f"histogram_quantile({q}, sum by (le, gen_ai_request_model) "
                f'(rate({TOKEN_USAGE}_bucket{{{CALL}, gen_ai_token_type="output"}}[{RI}])))',
                f"p{round(q * 100)} {{{{gen_ai_request_model}}}}",
            )
            for q in (0.5, 0.95)
        ],
        unit="none",
        description="gen_ai.client.token.usage, output.",
    )

    lay.row("Context growth and stops")
    lay.timeseries(
        "Context growth: mean input tokens by conversation turn",
        [target(mean(CONV_INPUT, "firsttoken_conversation_turns"), "turns {{firsttoken_conversation_turns}}")],
        unit="none",
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
                f"sum by (gen_ai_request_model, gen_ai_response_finish_reason) (rate({FINISH}{{{CALL}}}[{RI}]))",
                "{{gen_ai_request_model}} {{gen_ai_response_finish_reason}}",
            )
        ],
        unit="reqps",
        description="Why generations ended: stop, length / max_tokens, tool_calls, content_filter...",
    )
    lay.timeseries(
        "Share of calls stopped by max_tokens",
        [
            target(
                f"sum by (gen_ai_request_model) (rate({FINISH}{{{CALL}, {CUT_OFF}}}[{RI}]))"
                f" / sum by (gen_ai_request_model) (rate({FINISH}{{{CALL}}}[{RI}]))",
                "{{gen_ai_request_model}}",
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


# -- output ------------------------------------------------------------------------------------

BUILDERS = {
    "llm-latency-overview.json": latency_overview,
    "where-the-time-goes.json": where_the_time_goes,
    "tokens-and-cache.json": tokens_and_cache,
}


def render() -> dict[str, str]:
    """File name -> JSON text, exactly as committed."""
    return {name: json.dumps(build(), indent=2) + "\n" for name, build in BUILDERS.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a committed dashboard is out of date")
    args = parser.parse_args(argv)
    stale = []
    for name, text in render().items():
        path = OUT_DIR / name
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print(f"out of date (run python {Path(__file__).relative_to(ROOT)}): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
