"""The terminal report: per model, latency percentiles, tokens and cache hits, read from spans."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import semconv as sc

P95_MIN_CALLS = 20
"""Below this many calls a p95 is the slowest call or next to it (1 in 20 calls is slower)."""
P99_MIN_CALLS = 100
"""Below this many calls a p99 is the slowest call or next to it."""


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in [0, 100]) of unsorted values; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass
class ModelStats:
    """What the report shows for one (provider, model)."""

    calls: int = 0
    streamed: int = 0
    errors: int = 0
    ttft: list[float] = field(default_factory=list)
    tpot: list[float] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)
    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0

    @property
    def cache_hit_ratio(self) -> float | None:
        return self.cached_tokens / self.input_tokens if self.input_tokens else None


def collect(spans: Iterable[Any]) -> dict[tuple[str, str], ModelStats]:
    """Group finished call spans (the CLIENT spans firsttoken made) by provider and model."""
    stats: dict[tuple[str, str], ModelStats] = {}
    for span in spans:
        attrs = span.attributes or {}
        if sc.GEN_AI_OPERATION_NAME not in attrs or sc.FT_PHASE in attrs:
            continue
        key = (str(attrs.get(sc.GEN_AI_PROVIDER_NAME, "?")), str(attrs.get(sc.GEN_AI_REQUEST_MODEL, "?")))
        entry = stats.setdefault(key, ModelStats())
        entry.calls += 1
        if attrs.get(sc.GEN_AI_REQUEST_STREAM):
            entry.streamed += 1
        if sc.ERROR_TYPE in attrs:
            entry.errors += 1
        if span.end_time is not None and span.start_time is not None:
            entry.e2e.append((span.end_time - span.start_time) / 1e9)
        ttft = attrs.get(sc.FT_TIME_TO_FIRST_TOKEN)
        if isinstance(ttft, float):
            entry.ttft.append(ttft)
        tpot = attrs.get(sc.FT_TIME_PER_OUTPUT_TOKEN)
        if isinstance(tpot, float):
            entry.tpot.append(tpot)
        for attr, name in (
            (sc.GEN_AI_USAGE_INPUT_TOKENS, "input_tokens"),
            (sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, "cached_tokens"),
            (sc.GEN_AI_USAGE_OUTPUT_TOKENS, "output_tokens"),
        ):
            value = attrs.get(attr)
            if isinstance(value, int):
                setattr(entry, name, getattr(entry, name) + value)
    return stats


def _ms_triplet(values: Sequence[float]) -> str:
    if not values:
        return "-"
    parts = []
    for q in (50, 95, 99):
        v = percentile(values, q)
        assert v is not None
        ms = v * 1000.0
        parts.append(f"{ms:.1f}" if ms < 100 else f"{ms:.0f}")
    return " / ".join(parts)


def render(stats: dict[tuple[str, str], ModelStats], *, title: str) -> str:
    """A fixed-width table, one row per provider and model."""
    header = (
        "provider",
        "model",
        "calls",
        "stream",
        "err",
        "TTFT ms p50/p95/p99",
        "TPOT ms p50/p95/p99",
        "end-to-end ms p50/p95/p99",
        "in tok",
        "out tok",
        "cache hit",
    )
    rows: list[tuple[str, ...]] = [header]
    few = set()
    for (provider, model), s in sorted(stats.items()):
        ratio = s.cache_hit_ratio
        mark = "*" if s.calls < P95_MIN_CALLS else "+" if s.calls < P99_MIN_CALLS else ""
        if mark:
            few.add(mark)
        rows.append(
            (
                provider,
                model,
                f"{s.calls}{mark}",
                str(s.streamed),
                str(s.errors),
                _ms_triplet(s.ttft),
                _ms_triplet(s.tpot),
                _ms_triplet(s.e2e),
                str(s.input_tokens),
                str(s.output_tokens),
                "-" if ratio is None else f"{ratio:.0%}",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    left = {0, 1}
    lines = [title, ""]
    for n, row in enumerate(rows):
        cells = [c.ljust(widths[i]) if i in left else c.rjust(widths[i]) for i, c in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    if few:
        lines.append("")
        if "*" in few:
            lines.append(
                f"* fewer than {P95_MIN_CALLS} calls: p95 and p99 are about the slowest call, not a percentile of many"
            )
        if "+" in few:
            lines.append(f"+ fewer than {P99_MIN_CALLS} calls: p99 is about the slowest call")
    return "\n".join(lines)


def _phase_ms(ns: int) -> str:
    ms = ns / 1e6
    return f"{ms:.1f}" if ms < 10 else f"{ms:.0f}"


def where_the_time_went(spans: Iterable[Any]) -> list[str]:
    """The phases of the median and of the slowest call (by end-to-end), from the phase durations
    firsttoken puts on every call span: where each one's time went. Empty when no call has them."""
    prefix = sc.FT_PHASE_DURATION_PREFIX
    calls = sorted(
        (
            s
            for s in spans
            if s.attributes
            and sc.GEN_AI_OPERATION_NAME in s.attributes
            and sc.FT_PHASE not in s.attributes
            and s.end_time is not None
            and s.start_time is not None
            and any(key.startswith(prefix) for key in s.attributes)
        ),
        key=lambda s: s.end_time - s.start_time,
    )
    if not calls:
        return []
    picks = [("median call", calls[(len(calls) - 1) // 2]), ("slowest call", calls[-1])]
    lines = [f"Where the time went, by the phases firsttoken recorded ({len(calls)} calls):"]
    for label, call in picks:
        attrs = call.attributes
        total = call.end_time - call.start_time
        kind = "streamed" if attrs.get(sc.GEN_AI_REQUEST_STREAM) else "not streamed"
        parts = []
        for key, value in attrs.items():  # recorded in the order the phases happened
            if key.startswith(prefix) and isinstance(value, (int, float)):
                took = value * 1e9
                share = took / total if total else 0.0
                parts.append(f"{key[len(prefix) :]} {_phase_ms(int(took))} ms ({share:.0%})")
        lines.append(f"  {label}: {attrs.get(sc.GEN_AI_REQUEST_MODEL, '?')}, {kind}, {_phase_ms(total)} ms")
        lines.append(textwrap.fill(", ".join(parts), width=110, initial_indent="    ", subsequent_indent="    "))
    return lines
