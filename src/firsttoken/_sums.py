"""Counters summed in-process and reported by observable counters when metrics are collected.

A synchronous OpenTelemetry counter costs several microseconds per ``add`` in the Python SDK
(attribute hashing, aggregation lookup, exemplar offering), and firsttoken adds to about half a
dozen of them per call. Counters need no exemplars, so firsttoken sums them itself, for all the
counters of a call under one lock (:func:`add_all`), and hands the totals to the SDK at collection
time. The exported data is the same: monotonic, cumulative sums with the same names, units and
attributes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from opentelemetry.metrics import CallbackOptions, Meter, Observation
from opentelemetry.util.types import AttributeValue

Key = tuple[tuple[str, AttributeValue], ...]
"""A series: its attributes as ``tuple(attributes.items())`` (cheaper to build than a frozenset)."""

_LOCK = threading.Lock()


class SummedCounter:
    """A monotonic counter summed in-process, reported through an observable counter; added to
    with :func:`add_all`."""

    __slots__ = ("_sums",)

    def __init__(self, meter: Meter, name: str, *, unit: str, description: str) -> None:
        self._sums: dict[Key, float] = {}
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
