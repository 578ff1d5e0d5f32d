"""Shared helpers of the stack tests: binaries, a throwaway Prometheus, the queries we ship."""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.servers import free_port, wait_ready

ROOT = Path(__file__).resolve().parents[2]
RULES_DIR = ROOT / "prometheus" / "rules"
RULE_FILES = sorted(RULES_DIR.glob("*.yml"))
DASHBOARD_DIR = ROOT / "grafana" / "dashboards"
DATASOURCES = ROOT / "grafana" / "provisioning" / "datasources" / "datasources.yaml"

# Dashboard panels on metrics the instrumentation does not emit yet, by the issue that adds them.
# The only list of them: the live test requires these to return nothing (and fails once they are
# emitted, so the entry gets removed), every other query must return data. Their queries are still
# parse-checked with promtool. The name is a proposal.
PENDING_METRICS: dict[str, str] = {}

# What the dashboard variables are replaced with when a query is run outside Grafana.
VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "1h",
    "$provider": ".*",
    "$model": ".*",
    "$traffic_class": ".*",
}

_METRIC_REF = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*[{\[]")
_RECORDED_REF = re.compile(r"\bllm:[A-Za-z0-9_:]+")
_SUFFIXES = ("_bucket", "_sum", "_count")


def need(binary: str) -> str:
    """The path of a binary; skip without it, unless in CI (CI=true), where it must be there."""
    path = shutil.which(binary)
    if path:
        return path
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{binary} is not installed; scripts/test.sh installs Debian's prometheus package in CI")
    pytest.skip(
        f"{binary} is not installed (apt-get install prometheus prometheus-alertmanager); with CI=true this fails"
    )


def run(args: list[str], *, cwd: Path | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)


# `${env:NAME:-default}` in the Collector configs: the default is compose's value.
_ENV_DEFAULT = re.compile(r"\$\{env:[A-Z0-9_]+:-([^}]*)\}")


def load_yaml(path: Path) -> Any:
    """A YAML file as compose runs it: the Collector's ``${env:NAME:-default}`` read as its default."""
    return yaml.safe_load(_ENV_DEFAULT.sub(r"\1", path.read_text()))


def generator(name: str) -> Any:
    """A generator of firsttoken.stack (dashboards, sampling, slo): what `firsttoken stack generate` runs."""
    return importlib.import_module(f"firsttoken.stack.{name}")


def slo_config() -> Any:
    """prometheus/slos.yml, loaded and checked by the generator."""
    return generator("slo").load(ROOT / "prometheus" / "slos.yml")


def targets() -> dict[str, dict[str, float]]:
    """The targets of prometheus/slos.yml as {record: {traffic class ("" = default): seconds}}."""
    result: dict[str, dict[str, float]] = generator("sampling").by_record(slo_config().targets)
    return result


# -- the queries we ship -----------------------------------------------------------------------


def dashboards() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in sorted(DASHBOARD_DIR.glob("*.json"))}


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", ())


def dashboard_queries() -> list[tuple[str, str]]:
    """(where, PromQL as written in the dashboard) for every Prometheus target."""
    out = []
    for name, dash in dashboards().items():
        for panel in panels(dash):
            for t in panel.get("targets", ()):
                if t.get("datasource", panel.get("datasource", {})).get("type") == "prometheus":
                    out.append((f"{name} / {panel['title']} / {t['refId']}", t["expr"]))
    return out


def variable_queries() -> list[tuple[str, str]]:
    """(where, label_values(...) query) of every query variable."""
    out = []
    for name, dash in dashboards().items():
        for var in dash["templating"]["list"]:
            if var["type"] == "query":
                out.append((f"{name} / ${var['name']}", var["definition"]))
    return out


def rule_exprs() -> list[tuple[str, str]]:
    out = []
    for path in RULE_FILES:
        for group in load_yaml(path)["groups"]:
            for rule in group["rules"]:
                out.append((f"{path.name} / {rule.get('record') or rule.get('alert')}", rule["expr"]))
    return out


def recorded_names() -> set[str]:
    return {
        rule["record"]
        for path in RULE_FILES
        for group in load_yaml(path)["groups"]
        for rule in group["rules"]
        if "record" in rule
    }


def substitute(expr: str) -> str:
    for var in sorted(VARIABLES, key=len, reverse=True):
        expr = expr.replace(var, VARIABLES[var])
    return expr


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects (``name{`` / ``name[`` and recorded ``llm:`` names)."""
    names = {m for m in _METRIC_REF.findall(expr) if m not in ("by", "on", "without", "ignoring", "group_left")}
    names |= set(_RECORDED_REF.findall(expr))
    # Function calls are followed by "(" and never match; "le" and friends live inside braces.
    return names


def family(series: str) -> str:
    for suffix in _SUFFIXES:
        if series.endswith(suffix):
            return series[: -len(suffix)]
    return series


def pending_reason(expr: str) -> str | None:
    for name in metric_names(expr):
        reason = PENDING_METRICS.get(family(name))
        if reason:
            return reason
    return None


def documented_series() -> set[str]:
    """Every Prometheus series name in the metrics table of docs/metrics.md."""
    text = (ROOT / "docs" / "metrics.md").read_text()
    names: set[str] = set()
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0].startswith("`") and cells[1] in ("histogram", "counter", "gauge"):
            names |= set(re.findall(r"`([a-z_:][a-z0-9_:]*)`", cells[3]))
    return names


# -- a throwaway Prometheus --------------------------------------------------------------------


class Prometheus:
    """A real Prometheus on 127.0.0.1, in a temporary directory; always killed on exit."""

    def __init__(self, url: str, process: subprocess.Popen[bytes], log: Path) -> None:
        self.url = url
        self.process = process
        self.log = log

    def get(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=30) as resp:
            body = json.loads(resp.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.get("/api/v1/query", query=expr)
        assert data["resultType"] in ("vector", "scalar"), data
        return data["result"] if data["resultType"] == "vector" else [{"metric": {}, "value": data["result"]}]

    def logs(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


@contextmanager
def prometheus(config: dict[str, Any], *, features: str = "exemplar-storage") -> Iterator[Prometheus]:
    binary = need("prometheus")
    with tempfile.TemporaryDirectory(prefix="firsttoken-prom-") as tmp:
        cfg = Path(tmp) / "prometheus.yml"
        cfg.write_text(yaml.safe_dump(config))
        log = Path(tmp) / "prometheus.log"
        port = free_port()
        with log.open("wb") as out:
            process = subprocess.Popen(
                [
                    binary,
                    f"--config.file={cfg}",
                    f"--storage.tsdb.path={tmp}/data",
                    f"--web.listen-address=127.0.0.1:{port}",
                    f"--enable-feature={features}",
                    "--log.level=warn",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        server = Prometheus(f"http://127.0.0.1:{port}", process, log)
        try:
            wait_ready(process, f"{server.url}/-/ready", name="prometheus", timeout_s=30, poll_s=0.1, logs=server.logs)
            yield server
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


# -- the vector selectors of a PromQL expression -----------------------------------------------

# Keywords that are neither metric names nor functions; the label-list ones are followed by "(".
_LABEL_LIST_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
_AGGREGATIONS = {"sum", "avg", "min", "max", "count", "stddev", "stdvar", "topk", "bottomk", "quantile", "group"}
_KEYWORDS = (
    _LABEL_LIST_KEYWORDS
    | _AGGREGATIONS
    | {
        "count_values",
        "limitk",
        "limit_ratio",
        "bool",
        "and",
        "or",
        "unless",
        "offset",
        "atan2",
        "inf",
        "nan",
        "Inf",
        "NaN",
    }
)
_PROMQL_TOKEN = re.compile(
    r"""
    (?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)
    |(?P<range>\[[^\]]*\])
    |(?P<number>[0-9][0-9A-Za-z_.]*)
    |(?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
    |(?P<punct>[(){},@])
    |(?P<op>=~|!~|!=|==|>=|<=|[-+*/%^<>=])
    |(?P<space>\s+|\#[^\n]*)
    """,
    re.VERBOSE,
)


def _promql_tokens(expr: str) -> list[tuple[str, str]]:
    tokens, pos = [], 0
    while pos < len(expr):
        m = _PROMQL_TOKEN.match(expr, pos)
        if not m:
            raise ValueError(f"cannot read PromQL at {expr[pos : pos + 30]!r} in {expr!r}")
        pos = m.end()
        if m.lastgroup != "space":
            assert m.lastgroup is not None
            tokens.append((m.lastgroup, m.group()))
    return tokens


def _unquote(text: str) -> str:
    if text.startswith("`"):
        return text[1:-1]
    return re.sub(r"\\(.)", r"\1", text[1:-1])


def selectors(expr: str) -> list[tuple[str, frozenset[tuple[str, str, str]]]]:
    """Every vector selector of a PromQL expression: (metric name, {(label, op, value)}).

    A small reader, not a parser: enough for the queries this project ships (function calls,
    aggregations with ``by``/``without``, ``on``/``group_left`` label lists, ranges, subqueries,
    ``offset`` and ``@``). tests/stack/test_stack_scope.py checks it against the real Prometheus
    parser on every shipped expression. A name given as ``{__name__="..."}`` counts as the name.
    """
    tokens = _promql_tokens(expr)
    out: list[tuple[str, frozenset[tuple[str, str, str]]]] = []
    i = 0

    def matchers(start: int) -> tuple[int, set[tuple[str, str, str]]]:
        found: set[tuple[str, str, str]] = set()
        j = start + 1  # after "{"
        while tokens[j][1] != "}":
            if tokens[j][1] == ",":
                j += 1
                continue
            label, op, value = tokens[j], tokens[j + 1], tokens[j + 2]
            if label[0] not in ("ident", "string") or op[0] != "op" or value[0] != "string":
                raise ValueError(f"cannot read the matchers of {expr!r}")
            name = _unquote(label[1]) if label[0] == "string" else label[1]
            found.add((name, op[1], _unquote(value[1])))
            j += 3
        return j + 1, found

    while i < len(tokens):
        kind, text = tokens[i]
        after = tokens[i + 1][1] if i + 1 < len(tokens) else ""
        if kind == "ident" and text in _LABEL_LIST_KEYWORDS and after == "(":
            i = next(j for j in range(i, len(tokens)) if tokens[j][1] == ")") + 1
        elif kind == "ident" and (text in _KEYWORDS or after == "("):
            i += 1
        elif kind == "ident":
            found: set[tuple[str, str, str]] = set()
            i += 1
            if after == "{":
                i, found = matchers(i)
            out.append((text, frozenset(found)))
        elif text == "{":
            i, found = matchers(i)
            names = [v for label, op, v in found if label == "__name__" and op == "="]
            out.append((names[0] if names else "", frozenset(m for m in found if m[0] != "__name__")))
        else:
            i += 1
    return out


def shipped_exprs() -> list[tuple[str, str]]:
    """(where, PromQL) of every query the project ships: dashboard targets (variables substituted),
    the selectors of the dashboards' query variables, Grafana's trace-to-metrics queries (with and
    without span tags), every rule of prometheus/rules/ and of the threshold rules kept for
    comparison, and the queries alert annotations make."""
    out = [(where, substitute(expr)) for where, expr in dashboard_queries()]
    tempo = next(d for d in load_yaml(DATASOURCES)["datasources"] if d["type"] == "tempo")
    for query in tempo["jsonData"]["tracesToMetrics"]["queries"]:
        for tags in ('gen_ai_request_model="m", gen_ai_provider_name="p"', ""):
            out.append((f"datasources.yaml / {query['name']}", query["query"].replace("$${__tags}", tags)))
    for where, definition in variable_queries():
        selector = definition.removeprefix("label_values(").removesuffix(")").rsplit(", ", 1)[0]
        out.append((where, substitute(selector)))
    for path in [*RULE_FILES, Path(__file__).with_name("threshold_alerts.yml")]:
        for group in load_yaml(path)["groups"]:
            for rule in group["rules"]:
                where = f"{path.name} / {rule.get('record') or rule.get('alert')}"
                out.append((where, rule["expr"]))
                for key, text in (rule.get("annotations") or {}).items():
                    for query in re.findall(r"`([^`]*)`", str(text)):
                        out.append((f"{where} / annotation {key}", query.replace("%s", "x")))
    return out


# -- the stack's binaries and one launcher for them -----------------------------------------------

BUILD = ROOT / "scripts" / "stack" / "build.sh"


def _path(component: str) -> str:
    return subprocess.run([str(BUILD), component, "--path"], capture_output=True, text=True, check=True).stdout.strip()


def built(component: str) -> str | None:
    """The path of a component scripts/stack/build.sh built, or None."""
    path = _path(component)
    return path if os.access(path, os.X_OK) else None


def binary(component: str) -> str:
    """A built component; without it skip with one line, or fail with FIRSTTOKEN_STACK=required."""
    path = _path(component)
    if os.access(path, os.X_OK):
        return path
    line = f"{component} is not built ({path} missing): build it with scripts/stack/build.sh {component}"
    if os.environ.get("FIRSTTOKEN_STACK") == "required":
        log = Path(path).parents[2] / f"{component}-build.log"
        why = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else ["no build log"]
        pytest.fail(f"{line}; the build said: {why[0] if why else '?'}", pytrace=False)
    pytest.skip(line + " (with FIRSTTOKEN_STACK=required this fails)")


class Process:
    """A stack process on loopback, its output in a log file; with `ready`, started only once that URL
    answers 200 (RuntimeError with its log if it exits first or takes over `timeout_s`)."""

    def __init__(
        self,
        name: str,
        args: list[str],
        log: Path,
        env: dict[str, str] | None = None,
        *,
        ready: str | None = None,
        timeout_s: float = 60,
    ) -> None:
        self.name = name
        self.log = log
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                args, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, cwd=ROOT
            )
        if ready is not None:
            try:
                self.wait_ready(ready, timeout_s=timeout_s)
            except BaseException:
                self.stop()
                raise

    def wait_ready(self, url: str, *, timeout_s: float = 60) -> None:
        wait_ready(self.process, url, name=self.name, timeout_s=timeout_s, poll_s=0.2, logs=self.logs)

    def logs(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def collector_env(ports: Mapping[str, int]) -> dict[str, str]:
    """What the shipped Collector configs read for their own listeners, all on loopback: the OTLP
    receivers (`grpc`, `http`), the health check (`health`) and its own telemetry (`telemetry`).
    The exporters' endpoints (FIRSTTOKEN_PROMETHEUS_OTLP_URL, ...) are each test's own."""
    return {
        "FIRSTTOKEN_OTELCOL_GRPC_ENDPOINT": f"127.0.0.1:{ports['grpc']}",
        "FIRSTTOKEN_OTELCOL_HTTP_ENDPOINT": f"127.0.0.1:{ports['http']}",
        "FIRSTTOKEN_OTELCOL_HEALTH_ENDPOINT": f"127.0.0.1:{ports['health']}",
        "FIRSTTOKEN_OTELCOL_TELEMETRY_HOST": "127.0.0.1",
        "FIRSTTOKEN_OTELCOL_TELEMETRY_PORT": str(ports["telemetry"]),
    }


def demo_command(interval_s: float) -> list[str]:
    """The installed `firsttoken demo`, run until SIGINT, as the stack tests feed it: 4 at once, its
    actions spread over `interval_s` seconds, no levers, no HTML report."""
    return [
        str(Path(sys.executable).parent / "firsttoken"),
        "demo",
        "--continuous",
        "--no-levers",
        "--concurrency=4",
        f"--interval={interval_s:.0f}",
        "--html=",
    ]


# -- Jaeger's query API, called the way Grafana's Jaeger datasource calls it -------------------------


class Jaeger:
    """Jaeger's classic HTTP query API (the one Grafana's Jaeger datasource uses, pkg/tsdb/jaeger/
    client.go): `GET /api/traces/{id}` for a trace, `GET /api/traces?service=&operation=&tags=
    &minDuration=&maxDuration=&limit=` for a search, with the search's tags given as logfmt and sent
    as a JSON map, and empty parameters left out."""

    def __init__(self, url: str) -> None:
        self.url = url

    def _get(self, path: str, params: dict[str, str] | None = None) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        try:
            with urllib.request.urlopen(f"{self.url}{path}{query}", timeout=30) as resp:
                return json.loads(resp.read())["data"]
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise AssertionError(f"GET {path}{query}: {e.code} {e.read()[:500]!r}") from e

    def trace(self, trace_id: str) -> dict[str, Any] | None:
        """The trace (Jaeger JSON), or None when Jaeger does not have it."""
        data = self._get("/api/traces/" + urllib.parse.quote(trace_id, safe=""))
        return data[0] if data else None

    def search(self, target: dict[str, Any]) -> list[dict[str, Any]]:
        """The traces a Grafana Jaeger search target finds (service, operation, tags in logfmt,
        minDuration, maxDuration, limit)."""
        tags = dict(logfmt_pairs(target.get("tags", "")))
        params = {
            "service": target.get("service", ""),
            "operation": target.get("operation", ""),
            "tags": json.dumps(tags) if tags else "",
            "minDuration": target.get("minDuration", ""),
            "maxDuration": target.get("maxDuration", ""),
        }
        params = {k: v for k, v in params.items() if v}
        if target.get("limit"):
            params["limit"] = str(target["limit"])
        result: list[dict[str, Any]] = self._get("/api/traces", params) or []
        return result

    def services(self) -> list[str]:
        result: list[str] = self._get("/api/services") or []
        return result


_LOGFMT = re.compile(r'\s*([^\s=]+)=("(?:\\.|[^"\\])*"|\S*)')


def logfmt_pairs(text: str) -> Iterator[tuple[str, str]]:
    """key=value pairs of a logfmt line (a double-quoted value may hold spaces)."""
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _LOGFMT.match(text, pos)
        if not m:
            raise ValueError(f"not logfmt: {text!r}")
        value = m.group(2)
        yield m.group(1), json.loads(value) if value.startswith('"') else value
        pos = m.end()


def jaeger_spans(trace: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A Jaeger JSON trace's spans by span id, each with `attrs` (its tags as a dict) and `service`."""
    out = {}
    for span in trace["spans"]:
        attrs = {t["key"]: t["value"] for t in span.get("tags", [])}
        service = trace["processes"][span["processID"]]["serviceName"]
        out[span["spanID"]] = {**span, "attrs": attrs, "service": service}
    return out


def exemplar_link(trace_id: str) -> dict[str, Any]:
    """The Jaeger query that the provisioned exemplar link "Open trace in Jaeger" opens in Explore for
    this trace id: Grafana first turns the provisioning file's `$$` into `$` and then puts the
    exemplar's trace id in for ``${__value.raw}``; the link's panes hold one Jaeger query."""
    prometheus = next(d for d in load_yaml(DATASOURCES)["datasources"] if d["type"] == "prometheus")
    (link,) = [d for d in prometheus["jsonData"]["exemplarTraceIdDestinations"] if "Jaeger" in d["urlDisplayLabel"]]
    url = link["url"].replace("$$", "$").replace("${__value.raw}", trace_id)
    parsed = urllib.parse.urlparse(url)
    assert parsed.path == "/explore", url
    (panes,) = urllib.parse.parse_qs(parsed.query)["panes"]
    (pane,) = json.loads(panes).values()
    (query,) = pane["queries"]
    datasources = {d["uid"]: d for d in load_yaml(DATASOURCES)["datasources"]}
    assert datasources[query["datasource"]["uid"]]["type"] == query["datasource"]["type"] == "jaeger"
    assert pane["datasource"] == query["datasource"]["uid"]
    result: dict[str, Any] = query
    return result
