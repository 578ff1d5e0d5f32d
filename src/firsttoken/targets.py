"""Latency targets by traffic class: the one set of numbers the app and the stack share.

A user edits them in one file, the ``targets:`` of ``prometheus/slos.yml``; ``firsttoken stack
generate`` writes everything derived from it: the Prometheus target rules, the SLO rules and
alerts, the Collector's tail-sampling policies, the dashboards, and ``_targets.py``, the values
this package ships as its default. The app's tail policy (which calls get their phase spans) reads
the same numbers: the shipped ones, or the file the ``targets`` setting (``FIRSTTOKEN_TARGETS``)
names, so that the app and the Collector agree on which calls are slow.

Every target is a bucket bound of the histogram it is compared with (``semconv.TTFT_BUCKETS`` for
time to first token, ``DURATION_BUCKETS`` end to end) and lower than its last bound: then
"p99 over the target" means exactly "more than 1 % of the calls over it", and an SLO counts its
good calls from one bucket.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import semconv as sc
from ._targets import TARGETS as _SHIPPED

NAMES = ("ttft_p95", "ttft_p99", "e2e_p99")
"""The targets, each ``{traffic class: seconds}`` with a ``default`` for every other class."""
TTFT = "ttft_p95"
"""The target a call's time to first token is slow over (the app's tail, the Collector's sampling)."""
E2E = "e2e_p99"
"""The target a call's end-to-end duration is slow over."""
SOURCE = "prometheus/slos.yml"
"""Where a checkout keeps the targets, relative to its root."""

_CLASS = re.compile(r"[A-Za-z0-9_.:-]+")


class TargetsError(ValueError):
    """Targets that cannot be used: one line per bad value, each naming the value and what is valid."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


def record(name: str) -> str:
    """The Prometheus series a target is recorded as (``llm:target:ttft_p95_seconds``)."""
    return f"llm:target:{name}_seconds"


def histogram(name: str) -> tuple[str, tuple[float, ...]]:
    """The histogram a target is compared with, and its bucket bounds."""
    if name.startswith("ttft"):
        return sc.M_TIME_TO_FIRST_TOKEN, sc.TTFT_BUCKETS
    return sc.M_OPERATION_DURATION, sc.DURATION_BUCKETS


def _bounds(bounds: tuple[float, ...]) -> str:
    return ", ".join(f"{b:g}" for b in bounds[:-1])


def check(doc: Any, where: str) -> dict[str, dict[str, float]]:
    """The ``targets:`` mapping of a source file as ``{name: {traffic class ("" = default): seconds}}``;
    every bad value is a line of the :class:`TargetsError` raised."""
    if not isinstance(doc, Mapping):
        raise TargetsError([f"{where}: targets: expected a mapping of {', '.join(NAMES)}"])
    problems = [
        f"{where}: targets.{name}: unknown target (one of {', '.join(NAMES)})" for name in doc if name not in NAMES
    ]
    out: dict[str, dict[str, float]] = {}
    for name in NAMES:
        by_class = doc.get(name)
        if not isinstance(by_class, Mapping) or "default" not in by_class:
            problems.append(f"{where}: targets.{name}: missing, or without a default (e.g. {{ default: 2 }})")
            continue
        metric, bounds = histogram(name)
        seconds: dict[str, float] = {}
        for traffic_class, value in by_class.items():
            here = f"{where}: targets.{name}.{traffic_class}"
            if not isinstance(traffic_class, str) or not _CLASS.fullmatch(traffic_class):
                problems.append(f"{here}: a traffic class is a name of letters, digits and _.:-")
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or float(value) not in bounds[:-1]:
                problems.append(
                    f"{here} = {value!r} is not a bucket bound of {metric}; valid (seconds): {_bounds(bounds)}"
                )
            else:
                seconds["" if traffic_class == "default" else traffic_class] = float(value)
        out[name] = seconds
    if problems:
        raise TargetsError(problems)
    return out


def read(path: Path) -> dict[str, dict[str, float]]:
    """The targets of a source file (its ``targets:``); any problem is a :class:`TargetsError`."""
    try:
        import yaml
    except ImportError:
        raise TargetsError([f"{path}: reading it needs PyYAML (pip install 'firsttoken[cli]')"]) from None
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise TargetsError([f"{path}: cannot read it: {' '.join(str(exc).split())}"]) from None
    if not isinstance(doc, Mapping) or "targets" not in doc:
        raise TargetsError([f"{path}: no targets: section (see {SOURCE})"])
    return check(doc["targets"], str(path))


@dataclass(frozen=True)
class Targets:
    """The targets the app's tail policy uses: seconds by traffic class ("" = the default)."""

    ttft: Mapping[str, float]
    e2e: Mapping[str, float]
    source: str

    def ttft_for(self, traffic_class: str) -> float:
        return self.ttft.get(traffic_class, self.ttft[""])

    def e2e_for(self, traffic_class: str) -> float:
        return self.e2e.get(traffic_class, self.e2e[""])

    def names(self, traffic_class: str) -> bool:
        """Whether a (non-empty) traffic class has targets of its own."""
        return bool(traffic_class) and (traffic_class in self.ttft or traffic_class in self.e2e)


def of(values: Mapping[str, Mapping[str, float]], source: str) -> Targets:
    return Targets(ttft=dict(values[TTFT]), e2e=dict(values[E2E]), source=source)


SHIPPED = of(_SHIPPED, "the package's")
"""The targets of the slos.yml this package was built from."""


def load(path: str | Path) -> Targets:
    """The targets of a source file, for the app."""
    return of(read(Path(path)), str(path))
