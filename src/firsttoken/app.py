"""Application end-to-end: ``action()`` spans the user action, ``phase()`` its app-side steps.

Users feel the time from their action to the rendered result, not API latency. An action is the
parent of every LLM call made inside it (also across ``asyncio.gather``, tasks and thread pools
that copy the context), and when it ends it knows how many calls it made, their summed time, and
how much of the action was spent waiting on at least one of them (the LLM's share of the critical
path): two sequential calls that could have run in parallel show a share near 1 and a parallelism
of 1.

The traffic class (``interactive``, ``async``, ``batch`` or your own short label) set on an action,
or with ``traffic_class()``, is carried to every call inside as a metric dimension, so SLOs and
alerts can hold interactive traffic to a tighter target than batch.

The scopes' spans and metrics are recorded by :mod:`firsttoken.actions`.

Every scope here is a context manager (sync and async) and a decorator (functions, coroutine
functions, generators and async generators; a decorated function opens a fresh scope per call).
What a scope sets is undone in the context that set it; a scope left in another context (a
generator finalised elsewhere) records its end and leaves that context alone.
"""

from __future__ import annotations

import functools
import inspect
import logging
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Generator
from contextvars import ContextVar, Token
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar, cast

from . import semconv as sc
from ._install import active_recorder
from ._internal import internal_error
from .config import warn
from .context import CONVERSATION_ID, CURRENT_ACTION, TRAFFIC_CLASS, ActionState

if TYPE_CHECKING:
    from opentelemetry.context import Context

log = logging.getLogger("firsttoken")

F = TypeVar("F", bound=Callable[..., Any])
S = TypeVar("S", bound="_Scope")

_LABEL = re.compile(r"^[A-Za-z0-9_.:-]{1,40}$")
"""A traffic class: a label of every call metric, so short and plain."""
_NAME = re.compile(r"^[A-Za-z0-9_.:/ -]{1,64}$")
"""An action or phase name: a metric label and the span name; spaces and slashes read well there."""
_MAX_WARNED = 32

_ENTRY: ContextVar[_Entry | None] = ContextVar("firsttoken_scope_entry", default=None)

_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


def _label(kind: str, value: object, pattern: re.Pattern[str] = _LABEL) -> str:
    """``value`` if it is a usable label, else ``_OTHER`` (with one warning per bad value)."""
    if isinstance(value, str) and pattern.match(value):
        return value
    shown = repr(value)[:60] if isinstance(value, str) else f"of type {type(value).__name__}"
    with _warned_lock:
        first = (kind, shown) not in _warned and len(_warned) < _MAX_WARNED
        if first:
            _warned.add((kind, shown))
    if first:
        if pattern is _NAME:
            allowed = "letters, digits, spaces, _ . : / -, at most 64"
        else:
            allowed = "letters, digits, _ . : -, at most 40"
        warn(f"{kind} {shown} is not a short label ({allowed}); it is reported as {sc.ERROR_TYPE_OTHER}")
    return sc.ERROR_TYPE_OTHER


# -- scopes ------------------------------------------------------------------------------------


class _Entry:
    """What one entry into a scope set, to undo on exit."""

    __slots__ = ("otel", "recorder", "resets", "span", "start_ns", "state", "token")

    def __init__(self) -> None:
        self.resets: list[tuple[ContextVar[Any], Token[Any]]] = []
        self.otel: Token[Context] | None = None
        self.recorder: Any = None
        self.token: Token[_Entry | None] | None = None
        self.state: ActionState | None = None
        self.span: Any = None
        self.start_ns = time.perf_counter_ns()

    def set(self, var: ContextVar[Any], value: Any) -> None:
        self.resets.append((var, var.set(value)))

    def attach(self, span: Any) -> None:
        # Only ever called when instrumented: the OpenTelemetry API is loaded by then.
        from opentelemetry import context as otel_context
        from opentelemetry import trace

        self.otel = otel_context.attach(trace.set_span_in_context(span))

    def undo(self) -> None:
        """Restore the context as it was before the entry, if this is still the context it set."""
        if self.token is None:
            return
        try:
            _ENTRY.reset(self.token)
        except (ValueError, RuntimeError):
            return  # exited in another context (a generator finalised elsewhere): nothing of ours here
        if self.otel is not None:
            from opentelemetry import context as otel_context

            otel_context.detach(self.otel)
        for var, token in reversed(self.resets):
            try:
                var.reset(token)
            except (ValueError, RuntimeError):
                log.debug("firsttoken: could not restore %s", var.name, exc_info=True)


class _Scope:
    """A context manager (sync and async) and decorator; subclasses say what entering means."""

    def __init__(self) -> None:
        self._entries: list[_Entry] = []

    def _fresh(self: S) -> S:
        """A new scope with the same arguments: a decorated function opens one per call."""
        raise NotImplementedError

    def _start(self, entry: _Entry) -> None:
        raise NotImplementedError

    def _end(self, entry: _Entry, end_ns: int, exc: BaseException | None) -> None:
        """Record the scope's end (the context is already restored)."""

    def __enter__(self: S) -> S:
        entry = _Entry()
        try:
            self._start(entry)
        except Exception:  # never let telemetry break the app
            internal_error("entering %s failed", type(self).__name__)
        entry.token = _ENTRY.set(entry)
        self._entries.append(entry)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        end_ns = time.perf_counter_ns()
        entry = self._take()
        if entry is None:
            return
        entry.undo()
        try:
            self._end(entry, end_ns, exc)
        except Exception:
            internal_error("leaving %s failed", type(self).__name__)

    def _take(self) -> _Entry | None:
        """This context's entry (one instance may be open in several tasks at once), else the last."""
        current = _ENTRY.get()
        for i in range(len(self._entries) - 1, -1, -1):
            if self._entries[i] is current:
                return self._entries.pop(i)
        return self._entries.pop() if self._entries else None

    async def __aenter__(self: S) -> S:
        return self.__enter__()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.__exit__(exc_type, exc, tb)

    def __call__(self, func: F) -> F:
        fresh = self._fresh
        if inspect.isasyncgenfunction(func):

            @functools.wraps(func)
            async def agen_wrapper(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
                # ``async for`` would neither forward asend/athrow nor close the generator when the
                # app stops early; this does both, inside the scope.
                async with fresh():
                    gen = func(*args, **kwargs)
                    try:
                        item = await gen.__anext__()
                        while True:
                            try:
                                sent = yield item
                            except GeneratorExit:
                                raise
                            except BaseException as exc:  # the app's, thrown into its generator
                                item = await gen.athrow(exc)
                            else:
                                item = await gen.asend(sent)
                    except StopAsyncIteration:
                        return
                    finally:
                        await gen.aclose()

            return cast(F, agen_wrapper)
        if inspect.isgeneratorfunction(func):

            @functools.wraps(func)
            def gen_wrapper(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
                with fresh():
                    return (yield from func(*args, **kwargs))

            return cast(F, gen_wrapper)
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                async with fresh():
                    return await func(*args, **kwargs)

            return cast(F, async_wrapper)

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with fresh():
                return func(*args, **kwargs)

        return cast(F, wrapper)


class action(_Scope):
    """Measure a user action end to end: a context manager (sync and async) and a decorator.

    ``name`` is a low-cardinality action name (a metric dimension and the span name).
    ``traffic_class`` (default: the enclosing one) labels every call inside. ``conversation_id``
    sets ``gen_ai.conversation.id`` on the calls inside (and numbers their turns). ``attributes``
    (str, bool, int or float values) go on the action span only.
    """

    def __init__(
        self,
        name: str,
        *,
        traffic_class: str | None = None,
        conversation_id: str | None = None,
        **attributes: Any,
    ) -> None:
        super().__init__()
        self.name = _label("action name", name, _NAME)
        self.traffic_class = None if traffic_class is None else _label("traffic class", traffic_class)
        self.conversation_id = None if conversation_id is None else str(conversation_id)
        self.attributes = attributes

    def _fresh(self) -> action:
        return action(
            self.name, traffic_class=self.traffic_class, conversation_id=self.conversation_id, **self.attributes
        )

    def _start(self, entry: _Entry) -> None:
        traffic = self.traffic_class or TRAFFIC_CLASS.get()
        state = entry.state = ActionState(self.name, traffic, CURRENT_ACTION.get())
        entry.set(CURRENT_ACTION, state)
        entry.set(TRAFFIC_CLASS, traffic)
        attributes = self.attributes
        if self.conversation_id is not None:
            entry.set(CONVERSATION_ID, self.conversation_id)
            attributes = {**attributes, sc.GEN_AI_CONVERSATION_ID: self.conversation_id}
        recorder = active_recorder()
        if recorder is not None:
            state.recorder = recorder.actions
            state.span = state.recorder.start_action(state, attributes)
            entry.attach(state.span)

    def _end(self, entry: _Entry, end_ns: int, exc: BaseException | None) -> None:
        state = entry.state
        if state is not None and state.span is not None:
            state.recorder.finish_action(state, end_ns, exc)


class phase(_Scope):
    """Mark an app-side step (validation, retrieval, rendering) of an action: a span and a metric."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = _label("phase name", name, _NAME)

    def _fresh(self) -> phase:
        return phase(self.name)

    def _start(self, entry: _Entry) -> None:
        entry.state = CURRENT_ACTION.get()
        recorder = active_recorder()
        if recorder is not None:
            entry.recorder = recorder.actions
            entry.span = entry.recorder.start_app_phase(self.name, entry.state)
            entry.attach(entry.span)

    def _end(self, entry: _Entry, end_ns: int, exc: BaseException | None) -> None:
        if entry.span is not None:
            duration = (end_ns - entry.start_ns) / 1e9
            entry.recorder.finish_app_phase(entry.span, self.name, entry.state, duration, exc)


class traffic_class(_Scope):
    """Set the traffic class of every LLM call in a block or function, without opening an action."""

    def __init__(self, label: str) -> None:
        super().__init__()
        self.label = _label("traffic class", label)

    def _fresh(self) -> traffic_class:
        return traffic_class(self.label)

    def _start(self, entry: _Entry) -> None:
        entry.set(TRAFFIC_CLASS, self.label)


class conversation(_Scope):
    """Set ``gen_ai.conversation.id`` on every LLM call in a block or function, numbering the turns."""

    def __init__(self, conversation_id: str) -> None:
        super().__init__()
        self.conversation_id = str(conversation_id)

    def _fresh(self) -> conversation:
        return conversation(self.conversation_id)

    def _start(self, entry: _Entry) -> None:
        entry.set(CONVERSATION_ID, self.conversation_id)
