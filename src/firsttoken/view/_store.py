"""The viewer's SQLite store: LLM call spans, their phase spans and the user actions around them,
from any number of apps, kept within an age and a row bound."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from .. import semconv as sc
from ..charts import percentile
from ._otlp import SpanRecord

SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    span_id TEXT PRIMARY KEY, trace_id TEXT NOT NULL, parent_id TEXT, service TEXT, instance TEXT,
    name TEXT, provider TEXT, model TEXT, operation TEXT, traffic_class TEXT,
    start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, e2e REAL, ttft REAL, tpot REAL,
    failed INTEGER NOT NULL, end_reason TEXT, input_tokens INTEGER, output_tokens INTEGER,
    cache_read INTEGER, attrs TEXT
);
CREATE INDEX IF NOT EXISTS calls_start ON calls (start_ns);
CREATE INDEX IF NOT EXISTS calls_trace ON calls (trace_id);
CREATE INDEX IF NOT EXISTS calls_window ON calls (start_ns, model, provider, traffic_class, service, e2e, ttft, tpot,
    failed, input_tokens, cache_read);
CREATE INDEX IF NOT EXISTS calls_e2e ON calls (e2e);
CREATE INDEX IF NOT EXISTS calls_ttft ON calls (ttft);
CREATE INDEX IF NOT EXISTS calls_tpot ON calls (tpot);
CREATE TABLE IF NOT EXISTS spans (
    span_id TEXT PRIMARY KEY, trace_id TEXT NOT NULL, parent_id TEXT, kind TEXT NOT NULL, name TEXT,
    start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, failed INTEGER NOT NULL, attrs TEXT
);
CREATE INDEX IF NOT EXISTS spans_parent ON spans (parent_id, kind);
CREATE INDEX IF NOT EXISTS spans_trace ON spans (trace_id, kind);
CREATE INDEX IF NOT EXISTS spans_start ON spans (start_ns);
CREATE INDEX IF NOT EXISTS spans_kind ON spans (kind, start_ns);
"""

GROUPS = {"model": "model", "provider": "provider", "traffic_class": "traffic_class", "service": "service"}
"""What the summary can be grouped by: the column behind each choice."""

KIND_PHASE, KIND_ACTION, KIND_APP_PHASE = "phase", "action", "app_phase"

SPANS_PER_CALL = 16
"""Other spans kept per call the store may keep: a call's phase spans (up to 11) and its share of actions
and app phases. Phase spans whose call span never came count here too, so they are bounded as well."""
STATUS_MESSAGE = "otel.status_description"
"""Where a span's status message is kept among its stored attributes (the name OpenTelemetry gives it
in formats without a status field)."""
MAX_BYTES = 1 << 30
"""The database's pages in use, at most (``--max-db-mb``): ``max_calls`` bounds rows, not their attributes."""
FUTURE_S = 600
"""Spans starting further than this ahead of the viewer's clock are not stored: a skewed or hostile
sender would otherwise hold the newest places forever and push real calls out of the bounds."""


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _kind(attrs: dict[str, Any]) -> str | None:
    if sc.GEN_AI_OPERATION_NAME in attrs:
        return "call"
    if sc.FT_PHASE in attrs:
        return KIND_PHASE
    # An app phase inside an action carries the action's name too: its own attribute decides first.
    if sc.FT_APP_PHASE in attrs:
        return KIND_APP_PHASE
    if sc.FT_ACTION_NAME in attrs:
        return KIND_ACTION
    return None


class Store:
    """Thread-safe: one connection, one lock (SQLite writes are serial anyway)."""

    def __init__(
        self, path: str, *, max_age_s: float = 7 * 86400, max_calls: int = 200_000, max_bytes: int = MAX_BYTES
    ) -> None:
        self.path = path
        self.max_age_s = max_age_s
        self.max_calls = max_calls
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False)
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(SCHEMA)
            # Stores written before app phases were told from actions: put them right.
            self._db.execute(
                "UPDATE spans SET kind = ? WHERE kind = ? AND json_extract(attrs, ?) IS NOT NULL",
                (KIND_APP_PHASE, KIND_ACTION, f'$."{sc.FT_APP_PHASE}"'),
            )
            self._db.commit()
            (self._calls,) = self._db.execute("SELECT COUNT(*) FROM calls").fetchone()
            (self._spans,) = self._db.execute("SELECT COUNT(*) FROM spans").fetchone()
            (self._page_size,) = self._db.execute("PRAGMA page_size").fetchone()
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise sqlite3.DatabaseError(f"{path}: {exc}") from None
        self.refused_future = 0
        self._since_trim = 0

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- ingest -------------------------------------------------------------------------------

    def add(self, records: Iterable[SpanRecord], now_ns: int | None = None) -> int:
        """Store the spans firsttoken makes (calls, phases, actions, app phases), then hold the bounds;
        returns how many were stored. Spans dated more than ``FUTURE_S`` after ``now_ns`` are refused
        (counted in ``refused_future``)."""
        calls: list[tuple[Any, ...]] = []
        spans: list[tuple[Any, ...]] = []
        latest = (time.time_ns() if now_ns is None else now_ns) + FUTURE_S * 1_000_000_000
        for r in records:
            a = r.attributes
            kind = _kind(a)
            if kind is None:
                continue
            if r.start_ns > latest:
                self.refused_future += 1
                continue
            if r.status_message:
                a = {**a, STATUS_MESSAGE: r.status_message}
            if kind == "call":
                error = a.get(sc.ERROR_TYPE)
                calls.append(
                    (
                        r.span_id, r.trace_id, r.parent_id, r.service, r.instance, r.name,
                        a.get(sc.GEN_AI_PROVIDER_NAME), a.get(sc.GEN_AI_REQUEST_MODEL),
                        a.get(sc.GEN_AI_OPERATION_NAME), a.get(sc.FT_TRAFFIC_CLASS),
                        r.start_ns, r.end_ns, (r.end_ns - r.start_ns) / 1e9,
                        _num(a.get(sc.FT_TIME_TO_FIRST_TOKEN)), _num(a.get(sc.FT_TIME_PER_OUTPUT_TOKEN)),
                        1 if (r.error or error is not None) else 0, a.get(sc.FT_END_REASON),
                        _int(a.get(sc.GEN_AI_USAGE_INPUT_TOKENS)), _int(a.get(sc.GEN_AI_USAGE_OUTPUT_TOKENS)),
                        _int(a.get(sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS)), json.dumps(a, default=str),
                    )
                )  # fmt: skip
            else:
                name = a.get(sc.FT_PHASE) if kind == KIND_PHASE else r.name
                spans.append(
                    (r.span_id, r.trace_id, r.parent_id, kind, str(name), r.start_ns, r.end_ns, int(r.error),
                     json.dumps(a, default=str))
                )  # fmt: skip
        with self._lock:
            self._db.executemany(f"INSERT OR REPLACE INTO calls VALUES ({','.join('?' * 21)})", calls)
            self._db.executemany("INSERT OR REPLACE INTO spans VALUES (?,?,?,?,?,?,?,?,?)", spans)
            # Counts from above (a replaced row counts twice): a real count is taken only when they pass a bound.
            self._calls += len(calls)
            self._spans += len(spans)
            self._since_trim += len(calls) + len(spans)
            if self._since_trim >= 5000:
                self._trim()
            elif self._calls > self.max_calls or self._spans > self.max_calls * SPANS_PER_CALL:
                self._trim_rows()
            self._trim_bytes()
            self._db.commit()
        return len(calls) + len(spans)

    def _trim_rows(self) -> None:
        """The oldest calls past ``max_calls`` and the oldest other spans past ``SPANS_PER_CALL`` times
        that, exactly (ties in start time broken by arrival), and the spans older than the oldest call kept."""
        (self._calls,) = self._db.execute("SELECT COUNT(*) FROM calls").fetchone()
        if self._calls > self.max_calls:
            self._db.execute(
                "DELETE FROM calls WHERE rowid IN (SELECT rowid FROM calls ORDER BY start_ns, rowid LIMIT ?)",
                (self._calls - self.max_calls,),
            )
            self._calls = self.max_calls
            (edge,) = self._db.execute("SELECT MIN(start_ns) FROM calls").fetchone()
            if edge is not None:
                self._db.execute("DELETE FROM spans WHERE start_ns < ?", (edge,))
        (self._spans,) = self._db.execute("SELECT COUNT(*) FROM spans").fetchone()
        limit = self.max_calls * SPANS_PER_CALL
        if self._spans > limit:
            self._db.execute(
                "DELETE FROM spans WHERE rowid IN (SELECT rowid FROM spans ORDER BY start_ns, rowid LIMIT ?)",
                (self._spans - limit,),
            )
            self._spans = limit

    def used_bytes(self) -> int:
        """The database's pages in use (freed pages are reused, so the file stays near this plus one request)."""
        (pages,) = self._db.execute("PRAGMA page_count").fetchone()
        (free,) = self._db.execute("PRAGMA freelist_count").fetchone()
        return int(pages - free) * int(self._page_size)

    def _trim_bytes(self) -> None:
        """While the pages in use pass ``max_bytes`` (large attributes): the oldest eighth of the calls, with
        the spans older than the oldest call kept, or the oldest eighth of the spans when no call is left."""
        if self.used_bytes() <= self.max_bytes:
            return
        while self.used_bytes() > self.max_bytes:
            (self._calls,) = self._db.execute("SELECT COUNT(*) FROM calls").fetchone()
            (self._spans,) = self._db.execute("SELECT COUNT(*) FROM spans").fetchone()
            if self._calls:
                self._db.execute(
                    "DELETE FROM calls WHERE rowid IN (SELECT rowid FROM calls ORDER BY start_ns, rowid LIMIT ?)",
                    (max(1, self._calls // 8),),
                )
                (edge,) = self._db.execute("SELECT MIN(start_ns) FROM calls").fetchone()
                if edge is not None:
                    self._db.execute("DELETE FROM spans WHERE start_ns < ?", (edge,))
            elif self._spans:
                self._db.execute(
                    "DELETE FROM spans WHERE rowid IN (SELECT rowid FROM spans ORDER BY start_ns, rowid LIMIT ?)",
                    (max(1, self._spans // 8),),
                )
            else:
                return
        (self._calls,) = self._db.execute("SELECT COUNT(*) FROM calls").fetchone()
        (self._spans,) = self._db.execute("SELECT COUNT(*) FROM spans").fetchone()

    def _trim(self) -> None:
        """Drop what is older than the age bound, and what is dated too far ahead (stored before that
        was refused), then hold the row bounds."""
        self._since_trim = 0
        now = time.time_ns()
        cutoff = now - int(self.max_age_s * 1e9)
        latest = now + FUTURE_S * 1_000_000_000
        for table in ("calls", "spans"):
            self._db.execute(f"DELETE FROM {table} WHERE start_ns < ? OR start_ns > ?", (cutoff, latest))
        self._trim_rows()
        self._trim_bytes()

    def trim(self) -> None:
        with self._lock:
            self._trim()
            self._db.commit()

    # -- queries ------------------------------------------------------------------------------

    def _rows(self, sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]:
        with self._lock:
            cur = self._db.execute(sql, args)
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM calls").fetchone()[0])

    def span_count(self) -> int:
        """Phase, action and app phase spans stored."""
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM spans").fetchone()[0])

    def _window(self, since_ns: int, group: str) -> list[tuple[Any, ...]]:
        """(group key, start, e2e, ttft, tpot, failed, input tokens, cache reads) of the calls since ``since_ns``."""
        column = GROUPS[group]
        with self._lock:
            return self._db.execute(
                f"SELECT {column}, start_ns, e2e, ttft, tpot, failed, input_tokens, cache_read "
                "FROM calls WHERE start_ns >= ?",
                (since_ns,),
            ).fetchall()

    def summary(self, since_ns: int, group: str, rows: list[tuple[Any, ...]] | None = None) -> list[dict[str, Any]]:
        """Per group: calls, failures, cache hits, TTFT/TPOT/end-to-end percentiles of successful calls."""
        by: dict[str, list[tuple[Any, ...]]] = {}
        for row in self._window(since_ns, group) if rows is None else rows:
            by.setdefault("(none)" if row[0] is None else str(row[0]), []).append(row)
        out = []
        for key, items in sorted(by.items()):
            ok = [r for r in items if not r[5]]
            inputs = sum(r[6] or 0 for r in ok)
            cached = sum(r[7] or 0 for r in ok)
            entry: dict[str, Any] = {
                "key": key,
                "calls": len(items),
                "failed": len(items) - len(ok),
                "cache_hit": cached / inputs if inputs else None,
            }
            for name, index in (("ttft", 3), ("tpot", 4), ("e2e", 2)):
                values = sorted(r[index] for r in ok if r[index] is not None)
                for q in (50, 95, 99):
                    entry[f"{name}_p{q}"] = percentile(values, q)  # sorted already: each call is linear
            out.append(entry)
        return out

    @staticmethod
    def buckets(since_ns: int, until_ns: int, buckets: int = 30) -> tuple[int, int]:
        """(first bucket's start, bucket width): ``buckets`` slices of the window fixed in absolute
        time (multiples of the width), the last one holding ``until_ns``, so that the same calls fall in
        the same slices whenever the page asks."""
        width = max(1, (until_ns - since_ns) // buckets)
        return (until_ns // width - buckets + 1) * width, width

    def series(
        self, since_ns: int, until_ns: int, group: str, buckets: int = 30, rows: list[tuple[Any, ...]] | None = None
    ) -> dict[str, Any]:
        """TTFT p95 and calls per second over time, per group, in ``buckets`` slices fixed in absolute
        time (see :meth:`buckets`; ``rows`` must reach back to the first one's start). The last slice,
        still filling, has its calls per second over the part of it that has passed."""
        first, width = self.buckets(since_ns, until_ns, buckets)
        cells: dict[str, list[list[float]]] = {}
        counts: dict[str, list[int]] = {}
        for r in self._window(first, group) if rows is None else rows:
            if r[1] < first:
                continue
            key = "(none)" if r[0] is None else str(r[0])
            i = min(buckets - 1, (r[1] - first) // width)
            if key not in cells:
                cells[key] = [[] for _ in range(buckets)]
                counts[key] = [0] * buckets
            counts[key][i] += 1
            if r[3] is not None and not r[5]:
                cells[key][i].append(r[3])
        times = [(first + width * (i + 0.5)) / 1e6 for i in range(buckets)]
        spans = [width / 1e9] * buckets
        spans[-1] = max(1.0, (until_ns - (first + width * (buckets - 1))) / 1e9)
        return {
            "t_ms": times,
            "bucket_s": width / 1e9,
            "groups": {
                key: {
                    "ttft_p95": [percentile(c, 95) for c in cs],
                    "calls_per_s": [n / s for n, s in zip(counts[key], spans, strict=True)],
                }
                for key, cs in sorted(cells.items())
            },
        }

    def overview(self, since_ns: int, until_ns: int, group: str, metric: str) -> dict[str, Any]:
        """What the page shows, from one read of the window's calls (reaching back to the first slice
        of the chart over time, which may start a little before the window)."""
        first, _ = self.buckets(since_ns, until_ns)
        rows = self._window(min(first, since_ns), group)
        return {
            "stored": self.count(),
            "summary": self.summary(since_ns, group, [r for r in rows if r[1] >= since_ns]),
            "actions": self.actions(since_ns),
            "series": self.series(since_ns, until_ns, group, rows=rows),
            "slowest": self.slowest(since_ns, metric, 20),
            "errors": self.errors(since_ns, 20),
        }

    def actions(self, since_ns: int) -> list[dict[str, Any]]:
        """Application end-to-end: per action name, count and p50/p95/p99 of its duration."""
        rows = self._rows(
            "SELECT name, (end_ns - start_ns) / 1e9 AS d, failed FROM spans WHERE kind = ? AND start_ns >= ?",
            (KIND_ACTION, since_ns),
        )
        by: dict[str, list[float]] = {}
        failed: dict[str, int] = {}
        for r in rows:
            by.setdefault(r["name"], []).append(r["d"])
            failed[r["name"]] = failed.get(r["name"], 0) + int(r["failed"])
        return [
            {
                "key": name,
                "actions": len(ds),
                "failed": failed[name],
                **{f"p{q}": percentile(ds, q) for q in (50, 95, 99)},
            }
            for name, ds in sorted(by.items())
        ]

    def slowest(self, since_ns: int, metric: str, limit: int) -> list[dict[str, Any]]:
        column = {"e2e": "e2e", "ttft": "ttft", "tpot": "tpot"}[metric]
        return self._rows(
            "SELECT span_id, trace_id, service, provider, model, traffic_class, start_ns, e2e, ttft, tpot, failed, "
            f"end_reason FROM calls WHERE start_ns >= ? AND {column} IS NOT NULL ORDER BY {column} DESC LIMIT ?",
            (since_ns, limit),
        )

    def errors(self, since_ns: int, limit: int) -> list[dict[str, Any]]:
        """The latest failed calls: when, app, provider, model, error type, HTTP status and the span's
        status message, newest first (a fast failure never ranks among the slowest calls)."""
        rows = self._rows(
            "SELECT span_id, service, provider, model, start_ns, e2e, end_reason, attrs FROM calls "
            "WHERE start_ns >= ? AND failed = 1 ORDER BY start_ns DESC LIMIT ?",
            (since_ns, limit),
        )
        for row in rows:
            attrs = json.loads(row.pop("attrs") or "{}")
            row["error_type"] = attrs.get(sc.ERROR_TYPE)
            row["status"] = attrs.get(sc.HTTP_RESPONSE_STATUS_CODE)
            row["message"] = attrs.get(STATUS_MESSAGE)
        return rows

    def call(self, span_id: str) -> dict[str, Any] | None:
        """One call: its attributes, its phases, and the user action around it with that action's other calls."""
        found = self._rows("SELECT * FROM calls WHERE span_id = ?", (span_id,))
        if not found:
            return None
        call = found[0]
        call["attrs"] = json.loads(call["attrs"] or "{}")
        phases = self._rows(
            "SELECT name, start_ns, end_ns FROM spans INDEXED BY spans_parent WHERE parent_id = ? AND kind = ? "
            "ORDER BY start_ns",
            (span_id, KIND_PHASE),
        )
        start = call["start_ns"]
        call["phases"] = [
            {
                "phase": p["name"],
                "start_s": (p["start_ns"] - start) / 1e9,
                "duration_s": (p["end_ns"] - p["start_ns"]) / 1e9,
            }
            for p in phases
        ]
        actions = self._rows(
            "SELECT span_id, name, start_ns, end_ns, failed FROM spans INDEXED BY spans_trace "
            "WHERE trace_id = ? AND kind = ? AND start_ns <= ? AND end_ns >= ? ORDER BY start_ns LIMIT 1",
            (call["trace_id"], KIND_ACTION, call["start_ns"], call["end_ns"]),
        )
        call["action"] = None
        if actions:
            action = actions[0]
            siblings = self._rows(
                "SELECT span_id, model, provider, start_ns, e2e, ttft, failed FROM calls "
                "WHERE trace_id = ? AND start_ns >= ? AND end_ns <= ? ORDER BY start_ns",
                (call["trace_id"], action["start_ns"], action["end_ns"]),
            )
            action["duration_s"] = (action["end_ns"] - action["start_ns"]) / 1e9
            action["calls"] = [
                {**s, "offset_s": (s["start_ns"] - action["start_ns"]) / 1e9} for s in siblings
            ]  # fmt: skip
            call["action"] = action
        return call
