"""What firsttoken's reports and its viewer draw with: one colour per phase, percentiles, plotly.js.

One colour per phase, the same in every chart of every report and page firsttoken draws. The call
phases come in the order they happen on the wire, each with a colour of its own; phases an app names
itself (`firsttoken.phase("render")`) take colours from a second, muted set, chosen by name so that a
phase keeps its colour across charts and runs.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence

from . import semconv as sc

PHASES: tuple[str, ...] = (
    sc.PHASE_PREPARE,
    sc.PHASE_POOL_WAIT,
    sc.PHASE_DNS,
    sc.PHASE_TCP_CONNECT,
    sc.PHASE_TLS_HANDSHAKE,
    sc.PHASE_CONNECT,
    sc.PHASE_UPLOAD,
    sc.PHASE_SERVER_WAIT,
    sc.PHASE_DOWNLOAD,
    sc.PHASE_RETRY_WAIT,
    sc.PHASE_WAIT_FIRST_TOKEN,
    sc.PHASE_DECODE,
    sc.PHASE_WAIT_NO_OUTPUT,
    sc.PHASE_FINISH,
)
"""The call's phases in wire order: the order of a legend and of a stacked bar."""

PHASE_COLOURS: dict[str, str] = {
    sc.PHASE_PREPARE: "#9e9e9e",  # grey: the SDK's own work
    sc.PHASE_POOL_WAIT: "#bcbd22",  # olive
    sc.PHASE_DNS: "#17becf",  # cyan
    sc.PHASE_TCP_CONNECT: "#1f77b4",  # blue
    sc.PHASE_TLS_HANDSHAKE: "#9467bd",  # purple
    sc.PHASE_CONNECT: "#c5b0d5",  # lavender
    sc.PHASE_UPLOAD: "#8c564b",  # brown
    sc.PHASE_SERVER_WAIT: "#ff7f0e",  # orange
    sc.PHASE_DOWNLOAD: "#2ca02c",  # green
    sc.PHASE_RETRY_WAIT: "#d62728",  # red: time lost to failures
    sc.PHASE_WAIT_FIRST_TOKEN: "#ffbb78",  # light orange: still waiting, after the headers
    sc.PHASE_DECODE: "#98df8a",  # light green: tokens arriving
    sc.PHASE_WAIT_NO_OUTPUT: "#ffd92f",  # yellow: waiting, and no output came
    sc.PHASE_FINISH: "#e377c2",  # pink
}

_APP_COLOURS: tuple[str, ...] = ("#4e79a7", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#ff9da7", "#af7aa1", "#bab0ac")


def phase_colour(phase: str) -> str:
    """The colour of a phase: fixed for the call phases, stable by name for an app's own phases."""
    colour = PHASE_COLOURS.get(phase)
    if colour is not None:
        return colour
    return _APP_COLOURS[zlib.crc32(phase.encode()) % len(_APP_COLOURS)]


def phase_order(phase: str) -> int:
    """Sort key: the call phases in wire order, then an app's phases."""
    try:
        return PHASES.index(phase)
    except ValueError:
        return len(PHASES)


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in [0, 100]) of unsorted values; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


class ReportError(Exception):
    """The HTML report cannot be written (its chart library is missing)."""


def plotly_js() -> str:
    try:
        from plotly.offline import get_plotlyjs  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError:
        raise ReportError("the HTML report needs plotly: pip install 'plotly>=5.20' (firsttoken's cli extra)") from None
    return str(get_plotlyjs())


__all__ = ["PHASES", "PHASE_COLOURS", "ReportError", "percentile", "phase_colour", "phase_order", "plotly_js"]
