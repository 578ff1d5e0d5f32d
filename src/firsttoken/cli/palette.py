"""One colour per phase, the same in every chart of every report and page firsttoken draws.

The call phases come in the order they happen on the wire, each with a colour of its own; phases
an app names itself (`firsttoken.phase("render")`) take colours from a second, muted set, chosen by
name so that a phase keeps its colour across charts and runs.
"""

from __future__ import annotations

import zlib

from .. import semconv as sc

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


__all__ = ["PHASES", "PHASE_COLOURS", "phase_colour", "phase_order"]
