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
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import re
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from types import TracebackType
from typing import Any, TypeVar, cast

from opentelemetry import context as otel_context
from opentelemetry import trace

from . import semconv as sc
from .config import warn

F = TypeVar("F", bound=Callable[..., Any])

_LABEL = re.compile(r"^[A-Za-z0-9_.:-]{1,40}$")

TRAFFIC_CLASS: ContextVar[str | None] = ContextVar("firsttoken_traffic_class", default=None)
CONVERSATION_ID: ContextVar[str | None] = ContextVar("firsttoken_conversation_id", default=None)
CURRENT_ACTION: ContextVar[ActionState | None] = ContextVar("firsttoken_action", default=None)


def _label(kind: str, value: str | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and _LABEL.match(value):
        return value
    warn(f"{kind} {value!r} is not a short label (letters, digits, _ . : -, at most 40); using {sc.ERROR_TYPE_OTHER}")
    return sc.ERROR_TYPE_OTHER


class ActionState:
    """The LLM calls an action made, gathered from whatever thread or task finished them."""

    __slots__ = ("_lock", "intervals", "name", "span", "start_ns", "traffic_class")

    def __init__(self, name: str, traffic_class: str | None) -> None:
        self.name = name
        self.traffic_class = traffic_class
        self.start_ns = time.perf_counter_ns()
        self.intervals: list[tuple[int, int]] = []
        self.span: Any = None
        self._lock = threading.Lock()

    def add_call(self, start_ns: int, end_ns: int) -> None:
        with self._lock:
            self.intervals.append((start_ns, end_ns))

    def llm_summary(self, end_ns: int) -> tuple[int, int, int]:
        """(calls, summed call time, time at least one call was in flight), within the action."""
        with self._lock:
            spans = sorted((max(s, self.start_ns), min(e, end_ns)) for s, e in self.intervals)
        total = sum(max(0, e - s) for s, e in spans)
        busy = 0
        cur_s = cur_e = None
        for s, e in spans:
            if e <= s:
                continue
            if cur_e is None or s > cur_e:
                if cur_e is not None and cur_s is not None:
                    busy += cur_e - cur_s
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        if cur_e is not None and cur_s is not None:
            busy += cur_e - cur_s
        return len(spans), total, busy


def _recorder() -> Any:
    from .instrumentor import FirstTokenInstrumentor

    return FirstTokenInstrumentor().recorder


class action:
    """Measure a user action end to end. A context manager (sync and async) and a decorator.

    ``firsttoken.action(name, *, traffic_class=None, conversation_id=None, **attributes)``:
    ``name`` is a low-cardinality action name (it is a metric dimension); ``attributes`` go on the
    span only.
    """

    def __init__(
        self,
        name: str,
        *,
        traffic_class: str | None = None,
        conversation_id: str | None = None,
        **attributes: Any,
    ) -> None:
        self.name = _label("action name", name) or sc.ERROR_TYPE_OTHER
        self.traffic_class = _label("traffic class", traffic_class)
        self.conversation_id = conversation_id
        self.attributes = attributes
        self._stack: list[tuple[ActionState, list[Any]]] = []

    # -- context manager -----------------------------------------------------------------

    def __enter__(self) -> action:
        traffic = self.traffic_class or TRAFFIC_CLASS.get()
        state = ActionState(self.name, traffic)
        tokens: list[Any] = [CURRENT_ACTION.set(state)]
        tokens.append(TRAFFIC_CLASS.set(traffic))
        tokens.append(CONVERSATION_ID.set(self.conversation_id or CONVERSATION_ID.get()))
        recorder = _recorder()
        if recorder is not None:
            try:
                state.span = recorder.start_action(state, self.attributes)
                tokens.append(otel_context.attach(trace.set_span_in_context(state.span)))
            except Exception:
                state.span = None
        self._stack.append((state, tokens))
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        state, tokens = self._stack.pop()
        end_ns = time.perf_counter_ns()
        if state.span is not None:
            otel_context.detach(tokens.pop())
        CONVERSATION_ID.reset(tokens.pop())
        TRAFFIC_CLASS.reset(tokens.pop())
        CURRENT_ACTION.reset(tokens.pop())
        recorder = _recorder()
        if state.span is not None and recorder is not None:
            with contextlib.suppress(Exception):
                recorder.finish_action(state, end_ns, exc)

    async def __aenter__(self) -> action:
        return self.__enter__()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.__exit__(exc_type, exc, tb)

    # -- decorator ----------------------------------------------------------------------

    def _fresh(self) -> action:
        return action(
            self.name, traffic_class=self.traffic_class, conversation_id=self.conversation_id, **self.attributes
        )

    def __call__(self, func: F) -> F:
        if inspect.isasyncgenfunction(func):

            @functools.wraps(func)
            async def agen_wrapper(*args: Any, **kwargs: Any) -> Any:
                async with self._fresh():
                    async for item in func(*args, **kwargs):
                        yield item

            return cast(F, agen_wrapper)
        if inspect.isgeneratorfunction(func):

            @functools.wraps(func)
            def gen_wrapper(*args: Any, **kwargs: Any) -> Any:
                with self._fresh():
                    yield from func(*args, **kwargs)

            return cast(F, gen_wrapper)
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                async with self._fresh():
                    return await func(*args, **kwargs)

            return cast(F, async_wrapper)

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self._fresh():
                return func(*args, **kwargs)

        return cast(F, wrapper)


class phase:
    """Mark an app-side step (validation, retrieval, rendering) inside an action."""

    def __init__(self, name: str) -> None:
        self.name = _label("phase name", name) or sc.ERROR_TYPE_OTHER
        self._stack: list[tuple[Any, Any, int]] = []

    def __enter__(self) -> phase:
        recorder = _recorder()
        span = token = None
        if recorder is not None:
            try:
                span = recorder.start_app_phase(self.name, CURRENT_ACTION.get())
                token = otel_context.attach(trace.set_span_in_context(span))
            except Exception:
                span = None
        self._stack.append((span, token, time.perf_counter_ns()))
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        span, token, start_ns = self._stack.pop()
        if token is not None:
            otel_context.detach(token)
        recorder = _recorder()
        if span is not None and recorder is not None:
            with contextlib.suppress(Exception):
                recorder.finish_app_phase(
                    span, self.name, CURRENT_ACTION.get(), (time.perf_counter_ns() - start_ns) / 1e9, exc
                )

    async def __aenter__(self) -> phase:
        return self.__enter__()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.__exit__(exc_type, exc, tb)

    def __call__(self, func: F) -> F:
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                async with phase(self.name):
                    return await func(*args, **kwargs)

            return cast(F, async_wrapper)

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with phase(self.name):
                return func(*args, **kwargs)

        return cast(F, wrapper)


class traffic_class:
    """Set the traffic class of every LLM call in a block (without opening an action)."""

    def __init__(self, label: str) -> None:
        self.label = _label("traffic class", label)
        self._tokens: list[Any] = []

    def __enter__(self) -> traffic_class:
        self._tokens.append(TRAFFIC_CLASS.set(self.label))
        return self

    def __exit__(self, *exc: object) -> None:
        TRAFFIC_CLASS.reset(self._tokens.pop())

    async def __aenter__(self) -> traffic_class:
        return self.__enter__()

    async def __aexit__(self, *exc: object) -> None:
        self.__exit__(*exc)


class conversation:
    """Set ``gen_ai.conversation.id`` on every LLM call in a block."""

    def __init__(self, conversation_id: str) -> None:
        self.conversation_id = conversation_id
        self._tokens: list[Any] = []

    def __enter__(self) -> conversation:
        self._tokens.append(CONVERSATION_ID.set(self.conversation_id))
        return self

    def __exit__(self, *exc: object) -> None:
        CONVERSATION_ID.reset(self._tokens.pop())

    async def __aenter__(self) -> conversation:
        return self.__enter__()

    async def __aexit__(self, *exc: object) -> None:
        self.__exit__(*exc)
