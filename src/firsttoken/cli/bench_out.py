"""What ``firsttoken bench`` prints and writes: per-target percentiles, comparisons with bootstrap
confidence intervals, race outcomes, and every request's timeline as JSON and CSV."""

from __future__ import annotations

import csv
import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .. import semconv as sc
from ..charts import percentile
from .bench_run import SETUP_PHASES, Collector, Sample, fill, is_call
from .report import DEFAULT_WIDTH, pack, wrap

QUANTILES = (50, 90, 95, 99)
METRICS = (
    ("ttft_s", "TTFT ms", 1000.0),
    ("tpot_s", "time per output token ms", 1000.0),
    ("tokens_per_s", "output tokens/s", 1.0),
    ("e2e_s", "API end-to-end ms", 1000.0),
)
CSV_FIELDS = (
    "target",
    "seq",
    "warmup",
    "ok",
    "error",
    "end_reason",
    "stream",
    "start_s",
    "scheduled_s",
    "ttft_s",
    "tpot_s",
    "tokens_per_s",
    "e2e_s",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "attempts",
    "connection_reused",
    "setup_s",
    "winner",
    "phases",
)


def values(samples: Sequence[Sample], metric: str) -> list[float]:
    out = []
    for s in samples:
        v = getattr(s, metric)
        if s.ok and v is not None:
            out.append(float(v))
    return out


@dataclass
class Summary:
    target: str
    n: int
    ok: int
    errors: dict[str, int]
    retries: int
    cache_hit_ratio: float | None
    setup_share: float | None
    quantiles: dict[str, dict[str, float | None]]
    median: Sample | None
    slowest: Sample | None

    def as_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "n": self.n,
            "ok": self.ok,
            "errors": self.errors,
            "retries": self.retries,
            "cache_hit_ratio": self.cache_hit_ratio,
            "connection_setup_share": self.setup_share,
            "quantiles": self.quantiles,
            "median_request": self.median.seq if self.median else None,
            "slowest_request": self.slowest.seq if self.slowest else None,
        }


def at_percentile(ranked: Sequence[Any], q: float) -> Any:
    """The item at the ``q``-th percentile's rank (rounded down) of items sorted by end-to-end then
    request number: one request, the same one in the terminal, the JSON and the HTML report."""
    return ranked[int((len(ranked) - 1) * q / 100)] if ranked else None


def summarize(target: str, samples: Sequence[Sample]) -> Summary:
    measured = [s for s in samples if not s.warmup]
    ok = [s for s in measured if s.ok]
    errors: dict[str, int] = {}
    for s in measured:
        if not s.ok:
            key = s.error or s.end_reason or "unknown"
            errors[key] = errors.get(key, 0) + 1
    inputs = sum(s.input_tokens or 0 for s in ok)
    cached = sum(s.cached_tokens or 0 for s in ok)
    e2e = sum(s.e2e_s or 0.0 for s in ok)
    setup = sum(s.setup_s for s in ok)
    quantiles: dict[str, dict[str, float | None]] = {}
    for metric, _, _ in METRICS:
        vals = values(ok, metric)
        q: dict[str, float | None] = {f"p{p}": percentile(vals, p) for p in QUANTILES}
        q["max"] = max(vals) if vals else None
        q["n"] = float(len(vals))
        quantiles[metric] = q
    by_e2e = sorted((s for s in ok if s.e2e_s is not None), key=lambda s: (s.e2e_s or 0.0, s.seq))
    return Summary(
        target=target,
        n=len(measured),
        ok=len(ok),
        errors=errors,
        retries=sum(max(0, s.attempts - 1) for s in measured),
        cache_hit_ratio=cached / inputs if inputs else None,
        setup_share=setup / e2e if e2e else None,
        quantiles=quantiles,
        median=at_percentile(by_e2e, 50),
        slowest=by_e2e[-1] if by_e2e else None,
    )


def _num(v: float | None, scale: float) -> str:
    if v is None:
        return "-"
    x = v * scale
    return f"{x:.1f}" if abs(x) < 1000 else f"{x:.0f}"


def _phases(sample: Sample) -> list[str]:
    totals: dict[str, float] = {}
    for name, _, d in sample.phases:
        totals[name] = totals.get(name, 0.0) + d
    return [f"{name} {d * 1000:.1f}" for name, d in totals.items()]


def render_summary(s: Summary, description: str, width: int = DEFAULT_WIDTH) -> str:
    """One target's block, every line within ``width`` columns (values are never broken)."""
    lines = wrap(f"{s.target}: {description}", width, subsequent="  ")
    err = ", ".join(f"{k} {v}" for k, v in sorted(s.errors.items())) or "0"
    hit = "-" if s.cache_hit_ratio is None else f"{s.cache_hit_ratio:.0%}"
    setup = "-" if s.setup_share is None else f"{s.setup_share:.1%}"
    facts = [f"requests {s.n}", f"ok {s.ok}", f"errors {err}", f"retries {s.retries}", f"cache hit {hit}"]
    lines += pack([*facts, f"connection set-up {setup} of end-to-end"], width, indent="  ")
    if s.ok == 0:
        lines += wrap("  (no request succeeded: no latencies to show)", width, subsequent="   ")
        return "\n".join(lines)
    if s.ok < s.n:
        lines += wrap(
            f"  (the percentiles are of the {s.ok} ok requests; the {s.n - s.ok} failed are left out)",
            width,
            subsequent="   ",
        )
    header = ("", "n", *(f"p{p}" for p in QUANTILES), "max")
    rows: list[tuple[str, ...]] = [header]
    for metric, label, scale in METRICS:
        q = s.quantiles[metric]
        n = int(q["n"] or 0)
        if n == 0:
            continue
        rows.append(
            (label, str(n), *(_num(q[f"p{p}"], scale) for p in QUANTILES), _num(q["max"], scale)),
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [c.rjust(widths[i]) for i, c in enumerate(row) if i > 0]
        lines.append("  " + "  ".join(cells).rstrip())
    for label, sample in (("median", s.median), ("slowest", s.slowest)):
        if sample is not None and sample.e2e_s is not None:
            lines.append(f"  {label} request #{sample.seq} ({sample.e2e_s * 1000:.1f} ms), ms:")
            lines += pack(_phases(sample), width, indent="    ")
    return "\n".join(lines)


# -- comparisons ------------------------------------------------------------------------------


def bootstrap_ratio(
    a: Sequence[float], b: Sequence[float], q: float, *, rounds: int = 2000, seed: int = 0, level: float = 0.95
) -> tuple[float, float, float] | None:
    """Ratio of the q-th percentiles of ``a`` and ``b`` with a percentile-bootstrap interval."""
    if len(a) < 2 or len(b) < 2:
        return None
    pa, pb = percentile(a, q), percentile(b, q)
    if pa is None or pb is None or pb == 0:
        return None
    rng = random.Random(seed)
    ratios = []
    for _ in range(rounds):
        ra = percentile([a[rng.randrange(len(a))] for _ in a], q)
        rb = percentile([b[rng.randrange(len(b))] for _ in b], q)
        if ra is not None and rb:
            ratios.append(ra / rb)
    tail = (1 - level) / 2 * 100
    low, high = percentile(ratios, tail), percentile(ratios, 100 - tail)
    assert low is not None and high is not None
    return pa / pb, low, high


def compare(names: Sequence[str], by_target: dict[str, list[Sample]], seed: int) -> list[dict[str, Any]]:
    """Every target against the first, on TTFT and end-to-end at p50 and p95."""
    base = names[0]
    out = []
    for other in names[1:]:
        for metric in ("ttft_s", "e2e_s"):
            a = values([s for s in by_target.get(other, []) if not s.warmup], metric)
            b = values([s for s in by_target.get(base, []) if not s.warmup], metric)
            for q in (50, 95):
                r = bootstrap_ratio(a, b, q, seed=seed)
                if r is not None:
                    out.append(
                        {
                            "a": other,
                            "b": base,
                            "metric": metric,
                            "quantile": q,
                            "ratio": r[0],
                            "low": r[1],
                            "high": r[2],
                        }
                    )
    return out


def verdict(row: dict[str, Any]) -> str:
    """What a comparison row says: slower or faster only when its whole interval is past 1."""
    if row["low"] > 1:
        return f"{row['a']} slower"
    if row["high"] < 1:
        return f"{row['a']} faster"
    return "no clear difference"


def render_compare(rows: Sequence[dict[str, Any]]) -> str:
    lines = ["Comparison (interleaved; ratio of percentiles with 95% bootstrap interval):"]
    for r in rows:
        metric = "TTFT" if r["metric"] == "ttft_s" else "end-to-end"
        lines.append(
            f"  {metric} p{r['quantile']}: {r['a']} / {r['b']} = {r['ratio']:.2f} "
            f"[{r['low']:.2f}, {r['high']:.2f}]  ({verdict(r)})"
        )
    return "\n".join(lines)


# -- races ------------------------------------------------------------------------------------


def race_summary(label: str, names: Sequence[str], samples: Sequence[Sample]) -> dict[str, Any]:
    raced = [s for s in samples if not s.warmup and s.race is not None]
    wins: dict[str, int] = dict.fromkeys(names, 0)
    wasted_in = wasted_out = used = 0
    for s in raced:
        info = s.race or {}
        if info.get("winner") in wins:
            wins[info["winner"]] += 1
        wasted_in += info.get("wasted_input_tokens", 0)
        wasted_out += info.get("wasted_output_tokens", 0)
        used += info.get("used_tokens", 0)
    decided = sum(wins.values())
    wasted = wasted_in + wasted_out
    return {
        "label": label,
        "requests": len(raced),
        "wins": wins,
        "win_share": {n: (w / decided if decided else None) for n, w in wins.items()},
        "wasted_input_tokens": wasted_in,
        "wasted_output_tokens": wasted_out,
        "wasted_share": wasted / (wasted + used) if wasted + used else None,
    }


def render_race(info: dict[str, Any], summaries: dict[str, Summary]) -> str:
    label = info["label"]
    lines = [f"Race {label}: each request sent to every contender at once, the first kept, the others cancelled"]
    for name in [label, *info["wins"]]:
        s = summaries.get(name)
        if s is None:
            continue
        q = s.quantiles["ttft_s"] if s.quantiles["ttft_s"]["n"] else s.quantiles["e2e_s"]
        what = "TTFT" if s.quantiles["ttft_s"]["n"] else "end-to-end"
        lines.append(
            f"  {name:<20} {what} ms p50 {_num(q['p50'], 1000)}  p95 {_num(q['p95'], 1000)}  p99 {_num(q['p99'], 1000)}"
            + (
                ""
                if name == label
                else f"  wins {info['win_share'][name]:.0%}"
                if info["win_share"][name] is not None
                else ""
            )
        )
    wasted = info["wasted_share"]
    lines.append(
        f"  wasted by the cancelled losers: {info['wasted_input_tokens']} input + {info['wasted_output_tokens']} "
        f"output tokens ({'-' if wasted is None else f'{wasted:.0%}'} of all tokens)"
    )
    return "\n".join(lines)


# -- from any recorded spans (firsttoken demo) -----------------------------------------------


def document_from_spans(spans: Iterable[Any], *, tool: str) -> dict[str, Any]:
    """A bench-shaped document (summaries and every call's timeline) from finished spans.

    Calls are grouped by provider and model; the HTML report reads this like a bench run's.
    """
    collector = Collector()
    calls = []
    for span in spans:
        collector.on_end(span)
        if is_call(span):
            calls.append(span)
    calls.sort(key=lambda c: c.start_time or 0)
    start = calls[0].start_time or 0 if calls else 0
    by_target: dict[str, list[Sample]] = {}
    for n, call in enumerate(calls):
        attrs = call.attributes or {}
        name = f"{attrs.get(sc.GEN_AI_PROVIDER_NAME, '?')} {attrs.get(sc.GEN_AI_REQUEST_MODEL, '?')}"
        sample = Sample(target=name, seq=n, warmup=False, start_s=0.0)
        fill(sample, call, collector, start)
        by_target.setdefault(name, []).append(sample)
    endpoints: set[str] = set()
    max_tokens: set[int] = set()
    streamed = {"streamed": 0, "not streamed": 0}
    for call in calls:
        attrs = call.attributes or {}
        host, port = attrs.get(sc.SERVER_ADDRESS), attrs.get(sc.SERVER_PORT)
        if host:
            endpoints.add(f"{attrs.get(sc.GEN_AI_PROVIDER_NAME, '?')} at {host}{'' if port is None else f':{port}'}")
        limit = attrs.get(sc.GEN_AI_REQUEST_MAX_TOKENS)
        if isinstance(limit, int):
            max_tokens.add(limit)
        streamed["streamed" if attrs.get(sc.GEN_AI_REQUEST_STREAM) else "not streamed"] += 1
    return {
        "tool": tool,
        "started": (calls[0].start_time or 0) / 1e9 if calls else None,
        "endpoints": sorted(endpoints),
        "max_tokens": sorted(max_tokens),
        "streamed": streamed,
        "versions": versions(),
        "summaries": {name: summarize(name, ss).as_json() for name, ss in sorted(by_target.items())},
        "requests": [s.as_json() for ss in by_target.values() for s in ss],
    }


VERSIONED = ("firsttoken", "openai", "anthropic", "httpx", "opentelemetry-sdk")


def versions() -> dict[str, str]:
    """The versions of what measured: firsttoken, the SDKs, httpx and the OpenTelemetry SDK, and Python."""
    import platform
    from importlib import metadata

    out = {"python": platform.python_version()}
    for name in VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


# -- files ------------------------------------------------------------------------------------


def write_json(path: str, document: dict[str, Any]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(document, f, indent=1)


def write_csv(path: str, samples: Sequence[Sample]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for s in samples:
            row = {k: getattr(s, k, None) for k in CSV_FIELDS if k not in ("winner", "phases")}
            row["winner"] = (s.race or {}).get("winner")
            row["phases"] = ";".join(f"{p}={d * 1000:.3f}" for p, _, d in s.phases)
            w.writerow(row)


__all__ = ["SETUP_PHASES", "Summary", "bootstrap_ratio", "compare", "summarize", "verdict", "versions"]
