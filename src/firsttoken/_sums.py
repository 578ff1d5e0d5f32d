"""Counters summed in-process and reported by observable counters when metrics are collected.

A synchronous OpenTelemetry counter costs several microseconds per ``add`` in the Python SDK
(attribute hashing, aggregation lookup, exemplar offering), and firsttoken adds to about half a
dozen of them per call. Counters need no exemplars, so firsttoken sums them itself, for all the
counters of a call under one lock (:func:`add_all`), and hands the totals to the SDK at collection
time. The exported data is the same: monotonic, cumulative sums with the same names, units and
attributes.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterable

from opentelemetry.metrics import CallbackOptions, Meter, Observation
from opentelemetry.util.types import AttributeValue

Key = tuple[tuple[str, AttributeValue], ...]
"""A series: its attributes as ``tuple(attributes.items())`` (cheaper to build than a frozenset)."""

_LOCK = threading.Lock()
_counters: weakref.WeakSet[SummedCounter] = weakref.WeakSet()


class SummedCounter:
    """A monotonic counter summed in-process, reported through an observable counter; added to
    with :func:`add_all`."""

    __slots__ = ("__weakref__", "_sums")

    def __init__(self, meter: Meter, name: str, *, unit: str, description: str) -> None:
        self._sums: dict[Key, float] = {}
        _counters.add(self)
        meter.create_observable_counter(name, callbacks=[self._observe], unit=unit, description=description)

    def _observe(self, options: CallbackOptions) -> Iterable[Observation]:
        with _LOCK:
            items = list(self._sums.items())
        # The same attributes may have been added in another order: one series each.
        merged: dict[frozenset[tuple[str, AttributeValue]], float] = {}
        for key, value in items:
            series = frozenset(key)
            merged[series] = merged.get(series, 0) + value
        return [Observation(value, dict(series)) for series, value in merged.items()]


def add_all(entries: Iterable[tuple[SummedCounter, float, Key]]) -> None:
    """Add to several counters at once: ``(counter, amount, key)``; negative amounts are ignored."""
    with _LOCK:
        for counter, amount, key in entries:
            if amount >= 0:
                sums = counter._sums
                sums[key] = sums.get(key, 0) + amount


def _start_afresh() -> None:
    """A forked child (a pool worker, a pre-forking server's worker) counts from zero: the parent's calls
    are the parent's to report; a child that kept them would report them again as its own, once per
    worker. The lock is made anew too: another thread of the parent may have held it at the fork."""
    global _LOCK
    _LOCK = threading.Lock()
    for counter in list(_counters):
        counter._sums = {}


os.register_at_fork(after_in_child=_start_afresh)
