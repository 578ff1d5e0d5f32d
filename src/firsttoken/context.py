"""The call in progress, visible to the transport hooks below the SDK method that started it."""

from __future__ import annotations

from contextvars import ContextVar

from .timeline import Timeline

CURRENT_CALL: ContextVar[Timeline | None] = ContextVar("firsttoken_current_call", default=None)

CALL_START: ContextVar[tuple[int, int] | None] = ContextVar("firsttoken_call_start", default=None)
"""(perf_counter_ns, time_ns) when the app called the SDK's public method; the call's start."""
