"""Race several calls for the same answer, keep the first, cancel the others: ``race`` and ``arace``.

For latency-critical paths the usual advice is to send the request to two or more providers (or
models, or regions) at once and take whichever answers first. That only pays if the losers are
stopped the moment one wins, and it only shows in the telemetry if the raced request is one unit:

* the race is one :func:`firsttoken.action` (named ``race`` unless the caller is already inside an
  action, which then is the unit), so every contender's call span is a child of it;
* the winner is the first contender whose stream yields an item carrying generated output
  (``until="first_token"``, the default: the same rule firsttoken's instrumentation uses for TTFT),
  or the first whose call returns and whose stream, if any, ends (``until="finish"``);
* :func:`arace` cancels the losers' tasks at once, so their call spans end ``cancelled``;
  :func:`race` (threads) closes a loser's stream as soon as its thread gets control back (when
  its call returns or its next item arrives): those spans end ``closed``.

A contender is a function of no arguments that makes the call, for example
``lambda: client.chat.completions.create(model=..., messages=..., stream=True)``. It may return a
stream, a response, or (for :func:`arace`) an awaitable of either.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import queue
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .app import action
from .context import CURRENT_ACTION
from .timeline import Timeline

if TYPE_CHECKING:
    import asyncio

# asyncio and the provider readers are imported where used: ``import firsttoken`` imports this module.

__all__ = ["FINISH", "FIRST_TOKEN", "RaceResult", "arace", "carries_output", "race"]

FIRST_TOKEN = "first_token"
FINISH = "finish"
_MODES = (FIRST_TOKEN, FINISH)


def _scratch() -> Timeline:
    return Timeline(
        provider="race",
        operation="chat",
        request_model=None,
        server_address=None,
        server_port=None,
        stream=True,
        on_finish=lambda tl: None,
    )


def carries_output(item: Any) -> bool:
    """Whether a streamed item carries generated output, by the rule firsttoken's TTFT uses.

    OpenAI chat and completion chunks, Responses events and Anthropic message events are read by
    the same provider code as the instrumentation; an item of any other kind counts as output.
    """
    from .providers import anthropic as _anthropic_hooks
    from .providers import openai as _openai_hooks

    kind = getattr(item, "type", None)
    obj = getattr(item, "object", None)
    observe: Callable[[Timeline, Any, int], None]
    if obj == "chat.completion.chunk":
        observe = _openai_hooks.observe_chat_chunk
    elif obj == "text_completion":
        observe = _openai_hooks.observe_completion_chunk
    elif isinstance(kind, str) and kind.startswith("response."):
        observe = _openai_hooks.observe_response_event
    elif isinstance(kind, str) and (kind.startswith(("message_", "content_block_")) or kind in ("ping", "error")):
        observe = _anthropic_hooks.observe_event
    else:
        return True
    tl = _scratch()
    try:
        observe(tl, item, 1)
    except Exception:  # an item of a shape the observers do not know: not output
        return False
    return tl.first_token_ns is not None


@dataclass
class RaceResult:
    """The outcome of a race.

    ``value`` is what the winning contender returned: with ``until="first_token"`` its stream,
    positioned after ``items`` (the items the race read from it, up to and including the first
    carrying output); with ``until="finish"`` its response, or its stream with every item in
    ``items``. Iterate the result (``for``/``async for``) to get ``items`` and then the rest of
    the winner's stream.
    """

    winner: int
    value: Any
    items: list[Any]
    mode: str
    started_ns: int
    decided_ns: int
    losers: list[int] = field(default_factory=list)
    """Contenders stopped because another won (not those that had failed before)."""
    errors: dict[int, BaseException] = field(default_factory=dict)
    """Contenders that failed before the race was decided."""
    loser_output_items: dict[int, int] = field(default_factory=dict)
    """Per loser, the streamed items carrying output it had received when it was stopped."""

    @property
    def decided_after_s(self) -> float:
        """Seconds from the start of the race to the winner's first token (or finish)."""
        return (self.decided_ns - self.started_ns) / 1e9

    def __iter__(self) -> Iterator[Any]:
        yield from self.items
        if self.mode == FIRST_TOKEN and _is_stream(self.value):
            yield from self.value

    async def __aiter__(self) -> AsyncIterator[Any]:
        for item in self.items:
            yield item
        if self.mode == FIRST_TOKEN and _is_async_stream(self.value):
            async for item in self.value:
                yield item


def _is_async_stream(value: Any) -> bool:
    return hasattr(value, "__aiter__") and not isinstance(value, (str, bytes, dict))


def _is_stream(value: Any) -> bool:
    return hasattr(value, "__iter__") and hasattr(value, "close") and not isinstance(value, (str, bytes, dict))


def _check(calls: Sequence[Callable[[], Any]], until: str) -> None:
    if until not in _MODES:
        raise ValueError(f"until must be {FIRST_TOKEN!r} or {FINISH!r}, got {until!r}")
    if len(calls) < 2:
        raise ValueError(f"a race needs at least two contenders, got {len(calls)}")
    for n, call in enumerate(calls):
        if not callable(call):
            raise TypeError(f"contender {n} is not callable (pass a function that makes the call)")


# -- asyncio --------------------------------------------------------------------------------


class _AsyncRace:
    """Shared by the contenders: the first to claim wins and cancels the others on the spot.

    The claim is made inside the winning contender's own step of the event loop, so a loser
    cannot read one more item first: it is cancelled where it waits, and its call ends
    ``cancelled`` however close the race was.
    """

    def __init__(self, count: int) -> None:
        self.winner: int | None = None
        self.decided_ns = 0
        self.tasks: list[asyncio.Future[Any]] = []
        self.outputs = [0] * count

    def claim(self, n: int) -> None:
        if self.winner is not None:
            return
        self.winner = n
        self.decided_ns = time.perf_counter_ns()
        for other, task in enumerate(self.tasks):
            if other != n:
                task.cancel()

    async def contend(self, n: int, call: Callable[[], Any], until: str) -> tuple[Any, list[Any]]:
        value = call()
        if inspect.isawaitable(value):
            value = await value
        items: list[Any] = []
        if _is_async_stream(value):
            async for item in value:
                items.append(item)
                if carries_output(item):
                    self.outputs[n] += 1
                    if until == FIRST_TOKEN:
                        break
        self.claim(n)
        return value, items


async def arace(
    *calls: Callable[[], Awaitable[Any] | Any],
    until: str = FIRST_TOKEN,
    name: str = "race",
) -> RaceResult:
    """Start every contender at once on this event loop; return the first; cancel the others.

    Losers are cancelled the moment the winner is known, before this returns (their call spans end
    ``cancelled``). If every contender fails, the first contender's exception is raised.
    """
    import asyncio

    _check(calls, until)
    scope = action(name) if CURRENT_ACTION.get() is None else None
    if scope is not None:
        scope.__enter__()
    started = time.perf_counter_ns()
    state = _AsyncRace(len(calls))
    state.tasks = [asyncio.ensure_future(state.contend(n, call, until)) for n, call in enumerate(calls)]
    index = {task: n for n, task in enumerate(state.tasks)}
    errors: dict[int, BaseException] = {}
    raised: BaseException | None = None
    try:
        pending: set[asyncio.Future[Any]] = set(state.tasks)
        while pending and state.winner is None:
            _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        await asyncio.gather(*state.tasks, return_exceptions=True)  # the cancellations land
        for task in state.tasks:
            exc = None if task.cancelled() else task.exception()
            if exc is not None:
                errors[index[task]] = exc
        winner = state.winner
        if winner is None:
            raised = errors[min(errors)]
            raise raised
        losers = [n for n in range(len(calls)) if n != winner and n not in errors]
        value, items = state.tasks[winner].result()
        outputs = {n: state.outputs[n] for n in losers}
        return RaceResult(winner, value, items, until, started, state.decided_ns, losers, errors, outputs)
    except BaseException as exc:
        raised = exc
        for task in state.tasks:
            task.cancel()
        await asyncio.gather(*state.tasks, return_exceptions=True)
        raise
    finally:
        if scope is not None:
            scope.__exit__(type(raised) if raised else None, raised, raised.__traceback__ if raised else None)


# -- threads --------------------------------------------------------------------------------


class _SyncContender(threading.Thread):
    def __init__(
        self, n: int, call: Callable[[], Any], until: str, done: queue.SimpleQueue[int], lost: threading.Event
    ):
        super().__init__(name=f"firsttoken-race-{n}", daemon=True)
        self.n = n
        self.call = call
        self.until = until
        self.done = done
        self.lost = lost
        self.ctx = contextvars.copy_context()
        self.value: Any = None
        self.items: list[Any] = []
        self.error: BaseException | None = None
        self.outputs = 0
        self.lock = threading.Lock()
        self.finished = False

    def run(self) -> None:
        self.ctx.run(self._run)

    def _stop(self) -> bool:
        if not self.lost.is_set():
            return False
        close = getattr(self.value, "close", None)
        if close is not None and _is_stream(self.value):
            with contextlib.suppress(Exception):
                close()
        return True

    def _run(self) -> None:
        try:
            self.value = self.call()
            if _is_stream(self.value):
                if self._stop():
                    return
                for item in self.value:
                    self.items.append(item)
                    if carries_output(item):
                        self.outputs += 1
                        if self.until == FIRST_TOKEN:
                            break
                    if self._stop():
                        return
        except BaseException as exc:  # the call's own error: the race reports it
            self.error = exc
        with self.lock:
            self.finished = True
            lost = self.lost.is_set()
        if lost:
            self._stop()
        self.done.put(self.n)

    def lose(self) -> None:
        """Called by the race once decided: the thread stops itself, or is stopped here if it is done."""
        with self.lock:
            self.lost.set()
            finished = self.finished
        if finished:
            self._stop()


def race(*calls: Callable[[], Any], until: str = FIRST_TOKEN, name: str = "race") -> RaceResult:
    """The threaded twin of :func:`arace`, for sync SDK clients: one thread per contender.

    Returns as soon as a winner is known. A thread cannot be interrupted while it waits on the
    network, so each loser closes its own stream when it next gets control (its call returns or its
    next item arrives); a loser's call span then ends ``closed``.
    """
    _check(calls, until)
    scope = action(name) if CURRENT_ACTION.get() is None else None
    if scope is not None:
        scope.__enter__()
    raised: BaseException | None = None
    try:
        started = time.perf_counter_ns()
        done: queue.SimpleQueue[int] = queue.SimpleQueue()
        lost = [threading.Event() for _ in calls]
        threads = [_SyncContender(n, call, until, done, lost[n]) for n, call in enumerate(calls)]
        for thread in threads:
            thread.start()
        errors: dict[int, BaseException] = {}
        winner: int | None = None
        for _ in threads:
            n = done.get()
            error = threads[n].error
            if error is None:
                winner = n
                break
            errors[n] = error
        decided = time.perf_counter_ns()
        losers = [n for n in range(len(calls)) if n != winner and n not in errors]
        for n in losers:
            threads[n].lose()
        if winner is None:
            raised = errors[min(errors)]
            raise raised
        win = threads[winner]
        outputs = {n: threads[n].outputs for n in losers}
        return RaceResult(winner, win.value, win.items, until, started, decided, losers, errors, outputs)
    except BaseException as exc:
        raised = exc
        raise
    finally:
        if scope is not None:
            scope.__exit__(type(raised) if raised else None, raised, raised.__traceback__ if raised else None)
