"""Faults: the ways a real provider lets a client down, on demand."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

__all__ = ["FAULT_HEADER", "Fault", "FaultQueue"]

#: Request header that asks for a fault on that one request, e.g. ``rate_limit;retry_after=0.05``.
FAULT_HEADER = "x-firsttoken-sim-fault"

FaultKind = Literal["rate_limit", "server_error", "overloaded", "drop_after", "stall", "error_event"]


@dataclass(frozen=True)
class Fault:
    """One fault. Build it with the constructors; the fields are what :attr:`Simulator.requests` shows."""

    kind: FaultKind
    status: int | None = None
    retry_after: float | None = None
    after_chunks: int = 0
    seconds: float | None = None

    @classmethod
    def rate_limit(cls, *, retry_after: float | None = 1.0) -> Fault:
        """HTTP 429 at once, with ``retry-after`` (seconds) and ``retry-after-ms``; ``None`` sends neither."""
        _non_negative("retry_after", retry_after)
        return cls("rate_limit", status=429, retry_after=retry_after)

    @classmethod
    def server_error(cls, *, status: int = 500) -> Fault:
        """An HTTP 5xx error response at once (SDKs retry these)."""
        if isinstance(status, bool) or not isinstance(status, int) or not 500 <= status <= 599:
            raise ValueError(f"Fault.server_error status must be a 5xx integer, got {status!r}")
        return cls("server_error", status=status)

    @classmethod
    def overloaded(cls) -> Fault:
        """Capacity exhausted: Anthropic's 529 ``overloaded_error``; 503 on the OpenAI paths."""
        return cls("overloaded", status=529)

    @classmethod
    def drop_after(cls, *, chunks: int) -> Fault:
        """Close the TCP connection after ``chunks`` SSE events (0: before any response byte)."""
        _count("chunks", chunks)
        return cls("drop_after", after_chunks=chunks)

    @classmethod
    def stall(cls, *, after_chunks: int, seconds: float | None = None) -> Fault:
        """Stop sending after ``after_chunks`` SSE events for ``seconds`` (``None``: until the client leaves)."""
        _count("after_chunks", after_chunks)
        _non_negative("seconds", seconds)
        return cls("stall", after_chunks=after_chunks, seconds=seconds)

    @classmethod
    def error_event(cls, *, after_chunks: int = 0) -> Fault:
        """An error inside a 200 stream after ``after_chunks`` events, then the end of the stream.

        Anthropic: ``event: error`` with ``overloaded_error``. OpenAI: a ``data:`` line with an
        ``error`` object (chat/completions), an ``error`` event (responses).
        """
        _count("after_chunks", after_chunks)
        return cls("error_event", after_chunks=after_chunks)

    @classmethod
    def parse(cls, spec: str) -> Fault:
        """Parse the header form: ``name;key=value;...``, e.g. ``stall;after_chunks=2;seconds=1``."""
        name, *params = (p.strip() for p in spec.split(";"))
        if name not in _PARAMS:
            raise ValueError(f"unknown fault {name!r}; expected one of {', '.join(_PARAMS)}")
        kwargs: dict[str, float | int | None] = {}
        for param in params:
            if not param:
                continue
            key, sep, raw = param.partition("=")
            key = key.strip()
            if not sep or key not in _PARAMS[name]:
                raise ValueError(f"unknown parameter {param!r} for fault {name!r}")
            raw = raw.strip()
            try:
                if raw.lower() == "none":
                    kwargs[key] = None
                elif key in ("chunks", "after_chunks", "status"):
                    kwargs[key] = int(raw)
                else:
                    kwargs[key] = float(raw)
            except ValueError:
                raise ValueError(f"bad value {raw!r} for {key!r} in fault {spec!r}") from None
        constructor: Callable[..., Fault] = getattr(cls, name)
        return constructor(**kwargs)

    @property
    def is_status(self) -> bool:
        """Answered with an error status instead of the normal response."""
        return self.kind in ("rate_limit", "server_error", "overloaded")


_PARAMS: dict[str, tuple[str, ...]] = {
    "rate_limit": ("retry_after",),
    "server_error": ("status",),
    "overloaded": (),
    "drop_after": ("chunks",),
    "stall": ("after_chunks", "seconds"),
    "error_event": ("after_chunks",),
}


def _count(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"Fault {name} must be a non-negative integer, got {value!r}")


def _non_negative(name: str, value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"Fault {name} must be a non-negative number of seconds or None, got {value!r}")


@dataclass
class _Rule:
    fault: Fault
    remaining: int | None
    path: str | None
    model: str | None

    def matches(self, path: str, model: str | None) -> bool:
        if self.path is not None and path != self.path and not path.endswith(self.path):
            return False
        return self.model is None or self.model == model


class FaultQueue:
    """Injected faults waiting for matching requests, in injection order."""

    def __init__(self) -> None:
        self._rules: list[_Rule] = []
        self._lock = threading.Lock()

    def add(self, fault: Fault, *, times: int | None, path: str | None, model: str | None) -> None:
        if not isinstance(fault, Fault):
            raise TypeError(f"inject() takes a Fault, got {type(fault).__name__}")
        if times is not None and (isinstance(times, bool) or not isinstance(times, int) or times < 1):
            raise ValueError(f"times must be a positive integer or None (every request), got {times!r}")
        with self._lock:
            self._rules.append(_Rule(fault, times, path, model))

    def take(self, path: str, model: str | None) -> Fault | None:
        with self._lock:
            for rule in self._rules:
                if rule.matches(path, model):
                    if rule.remaining is not None:
                        rule.remaining -= 1
                        if rule.remaining == 0:
                            self._rules.remove(rule)
                    return rule.fault
        return None

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()
