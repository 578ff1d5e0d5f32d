"""Which calls get a waterfall: the slow tail of each kind of call, in-process and cheap.

A call's phase child spans cost as much to build and export as the call span itself several times
over, and only the calls a person drills into need them: the slow ones. A call's end is known when
its spans are built, so firsttoken decides then. "Slow" is over the call's traffic-class targets
when its class has some, otherwise relative to the same kind of call (the same provider, operation,
model and streaming): above the running 90th percentile of its recent calls and clearly above
their median, kept here per kind from a window of the last calls and recomputed every few calls.

The margin over the median matters when the calls of a kind are all alike (a steady server, a
cache, a local model): then the p90 is barely above the median, and a slow drift between two
recomputations (a warming cache, a filling batch, a clock of a few percent) puts most calls above
the p90 of the calls before them, which would hand a waterfall to most calls instead of a tenth.
A call must be MARGIN over the median too, and a kind whose calls cross the threshold far more
often than a tenth of the time gets it recomputed at once rather than at the next round.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable

from . import semconv as sc
from .targets import Targets
from .timeline import Timeline

QUANTILE = 0.9
"""Calls above this quantile of their kind's recent calls are slow."""
WINDOW = 128
"""Recent calls per kind the quantile is taken over."""
MIN_CALLS = 16
"""Calls of a kind seen before any of them is called slow (a few calls make no tail)."""
EVERY = 16
"""The quantile is recomputed after this many calls of a kind (a sort of WINDOW floats)."""
MARGIN = 0.25
"""A slow call is also this much (a fraction) over its kind's running median: among calls that are
all alike, being above the p90 by a hair is not slow."""
OVER_LIMIT = 3
"""Calls over the threshold since it was computed that make it stale: recomputed at the next call.
A tenth of EVERY calls is 1.6 on average; 3 in a row of 16 means the kind drifted."""
MAX_KINDS = 1024
"""Kinds tracked at once; past that (models named per call), tracking starts over."""
BURST = 32.0
"""Waterfalls that may be given in a row, beyond the share, after a quiet stretch."""

SLOW_TPOT_S = 0.1
"""Time per output token over this (under 10 tokens/s) is a slow decode, as for the Collector."""
SLOW_CONNECT_S = 0.1
"""Connection set-up (DNS, TCP, TLS and the rest) over this many seconds earns a waterfall."""


class _Window:
    __slots__ = ("over", "seen", "since", "threshold", "values")

    def __init__(self) -> None:
        self.values: list[float] = []
        self.seen = 0
        self.since = 0
        """Calls since the threshold was computed."""
        self.over = 0
        """Of those, calls over it."""
        self.threshold: float | None = None


class SlowTail:
    """Per kind of call, whether a value (TTFT or duration) is in its slowest tenth of late, and
    clearly above its median."""

    def __init__(self) -> None:
        self._kinds: dict[Hashable, _Window] = {}
        self._lock = threading.Lock()

    def is_slow(self, kind: Hashable, value: float) -> bool:
        """Whether ``value`` is above the kind's running quantile and MARGIN over its running median;
        then counts it in."""
        with self._lock:
            window = self._kinds.get(kind)
            if window is None:
                if len(self._kinds) >= MAX_KINDS:
                    self._kinds = {}
                window = self._kinds[kind] = _Window()
            threshold = window.threshold
            slow = threshold is not None and value > threshold
            values = window.values
            if len(values) < WINDOW:
                values.append(value)
            else:
                values[window.seen % WINDOW] = value
            window.seen += 1
            window.since += 1
            if slow:
                window.over += 1
            if window.seen >= MIN_CALLS and (window.since >= EVERY or window.over >= OVER_LIMIT):
                ordered = sorted(values)
                window.threshold = max(
                    ordered[int(QUANTILE * len(ordered))], ordered[len(ordered) // 2] * (1.0 + MARGIN)
                )
                window.since = window.over = 0
        return slow


class Budget:
    """At most ``share`` of the calls, over time, get a waterfall, however many are in the tail.

    Under overload (an app past its CPU ceiling, a provider slowing down) most calls are over their
    targets, and phase spans for each would cost the app most when it can least afford it: building
    them is more work than the call span, and they are alive until exported. Each finished call adds
    ``share`` to a bucket holding at most BURST; a call in the tail takes one from it, or, when it
    holds less than one, gets no phase spans (its phase durations stay on its span as attributes,
    and the span says it was capped). Unlocked: two threads finishing calls at the same instant may
    miscount a credit between them, which the following calls even out; it never raises.
    """

    __slots__ = ("share", "tokens")

    def __init__(self, share: float) -> None:
        self.share = share
        self.tokens = BURST

    def credit(self) -> None:
        """One more finished call."""
        tokens = self.tokens + self.share
        self.tokens = tokens if tokens < BURST else BURST

    def take(self) -> bool:
        """Whether a call in the tail gets its waterfall (and takes a credit for it)."""
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


def in_tail(tl: Timeline, totals: dict[str, int], slow: SlowTail, targets: Targets) -> bool:
    """Whether a call is one someone will drill into: failed, retried, slow to connect, over the
    targets the Collector keeps traces for (the same ones: firsttoken.targets), or, outside a
    traffic class with targets, slow for its kind (above the running p90)."""
    if tl.error_type or tl.attempts > 1:
        return True
    setup = 0
    for name, ns in totals.items():
        if name in sc.CONNECTION_SETUP_PHASES:
            setup += ns
    if setup > SLOW_CONNECT_S * 1e9:
        return True
    duration = tl.duration_s
    if duration is None:
        return False
    ttft = tl.time_to_first_token_s if tl.stream else None
    if tl.stream:
        tpot = tl.time_per_output_token_s
        if tpot is not None and tpot > SLOW_TPOT_S:
            return True
    traffic_class = tl.traffic_class or ""
    if duration > targets.e2e_for(traffic_class):
        return True
    if ttft is not None and ttft > targets.ttft_for(traffic_class):
        return True
    if targets.names(traffic_class):
        return False  # a class with targets: slow means over them
    kind = (tl.provider, tl.operation, tl.request_model, tl.stream, traffic_class)
    return slow.is_slow(kind, duration if ttft is None else ttft)
