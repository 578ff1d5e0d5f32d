"""The terminal report: per model, latency percentiles, tokens and cache hits, read from spans.

Everything here fits a given width (the terminal's, 100 columns when it is not a terminal): tables
that would not fit are split, and text wraps between values, never inside one.
"""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import semconv as sc
from ..charts import percentile

P95_MIN_CALLS = 20
"""Below this many calls a p95 is the slowest call or next to it (1 in 20 calls is slower)."""
P99_MIN_CALLS = 100
"""Below this many calls a p99 is the slowest call or next to it."""
DEFAULT_WIDTH = 100
"""Columns when the output is not a terminal (a pipe, a log file) and COLUMNS is not set."""
MIN_WIDTH = 72
"""Narrower terminals get this width: the tables cannot be made narrower without breaking values."""


def terminal_width() -> int:
    """The terminal's columns (``COLUMNS`` first), :data:`DEFAULT_WIDTH` without a terminal."""
    return max(MIN_WIDTH, shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns)


def wrap(text: str, width: int, *, indent: str = "", subsequent: str | None = None) -> list[str]:
    """Lines of at most ``width`` columns, broken at spaces only (a path or a number stays whole)."""
    return textwrap.wrap(
        text,
        width=width,
        initial_indent=indent,
        subsequent_indent=indent if subsequent is None else subsequent,
        break_long_words=False,
        break_on_hyphens=False,
    ) or [indent.rstrip()]


def pack(parts: Sequence[str], width: int, *, indent: str = "    ") -> list[str]:
    """``parts`` joined by commas into lines of at most ``width`` columns; a part is never split."""
    lines: list[str] = []
    line = ""
    for n, part in enumerate(parts):
        piece = part + ("," if n < len(parts) - 1 else "")
        candidate = f"{line} {piece}" if line else indent + piece
        if line and len(candidate) > width:
            lines.append(line)
            candidate = indent + piece
        line = candidate
    if line:
        lines.append(line)
    return lines


@dataclass
class ModelStats:
    """What the report shows for one (provider, model). Latencies are of successful calls only:
    a failed call is counted in ``errors``, its time (often retries, then a refusal) kept apart."""

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
    def ok(self) -> int:
        return self.calls - self.errors

    @property
    def cache_hit_ratio(self) -> float | None:
        return self.cached_tokens / self.input_tokens if self.input_tokens else None


def is_call(span: Any) -> bool:
    """A call span firsttoken made (not one of its phase spans)."""
    attrs = span.attributes or {}
    return sc.GEN_AI_OPERATION_NAME in attrs and sc.FT_PHASE not in attrs


def failed(span: Any) -> bool:
    """The call ended in an error the app saw (after the SDK's retries, if any)."""
    return sc.ERROR_TYPE in (span.attributes or {})


def collect(spans: Iterable[Any]) -> dict[tuple[str, str], ModelStats]:
    """Group finished call spans (the CLIENT spans firsttoken made) by provider and model."""
    stats: dict[tuple[str, str], ModelStats] = {}
    for span in spans:
        if not is_call(span):
            continue
        attrs = span.attributes or {}
        key = (str(attrs.get(sc.GEN_AI_PROVIDER_NAME, "?")), str(attrs.get(sc.GEN_AI_REQUEST_MODEL, "?")))
        entry = stats.setdefault(key, ModelStats())
        entry.calls += 1
        if attrs.get(sc.GEN_AI_REQUEST_STREAM):
            entry.streamed += 1
        if failed(span):
            entry.errors += 1
            continue  # counted apart: its time is not a latency of the model
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


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    ms = value * 1000.0
    return f"{ms:.1f}" if ms < 100 else f"{ms:.0f}"


def table(rows: Sequence[Sequence[str]], *, left: int = 1, groups: Sequence[tuple[str, int]] = ()) -> list[str]:
    """A fixed-width table: the first row is the header, the first ``left`` columns align left.

    ``groups`` puts a header line above the header: (label, columns it spans), in column order.
    """
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out: list[str] = []
    if groups:
        cells, col = [], 0
        for label, span in groups:
            short = len(label) - (sum(widths[col : col + span]) + 2 * (span - 1))
            for i in range(short if short > 0 else 0):  # widen the group's columns to hold its label
                widths[col + i % span] += 1
            cells.append(label.ljust(sum(widths[col : col + span]) + 2 * (span - 1)))
            col += span
        out.append("  ".join(cells).rstrip())
    for n, row in enumerate(rows):
        cells = [c.ljust(widths[i]) if i < left else c.rjust(widths[i]) for i, c in enumerate(row)]
        out.append("  ".join(cells).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return out


def fitted(rows: Sequence[Sequence[str]], width: int, *, left: int = 1) -> list[str]:
    """:func:`table`, split into tables of fewer columns (each repeating the first ``left``) when it
    is wider than ``width``, one under the other."""
    whole = table(rows, left=left)
    if max(len(line) for line in whole) <= width:
        return whole
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    keys = sum(widths[:left]) + 2 * left
    parts: list[list[int]] = [[]]
    for i in range(left, len(widths)):
        used = keys + sum(widths[j] + 2 for j in parts[-1])
        if parts[-1] and used + widths[i] > width:
            parts.append([])
        parts[-1].append(i)
    # As many tables as needed, with the columns shared out evenly (not a lone last column).
    values = list(range(left, len(widths)))
    size = -(-len(values) // len(parts))
    even = [values[n : n + size] for n in range(0, len(values), size)]
    if len(even) == len(parts) and all(keys + sum(widths[j] + 2 for j in cols) - 2 <= width for cols in even):
        parts = even
    out: list[str] = []
    for n, columns in enumerate(parts):
        picked = [*range(left), *columns]
        out += ([""] if n else []) + table([[row[i] for i in picked] for row in rows], left=left)
    return out


def render(stats: dict[tuple[str, str], ModelStats], *, title: str, width: int = DEFAULT_WIDTH) -> str:
    """Two tables, one row per provider and model: the calls, then their latency percentiles."""
    few = set()
    counts: list[tuple[str, ...]] = [
        ("provider", "model", "calls", "failed", "streamed", "input tok", "output tok", "cache hit")
    ]
    latency: list[tuple[str, ...]] = [("model", *(f"p{q}" for _ in range(3) for q in (50, 95, 99)))]
    for (provider, model), s in sorted(stats.items()):
        ratio = s.cache_hit_ratio
        mark = "*" if s.ok < P95_MIN_CALLS else "+" if s.ok < P99_MIN_CALLS else ""
        if mark:
            few.add(mark)
        counts.append(
            (
                provider,
                model,
                str(s.calls),
                str(s.errors),
                str(s.streamed),
                str(s.input_tokens),
                str(s.output_tokens),
                "-" if ratio is None else f"{ratio:.0%}",
            )
        )
        values = [_ms(percentile(v, q)) for v in (s.ttft, s.tpot, s.e2e) for q in (50, 95, 99)]
        latency.append((f"{model}{mark}", *values))
    lines = [*wrap(title, width), "", *fitted(counts, width, left=2), ""]
    lines += wrap(
        "Latency in ms of the calls that succeeded (failed calls are counted above, not timed here). "
        "TTFT and TPOT are of the streamed calls only, end-to-end of all of them: where a model was "
        "called both ways, its TTFT can be above its end-to-end.",
        width,
    )
    lines += [
        "",
        *table(latency, groups=(("", 1), ("TTFT", 3), ("TPOT", 3), ("end-to-end", 3))),
    ]
    if few:
        lines.append("")
        if "*" in few:
            lines += wrap(
                f"* fewer than {P95_MIN_CALLS} successful calls: p95 and p99 are about the slowest call, "
                "not a percentile of many",
                width,
            )
        if "+" in few:
            lines += wrap(f"+ fewer than {P99_MIN_CALLS} successful calls: p99 is about the slowest call", width)
    return "\n".join(lines)


def _phase_ms(ns: int) -> str:
    ms = ns / 1e6
    return f"{ms:.1f}" if ms < 10 else f"{ms:.0f}"


def where_the_time_went(spans: Iterable[Any], *, width: int = DEFAULT_WIDTH) -> list[str]:
    """The phases of the median and of the slowest successful call (by end-to-end), from the phase
    durations firsttoken puts on every call span: where each one's time went. Empty when no call
    has them. Failed calls are left out (their time is retries and a refusal), and said so."""
    prefix = sc.FT_PHASE_DURATION_PREFIX
    timed = [
        s
        for s in spans
        if is_call(s)
        and s.end_time is not None
        and s.start_time is not None
        and any(key.startswith(prefix) for key in (s.attributes or {}))
    ]
    calls = sorted((s for s in timed if not failed(s)), key=lambda s: s.end_time - s.start_time)
    if not calls:
        return []
    left_out = len(timed) - len(calls)
    picks = [("median call", calls[(len(calls) - 1) // 2]), ("slowest call", calls[-1])]
    head = f"Where the time went, by the phases firsttoken recorded ({len(calls)} successful calls"
    head += f"; {left_out} failed left out):" if left_out else "):"
    lines = wrap(head, width)
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
        lines += wrap(
            f"{label}: {attrs.get(sc.GEN_AI_REQUEST_MODEL, '?')}, {kind}, {_phase_ms(total)} ms",
            width,
            indent="  ",
            subsequent="    ",
        )
        lines += pack(parts, width)
    if any(f"{prefix}{sc.PHASE_WAIT_NO_OUTPUT}" in call.attributes for _, call in picks):
        lines += wrap(
            f"{sc.PHASE_WAIT_NO_OUTPUT}: the stream carried no output token (no TTFT): waiting for output that "
            "never came; for a reasoning model, hidden reasoning that used up the output budget",
            width,
            indent="  ",
            subsequent="  ",
        )
    return lines
