"""Stream observers: first and last token, and a call that ends exactly once however the app stops.

The provider hooks replace an SDK stream's item generator with :func:`observe_sync` or
:func:`observe_async`. The SDK's ``Stream`` object, its type, helpers and exceptions stay exactly
what the app would get without firsttoken; only the generator under it is ours.

How a streamed call ends:

* the generator runs out: ``completed``, at that moment;
* it raises: ``error`` (status ERROR, ``error.type``), or ``cancelled`` for asyncio cancellation
  and KeyboardInterrupt, which are not errors;
* the app closes the stream, or leaves its ``with`` block, before the end: the response is closed
  while our generator is suspended, and the transport hook ends the call as ``closed``;
* the app drops the stream: a finalizer ends it as ``abandoned`` at the last moment anything was
  seen of the call, not at the moment of garbage collection;
* but once the stream's terminal event has been read (``Timeline.terminal_seen``, set by the
  provider's reader: Anthropic's ``message_delta`` with a stop reason, the chunk finishing every
  choice, ``[DONE]``, ``response.completed``, ...), a close or a drop ends it ``completed``: the
  answer was whole.

Finalizers run inside the garbage collector, where taking a lock the interrupted thread already
holds (the SDK's span processor has some) would deadlock. So they only queue the call; a worker
thread records it.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import re
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TypeVar

from . import semconv as sc
from ._internal import internal_error
from .timeline import Timeline, is_cancellation

log = logging.getLogger("firsttoken")

T = TypeVar("T")
Observer = Callable[[Timeline, Any, int], None]
"""``observe(timeline, item, now_ns)``: provider-specific reading of one streamed item."""


def error_type_of(exc: BaseException) -> str:
    """A low-cardinality ``error.type``: the exception's class name."""
    return type(exc).__qualname__


ERROR_MESSAGE_MAX = 500
"""Characters kept of a failure's message (the span's status description)."""


_KEY_LIKE = re.compile(r"[A-Za-z0-9_*.-]*(?:\*|[0-9])[A-Za-z0-9_*.-]*")
"""A word of key-like characters with a digit or a mask in it: a candidate key (kept if short)."""
KEY_LIKE_MIN = 16
"""Key-like words of this many characters or more are replaced: no API key is that short, and few
words of an error message are that long (a request id is, and goes too)."""


def _unkeyed(message: str) -> str:
    """The message with every key-like word replaced by ``[redacted]``: an API's own message may quote
    the key it refused, masked but for a few characters (openai's 401: "Incorrect API key provided:
    sk-proj-****...abcd")."""

    def word(match: re.Match[str]) -> str:
        text = match.group(0)
        core = text.rstrip(".")  # a sentence's full stop stays
        return "[redacted]" + text[len(core) :] if len(core) >= KEY_LIKE_MIN else text

    return _KEY_LIKE.sub(word, message)


def error_message_of(exc: BaseException) -> str | None:
    """The failure in the API's own words: the ``message`` of the error body an SDK's exception carries
    (openai's ``body`` is the error object, anthropic's holds it under ``error``), at most
    :data:`ERROR_MESSAGE_MAX` characters, with any key-like word replaced (:func:`_unkeyed`). ``None``
    for any other exception: its text may hold what the app put in it, or a URL with a key."""
    body = getattr(exc, "body", None)
    error = body.get("error", body) if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return _unkeyed(message)[:ERROR_MESSAGE_MAX] if isinstance(message, str) and message else None


# One ``error.type`` vocabulary on every path (docs/semantics.md): the class name of the exception the
# official SDKs raise for the failure, whether or not an SDK carried the call. A call read on the wire
# gets the name the openai SDK (whose classes anthropic's mirror) would have raised for its status.
_STATUS_ERRORS = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    409: "ConflictError",
    422: "UnprocessableEntityError",
    429: "RateLimitError",
}
ERROR_EVENT = "APIError"
"""``error.type`` of an error event inside a stream whose status said success (the SDKs raise APIError)."""


def error_type_for_status(status: int) -> str:
    """``error.type`` of an HTTP error status, as the SDKs name the exception they raise for it."""
    known = _STATUS_ERRORS.get(status)
    if known is not None:
        return known
    return "InternalServerError" if status >= 500 else "APIStatusError"


def end_on_exception(tl: Timeline, exc: BaseException, end_ns: int | None = None) -> None:
    if is_cancellation(exc):
        tl.finish(sc.END_CANCELLED, end_ns)
    else:
        tl.finish(sc.END_ERROR, end_ns, error_type_of(exc), error_message_of(exc))


def observe_sync(items: Iterator[T], tl: Timeline, observe: Observer) -> Iterator[T]:
    """Yield exactly what ``items`` yields, timing each item and ending the call once."""
    clock = time.perf_counter_ns
    gaps = tl.chunk_gaps
    try:
        for item in items:
            now = clock()
            # Per chunk, so written out here rather than in a function both loops would call.
            if tl.first_chunk_ns is None:
                tl.first_chunk_ns = now
            elif gaps is not None and tl.last_chunk_ns is not None:
                gaps.append(now - tl.last_chunk_ns)
            tl.last_chunk_ns = now
            tl.chunk_count += 1
            try:
                observe(tl, item, now)
            except Exception:  # a surprise in an item must not reach the app
                internal_error("reading a streamed item failed")
            yield item
    except GeneratorExit:
        # Only the garbage collector (or a close of this private generator) gets here. Closing the
        # SDK's generator closes the response: that is not the app closing it, so detach first.
        tl.on_close = None
        abandon(tl)
        close = getattr(items, "close", None)
        if close is not None:
            close()
        raise
    except BaseException as exc:
        end_on_exception(tl, exc)
        raise
    tl.finish(sc.END_COMPLETED)


async def observe_async(items: AsyncIterator[T], tl: Timeline, observe: Observer) -> AsyncIterator[T]:
    """The async twin of :func:`observe_sync`."""
    clock = time.perf_counter_ns
    gaps = tl.chunk_gaps
    try:
        async for item in items:
            now = clock()
            if tl.first_chunk_ns is None:
                tl.first_chunk_ns = now
            elif gaps is not None and tl.last_chunk_ns is not None:
                gaps.append(now - tl.last_chunk_ns)
            tl.last_chunk_ns = now
            tl.chunk_count += 1
            try:
                observe(tl, item, now)
            except Exception:  # a surprise in an item must not reach the app
                internal_error("reading a streamed item failed")
            yield item
    except GeneratorExit:
        # Only asyncio's finalizer of a dropped generator (or ``shutdown_asyncgens``) gets here. The SDK's
        # generator is left to the same finalizer, as without firsttoken: it has one of its own, scheduled
        # in the same pass when both were garbage together, and awaiting its ``aclose()`` here too made
        # one of the two fail ("aclose(): asynchronous generator is already running") in a task nobody
        # awaits, which the app's loop reports as an error.
        tl.on_close = None
        abandon(tl)
        raise
    except BaseException as exc:
        end_on_exception(tl, exc)
        raise
    tl.finish(sc.END_COMPLETED)


def is_running(gen: Any) -> bool:
    """Whether a (sync or async) generator is executing right now, e.g. inside its ``finally``."""
    return bool(getattr(gen, "gi_running", False) or getattr(gen, "ag_running", False))


# -- abandonment ------------------------------------------------------------------------------

# The queue holds dropped calls, and the markers `flush_abandoned` puts behind them: the worker
# takes both in order, so a marker it has set means every call queued before it was recorded.
_abandoned: queue.SimpleQueue[Timeline | threading.Event] = queue.SimpleQueue()
_worker: threading.Thread | None = None
_worker_lock = threading.Lock()


def abandon(tl: Timeline) -> None:
    """Queue a call whose stream was dropped; safe inside a finalizer or the garbage collector."""
    if not tl.ended:
        _abandoned.put(tl)


class _Watch(weakref.ref[Any]):
    """A weak reference to what the app holds of a call, carrying the call: one object per call
    for the collector to track (``weakref.finalize`` made four and a registry entry)."""

    __slots__ = ("tl",)
    tl: Timeline

    def __new__(cls, obj: object, tl: Timeline) -> _Watch:
        self = super().__new__(cls, obj, _collected)
        self.tl = tl
        return self


_watching: dict[int, _Watch] = {}
"""Keeps each watch alive until its object is collected (a reference dies with its holder)."""


def _collected(ref: _Watch) -> None:
    # Runs inside the garbage collector, maybe: no locks (abandon only queues).
    _watching.pop(id(ref), None)
    abandon(ref.tl)


def watch(obj: object, tl: Timeline) -> None:
    """End ``tl`` as abandoned when ``obj`` is collected before the call ended."""
    ref = _Watch(obj, tl)
    _watching[id(ref)] = ref


def abandon_live() -> None:
    """The process is ending: the calls whose objects are still alive and unfinished are abandoned now."""
    for ref in list(_watching.values()):
        abandon(ref.tl)


def _at_exit() -> None:
    abandon_live()
    flush_abandoned()


def _finish_abandoned(item: Timeline | threading.Event) -> None:
    if isinstance(item, threading.Event):
        item.set()
        return
    try:
        item.finish(sc.END_COMPLETED if item.terminal_seen else sc.END_ABANDONED, item.last_observed_ns())
    except Exception:
        internal_error("ending an abandoned call failed")


def _work() -> None:
    while True:
        _finish_abandoned(_abandoned.get())


def start_worker() -> None:
    """Start the thread that records abandoned calls (once; outside any finalizer)."""
    global _worker, _started
    _started = True
    with _worker_lock:
        if _worker is None or not _worker.is_alive():
            _worker = threading.Thread(target=_work, name="firsttoken-abandoned", daemon=True)
            _worker.start()


def flush_abandoned(timeout: float = 2.0) -> bool:
    """Record every abandoned call queued so far before returning (tests, flush, exit); True when the
    worker did within ``timeout`` seconds, or when none was queued.

    With the worker running, wait (at most ``timeout`` seconds) until it has recorded all of them,
    including one it had already taken off the queue; without it, record them in this thread.
    """
    worker = _worker
    if worker is not None and worker.is_alive():
        done = threading.Event()
        _abandoned.put(done)
        if done.wait(timeout):
            return True
    recorded = True
    while True:
        try:
            item = _abandoned.get_nowait()
        except queue.Empty:
            return recorded
        if worker is not None and worker.is_alive():
            recorded = False  # the worker is stuck on one: record the rest here, but say it
        _finish_abandoned(item)


def _after_fork() -> None:
    # A forked child (a pre-forking web server's worker) has the queue but not the thread.
    global _worker
    _worker = None
    if _started:
        start_worker()


_started = False
atexit.register(_at_exit)
os.register_at_fork(after_in_child=_after_fork)
