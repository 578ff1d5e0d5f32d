"""Shared helpers of the stack tests: binaries, a throwaway Prometheus, the queries we ship."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Iterator
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
    """A generator script of scripts/stack/ (dashboards, sampling), imported as a module."""
    path = ROOT / "scripts" / "stack" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"firsttoken_stack_{name}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def targets() -> dict[str, dict[str, float]]:
    """prometheus/rules/targets.yml as {record: {traffic class ("" = default): seconds}}."""
    result: dict[str, dict[str, float]] = generator("sampling").load_targets()
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
