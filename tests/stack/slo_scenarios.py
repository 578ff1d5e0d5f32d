"""Alert quality, measured: scenarios as synthetic series over days, evaluated by promtool.

Each scenario is a few days of per-minute cumulative histograms (time to first token, end-to-end
by outcome) of two or three models, drawn from a seeded model of real traffic; promtool's rule
engine (``promtool test rules``) evaluates every shipped rule file on them, minute by minute, with
the rule groups in a fixed order (``group_eval_order``). At the last minute a few PromQL queries
over the ``ALERTS`` series the engine wrote say, per alert and model: how many minutes it fired,
how many episodes, the first and the last firing minute. Those are read back from promtool's
answer (the test expects nothing, so promtool prints what it got).

    python tests/stack/slo_scenarios.py            # run every scenario, print the table of docs/alerts.md
    python tests/stack/slo_scenarios.py healthy    # one scenario
    python tests/stack/slo_scenarios.py shares     # detection time by the share of calls over the target

The traffic model (the same for every scenario unless it changes one thing):
- two interactive models, ``openai/gpt-a`` (40 calls a minute at the daily mean) and
  ``anthropic/claude-b`` (20), diurnal (x0.4 at night to x1.6 at the peak, 15:00), Poisson per minute;
- time to first token lognormal, median 0.6 s (gpt-a) / 0.5 s (claude-b), sigma 0.2, and 0.5 % of
  calls slow (uniform 2.6-8 s: over the 2.5 s interactive target), so a few dozen slow calls an
  hour at the peak; 0.1 % of calls fail (no first token, 0.3 s);
- end-to-end = time to first token + decode (lognormal, median 4 s, sigma 0.5).
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "prometheus" / "rules"
# Every shipped rule file, and the threshold alerts of before (old and new measured side by side).
THRESHOLD_ALERTS = Path(__file__).with_name("threshold_alerts.yml")
RULE_FILES = (
    *(RULES / f for f in ("targets.yml", "recording.yml", "slo-recording.yml", "alerts.yml", "slo-alerts.yml")),
    THRESHOLD_ALERTS,
)
# Fixed: promtool 2.42 otherwise runs the groups in a random order, which moves fire times by a minute.
GROUP_ORDER = (
    "firsttoken-targets",
    "firsttoken-latency",
    "firsttoken-cache",
    "firsttoken-slo",
    "firsttoken-alerts",
    "firsttoken-slo-alerts",
    "firsttoken-threshold-alerts",
)
OLD_ALERTS = ("LLMTimeToFirstTokenP95High", "LLMTimeToFirstTokenP99High", "LLMEndToEndP99High")
TTFT = "firsttoken_client_time_to_first_token_seconds"
DURATION = "gen_ai_client_operation_duration_seconds"
SCOPE_LABELS = 'otel_scope_name="firsttoken",otel_scope_version="0.1.0"'
# Subsets of firsttoken.semconv's bounds: the interactive targets the rules compare with, one under
# each, and every bound above (a percentile from buckets never exceeds the last finite bound, so
# the old p99 alerts need them to see a tail).
TTFT_LE = (0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0)
DURATION_LE = (10.24, 20.48, 40.96, 81.92)
DAY = 1440  # minutes
PEAK_MINUTE = 15 * 60


@dataclass
class Model:
    provider: str
    name: str
    per_minute: float  # mean calls a minute over a day
    median_ttft: float
    traffic_class: str = "interactive"


GPT = Model("openai", "gpt-a", 40, 0.6)
CLAUDE = Model("anthropic", "claude-b", 20, 0.5)
RARE = Model("openai", "gpt-rare", 10 / 60, 0.6)


@dataclass
class Minute:
    """What one model's calls are like in one minute (scenarios change these)."""

    traffic: float = 1.0  # x the diurnal rate
    ttft_factor: float = 1.0  # x every call's time to first token
    slow_share: float = 0.005
    error_share: float = 0.001
    forced_slow: list[float] = field(default_factory=list)  # these calls too, with these TTFTs


@dataclass
class Scenario:
    name: str
    title: str
    event_minute: int  # when the change begins (minutes from the start); the healthy week: 0
    recovery_minute: int | None  # when it ends; None = it stays
    models: list[Model]
    change: Callable[[Model, int], Minute]


def diurnal(minute: int) -> float:
    return 1 + 0.6 * math.sin(2 * math.pi * ((minute % DAY) - PEAK_MINUTE + DAY / 4) / DAY)


def poisson(rng: random.Random, lam: float) -> int:
    if lam > 50:
        return max(0, round(rng.gauss(lam, math.sqrt(lam))))
    limit, k, p = math.exp(-lam), 0, rng.random()
    while p > limit:
        k += 1
        p *= rng.random()
    return k


def series_for(
    model: Model, minutes: int, change: Callable[[Model, int], Minute], rng: random.Random
) -> dict[str, list[int]]:
    """Cumulative per-minute counts of every series of one model (Prometheus names, labels; firsttoken's
    scope labels as the OTLP receiver writes them with promote_scope_metadata)."""
    base = (
        f'{SCOPE_LABELS},gen_ai_provider_name="{model.provider}",gen_ai_request_model="{model.name}",'
        f'firsttoken_traffic_class="{model.traffic_class}"'
    )
    ttft = [0] * (len(TTFT_LE) + 1)
    ok = [0] * (len(DURATION_LE) + 1)
    failed = 0
    out: dict[str, list[int]] = {}

    def keep(name: str, le: str | None, value: int, extra: str = "") -> None:
        labels = base + extra + (f',le="{le}"' if le else "")
        out.setdefault(f"{name}{{{labels}}}", []).append(value)

    def bucket(bounds: tuple[float, ...], value: float) -> int:
        return next((i for i, b in enumerate(bounds) if value <= b), len(bounds))

    for minute in range(minutes + 1):
        if minute:
            m = change(model, minute)
            n = poisson(rng, model.per_minute * diurnal(minute) * m.traffic)
            firsts = []
            for _ in range(n):
                if rng.random() < m.error_share:
                    failed += 1
                    continue
                if rng.random() < m.slow_share:
                    firsts.append(rng.uniform(2.6, 8.0))
                else:
                    firsts.append(model.median_ttft * math.exp(rng.gauss(0, 0.2)))
            firsts = [t * m.ttft_factor for t in firsts] + list(m.forced_slow)
            for first in firsts:
                ttft[bucket(TTFT_LE, first)] += 1
                ok[bucket(DURATION_LE, first + 4 * math.exp(rng.gauss(0, 0.5)))] += 1
        for i, le in enumerate([*TTFT_LE, math.inf]):
            keep(f"{TTFT}_bucket", "+Inf" if le == math.inf else f"{le:g}", sum(ttft[: i + 1]))
        keep(f"{TTFT}_count", None, sum(ttft))
        for i, le in enumerate([*DURATION_LE, math.inf]):
            keep(f"{DURATION}_bucket", "+Inf" if le == math.inf else f"{le:g}", sum(ok[: i + 1]))
        keep(f"{DURATION}_count", None, sum(ok))
        # Failed calls: only their count is read (a failed call is bad for e2e and availability).
        keep(f"{DURATION}_count", None, failed, ',error_type="APIConnectionError"')
    return out


def _healthy(model: Model, minute: int) -> Minute:
    return Minute()


def _calm(model: Model, minute: int) -> Minute:
    return calm_nights(minute)


def night(minute: int) -> bool:
    """22:00 to 06:00."""
    return not 6 * 60 <= minute % DAY < 22 * 60


def calm_nights(minute: int) -> Minute:
    """Healthy, but at night (batch jobs, a slower region awake) a share of slow and failed calls just
    under each budget: a time-to-first-token burn of 0.95 and an availability burn of 0.9, so the 6 h
    burn rates cross 1 on some nights by chance; by day as usual."""
    return Minute(slow_share=0.0095, error_share=0.0045) if night(minute) else Minute()


def _usual(minute: int) -> Minute:
    return Minute()


def _during(
    start: int, end: int | None, model_name: str | None, changed: Minute, base: Callable[[int], Minute] = _usual
) -> Callable[[Model, int], Minute]:
    def change(model: Model, minute: int) -> Minute:
        if (model_name is None or model.name == model_name) and start <= minute < (end if end is not None else 1 << 30):
            return changed
        return base(minute)

    return change


def _spaced(minutes: dict[int, list[float]], model_name: str) -> Callable[[Model, int], Minute]:
    def change(model: Model, minute: int) -> Minute:
        if model.name == model_name and minute in minutes:
            return Minute(forced_slow=minutes[minute])
        return Minute()

    return change


# One run of a week holds every scenario, each on models of its own (named "<scenario>:<model>"):
# the rules are per model, so they do not meet. Every event comes after three healthy days (the
# ticket's window is 3 d): at 10:00 of day 4, the slow degradation at 00:00 of day 4, the traffic
# spike around the diurnal peak (15:00).
DAYS = 7
WARMUP = 3 * DAY
AT = WARMUP + 10 * 60


def scenarios() -> list[Scenario]:
    return [
        Scenario("healthy", "a healthy week (two models)", 0, None, [GPT, CLAUDE], _healthy),
        Scenario(
            "regression-5x",
            "sudden 5x TTFT regression of gpt-a that stays",
            AT,
            None,
            [GPT],
            _during(AT, None, "gpt-a", Minute(ttft_factor=5)),
        ),
        Scenario(
            "spike-10x-10m",
            "10x TTFT of gpt-a for 10 minutes, then recovery",
            AT,
            AT + 10,
            [GPT],
            _during(AT, AT + 10, "gpt-a", Minute(ttft_factor=10)),
        ),
        Scenario(
            "slow-degradation",
            "3 % of gpt-a's calls over target (not 0.5 %) for two days",
            WARMUP,
            WARMUP + 2 * DAY,
            [GPT],
            _during(WARMUP, WARMUP + 2 * DAY, "gpt-a", Minute(slow_share=0.03)),
        ),
        Scenario(
            "one-slow-call",
            "one call of gpt-a with a 35 s first token",
            AT,
            AT + 1,
            [GPT],
            _spaced({AT: [35.0]}, "gpt-a"),
        ),
        Scenario(
            "low-traffic",
            "gpt-rare (10 calls an hour) with two slow calls",
            AT,
            AT + 6,
            [RARE],
            _spaced({AT: [6.0], AT + 5: [7.0]}, "gpt-rare"),
        ),
        Scenario(
            "outage-15m",
            "every call to anthropic fails for 15 minutes",
            AT,
            AT + 15,
            [CLAUDE],
            _during(AT, AT + 15, "claude-b", Minute(error_share=1.0)),
        ),
        Scenario(
            "traffic-spike",
            "3x traffic for an hour at the diurnal peak, latency in budget",
            WARMUP + PEAK_MINUTE - 30,
            WARMUP + PEAK_MINUTE + 30,
            [GPT],
            _during(WARMUP + PEAK_MINUTE - 30, WARMUP + PEAK_MINUTE + 30, None, Minute(traffic=3)),
        ),
        # Measured from the second day: on the first night a new Prometheus's 3 d window holds only
        # that night, which burns just under the budget, and the ticket may open (docs/alerts.md).
        Scenario("calm-nights", "a week whose nights burn just under the budget, from day 2", DAY, None, [GPT], _calm),
        Scenario(
            "outage-calm-nights",
            "every call to gpt-a fails for 15 minutes; nights just under the budget",
            AT,
            AT + 15,
            [GPT],
            _during(AT, AT + 15, "gpt-a", Minute(error_share=1.0), calm_nights),
        ),
        Scenario(
            "regression-2h-calm-nights",
            "5x TTFT of gpt-a for 2 hours, then recovery; nights just under the budget",
            AT,
            AT + 120,
            [GPT],
            _during(AT, AT + 120, "gpt-a", Minute(ttft_factor=5), calm_nights),
        ),
    ]


# Detection time by the share of calls a regression puts over the target (the rest unchanged): a
# a day of one model each, the regression from 10:00 on (the pages' windows, 6 h at most, are full
# by then). Pages only: the ticket's three days are not held (the slow degradation above measures it).
SHARES = (0.05, 0.1, 0.2, 0.27, 0.5, 1.0)
SHARE_DAYS = 1
SHARE_AT = 10 * 60


def share_scenarios() -> list[Scenario]:
    return [
        Scenario(
            f"share-{round(share * 100)}",
            f"{share:.0%} of gpt-a's calls over the target from then on",
            SHARE_AT,
            None,
            [GPT],
            _during(SHARE_AT, None, "gpt-a", Minute(slow_share=share)),
        )
        for share in SHARES
    ]


# What the rule engine keeps, per scenario, alert name, SLO, severity and model, from the
# scenario's event on (ALERTS carries the model; the scenario is its name's prefix): minutes firing,
# episodes, first and last firing minute. Recording rules of the test itself, evaluated after every
# other group, so that nothing has to be read back over days (promtool's query sample limit).
BY = "alertname, slo, severity, gen_ai_request_model"


def measuring_rules(chosen: list[Scenario]) -> dict[str, Any]:
    firing = (
        f'max by ({BY}, scenario) (label_replace(ALERTS{{alertstate="firing"}}, "scenario", "$1", '
        '"gen_ai_request_model", "([^:]+):.*"))'
    )
    rules: list[dict[str, Any]] = [
        {"record": "scenario:event_seconds", "expr": f"vector({s.event_minute * 60})", "labels": {"scenario": s.name}}
        for s in chosen
    ]
    rules += [
        {"record": "scenario:firing", "expr": f"{firing} and on (scenario) (scenario:event_seconds <= time())"},
        {"record": "scenario:first", "expr": "scenario:first or (0 * scenario:firing + time())"},
        {"record": "scenario:last", "expr": "(0 * scenario:firing + time()) or scenario:last"},
        {
            "record": "scenario:minutes",
            "expr": "(scenario:minutes or 0 * scenario:firing) + (scenario:firing or 0 * scenario:minutes)",
        },
        {
            "record": "scenario:episodes",
            "expr": "(scenario:episodes or 0 * scenario:firing)"
            " + ((scenario:firing unless scenario:firing offset 1m) or 0 * (scenario:episodes or scenario:firing))",
        },
    ]
    return {"groups": [{"name": "scenario-measure", "rules": rules}]}


QUERIES = {kind: f"scenario:{kind}" for kind in ("minutes", "episodes", "first", "last")}


def test_file(chosen: list[Scenario], seed: int, days: float = DAYS) -> dict[str, Any]:
    minutes = round(days * DAY)
    input_series = []
    for scenario in chosen:
        rng = random.Random(f"{scenario.name}-{seed}")
        for model in scenario.models:
            own = dataclasses.replace(model, name=f"{scenario.name}:{model.name}")
            for name, values in series_for(own, minutes, _named(scenario.change, model.name), rng).items():
                input_series.append({"series": name, "values": " ".join(map(str, values))})
    return {
        "rule_files": [*map(str, RULE_FILES), "measure.yml"],
        "evaluation_interval": "1m",
        "group_eval_order": [*GROUP_ORDER, "scenario-measure"],
        "tests": [
            {
                "name": "scenarios",
                "interval": "1m",
                "input_series": input_series,
                "promql_expr_test": [
                    {"expr": q, "eval_time": f"{minutes}m", "exp_samples": []} for q in QUERIES.values()
                ],
            }
        ],
    }


def _named(change: Callable[[Model, int], Minute], name: str) -> Callable[[Model, int], Minute]:
    """The scenario's change, seeing the model's own name (without the scenario's prefix)."""
    return lambda model, minute: change(dataclasses.replace(model, name=name), minute)


@dataclass
class Fired:
    alert: str
    slo: str
    severity: str
    model: str  # "<scenario>:<model>"
    minutes: int = 0
    episodes: int = 0
    first: int = 0  # minute of the run
    last: int = 0

    @property
    def scenario(self) -> str:
        return self.model.split(":", 1)[0]


_GOT = re.compile(r"(\{[^}]*\}) ([-+0-9.eE]+)")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def _kind(expr: str) -> str:
    return next(kind for kind, query in QUERIES.items() if expr.startswith(f'"{query}"'))


def parse(output: str) -> list[Fired]:
    """promtool's failures: per query (``expr: "..."``), the samples it got (``{labels} => value``)."""
    fired: dict[tuple[str, str, str, str], Fired] = {}
    for block in re.split(r"\n\s*expr: ", output)[1:]:
        kind = _kind(block.split("\n", 1)[0])
        got = block.split("got:", 1)[1] if "got:" in block else ""
        for labels_text, value in _GOT.findall(got):
            labels = dict(_LABEL.findall(labels_text))
            key = (
                labels["alertname"],
                labels.get("slo", ""),
                labels.get("severity", ""),
                labels.get("gen_ai_request_model", ""),
            )
            entry = fired.setdefault(key, Fired(*key))
            number = round(float(value))
            if kind == "minutes":
                entry.minutes = number
            elif kind == "episodes":
                entry.episodes = number
            elif kind == "first":
                entry.first = round(number / 60)
            else:
                entry.last = round(number / 60)
    return sorted(fired.values(), key=lambda f: (f.model, f.severity, f.alert, f.slo))


def run(
    chosen: list[Scenario], seed: int = 1, promtool: str = "promtool", days: float = DAYS, jobs: int = 0
) -> list[Fired]:
    """Every alert that fired in the run, with its minutes, episodes and first and last minute.

    The scenarios' series are apart (each model's name carries its scenario's) and every rule keeps
    the model label, so the scenarios are split among ``jobs`` promtool processes run at once (one
    per core by default): promtool evaluates a test on one core, minute by minute over days.
    """
    jobs = min(jobs or os.cpu_count() or 1, len(chosen)) or 1
    parts: list[list[Scenario]] = [[] for _ in range(jobs)]
    for scenario in sorted(chosen, key=lambda s: -len(s.models)):  # the most series first, to the lightest part
        min(parts, key=lambda part: sum(len(s.models) for s in part)).append(scenario)
    with futures.ThreadPoolExecutor(jobs) as pool:
        fired = [f for part in pool.map(lambda part: _run_one(part, seed, promtool, days), parts) for f in part]
    return sorted(fired, key=lambda f: (f.model, f.severity, f.alert, f.slo))


def _run_one(chosen: list[Scenario], seed: int, promtool: str, days: float) -> list[Fired]:
    with tempfile.TemporaryDirectory(prefix="firsttoken-slo-") as tmp:
        path = Path(tmp) / "scenarios.yml"
        path.write_text(yaml.safe_dump(test_file(chosen, seed, days), width=1 << 30))
        (Path(tmp) / "measure.yml").write_text(yaml.safe_dump(measuring_rules(chosen), width=1 << 30))
        result = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, check=False)
    out = result.stdout + result.stderr
    if result.returncode == 0 and "SUCCESS" in out:
        return []
    if "got:" not in out or "err:" in out:
        raise RuntimeError(f"promtool failed:\n{out[-3000:]}")
    return parse(out)


def is_old(f: Fired) -> bool:
    """One of the threshold alerts of before (the old LLMErrorRatioHigh is the critical one)."""
    return f.alert in OLD_ALERTS or (f.alert == "LLMErrorRatioHigh" and f.severity == "critical")


def describe(f: Fired, scenario: Scenario, end: int) -> str:
    """ "LLMErrorBudgetBurnFast ttft (page): +5 min, resolved +7 min after recovery" and the like."""
    name = f.alert + (f" {f.slo}" if f.slo else "") + f" ({f.severity})"
    if scenario.recovery_minute is None and scenario.change in (_healthy, _calm):
        return f"{name}: {f.episodes} episodes, {f.minutes} min in all"
    text = f"{name}: {'+' if f.first >= scenario.event_minute else ''}{f.first - scenario.event_minute} min"
    if f.episodes > 1:
        text += f", {f.episodes} episodes"
    if f.last >= end:
        text += ", still firing at the end"
    elif scenario.recovery_minute is not None:
        text += f", resolved {f.last + 1 - scenario.recovery_minute:+d} min after recovery"
    else:
        text += f", resolved at {f.last + 1 - scenario.event_minute:+d} min"
    return text


def table(fired: list[Fired], chosen: list[Scenario], days: float = DAYS) -> str:
    """The markdown table of docs/alerts.md: per scenario, what the old and the new alerts did."""
    end = round(days * DAY)
    lines = [
        "| scenario | threshold alerts (before) | SLO alerts (now) |",
        "|---|---|---|",
    ]
    for scenario in chosen:
        mine = [f for f in fired if f.scenario == scenario.name]
        old = [describe(f, scenario, end) for f in mine if is_old(f)]
        new = [describe(f, scenario, end) for f in mine if not is_old(f)]
        lines.append(f"| {scenario.title} | {'; '.join(old) or 'nothing'} | {'; '.join(new) or 'nothing'} |")
    return "\n".join(lines) + "\n"


def share_table(fired: list[Fired], chosen: list[Scenario]) -> str:
    """The detection-time table of docs/alerts.md: per share of calls over the target, when each page
    of the time-to-first-token SLO first fired (minutes after the regression began)."""
    lines = [
        "| calls over the target | burn rate | fast page (30m/5m over 14.4x) | slow page (6h/30m over 6x) |",
        "|---|---|---|---|",
    ]
    for scenario in chosen:
        share = int(scenario.name.removeprefix("share-"))
        cells = []
        for alert in ("LLMErrorBudgetBurnFast", "LLMErrorBudgetBurnSlow"):
            got = [f.first for f in fired if f.scenario == scenario.name and f.alert == alert and f.slo == "ttft"]
            cells.append(f"+{min(got) - scenario.event_minute} min" if got else "no page")
        lines.append(f"| {share} % | {share}x | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    week = [s for s in scenarios() if not argv or s.name in argv]
    shares = [s for s in share_scenarios() if not argv or s.name in argv or "shares" in argv]
    fired = (run(week) if week else []) + (run(shares, days=SHARE_DAYS) if shares else [])
    chosen = week + shares
    if week:
        print(table(fired, week))
    if shares:
        print(share_table(fired, shares))
    for scenario in chosen:
        print(f"== {scenario.name}: {scenario.title} (event at minute {scenario.event_minute})")
        for f in fired:
            if f.scenario != scenario.name:
                continue
            print(
                f"   {f.alert} {f.slo} {f.severity} {f.model}: {f.episodes} episodes, {f.minutes} min, "
                f"first {f.first - scenario.event_minute:+d} min, last {f.last - scenario.event_minute:+d} min"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
