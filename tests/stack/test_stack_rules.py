"""Alert and recording rules, Prometheus and Alertmanager configs, checked by the real tools."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml
from stack_tools import ROOT, RULE_FILES, RULES_DIR, generator, load_yaml, need, run, targets
from tests.servers import free_port, wait_ready

from firsttoken import semconv as sc

ALERT_TESTS = ROOT / "prometheus" / "tests" / "alerts_test.yml"
ALERTMANAGER = ROOT / "prometheus" / "alertmanager" / "alertmanager.yml"


def alerts(name: str = "alerts.yml") -> list[dict]:
    return [r for g in load_yaml(RULES_DIR / name)["groups"] for r in g["rules"]]


def all_alerts() -> list[dict]:
    """The hand-written alerts and the SLO burn-rate alerts generated from prometheus/slos.yml."""
    return alerts() + alerts("slo-alerts.yml")


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


def test_every_alert_has_a_hold_a_severity_and_a_firing_and_a_quiet_unit_test() -> None:
    """A hand-written alert holds (`for:`) so that one bad minute does not fire it; a burn-rate alert
    needs its short window too instead (and resolves with it). Severity: page or ticket."""
    tests = load_yaml(ALERT_TESTS)["tests"]
    for rule in all_alerts():
        name = rule["alert"]
        if rule in alerts():
            assert rule.get("for"), f"{name} has no `for:` and would flap"
        else:
            assert re.search(r"llm:slo_burn_rate:\w+\{.*\n.*llm:slo_burn_rate:\w+\{", rule["expr"]), name
        assert rule["labels"]["severity"] in ("page", "ticket"), name
        cases = [c for t in tests for c in t.get("alert_rule_test", ()) if c["alertname"] == name]
        assert any(c["exp_alerts"] for c in cases), f"no unit test shows {name} firing"
        assert any(not c["exp_alerts"] for c in cases), f"no unit test shows {name} quiet"


@pytest.mark.parametrize(
    ("what", "path", "old", "new"),
    [
        # A burn rate threshold ten times higher: the fast page misses the regression.
        ("burn", "slo-alerts.yml", "> 14.4", "> 144"),
        # No short window: the fast page keeps firing for 20 minutes after "slow" recovered.
        ("short window", "slo-alerts.yml", 'and llm:slo_burn_rate:5m{slo="ttft"} > 14.4\n', ""),
        # No minimum of bad calls: the low-traffic model pages on its two slow calls.
        ("min bad calls", "slo-alerts.yml", ">= 10", ">= 0"),
        # A looser interactive objective: nothing burns fast enough to page.
        (
            "objective",
            "slo-recording.yml",
            "+ 0.01\n        labels:\n          slo: ttft",
            "+ 0.5\n        labels:\n          slo: ttft",
        ),
        # No hold: the error ratio alert fires while the tests expect it pending.
        ("for", "alerts.yml", "for: 5m", "for: 0m"),
        # No traffic guard: the 2-calls-a-minute model fires too.
        ("guard", "alerts.yml", "* 300 >= 20", "* 300 >= 0"),
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
    target.write_text(text.replace(old, new, 1 if what == "objective" else -1))
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
        (["alertname=LLMErrorBudgetBurnFast", "severity=page", "slo=ttft"], "page"),
        (["alertname=LLMErrorBudgetBurnTicket", "severity=ticket", "slo=ttft"], "ticket"),
        (["alertname=LLMPromptCacheHitRatioDrop", "severity=ticket"], "ticket"),
        (["alertname=Unrouted"], "ticket"),
    ):
        routed = run([amtool, "config", "routes", "test", f"--config.file={ALERTMANAGER}", *labels])
        assert routed.returncode == 0, routed.stdout + routed.stderr
        assert routed.stdout.split() == [receiver], (labels, routed.stdout)


def test_alert_severities_have_routes() -> None:
    """Every severity the rules use is routed on purpose: page to `page`, ticket to `ticket`."""
    route = load_yaml(ALERTMANAGER)["route"]
    routed = {
        m.split("=")[1].strip(): r["receiver"]
        for r in route["routes"]
        for m in r["matchers"]
        if m.startswith("severity")
    }
    severities = {r["labels"]["severity"] for r in all_alerts()}
    assert routed == {"page": "page", "ticket": "ticket"} and severities == set(routed)


def test_a_page_inhibits_the_ticket_of_its_slo_in_the_real_alertmanager(tmp_path: Path) -> None:
    """The shipped alertmanager.yml in Debian's Alertmanager: a page of one SLO, model and class mutes
    that SLO's ticket for the same series, not another SLO's nor another model's."""
    binary = need("prometheus-alertmanager")  # Debian's name; scripts/test.sh installs it
    port, cluster = free_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    log = (tmp_path / "alertmanager.log").open("wb")
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={ALERTMANAGER}",
            f"--storage.path={tmp_path}",
            f"--web.listen-address=127.0.0.1:{port}",
            f"--cluster.listen-address=127.0.0.1:{cluster}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_ready(
            process,
            f"{url}/-/ready",
            name="alertmanager",
            timeout_s=30,
            poll_s=0.1,
            logs=lambda: (tmp_path / "alertmanager.log").read_text(errors="replace"),
        )
        series = {"gen_ai_provider_name": "openai", "gen_ai_request_model": "gpt-4o", "firsttoken_traffic_class": "x"}
        posted = [
            {"alertname": "LLMErrorBudgetBurnFast", "severity": "page", "slo": "ttft", **series},
            {"alertname": "LLMErrorBudgetBurnTicket", "severity": "ticket", "slo": "ttft", **series},
            {"alertname": "LLMErrorBudgetBurnTicket", "severity": "ticket", "slo": "e2e", **series},
            {
                "alertname": "LLMErrorBudgetBurnTicket",
                "severity": "ticket",
                "slo": "ttft",
                **{**series, "gen_ai_request_model": "other"},
            },
        ]
        body = json.dumps([{"labels": labels} for labels in posted]).encode()
        request = urllib.request.Request(
            f"{url}/api/v2/alerts", data=body, headers={"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(request, timeout=10) as resp:
            assert resp.status == 200
        deadline = time.monotonic() + 20
        state: dict[tuple[str, str, str], str] = {}
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"{url}/api/v2/alerts", timeout=10) as resp:
                got = json.loads(resp.read())
            state = {
                (a["labels"]["severity"], a["labels"]["slo"], a["labels"]["gen_ai_request_model"]): a["status"]["state"]
                for a in got
            }
            if len(state) == 4 and "unprocessed" not in state.values():
                break
            time.sleep(0.2)
        assert state == {
            ("page", "ttft", "gpt-4o"): "active",
            ("ticket", "ttft", "gpt-4o"): "suppressed",
            ("ticket", "e2e", "gpt-4o"): "active",
            ("ticket", "ttft", "other"): "active",
        }, state
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


def prometheus_name(otel_name: str, unit: str) -> str:
    """The UnderscoreEscapingWithSuffixes name of a histogram (docs/metrics.md)."""
    assert unit == sc.UNIT_SECONDS, unit
    return otel_name.replace(".", "_") + "_seconds"


def test_targets_are_bucket_bounds_of_the_histograms_they_are_compared_with(telemetry: Any, sim: Any) -> None:
    """Each target is a bound of the buckets firsttoken really records, and under the last one.

    The chain is read, not assumed: SLO (prometheus/slos.yml) -> the target record it counts good
    calls under -> the histogram its SLI reads (firsttoken.stack.slo) -> the bucket bounds of that
    histogram in what firsttoken exported for a real streamed call. Targets no SLO uses drive the
    tail sampler (firsttoken.stack.sampling) and are held to the histogram their name says.
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
    slo = generator("slo")
    sampling = generator("sampling")
    histogram = {"ttft": slo.TTFT, "e2e": slo.DURATION}
    compared: dict[str, str] = {}  # target record -> histogram
    for entry in load_yaml(ROOT / "prometheus" / "slos.yml")["slos"]:
        if entry["sli"] != "availability":
            compared[f"llm:target:{entry['target']}_seconds"] = slo.SLIS[entry["sli"]][0]
    for record in (sampling.TTFT_TARGET, sampling.E2E_TARGET):
        compared.setdefault(record, histogram[record.removeprefix("llm:target:").split("_")[0]])
    table = targets()
    assert set(table) == set(compared), "every target is used by an SLO or the sampler, and defined"
    for record, by_class in table.items():
        buckets = bounds[compared[record]]
        for traffic_class, value in by_class.items():
            where = f"{record}{{{traffic_class or 'default'}}} = {value}"
            assert value in buckets, f"{where} is not a bucket bound of {compared[record]}: {buckets}"
            assert value < buckets[-1], f"{where} is the last bound of {compared[record]}: never exceeded"
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
    assert seen >= 5, "the series were not read"
