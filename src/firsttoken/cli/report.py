"""The terminal report: per model, latency percentiles, tokens and cache hits, read from spans."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import semconv as sc


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
    for (provider, model), s in sorted(stats.items()):
        ratio = s.cache_hit_ratio
        rows.append(
            (
                provider,
                model,
                str(s.calls),
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
    return "\n".join(lines)
