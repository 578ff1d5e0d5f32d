"""The SLO recording rules and burn-rate alerts, from prometheus/slos.yml (its SLOs and targets).

An SLO (slos.yml) says which calls are good (``ttft``: time to first token within the class's
target; ``e2e``: succeeded within the class's end-to-end target; ``availability``:
did not fail) and what share of them must be, per traffic class. Every target is a bucket bound
of its histogram, so "good" is exact: ``_bucket{le="<target>"}``.

The recording rules are one group, evaluated in order, per provider, model and traffic class
(``slo`` label: the SLO's name):

- ``llm:slo_calls:rate5m`` (one rule per SLO) and ``llm:slo_bad:rate5m`` (one per SLO and traffic
  class: the class's threshold) from the raw histograms: one bucket and the count, of firsttoken's
  own points only (``otel_scope_name="firsttoken"``: another GenAI instrumentation of the same calls
  records under the same standard names), summed over the other scope labels;
- 30m as the mean of the 5 m rates at 1 minute steps (30 points: no lag, the alerts' fast window),
  1h and 6h as their mean at 5 minute steps (a subquery of 12 and 72 points that tiles the
  window), 1d and 3d from the 1 h rates at 1 hour steps (24 and 72 points), the SLO
  window (28d) from the 1 d rates at 1 day steps: never a range query of days over raw series.
  A subquery's points are aligned to its step: until one of them holds a sample (up to a step
  after Prometheus started), the window falls back to its source's rate, the whole short history;
- ``llm:slo_error_budget`` (1 - objective, with the objective and threshold as labels) and
  ``llm:slo_burn_rate:<window>`` = bad / calls / budget; ``llm:slo_budget_remaining`` = 1 - the
  burn rate over the SLO window.

The alerts of ``burn_alerts`` fire per SLO while the burn rate is over ``burn`` over both windows
and the long window holds at least ``min_bad_calls`` bad calls. An alert with an ``hour_cap`` (the
ticket) reads its long window as ``llm:slo_burn_rate_capped:<window>``: each hour's burn counted up to
the cap (``capped_rules``), so that an incident that paged and is over does not hold it open.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .. import semconv as sc
from .. import targets as tg

# Relative to the checkout.
SLOS = Path(tg.SOURCE)
RECORDING = Path("prometheus/rules/slo-recording.yml")
ALERTS = Path("prometheus/rules/slo-alerts.yml")
DASHBOARD_UID = "llm-slos"

TTFT = "firsttoken_client_time_to_first_token_seconds"
DURATION = "gen_ai_client_operation_duration_seconds"
BY = "gen_ai_provider_name, gen_ai_request_model, firsttoken_traffic_class"
ON = f"slo, {BY}"
CLASS_LABEL = "firsttoken_traffic_class"
SCOPE = f'otel_scope_name="{sc.SCOPE_NAME}"'
INFO_LABELS = "slo_objective, slo_threshold_seconds"
SLIS = {"ttft": (TTFT, sc.TTFT_BUCKETS), "e2e": (DURATION, sc.DURATION_BUCKETS), "availability": (DURATION, ())}
# Raw windows, then (window, from, step): each longer one is the mean of a shorter one's rates.
RAW_WINDOWS = ("5m",)
DERIVED_WINDOWS = (("30m", "5m", "1m"), ("1h", "5m", "5m"), ("6h", "5m", "5m"), ("1d", "1h", "1h"), ("3d", "1h", "1h"))
SECONDS = {"m": 60, "h": 3600, "d": 86400}
HOURLY_WINDOWS = tuple(w for w, source, _ in DERIVED_WINDOWS if source == "1h")
# Span attributes of firsttoken's call span, for the trace search in the alerts' annotations.
SPAN_MODEL = "gen_ai.request.model"
SPAN_CLASS = "firsttoken.traffic_class"
SPAN_TTFT = "firsttoken.time_to_first_token"

_DURATION = re.compile(r"([1-9][0-9]*)([mhd])")


def seconds(duration: str) -> int:
    match = _DURATION.fullmatch(duration)
    if not match:
        raise ValueError(f"{duration!r} is not a duration such as 5m, 6h or 28d")
    return int(match.group(1)) * SECONDS[match.group(2)]


@dataclass(frozen=True)
class SLO:
    name: str
    sli: str  # ttft, e2e or availability
    objective: dict[str, float]  # traffic class ("" = default) -> objective
    threshold: dict[str, float]  # traffic class ("" = default) -> seconds; empty for availability

    def objective_for(self, traffic_class: str) -> float:
        return self.objective.get(traffic_class, self.objective[""])

    def threshold_for(self, traffic_class: str) -> float | None:
        return self.threshold.get(traffic_class, self.threshold[""]) if self.threshold else None


@dataclass(frozen=True)
class BurnAlert:
    alert: str
    severity: str
    long: str
    short: str
    burn: float
    hour_cap: float | None = None
    """Over the long window, each hour's burn counted up to this (a long window built from 1 h rates)."""

    @property
    def long_burn(self) -> str:
        """The series of the long window's burn rate the alert is decided on (with the cap, if any)."""
        if self.hour_cap is None:
            return f"llm:slo_burn_rate:{self.long}"
        return f"llm:slo_burn_rate_capped:{self.long}"


@dataclass(frozen=True)
class Config:
    window: str
    slos: list[SLO]
    burn_alerts: list[BurnAlert]
    min_bad_calls: int
    targets: dict[str, dict[str, float]]
    """Every target of slos.yml: {name: {traffic class ("" = default): seconds}}."""

    @property
    def window_seconds(self) -> int:
        return seconds(self.window)

    def classes(self) -> list[str]:
        """The named traffic classes (targets or objectives), in order; the default ("") last."""
        named: list[str] = []
        for slo in self.slos:
            named += [c for c in [*slo.threshold, *slo.objective] if c and c not in named]
        return [*named, ""]


def load(path: Path) -> Config:
    """slos.yml, checked: every mistake is one clear error naming the file and the SLO (a
    :class:`firsttoken.targets.TargetsError` with a line per bad target)."""
    doc = yaml.safe_load(path.read_text())
    where = path.name
    targets = tg.check(doc.get("targets"), where)
    window = str(doc.get("window", ""))
    seconds(window)
    slos = []
    for entry in doc["slos"]:
        name = str(entry.get("name", ""))
        if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
            raise ValueError(f"{where}: SLO name {name!r}: lower-case letters, digits and _")
        sli = entry.get("sli")
        if sli not in SLIS:
            raise ValueError(f"{where}: {name}: sli must be one of {sorted(SLIS)}, not {sli!r}")
        objectives = dict(entry.get("objective") or {})
        if "default" not in objectives:
            raise ValueError(f"{where}: {name}: objective needs a default")
        objective = {("" if c == "default" else str(c)): float(v) for c, v in objectives.items()}
        for traffic_class, value in objective.items():
            if not 0 < value < 1:
                raise ValueError(f"{where}: {name}: objective {value} for {traffic_class or 'default'} not in (0, 1)")
        threshold: dict[str, float] = {}
        if sli != "availability":
            target = entry.get("target")
            if target not in targets:
                raise ValueError(
                    f"{where}: {name}: target {target!r} is not one of the targets ({', '.join(tg.NAMES)})"
                )
            if not str(target).startswith(sli):
                raise ValueError(f"{where}: {name}: a {sli} SLO needs a {sli} target, not {target}")
            threshold = targets[target]
        elif "target" in entry:
            raise ValueError(f"{where}: {name}: an availability SLO has no latency target")
        slos.append(SLO(name, sli, objective, threshold))
    if len({s.name for s in slos}) != len(slos):
        raise ValueError(f"{where}: two SLOs share a name")
    windows = {*RAW_WINDOWS, *(w for w, _, _ in DERIVED_WINDOWS)}
    alerts = []
    for entry in doc["burn_alerts"]:
        cap = entry.get("hour_cap")
        alert = BurnAlert(
            str(entry["alert"]),
            str(entry["severity"]),
            str(entry["long"]),
            str(entry["short"]),
            float(entry["burn"]),
            None if cap is None else float(cap),
        )
        if alert.hour_cap is not None:
            if alert.long not in HOURLY_WINDOWS:
                raise ValueError(
                    f"{where}: {alert.alert}: hour_cap needs a long window built from 1 h rates "
                    f"({', '.join(HOURLY_WINDOWS)}), not {alert.long}"
                )
            if not alert.hour_cap > alert.burn:
                raise ValueError(f"{where}: {alert.alert}: hour_cap {cap} must be over the alert's burn {alert.burn:g}")
        for w in (alert.long, alert.short):
            if w not in windows:
                raise ValueError(f"{where}: {alert.alert}: window {w} is not recorded (one of {sorted(windows)})")
        if seconds(alert.short) >= seconds(alert.long):
            raise ValueError(f"{where}: {alert.alert}: the short window must be shorter than the long one")
        if alert.severity not in ("page", "ticket"):
            raise ValueError(f"{where}: {alert.alert}: severity is page or ticket")
        alerts.append(alert)
    min_bad = int(doc["min_bad_calls"])
    if min_bad < 1:
        raise ValueError(f"{where}: min_bad_calls must be at least 1")
    return Config(window, slos, alerts, min_bad, targets)


def le_matcher(bound: float) -> str:
    """``le`` of one bucket in both spellings Prometheus may store ("1" from OTLP, "1.0" scraped)."""
    text = repr(float(bound)).removesuffix(".0")
    if "." in text or "e" in text:
        return f'le="{text}"'
    return f'le=~"{text}(\\\\.0)?"'


def class_selector(traffic_class: str, classes: list[str]) -> str:
    if traffic_class:
        return f'{CLASS_LABEL}="{traffic_class}"'
    return f'{CLASS_LABEL}!~"{"|".join(c for c in classes if c)}"'


def number(value: float) -> str:
    return f"{value:g}"


def _sum(expr: str) -> str:
    return f"sum by ({BY}) ({expr})"


def class_labels(slo: SLO, traffic_class: str) -> dict[str, str]:
    """The SLO's name and, for a named class, the class: the value its series have anyway, but it
    tells the rules of one SLO apart for promtool's duplicate-rule check."""
    return {"slo": slo.name, **({CLASS_LABEL: traffic_class} if traffic_class else {})}


def calls_rule(slo: SLO, scale: int = 1) -> dict[str, Any]:
    """Calls an SLO counts, every class at once: the class only changes what is good."""
    metric, _ = SLIS[slo.sli]
    expr = _sum(f"rate({metric}_count{{{SCOPE}}}[{scaled('5m', scale)}])")
    return {"record": "llm:slo_calls:rate5m", "expr": expr, "labels": {"slo": slo.name}}


def bad_rule(config: Config, slo: SLO, traffic_class: str, scale: int = 1) -> dict[str, Any]:
    """Bad calls of one SLO and class over 5 minutes, from one bucket (the class's threshold) and the count."""
    metric, _ = SLIS[slo.sli]
    selector = f"{SCOPE}, {class_selector(traffic_class, config.classes())}"
    w = scaled("5m", scale)
    calls = _sum(f"rate({metric}_count{{{selector}}}[{w}])")
    if slo.sli == "availability":
        errors = _sum(f'rate({metric}_count{{{selector}, error_type!=""}}[{w}])')
        bad = f"{errors} or 0 * {calls}"
    else:
        threshold = slo.threshold_for(traffic_class)
        assert threshold is not None
        good_selector = selector + (', error_type=""' if slo.sli == "e2e" else "")
        good = _sum(f"rate({metric}_bucket{{{good_selector}, {le_matcher(threshold)}}}[{w}])")
        bad = f"{calls} - ({good} or 0 * {calls})"
    return {"record": "llm:slo_bad:rate5m", "expr": bad, "labels": class_labels(slo, traffic_class)}


def budget_rule(slo: SLO, traffic_class: str, classes: list[str]) -> dict[str, Any]:
    """1 - objective, per series that had calls in the last 5 minutes or 3 days."""
    objective = slo.objective_for(traffic_class)
    labels = {**class_labels(slo, traffic_class), "slo_objective": number(objective)}
    threshold = slo.threshold_for(traffic_class)
    if threshold is not None:
        # A float literal (2.5, 5.0): Tempo 3 compares a float attribute only with one (trace_search).
        labels["slo_threshold_seconds"] = repr(float(threshold))
    selector = f'slo="{slo.name}", {class_selector(traffic_class, classes)}'
    calls = f"(llm:slo_calls:rate5m{{{selector}}} or llm:slo_calls:rate3d{{{selector}}})"
    return {
        "record": "llm:slo_error_budget",
        "expr": f"0 * {calls} + {number(round(1 - objective, 6))}",
        "labels": labels,
    }


def scaled(duration: str, scale: int) -> str:
    """A duration of the rules, divided by the test override's time scale (1: as shipped)."""
    return duration if scale == 1 else f"{seconds(duration) // scale}s"


def recording_rules(config: Config, scale: int = 1) -> dict[str, Any]:
    """The recording rules; ``scale`` > 1 is the real-stack test's override (docs/alerts.md): every
    window and step divided by it (5m -> 5s at 60), the series named as shipped."""
    classes = config.classes()
    rules: list[dict[str, Any]] = []
    for slo in config.slos:
        rules.append(calls_rule(slo, scale))
        rules += [bad_rule(config, slo, traffic_class, scale) for traffic_class in classes]
    derived = [*DERIVED_WINDOWS, (config.window, "1d", "1d")]
    for window, source, step in derived:
        for what in ("calls", "bad"):
            # Until the window holds one point (a step after Prometheus started), the source's rate.
            rules.append(
                {
                    "record": f"llm:slo_{what}:rate{window}",
                    "expr": f"avg_over_time(llm:slo_{what}:rate{source}[{scaled(window, scale)}:{scaled(step, scale)}])"
                    f" or llm:slo_{what}:rate{source}",
                }
            )
    # The bad calls of each window: the sum of its points' rates times their step, not mean rate x
    # window, which would overcount a window not yet full (a new model, a restart). A window holds
    # the next shorter one, so its count is at least that one's: the larger of the two. Without it a
    # burst came into the 30 m count a fifth per minute (5 m rates summed at 1 m steps) while the
    # 1 h one held it whole, and a series too new for the sum counted it whole, then a fifth: a page
    # fired and cleared. Until the window holds a point, the shorter window's count alone.
    previous = f"llm:slo_bad:rate5m * {300 // scale}"
    for window, source, step in DERIVED_WINDOWS:
        summed = (
            f"sum_over_time(llm:slo_bad:rate{source}[{scaled(window, scale)}:{scaled(step, scale)}])"
            f" * {seconds(step) // scale}"
        )
        rules.append({"record": f"llm:slo_bad_calls:{window}", "expr": f"{summed} >= {previous} or {previous}"})
        previous = f"llm:slo_bad_calls:{window}"
    for slo in config.slos:
        for traffic_class in classes:
            rules.append(budget_rule(slo, traffic_class, classes))
    rules += capped_rules(config, scale)
    for window in [*RAW_WINDOWS, *(w for w, _, _ in derived)]:
        rules.append(
            {
                "record": f"llm:slo_burn_rate:{window}",
                "expr": f"llm:slo_bad:rate{window} / llm:slo_calls:rate{window}"
                f" / ignoring ({INFO_LABELS}) group_left ({INFO_LABELS}) llm:slo_error_budget",
            }
        )
    rules.append(
        {"record": f"llm:slo_budget_remaining:{config.window}", "expr": f"1 - llm:slo_burn_rate:{config.window}"}
    )
    return {"groups": [{"name": "firsttoken-slo", "rules": rules}]}


def capped_rules(config: Config, scale: int = 1) -> list[dict[str, Any]]:
    """For each long window with an ``hour_cap``: its burn rate with every hour's bad calls counted up
    to ``hour_cap`` times the budget (label ``cap``). An hour that burns faster is a page's business; an
    incident that paged and is over then weighs at most that on the ticket's window, instead of holding
    it over 1 for days, where any night near 1x reopens the ticket (docs/alerts.md)."""
    rules: list[dict[str, Any]] = []
    ignoring = f"ignoring ({INFO_LABELS})"
    for cap in sorted({a.hour_cap for a in config.burn_alerts if a.hour_cap is not None}):
        limit = f"({number(cap)} * llm:slo_calls:rate1h * {ignoring} llm:slo_error_budget)"
        rules.append(
            {
                "record": "llm:slo_bad_capped:rate1h",
                "expr": f"llm:slo_bad:rate1h <= on ({ON}) {limit} or on ({ON}) {limit}",
                "labels": {"cap": number(cap)},
            }
        )
    for window in sorted({a.long for a in config.burn_alerts if a.hour_cap is not None}, key=seconds):
        rules.append(
            {
                "record": f"llm:slo_bad_capped:rate{window}",
                "expr": f"avg_over_time(llm:slo_bad_capped:rate1h[{scaled(window, scale)}:{scaled('1h', scale)}])"
                " or llm:slo_bad_capped:rate1h",
            }
        )
        rules.append(
            {
                "record": f"llm:slo_burn_rate_capped:{window}",
                "expr": f"llm:slo_bad_capped:rate{window} / ignoring (cap) llm:slo_calls:rate{window}"
                f" / ignoring ({INFO_LABELS}, cap) group_left ({INFO_LABELS}) llm:slo_error_budget",
            }
        )
    return rules


def _query(expr: str, show: str) -> str:
    """An annotation template that runs ``expr`` for the alert's series and prints its value."""
    selector = 'slo="%s", gen_ai_provider_name="%s", gen_ai_request_model="%s", firsttoken_traffic_class="%s"'
    args = " $labels.slo $labels.gen_ai_provider_name $labels.gen_ai_request_model $labels.firsttoken_traffic_class"
    return (
        "{{ with printf `"
        + expr.replace("SEL", selector)
        + "`"
        + args
        + " | query }}{{ . | first | value | "
        + show
        + " }}{{ end }}"
    )


def trace_search(slo: SLO) -> str:
    """TraceQL for the calls that spent the budget: this model and class, over the threshold or failed."""
    base = f'span.{SPAN_MODEL} = "{{{{ $labels.gen_ai_request_model }}}}"'
    base += f' && span.{SPAN_CLASS} = "{{{{ $labels.firsttoken_traffic_class }}}}"'
    if slo.sli == "ttft":
        return f"{{ {base} && span.{SPAN_TTFT} > {{{{ $labels.slo_threshold_seconds }}}} }}"
    if slo.sli == "e2e":
        return f"{{ {base} && (duration > {{{{ $labels.slo_threshold_seconds }}}}s || status = error) }}"
    return f"{{ {base} && status = error }}"


def jaeger_search(slo: SLO) -> str:
    """The Jaeger form of trace_search: one Jaeger search per service that made this model's calls of
    this class (and, for availability, per error type), as the path of Jaeger's search page, whose
    parameters are those of its query API (/api/traces) that Grafana's Jaeger datasource calls too.
    Jaeger needs a service, and compares attributes only as equal strings: the ttft and e2e searches
    are the calls slower than the threshold in all (for ttft a superset: a call's duration is at
    least its time to first token), the availability one the calls of each error type
    (docs/trace-stores.md)."""
    metric = (
        "firsttoken_client_time_to_first_token_seconds_count"
        if slo.sli == "ttft"
        else ("gen_ai_client_operation_duration_seconds_count")
    )
    series = 'otel_scope_name="firsttoken", gen_ai_request_model="%s", firsttoken_traffic_class="%s"'
    by = "job"
    # A double-quoted Go string (not a backtick one, which this project reserves for PromQL).
    tags = f'{{\\"{SPAN_MODEL}\\":\\"%s\\",\\"{SPAN_CLASS}\\":\\"%s\\"'
    tag_args = "$labels.gen_ai_request_model $labels.firsttoken_traffic_class"
    duration = "&minDuration={{ $labels.slo_threshold_seconds }}s"
    if slo.sli == "availability":
        series += ', error_type!=""'
        by = "job, error_type"
        tags += ',\\"error.type\\":\\"%s\\"'
        tag_args += " .Labels.error_type"
        duration = ""
    return (
        f"{{{{ range printf `group by ({by}) ({metric}{{{series}}})` $labels.gen_ai_request_model"
        " $labels.firsttoken_traffic_class | query }}/search?service={{ .Labels.job | urlquery }}"
        f'&tags={{{{ printf "{tags}}}" {tag_args} | urlquery }}}}{duration}&limit=100 {{{{ end }}}}'
    )


def what_is_good(slo: SLO) -> str:
    if slo.sli == "ttft":
        return "streamed calls with a time to first token within {{ $labels.slo_threshold_seconds }} s"
    if slo.sli == "e2e":
        return "calls that succeeded within {{ $labels.slo_threshold_seconds }} s end to end"
    return "calls that did not fail"


def alert_rules(config: Config) -> dict[str, Any]:
    window_s = seconds(config.window)
    rules = []
    for alert in config.burn_alerts:
        for slo in config.slos:
            name = f'slo="{slo.name}"'
            long_s = seconds(alert.long)
            expr = (
                f"llm:slo_burn_rate:{alert.long}{{{name}}} > {number(alert.burn)}\n"
                f"and llm:slo_burn_rate:{alert.short}{{{name}}} > {number(alert.burn)}\n"
                + ("" if alert.hour_cap is None else f"and {alert.long_burn}{{{name}}} > {number(alert.burn)}\n")
                + f"and on ({ON}) llm:slo_bad_calls:{alert.long}{{{name}}} >= {config.min_bad_calls}\n"
            )
            spent = number(round(100 * alert.burn * long_s / window_s, 2))
            capped = (
                ""
                if alert.hour_cap is None
                else f" (with each hour counted up to {number(alert.hour_cap)}x, also over {number(alert.burn)})"
            )
            remaining = _query(f"llm:slo_budget_remaining:{config.window}{{SEL}}", "humanizePercentage")
            lasts = _query(f"{window_s} / llm:slo_burn_rate:{alert.long}{{SEL}}", "humanizeDuration")
            rules.append(
                {
                    "alert": alert.alert,
                    "expr": expr,
                    "labels": {"severity": alert.severity, "slo": slo.name, "window": f"{alert.long}/{alert.short}"},
                    "annotations": {
                        "summary": (
                            f"{{{{ $labels.gen_ai_request_model }}}} ({{{{ $labels.gen_ai_provider_name }}}}, traffic "
                            f'class {{{{ or $labels.firsttoken_traffic_class "none" }}}}) burns its {slo.name} error '
                            f'budget {{{{ $value | printf "%.1f" }}}}x as fast as the SLO allows ({alert.long})'
                        ),
                        "description": (
                            f"SLO {slo.name}: {{{{ $labels.slo_objective | humanizePercentage }}}} of the "
                            f"{what_is_good(slo)}, over "
                            f"{config.window}. Burn rate over {alert.long} "
                            f'{{{{ $value | printf "%.1f" }}}}{capped} and over '
                            f"{alert.short} also over {number(alert.burn)} (at {number(alert.burn)}x, {spent}% of the "
                            f"{config.window} budget goes in {alert.long}). At this rate a whole {config.window} "
                            f"budget lasts {lasts}. Budget left over {config.window}: {remaining}."
                        ),
                        "dashboard": (
                            f"/d/{DASHBOARD_UID}?var-provider={{{{ $labels.gen_ai_provider_name }}}}"
                            "&var-model={{ $labels.gen_ai_request_model }}"
                            "&var-traffic_class={{ $labels.firsttoken_traffic_class }}"
                        ),
                        "trace_search": trace_search(slo),
                        "jaeger_search": jaeger_search(slo),
                    },
                }
            )
    return {"groups": [{"name": "firsttoken-slo-alerts", "rules": rules}]}


HEADER = """# GENERATED by `firsttoken stack generate` from prometheus/slos.yml: do not edit; edit that,
# then run firsttoken stack generate. What the rules do: docs/alerts.md and the docstring of
# firsttoken/stack/slo.py.
"""


class _Dumper(yaml.SafeDumper):  # type: ignore[misc]  # PyYAML is untyped here
    def ignore_aliases(self, data: Any) -> bool:
        return True

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def render(config: Config, scale: int = 1) -> dict[Path, str]:
    """The rule files, relative to the checkout -> their text."""
    dump = {"sort_keys": False, "width": 200, "Dumper": _Dumper, "allow_unicode": True}
    return {
        RECORDING: HEADER + yaml.dump(recording_rules(config, scale), **dump),
        ALERTS: HEADER + yaml.dump(alert_rules(config), **dump),
    }
