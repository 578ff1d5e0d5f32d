"""One call being answered: its timing, its fault, and what gets logged about it."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ._cache import PromptCache
from ._faults import Fault
from ._http import Disconnected, Exchange
from ._latency import LatencyModel, Schedule
from ._timing import ProviderStyle, ServerTiming

__all__ = ["Call", "Served", "Stopped"]


class Stopped(Exception):
    """A fault ended the response early; the handler just returns."""


@dataclass(frozen=True)
class Served:
    """What the simulator served for one request (see :attr:`Simulator.requests`).

    ``input_tokens`` is the whole prompt, cached or not; ``cached_tokens`` of it came from the prompt
    cache and ``cache_creation_tokens`` were written to it (Anthropic). ``output_tokens`` includes
    ``reasoning_tokens``. ``status`` is 0 when the connection was dropped before any response.
    ``http_version`` is ``"1.1"`` or ``"2"``; ``connection`` numbers the client connection that
    carried the request (unique in the process), so equal numbers mean a reused connection.
    """

    method: str
    path: str
    model: str | None
    stream: bool
    status: int
    input_tokens: int = 0
    cached_tokens: int = 0
    cache_creation_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    fault: Fault | None = None
    replayed: bool = False
    disconnected: bool = False
    http_version: str = "1.1"
    connection: int = 0


@dataclass
class Usage:
    input_tokens: int = 0
    cached_tokens: int = 0
    cache_creation_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass
class Call:
    """Everything a handler needs for one request, and the only way it writes to the client.

    The writing methods wait for their deadline, apply the call's fault, and log the call just before
    its last byte goes out, so a client that has its answer also finds it in ``Simulator.requests``.
    """

    exchange: Exchange
    body: dict[str, Any]
    model: str | None
    latency: LatencyModel
    rng: random.Random
    cache: PromptCache
    fault: Fault | None
    log: Callable[[Served], None]
    #: Provider-specific body of a mid-stream error event (see ``Fault.error_event``).
    error_event: Callable[[], bytes] = field(default=lambda: b"")
    #: Provider headers for every response (request id, rate limits), set by the server.
    headers: list[tuple[str, str]] = field(default_factory=list)
    stream: bool = False
    #: Whose server-timing fields the response carries (see ``_timing``).
    provider: ProviderStyle = "openai"
    replayed: bool = False
    usage: Usage = field(default_factory=Usage)
    chunks: int = 0
    logged: bool = False
    t0: float = field(default_factory=lambda: asyncio.get_running_loop().time())
    _schedule: Schedule | None = None

    @property
    def path(self) -> str:
        return self.exchange.request.path

    def schedule(self, uncached_tokens: int) -> Schedule:
        """Draw the call's deadlines once the handler knows how much must be prefilled."""
        self._schedule = Schedule(self.latency, self.rng, self.t0, uncached_tokens)
        return self._schedule

    def elapsed_ms(self, until: float | None = None) -> int:
        """Milliseconds from ``t0`` to ``until`` (a deadline of the schedule), or to now."""
        end = asyncio.get_running_loop().time() if until is None else until
        return max(0, round((end - self.t0) * 1000))

    def timing(self) -> ServerTiming:
        """The server-side split of the schedule so far (call after :meth:`schedule`)."""
        assert self._schedule is not None, "schedule() first"
        return ServerTiming.of(self._schedule)

    def new_id(self, prefix: str, length: int = 24) -> str:
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
        return prefix + "".join(self.rng.choice(alphabet) for _ in range(length))

    # -- logging --------------------------------------------------------------------------------

    def record(self, status: int, *, disconnected: bool = False) -> None:
        if self.logged:
            return
        self.logged = True
        u = self.usage
        req = self.exchange.request
        self.log(
            Served(
                method=req.method,
                path=req.path,
                model=self.model,
                stream=self.stream,
                status=status,
                input_tokens=u.input_tokens,
                cached_tokens=u.cached_tokens,
                cache_creation_tokens=u.cache_creation_tokens,
                output_tokens=u.output_tokens,
                reasoning_tokens=u.reasoning_tokens,
                fault=self.fault,
                replayed=self.replayed,
                disconnected=disconnected,
                http_version=req.http_version,
                connection=req.connection,
            )
        )

    # -- writing --------------------------------------------------------------------------------

    async def sleep_until(self, deadline: float) -> None:
        delay = deadline - asyncio.get_running_loop().time()
        if delay > 0:
            await asyncio.sleep(delay)

    def _drop(self) -> None:
        self.record(0 if not self.exchange.headers_sent else 200, disconnected=True)
        self.exchange.drop()
        raise Stopped

    async def respond(
        self, status: int, headers: list[tuple[str, str]], body: bytes, *, at: float | None = None
    ) -> None:
        """A whole response at ``at`` (non-streaming responses arrive in one piece, at the end)."""
        if at is not None:
            await self.sleep_until(at)
        if self.fault is not None and self.fault.kind in ("drop_after", "stall") and status < 400:
            await self._stall_or_drop()
        self.record(status)
        await self.exchange.send_headers(status, [*headers, ("content-length", str(len(body)))])
        await self.exchange.send_data(body)
        await self.exchange.end()

    async def start_stream(self, headers: list[tuple[str, str]], *, at: float) -> None:
        """Status and headers of a 200 stream, sent once the queue delay is over."""
        await self.sleep_until(at)
        if self.fault is not None and self.fault.kind == "drop_after" and self.fault.after_chunks == 0:
            self._drop()
        await self.exchange.send_headers(200, headers)

    async def event(self, data: bytes, *, at: float | None = None) -> None:
        """One SSE event (one "chunk" for the fault counters), sent at ``at``."""
        if at is not None:
            await self.sleep_until(at)
        await self._before_chunk()
        self.chunks += 1
        await self.exchange.send_data(data)

    async def end_stream(self) -> None:
        await self._before_chunk(at_end=True)
        self.record(200)
        await self.exchange.end()

    async def _before_chunk(self, *, at_end: bool = False) -> None:
        fault = self.fault
        if fault is None or fault.is_status or (self.chunks != fault.after_chunks and not at_end):
            return
        if self.chunks > fault.after_chunks:
            return  # already applied (a stall that ended)
        if fault.kind == "error_event":
            self.record(200)
            await self.exchange.send_data(self.error_event())
            await self.exchange.end()
            raise Stopped
        await self._stall_or_drop()
        if at_end:
            self.chunks = fault.after_chunks + 1  # a stall at the very end happens once

    async def _stall_or_drop(self) -> None:
        fault = self.fault
        assert fault is not None
        if fault.kind == "drop_after":
            self._drop()
        elif fault.kind == "stall":
            if fault.seconds is None:
                await self.exchange.gone.wait()
                raise Disconnected
            await asyncio.sleep(fault.seconds)
