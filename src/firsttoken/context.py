"""What the context carries to the hooks: the call in progress, and the app's action around it.

The call in progress is visible to the transport hooks below the SDK method that started it; the
action, traffic class and conversation set by :mod:`firsttoken.app` are read by the provider hooks
when a call starts.
"""

from __future__ import annotations

import threading
import time
from contextvars import ContextVar
from typing import Any

from .timeline import CallStart, Timeline

CURRENT_CALL: ContextVar[Timeline | None] = ContextVar("firsttoken_current_call", default=None)

CALL_START: ContextVar[CallStart | None] = ContextVar("firsttoken_call_start", default=None)
"""The :data:`CallStart` of the SDK call the current code runs in (None: no public method was seen)."""

TRAFFIC_CLASS: ContextVar[str | None] = ContextVar("firsttoken_traffic_class", default=None)
CONVERSATION_ID: ContextVar[str | None] = ContextVar("firsttoken_conversation_id", default=None)
CURRENT_ACTION: ContextVar[ActionState | None] = ContextVar("firsttoken_action", default=None)


# -- what an action learns from its calls ---------------------------------------------------------

MAX_INTERVALS = 4096
"""Call intervals an action keeps before folding the older ones into a settled busy time."""
_KEEP_AFTER_FOLD = 64


class ActionState:
    """The LLM calls an action made, gathered from whatever thread or task finished them.

    Memory is bounded: past :data:`MAX_INTERVALS` calls, the union of all but the latest intervals
    is folded into a number. A call that ends later but started before the fold only adds the part
    after it (the busy time may then be slightly low; counts and summed time stay exact).
    """

    __slots__ = (
        "_folded_until",
        "_intervals",
        "_lock",
        "_settled_busy_ns",
        "calls",
        "name",
        "parent",
        "recorder",
        "span",
        "start_ns",
        "total_ns",
        "traffic_class",
    )

    def __init__(self, name: str, traffic_class: str | None, parent: ActionState | None = None) -> None:
        self.name = name
        self.traffic_class = traffic_class
        self.parent = parent
        self.start_ns = time.perf_counter_ns()
        self.span: Any = None
        self.recorder: Any = None
        self.calls = 0
        self.total_ns = 0
        self._intervals: list[tuple[int, int]] = []
        self._settled_busy_ns = 0
        self._folded_until = self.start_ns
        self._lock = threading.Lock()

    def add_call(self, start_ns: int, end_ns: int) -> None:
        """A call made inside this action ended; the actions around this one count it too."""
        state: ActionState | None = self
        while state is not None:
            state._add(start_ns, end_ns)
            state = state.parent

    def _add(self, start_ns: int, end_ns: int) -> None:
        start_ns = max(start_ns, self.start_ns)
        with self._lock:
            self.calls += 1
            self.total_ns += max(0, end_ns - start_ns)
            start_ns = max(start_ns, self._folded_until)
            if end_ns > start_ns:
                self._intervals.append((start_ns, end_ns))
                if len(self._intervals) > MAX_INTERVALS:
                    merged = _union(self._intervals)
                    old, self._intervals = merged[:-_KEEP_AFTER_FOLD], merged[-_KEEP_AFTER_FOLD:]
                    self._settled_busy_ns += sum(e - s for s, e in old)
                    self._folded_until = self._intervals[0][0]

    def llm_summary(self, end_ns: int) -> tuple[int, int, int]:
        """(calls, summed call time, time at least one call was in flight), within the action."""
        with self._lock:
            intervals = [(s, min(e, end_ns)) for s, e in self._intervals]
            calls, total, settled = self.calls, self.total_ns, self._settled_busy_ns
        return calls, total, settled + sum(e - s for s, e in _union(intervals))


def _union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, disjoint intervals covering the same time as ``intervals``."""
    merged: list[tuple[int, int]] = []
    for s, e in sorted(intervals):
        if e <= s:
            continue
        if merged and s <= merged[-1][1]:
            if e > merged[-1][1]:
                merged[-1] = (merged[-1][0], e)
        else:
            merged.append((s, e))
    return merged
