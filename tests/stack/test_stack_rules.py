"""Alert and recording rules, Prometheus and Alertmanager configs, checked by the real tools."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml
from stack_tools import ROOT, RULE_FILES, RULES_DIR, load_yaml, need, run, targets

from firsttoken import semconv as sc

ALERT_TESTS = ROOT / "prometheus" / "tests" / "alerts_test.yml"
ALERTMANAGER = ROOT / "prometheus" / "alertmanager" / "alertmanager.yml"


def alerts() -> list[dict]:
    return [r for g in load_yaml(RULES_DIR / "alerts.yml")["groups"] for r in g["rules"]]


def test_promtool_check_rules() -> None:
    promtool = need("promtool")
    result = run([promtool, "check", "rules", *map(str, RULE_FILES)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(RULE_FILES)


def test_promtool_unit_tests_pass() -> None:
    promtool = need("promtool")
    result = run([promtool, "test", "rules", str(ALERT_TESTS)], cwd=ALERT_TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_has_for_severity_and_a_firing_and_a_quiet_unit_test() -> None:
    tests = load_yaml(ALERT_TESTS)["tests"]
    for rule in alerts():
        name = rule["alert"]
        assert rule.get("for"), f"{name} has no `for:` and would flap"
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        cases = [c for t in tests for c in t.get("alert_rule_test", ()) if c["alertname"] == name]
        assert any(c["exp_alerts"] for c in cases), f"no unit test shows {name} firing"
        assert any(not c["exp_alerts"] for c in cases), f"no unit test shows {name} quiet"


@pytest.mark.parametrize(
    ("what", "path", "old", "new"),
    [
        # A looser interactive target: the TTFT p95 regression no longer fires.
        (
            "target",
            "targets.yml",
            "expr: vector(1)\n        labels: { firsttoken_traffic_class: interactive }",
            "expr: vector(100)\n        labels: { firsttoken_traffic_class: interactive }",
        ),
        # No hold: the alerts fire while the tests expect them pending.
        ("for", "alerts.yml", "for: 5m", "for: 0m"),
        # No traffic guard: the 2-calls-a-minute model fires too.
        ("guard", "alerts.yml", "* 300 >= 20", "* 300 >= 0"),
        # A p99 guarded like a p95: one slow call among 30 fires the p99 alerts.
        ("p99 guard", "alerts.yml", "* 300 >= 100", "* 300 >= 20"),
        # No guard on the cache hit ratio: the one-call-a-minute model fires.
        ("cache guard", "alerts.yml", "* 900 >= 20", "* 900 >= 0"),
    ],
)
def test_unit_tests_catch_a_broken_rule(tmp_path: Path, what: str, path: str, old: str, new: str) -> None:
    """The promtool tests are not vacuous: each of these edits to the rules makes them fail."""
    promtool = need("promtool")
    shutil.copytree(ROOT / "prometheus", tmp_path / "prometheus")
    target = tmp_path / "prometheus" / "rules" / path
    text = target.read_text()
    assert old in text, f"mutation {what!r} no longer applies: {old!r} not in {path}"
    target.write_text(text.replace(old, new))
    tests = tmp_path / "prometheus" / "tests" / "alerts_test.yml"
    result = run([promtool, "test", "rules", str(tests)], cwd=tests.parent)
    assert result.returncode != 0, f"mutation {what!r} went unnoticed:\n{result.stdout}"


def test_prometheus_config_loads_in_promtool(tmp_path: Path) -> None:
    """prometheus.yml minus its Prometheus-3-only `otlp:` block passes Debian's promtool 2.42."""
    promtool = need("promtool")
    config = load_yaml(ROOT / "prometheus" / "prometheus.yml")
    otlp = config.pop("otlp")
    assert otlp["translation_strategy"] == "UnderscoreEscapingWithSuffixes"
    # Relative to the config file, as in compose (/etc/prometheus/rules) and the checkout.
    assert config["rule_files"] == ["rules/*.yml"]
    (tmp_path / "rules").symlink_to(RULES_DIR)
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    result = run([promtool, "check", "config", str(path)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(RULE_FILES)} rule files found" in result.stdout


def test_alertmanager_config_and_routes() -> None:
    amtool = need("amtool")
    result = run([amtool, "check-config", str(ALERTMANAGER)])
    assert result.returncode == 0, result.stdout + result.stderr
    for labels, receiver in (
        (["alertname=LLMErrorRatioHigh", "severity=critical"], "page"),
        (["alertname=LLMTimeToFirstTokenP95High", "severity=warning"], "default"),
    ):
        routed = run([amtool, "config", "routes", "test", f"--config.file={ALERTMANAGER}", *labels])
        assert routed.returncode == 0, routed.stdout + routed.stderr
        assert routed.stdout.split() == [receiver], (labels, routed.stdout)


def test_alert_severities_have_routes() -> None:
    """Every severity the rules use is routed on purpose (critical pages, the rest to default)."""
    route = load_yaml(ALERTMANAGER)["route"]
    paged = {m.split("=")[1].strip() for r in route["routes"] for m in r["matchers"] if m.startswith("severity")}
    severities = {r["labels"]["severity"] for r in alerts()}
    assert paged == {"critical"} and paged <= severities


def prometheus_name(otel_name: str, unit: str) -> str:
    """The UnderscoreEscapingWithSuffixes name of a histogram (docs/metrics.md)."""
    assert unit == sc.UNIT_SECONDS, unit
    return otel_name.replace(".", "_") + "_seconds"


def test_targets_are_bucket_bounds_of_the_histograms_they_are_compared_with(telemetry: Any, sim: Any) -> None:
    """Each target is a bound of the buckets firsttoken really records, and under the last one.

    The chain is read, not assumed: alert -> the recorded percentile it compares with its target
    -> the histogram that percentile is computed from -> the bucket bounds of that histogram in
    what firsttoken exported for a real streamed call.
    """
    client = openai.OpenAI(base_url=sim.openai_base_url, api_key="sk-test-key", max_retries=0)
    for _ in client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True):
        pass
    data = telemetry.reader.get_metrics_data()
    bounds: dict[str, tuple[float, ...]] = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                point = metric.data.data_points[0]
                if metric.unit == sc.UNIT_SECONDS and hasattr(point, "explicit_bounds"):
                    bounds[prometheus_name(metric.name, metric.unit)] = tuple(point.explicit_bounds)
    recorded = {r["record"]: r["expr"] for g in load_yaml(RULES_DIR / "recording.yml")["groups"] for r in g["rules"]}
    compared: dict[str, tuple[float, str]] = {}  # target record -> (quantile, histogram)
    for rule in alerts():
        for target in set(re.findall(r"llm:target:\w+", rule["expr"])):
            (percentile,) = set(re.findall(r"llm:\w+_seconds:p\d+_5m", rule["expr"]))
            match = re.search(r"histogram_quantile\(([\d.]+),.*\brate\((\w+)_bucket\b", recorded[percentile], re.S)
            assert match, recorded[percentile]
            compared[target] = (float(match.group(1)), match.group(2))
    table = targets()
    assert set(table) == set(compared), "every target is used by an alert, every alert's target is defined"
    for record, by_class in table.items():
        quantile, histogram = compared[record]
        assert record.endswith(f"_p{round(quantile * 100)}_seconds"), (record, quantile)
        buckets = bounds[histogram]
        for traffic_class, value in by_class.items():
            where = f"{record}{{{traffic_class or 'default'}}} = {value}"
            assert value in buckets, f"{where} is not a bucket bound of {histogram}: {buckets}"
            assert value < buckets[-1], f"{where} is the last bound of {histogram}: a percentile never exceeds it"
    assert bounds["firsttoken_client_time_to_first_token_seconds"] == sc.TTFT_BUCKETS
    assert bounds["gen_ai_client_operation_duration_seconds"] == sc.DURATION_BUCKETS


def test_docs_state_the_targets_of_targets_yml() -> None:
    """docs/stack.md's table of targets is the one in targets.yml."""
    text = (ROOT / "docs" / "stack.md").read_text()
    header = re.search(r"^\| target \(seconds\) \|(.*)\|$", text, re.M)
    assert header, "docs/stack.md has no table of targets"
    columns = [c.strip() for c in header.group(1).split("|")]
    rows = {
        m.group(1): [float(v) for v in m.group(2).split("|")]
        for m in re.finditer(r"^\| .*`(llm:target:\w+)` \|([\d.| ]+)\|$", text, re.M)
    }
    stated = {record: dict(zip(columns, values, strict=True)) for record, values in rows.items()}
    expected = {
        record: {(c or "default"): by_class.get(c, by_class[""]) for c in ["", *columns[1:]]}
        for record, by_class in targets().items()
    }
    assert stated == expected
    listed = {c for by_class in targets().values() for c in by_class if c}
    assert listed <= set(columns), f"docs/stack.md lacks a column for {listed - set(columns)}"


def test_unit_test_series_use_firsttoken_bucket_bounds() -> None:
    """The synthetic histograms of alerts_test.yml have only bounds firsttoken records (a subset)."""
    bounds = {
        "firsttoken_client_time_to_first_token_seconds_bucket": sc.TTFT_BUCKETS,
        "gen_ai_client_operation_duration_seconds_bucket": sc.DURATION_BUCKETS,
    }
    seen = 0
    for test in load_yaml(ALERT_TESTS)["tests"]:
        for series in test["input_series"]:
            match = re.fullmatch(r'(\w+)\{.*\ble="([^"]+)"\}', series["series"])
            if match and match.group(1) in bounds and match.group(2) != "+Inf":
                assert float(match.group(2)) in bounds[match.group(1)], series["series"]
                seen += 1
    assert seen > 20, "the series were not read"
