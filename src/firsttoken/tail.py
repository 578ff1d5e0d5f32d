"""Which calls get a waterfall: the slow tail of each kind of call, in-process and cheap.

A call's phase child spans cost as much to build and export as the call span itself several times
over, and only the calls a person drills into need them: the slow ones. A call's end is known when
its spans are built, so firsttoken decides then. "Slow" is over the call's traffic-class targets
when its class has some, otherwise relative to the same kind of call (the same provider, operation,
model and streaming): above the running 90th percentile of its recent calls, kept here per kind
from a window of the last calls and recomputed every few calls.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable

QUANTILE = 0.9
"""Calls above this quantile of their kind's recent calls are slow."""
WINDOW = 128
"""Recent calls per kind the quantile is taken over."""
MIN_CALLS = 16
"""Calls of a kind seen before any of them is called slow (a few calls make no tail)."""
EVERY = 16
"""The quantile is recomputed after this many calls of a kind (a sort of WINDOW floats)."""
MAX_KINDS = 1024
"""Kinds tracked at once; past that (models named per call), tracking starts over."""

# The latency targets of prometheus/rules/targets.yml, by traffic class ("" = calls without one, or
# of a class not listed), as the Collector's tail-sampling policies use them (scripts/stack/sampling.py;
# a test holds them equal): a call over its class's target keeps its trace there, so it gets its
# waterfall here.
TTFT_TARGETS: dict[str, float] = {"": 2.0, "interactive": 1.0, "async": 5.0, "batch": 10.0}
"""Seconds to first token (the p95 target) by traffic class."""
E2E_TARGETS: dict[str, float] = {"": 40.96, "interactive": 20.48, "async": 40.96, "batch": 40.96}
"""Seconds end to end (the p99 target) by traffic class."""
SLOW_TPOT_S = 0.1
"""Time per output token over this (under 10 tokens/s) is a slow decode, as for the Collector."""
SLOW_CONNECT_S = 0.1
"""Connection set-up (DNS, TCP, TLS and the rest) over this many seconds earns a waterfall."""


class _Window:
    __slots__ = ("seen", "threshold", "values")

    def __init__(self) -> None:
        self.values: list[float] = []
        self.seen = 0
        self.threshold: float | None = None


class SlowTail:
    """Per kind of call, whether a value (TTFT or duration) is in its slowest tenth of late."""

    def __init__(self) -> None:
        self._kinds: dict[Hashable, _Window] = {}
        self._lock = threading.Lock()

    def is_slow(self, kind: Hashable, value: float) -> bool:
        """Whether ``value`` is above the kind's running quantile; then counts it in."""
        with self._lock:
            window = self._kinds.get(kind)
            if window is None:
                if len(self._kinds) >= MAX_KINDS:
                    self._kinds = {}
                window = self._kinds[kind] = _Window()
            threshold = window.threshold
            values = window.values
            if len(values) < WINDOW:
                values.append(value)
            else:
                values[window.seen % WINDOW] = value
            window.seen += 1
            if window.seen >= MIN_CALLS and window.seen % EVERY == 0:
                ordered = sorted(values)
                window.threshold = ordered[int(QUANTILE * len(ordered))]
        return threshold is not None and value > threshold
