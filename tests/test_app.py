"""firsttoken.action() / phase() / traffic_class(): the application end-to-end span over real calls.

Timing bounds are reasoned from the simulator's exact (jitter-free) latency: every call takes
``CALL_S`` on the server plus loopback and SDK overhead of a few milliseconds, which a loaded
2-core box can stretch to tens of milliseconds; the bounds leave room for that and no more.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import sys
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anthropic
import httpx
import openai
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

import firsttoken
from firsttoken import semconv as sc
from firsttoken.sim import Fault, LatencyModel, Simulator

from .conftest import Telemetry
from .jitter import SchedulerProbe

QUEUE_MS = 150
CALL = LatencyModel(queue_ms=QUEUE_MS, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=1000, jitter=0, output_tokens=5)
CALL_S = (QUEUE_MS + 5) / 1000
"""A non-streamed call's server time: the queue, then 5 tokens at 1 ms each."""
SPAN_CLOCK_SKEW = 0.02
"""A span's end is read by the SDK a moment after firsttoken's own clock ends the action or phase;
on a loaded 2-core box, scheduling can put milliseconds between the two readings."""
MESSAGES: Any = [{"role": "user", "content": "Say hello to the test."}]
ANTHROPIC_MODEL = "claude-test-model"
PROVIDERS = ["openai", "anthropic"]


@pytest.fixture
def slow_sim() -> Iterator[Simulator]:
    with Simulator(latency=CALL, seed=3) as s:
        yield s


def sync_call(provider: str, sim: Simulator) -> Callable[[], Any]:
    """One non-streamed call through a (reused) client of ``provider``'s SDK."""
    if provider == "openai":
        oc = openai.OpenAI(base_url=sim.openai_base_url, api_key="sk-test", max_retries=0)
        return lambda: oc.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    ac = anthropic.Anthropic(base_url=sim.anthropic_base_url, api_key="sk-ant-test", max_retries=0)
    return lambda: ac.messages.create(model=ANTHROPIC_MODEL, max_tokens=64, messages=MESSAGES)


def async_call(provider: str, sim: Simulator) -> Callable[[], Awaitable[Any]]:
    if provider == "openai":
        oc = openai.AsyncOpenAI(base_url=sim.openai_base_url, api_key="sk-test", max_retries=0)
        return lambda: oc.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    ac = anthropic.AsyncAnthropic(base_url=sim.anthropic_base_url, api_key="sk-ant-test", max_retries=0)
    return lambda: ac.messages.create(model=ANTHROPIC_MODEL, max_tokens=64, messages=MESSAGES)


def actions(t: Telemetry, name: str | None = None) -> list[ReadableSpan]:
    return [
        s
        for s in t.spans()
        if s.attributes and sc.FT_ACTION_NAME in s.attributes and sc.FT_APP_PHASE not in s.attributes
        if name is None or s.attributes[sc.FT_ACTION_NAME] == name
    ]


def the_action(t: Telemetry, name: str | None = None) -> ReadableSpan:
    found = actions(t, name)
    assert len(found) == 1, [s.name for s in found]
    return found[0]


def parent_of(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def seconds(span: ReadableSpan) -> float:
    assert span.start_time is not None and span.end_time is not None
    return (span.end_time - span.start_time) / 1e9


def union_seconds(spans: list[ReadableSpan]) -> float:
    """Time covered by at least one of the spans (what the action computes from its own clock)."""
    busy, end = 0, None
    for s in sorted(spans, key=lambda s: s.start_time or 0):
        assert s.start_time is not None and s.end_time is not None
        if end is None or s.start_time > end:
            busy += s.end_time - s.start_time
            end = s.end_time
        elif s.end_time > end:
            busy += s.end_time - end
            end = s.end_time
    return busy / 1e9


def attrs_of(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


# -- the tree, the counts, the critical-path share ----------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_two_sequential_two_parallel_calls(telemetry: Telemetry, slow_sim: Simulator, provider: str) -> None:
    call = async_call(provider, slow_sim)
    await asyncio.gather(call(), call())  # open two connections outside the action: every call in it costs the same
    telemetry.exporter.clear()
    async with firsttoken.action("answer question", traffic_class="interactive", user_tier="free"):
        await call()
        await call()
        await asyncio.gather(call(), call())
        with firsttoken.phase("render"):
            time.sleep(0.1)  # app-side work the LLM is not part of

    action = the_action(telemetry)
    attrs = attrs_of(action)
    calls = telemetry.calls()
    assert len(calls) == 4
    assert all(c.context.trace_id == action.context.trace_id for c in calls)
    assert all(parent_of(c) == action.context.span_id for c in calls), "calls are children of the action"
    assert action.name == "answer question"
    assert attrs["user_tier"] == "free"
    assert attrs[sc.FT_TRAFFIC_CLASS] == "interactive"
    assert action.status.status_code is StatusCode.UNSET

    # Counts and sums agree with the call spans themselves (same clock, to the microsecond or so).
    assert attrs[sc.FT_ACTION_LLM_CALLS] == 4
    assert attrs[sc.FT_ACTION_LLM_TIME] == pytest.approx(sum(seconds(c) for c in calls), abs=1e-3)
    assert attrs[sc.FT_ACTION_LLM_BUSY_TIME] == pytest.approx(union_seconds(calls), abs=1e-3)

    # Three call-lengths of waiting (two in a row, then two at once), four of LLM time.
    busy = attrs[sc.FT_ACTION_LLM_BUSY_TIME]
    assert 3 * CALL_S <= busy < 3 * CALL_S + 0.25
    assert 4 * CALL_S <= attrs[sc.FT_ACTION_LLM_TIME] < 4 * CALL_S + 0.3
    # (2s + 2p) / (2s + p) = 4/3 when a sequential call (s) and a parallel one (p) take as long; a
    # loaded box makes the pair a little slower than the calls alone, and a start skew lowers it.
    assert 1.15 < attrs[sc.FT_ACTION_LLM_PARALLELISM] < 1.45, attrs
    # The LLM's share of the critical path: the 0.1 s render is not LLM time.
    duration = seconds(action)
    assert attrs[sc.FT_ACTION_LLM_SHARE] == pytest.approx(busy / duration, abs=0.01)
    assert 0.5 < attrs[sc.FT_ACTION_LLM_SHARE] < (duration - 0.1) / duration + 0.01

    metrics = telemetry.metrics()
    (point,) = metrics[sc.M_ACTION_DURATION]
    assert point.count == 1
    assert point.sum == pytest.approx(duration, abs=SPAN_CLOCK_SKEW)
    assert point.attributes == {sc.FT_ACTION_NAME: "answer question", sc.FT_TRAFFIC_CLASS: "interactive"}
    assert point.exemplars and point.exemplars[0].span_id == action.context.span_id
    (busy_point,) = metrics[sc.M_ACTION_LLM_BUSY_TIME]
    assert busy_point.sum == pytest.approx(busy)


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_parallelism_tells_parallel_from_sequential(
    telemetry: Telemetry, slow_sim: Simulator, provider: str
) -> None:
    call = async_call(provider, slow_sim)
    await asyncio.gather(call(), call())  # two pooled connections, so the pair below runs at once
    with SchedulerProbe() as probe:
        async with firsttoken.action("sequential"):
            await call()
            await call()
        async with firsttoken.action("parallel"):
            await asyncio.gather(call(), call())
    sequential = attrs_of(the_action(telemetry, "sequential"))
    parallel = attrs_of(the_action(telemetry, "parallel"))
    # One after the other never overlaps: exactly 1. At once: 2 calls' time over the time the pair
    # was busy, one call plus the skew between the two: allowed 15 % of a call and the scheduler
    # lateness measured meanwhile (2 / 1.15 = 1.74 on a quiet machine).
    assert sequential[sc.FT_ACTION_LLM_PARALLELISM] == pytest.approx(1.0)
    skew = 0.15 * CALL_S + probe.allow(0)
    assert 2 * CALL_S / (CALL_S + skew) < parallel[sc.FT_ACTION_LLM_PARALLELISM] <= 2.0 + 1e-9, probe.worst
    assert sequential[sc.FT_ACTION_LLM_BUSY_TIME] > 2 * CALL_S
    assert CALL_S <= parallel[sc.FT_ACTION_LLM_BUSY_TIME] < 2 * CALL_S + probe.allow(0)
    for attrs in (sequential, parallel):
        assert attrs[sc.FT_ACTION_LLM_CALLS] == 2
        assert attrs[sc.FT_ACTION_LLM_SHARE] > 0.8  # nothing but LLM calls in these actions


# -- context propagation ---------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["gather", "create_task", "taskgroup"])
async def test_context_flows_through_asyncio(telemetry: Telemetry, sim: Simulator, how: str) -> None:
    if how == "taskgroup" and sys.version_info < (3, 11):
        pytest.skip("asyncio.TaskGroup is Python 3.11+")
    calls = [async_call("openai", sim), async_call("anthropic", sim)]
    async with firsttoken.action("fan out", traffic_class="batch"):
        if how == "gather":
            await asyncio.gather(*(c() for c in calls))
        elif how == "create_task":
            tasks = [asyncio.create_task(c()) for c in calls]
            await asyncio.wait(tasks)
        else:
            async with asyncio.TaskGroup() as group:
                for c in calls:
                    group.create_task(c())
    check_fan_out(telemetry)


def test_context_flows_through_a_thread_pool_with_copy_context(telemetry: Telemetry, sim: Simulator) -> None:
    calls = [sync_call("openai", sim), sync_call("anthropic", sim)]
    with firsttoken.action("fan out", traffic_class="batch"), ThreadPoolExecutor(max_workers=2) as pool:
        futures = [pool.submit(contextvars.copy_context().run, c) for c in calls]
        for future in futures:
            future.result()
    check_fan_out(telemetry)


def check_fan_out(t: Telemetry) -> None:
    action = the_action(t, "fan out")
    calls = t.calls()
    assert {c.attributes[sc.GEN_AI_PROVIDER_NAME] for c in calls if c.attributes} == {"openai", "anthropic"}
    assert all(parent_of(c) == action.context.span_id for c in calls)
    assert all(c.attributes and c.attributes[sc.FT_TRAFFIC_CLASS] == "batch" for c in calls)
    assert attrs_of(action)[sc.FT_ACTION_LLM_CALLS] == 2


def test_a_thread_pool_without_copy_context_is_outside_the_action(telemetry: Telemetry, sim: Simulator) -> None:
    """The documented limit: a plain ``submit`` runs in the worker's own context."""
    call = sync_call("openai", sim)
    with firsttoken.action("detached"), ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(call).result()
    (span,) = telemetry.calls()
    assert span.parent is None
    assert sc.FT_TRAFFIC_CLASS not in attrs_of(span)
    assert attrs_of(the_action(telemetry))[sc.FT_ACTION_LLM_CALLS] == 0


# -- decorator forms ---------------------------------------------------------------------------------


def check_decorated(t: Telemetry, name: str, times: int = 1) -> None:
    found = actions(t, name)
    assert len(found) == times, "one action per call of the decorated function"
    calls = t.calls()
    assert len(calls) == times
    for action in found:
        attrs = attrs_of(action)
        assert attrs[sc.FT_ACTION_LLM_CALLS] == 1
        assert attrs[sc.FT_TRAFFIC_CLASS] == "interactive"
        assert sum(parent_of(c) == action.context.span_id for c in calls) == 1
        assert action.status.status_code is StatusCode.UNSET


def test_decorated_function(telemetry: Telemetry, sim: Simulator) -> None:
    call = sync_call("openai", sim)

    @firsttoken.action("sync fn", traffic_class="interactive")
    def handler(x: int, *, y: int) -> int:
        call()
        return x + y

    assert handler.__name__ == "handler"
    assert handler(1, y=2) == 3
    assert handler(2, y=2) == 4
    check_decorated(telemetry, "sync fn", times=2)


async def test_decorated_coroutine_function(telemetry: Telemetry, sim: Simulator) -> None:
    call = async_call("anthropic", sim)

    @firsttoken.action("async fn", traffic_class="interactive")
    async def handler(x: int) -> int:
        await call()
        return x * 2

    assert await asyncio.gather(handler(1), handler(2)) == [2, 4]
    check_decorated(telemetry, "async fn", times=2)


def test_decorated_generator(telemetry: Telemetry, sim: Simulator) -> None:
    client = openai.OpenAI(base_url=sim.openai_base_url, api_key="sk-test", max_retries=0)

    @firsttoken.action("sync gen", traffic_class="interactive")
    def answer() -> Iterator[str]:
        stream = client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True)
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                yield chunk.choices[0].delta.content

    gen = answer()
    assert not actions(telemetry), "nothing runs before the first item is asked for"
    assert "".join(gen)
    check_decorated(telemetry, "sync gen")
    # The generator protocol passes through: send() and the return value.

    @firsttoken.action("echo")
    def echo() -> Any:
        got = yield "ready"
        return got

    g = echo()
    assert next(g) == "ready"
    with pytest.raises(StopIteration) as stop:
        g.send("value")
    assert stop.value.value == "value"


async def test_decorated_async_generator(telemetry: Telemetry, sim: Simulator) -> None:
    client = anthropic.AsyncAnthropic(base_url=sim.anthropic_base_url, api_key="sk-ant-test", max_retries=0)

    @firsttoken.action("async gen", traffic_class="interactive")
    async def answer() -> AsyncIterator[str]:
        async with client.messages.stream(model=ANTHROPIC_MODEL, max_tokens=64, messages=MESSAGES) as stream:
            async for text in stream.text_stream:
                yield text

    assert "".join([t async for t in answer()])
    check_decorated(telemetry, "async gen")

    @firsttoken.action("echo")
    async def echo() -> AsyncIterator[str]:
        got = yield "ready"
        yield f"got {got}"

    g = echo()
    assert await g.__anext__() == "ready"
    assert await g.asend("value") == "got value"
    await g.aclose()


async def test_async_generator_left_early_is_closed_inside_the_action(telemetry: Telemetry, sim: Simulator) -> None:
    closed = asyncio.Event()

    @firsttoken.action("left early")
    async def numbers() -> AsyncIterator[int]:
        try:
            for i in range(10):
                yield i
        finally:
            closed.set()

    gen = numbers()
    async for i in gen:
        if i == 2:
            break
    await gen.aclose()
    assert closed.is_set()
    action = the_action(telemetry, "left early")
    assert action.status.status_code is StatusCode.UNSET, "leaving a generator early is not an error"


# -- errors ---------------------------------------------------------------------------------------------


class AppError(Exception):
    pass


def test_exception_marks_the_action_and_still_records(telemetry: Telemetry, sim: Simulator) -> None:
    call = sync_call("openai", sim)
    with pytest.raises(AppError, match="boom") as raised, firsttoken.action("fails", traffic_class="interactive"):
        call()
        raise AppError("boom")
    assert raised.type is AppError, "the app's exception passes through unchanged"
    action = the_action(telemetry)
    attrs = attrs_of(action)
    assert action.status.status_code is StatusCode.ERROR
    assert attrs[sc.ERROR_TYPE] == "AppError"
    assert attrs[sc.FT_ACTION_LLM_CALLS] == 1
    (point,) = telemetry.metrics()[sc.M_ACTION_DURATION]
    assert point.attributes[sc.ERROR_TYPE] == "AppError"
    assert point.count == 1


@pytest.mark.parametrize("provider", PROVIDERS)
def test_failed_llm_call_inside_an_action(telemetry: Telemetry, sim: Simulator, provider: str) -> None:
    call = sync_call(provider, sim)
    sim.inject(Fault.server_error(status=500))

    @firsttoken.action("llm fails")
    def handler() -> None:
        call()

    with pytest.raises((openai.InternalServerError, anthropic.InternalServerError)):
        handler()
    action = the_action(telemetry)
    (span,) = telemetry.calls()
    assert parent_of(span) == action.context.span_id
    assert attrs_of(action)[sc.FT_ACTION_LLM_CALLS] == 1
    assert action.status.status_code is StatusCode.ERROR
    assert attrs_of(action)[sc.ERROR_TYPE] == "InternalServerError"


async def test_exception_in_decorated_async_forms(telemetry: Telemetry) -> None:
    @firsttoken.action("coro fails")
    async def coro() -> None:
        raise AppError("coro")

    @firsttoken.action("agen fails")
    async def agen() -> AsyncIterator[int]:
        yield 1
        raise AppError("agen")

    with pytest.raises(AppError, match="coro"):
        await coro()
    with pytest.raises(AppError, match="agen"):
        async for _ in agen():
            pass
    for name in ("coro fails", "agen fails"):
        action = the_action(telemetry, name)
        assert action.status.status_code is StatusCode.ERROR
        assert attrs_of(action)[sc.ERROR_TYPE] == "AppError"


# -- phases and nesting ----------------------------------------------------------------------------------


def test_phases(telemetry: Telemetry, sim: Simulator) -> None:
    call = sync_call("anthropic", sim)

    @firsttoken.phase("validate")
    def validate() -> None:
        pass

    with firsttoken.action("checkout", traffic_class="interactive"):
        validate()
        with firsttoken.phase("generate"):
            call()
        with pytest.raises(AppError), firsttoken.phase("render"):
            raise AppError("template")

    action = the_action(telemetry)
    phases = {s.name: s for s in telemetry.spans() if s.attributes and sc.FT_APP_PHASE in s.attributes}
    assert set(phases) == {"validate", "generate", "render"}
    assert all(parent_of(p) == action.context.span_id for p in phases.values())
    (span,) = telemetry.calls()
    assert parent_of(span) == phases["generate"].context.span_id, "a call inside a phase is the phase's child"
    assert attrs_of(action)[sc.FT_ACTION_LLM_CALLS] == 1, "and still counts for the action"
    assert phases["render"].status.status_code is StatusCode.ERROR
    assert action.status.status_code is StatusCode.UNSET, "the app handled the render error"

    points = {p.attributes[sc.FT_APP_PHASE]: p for p in telemetry.metrics()[sc.M_APP_PHASE_DURATION]}
    assert set(points) == {"validate", "generate", "render"}
    for name, point in points.items():
        assert point.count == 1
        assert point.attributes[sc.FT_ACTION_NAME] == "checkout"
        assert point.attributes[sc.FT_TRAFFIC_CLASS] == "interactive"
        assert point.sum == pytest.approx(seconds(phases[name]), abs=SPAN_CLOCK_SKEW)
    assert points["render"].attributes[sc.ERROR_TYPE] == "AppError"


def test_nested_actions(telemetry: Telemetry, sim: Simulator) -> None:
    call = sync_call("openai", sim)
    with firsttoken.action("outer", traffic_class="interactive"):
        call()
        with firsttoken.action("inner"):
            call()
            call()
        with firsttoken.action("inner batch", traffic_class="batch"):
            call()
    outer, inner, batch = (the_action(telemetry, n) for n in ("outer", "inner", "inner batch"))
    assert parent_of(inner) == outer.context.span_id
    assert parent_of(batch) == outer.context.span_id
    assert attrs_of(outer)[sc.FT_ACTION_LLM_CALLS] == 4, "an action counts the calls of the actions inside it"
    assert attrs_of(inner)[sc.FT_ACTION_LLM_CALLS] == 2
    assert attrs_of(batch)[sc.FT_ACTION_LLM_CALLS] == 1
    assert attrs_of(inner)[sc.FT_TRAFFIC_CLASS] == "interactive", "inherited"
    assert attrs_of(batch)[sc.FT_TRAFFIC_CLASS] == "batch"
    classes = [c.attributes[sc.FT_TRAFFIC_CLASS] for c in telemetry.calls() if c.attributes]
    assert sorted(classes) == ["batch", "interactive", "interactive", "interactive"]
    assert attrs_of(outer)[sc.FT_ACTION_LLM_TIME] >= attrs_of(inner)[sc.FT_ACTION_LLM_TIME]


async def test_one_action_object_shared_by_concurrent_tasks(telemetry: Telemetry, sim: Simulator) -> None:
    shared = firsttoken.action("shared")
    call = async_call("openai", sim)
    first_inside = asyncio.Event()

    async def first() -> None:
        async with shared:
            first_inside.set()
            await call()

    async def second() -> None:
        await first_inside.wait()
        async with shared:
            await call()

    await asyncio.gather(first(), second())
    found = actions(telemetry, "shared")
    assert len(found) == 2
    calls = telemetry.calls()
    for action in found:
        assert attrs_of(action)[sc.FT_ACTION_LLM_CALLS] == 1
        assert sum(parent_of(c) == action.context.span_id for c in calls) == 1
    assert firsttoken.app.CURRENT_ACTION.get() is None


def test_scopes_restore_the_context(telemetry: Telemetry) -> None:
    from opentelemetry import trace

    before = trace.get_current_span()
    with firsttoken.action("a", traffic_class="batch", conversation_id="c-1"), firsttoken.phase("p"):
        assert firsttoken.app.TRAFFIC_CLASS.get() == "batch"
        assert firsttoken.app.CONVERSATION_ID.get() == "c-1"
    assert trace.get_current_span() is before
    assert firsttoken.app.CURRENT_ACTION.get() is None
    assert firsttoken.app.TRAFFIC_CLASS.get() is None
    assert firsttoken.app.CONVERSATION_ID.get() is None
    assert attrs_of(the_action(telemetry))[sc.GEN_AI_CONVERSATION_ID] == "c-1"


def test_generator_closed_in_another_context(telemetry: Telemetry, caplog: pytest.LogCaptureFixture) -> None:
    """A decorated generator started in one context and finalised in another (a server that hands
    iteration to a worker, the collector) still ends its action, and touches neither context."""

    @firsttoken.action("elsewhere")
    def numbers() -> Iterator[int]:
        yield 1
        yield 2

    gen = numbers()
    other = contextvars.copy_context()
    assert other.run(next, gen) == 1
    assert firsttoken.app.CURRENT_ACTION.get() is None
    gen.close()  # here, not in `other`
    assert firsttoken.app.CURRENT_ACTION.get() is None
    action = the_action(telemetry)
    assert action.status.status_code is StatusCode.UNSET
    assert attrs_of(action)[sc.FT_ACTION_LLM_CALLS] == 0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], "no 'failed to detach' noise"


def test_busy_time_stays_exact_enough_past_the_interval_bound() -> None:
    state = firsttoken.app.ActionState("batch", None)
    t0, step = state.start_ns, 1000
    expected_busy = 0
    for i in range(firsttoken.context.MAX_INTERVALS * 2):
        start = t0 + i * 2 * step  # disjoint calls, one after another, with gaps
        state.add_call(start, start + step)
        expected_busy += step
    state.add_call(t0 + 10, t0 + 20)  # a late report of an early call: folded away, only counted
    end = t0 + firsttoken.context.MAX_INTERVALS * 4 * step
    calls, total, busy = state.llm_summary(end)
    assert calls == firsttoken.context.MAX_INTERVALS * 2 + 1
    assert total == expected_busy + 10
    assert busy == expected_busy
    assert len(state._intervals) <= firsttoken.context.MAX_INTERVALS


def test_without_instrumentation_scopes_are_harmless(sim: Simulator) -> None:
    call = sync_call("openai", sim)

    @firsttoken.action("plain")
    def handler() -> str:
        with firsttoken.phase("step"), firsttoken.traffic_class("batch"):
            return str(call().id)

    assert handler().startswith("chatcmpl")
    assert firsttoken.app.CURRENT_ACTION.get() is None


# -- traffic class ------------------------------------------------------------------------------------------


def call_every_kind(sim: Simulator) -> None:
    """Streamed and whole calls of both SDKs (so every call metric gets points)."""
    oc = openai.OpenAI(base_url=sim.openai_base_url, api_key="sk-test", max_retries=0)
    ac = anthropic.Anthropic(base_url=sim.anthropic_base_url, api_key="sk-ant-test", max_retries=0)
    oc.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "system", "content": "Be brief."}, *MESSAGES])
    for _ in oc.chat.completions.create(
        model="gpt-4o-mini",
        messages=MESSAGES,
        stream=True,
        stream_options={"include_usage": True},
        max_tokens=3,
    ):
        pass
    oc.embeddings.create(model="text-embedding-3-small", input="hello")
    with ac.messages.stream(model=ANTHROPIC_MODEL, max_tokens=64, system="Be brief.", messages=MESSAGES) as s:
        s.until_done()


CALL_METRIC_PREFIXES = ("gen_ai.client.", "firsttoken.client.")


def call_metric_classes(t: Telemetry) -> dict[str, set[Any]]:
    """Call metric name -> the traffic classes its points carry (None: a point without one)."""
    return {
        name: {p.attributes.get(sc.FT_TRAFFIC_CLASS) for p in points}
        for name, points in t.metrics().items()
        if name.startswith(CALL_METRIC_PREFIXES)
    }


def test_traffic_class_reaches_every_call_metric(telemetry: Telemetry, sim: Simulator) -> None:
    with firsttoken.action("chat turn", traffic_class="interactive"):
        call_every_kind(sim)
    with firsttoken.traffic_class("batch"):
        call_every_kind(sim)
    classes = call_metric_classes(telemetry)
    for name in (
        sc.M_OPERATION_DURATION,
        sc.M_TIME_TO_FIRST_TOKEN,
        sc.M_TIME_TO_FIRST_CHUNK,
        sc.M_TIME_PER_OUTPUT_TOKEN,
        sc.M_TOKEN_USAGE,
        sc.M_INPUT_TOKENS,
        sc.M_OUTPUT_TOKENS,
        sc.M_CACHE_READ_INPUT_TOKENS,
        sc.M_PHASE_TIME,
        sc.M_CONNECTIONS,
        sc.M_FINISH_REASONS,
        sc.M_SDK_CLIENTS,
        sc.M_PREFIX_INPUT_TOKENS,
    ):
        assert name in classes, f"{name} was not recorded"
    for name, seen in classes.items():
        assert seen == {"interactive", "batch"}, f"{name}: {seen}"
    assert {c.attributes[sc.FT_TRAFFIC_CLASS] for c in telemetry.calls() if c.attributes} == {"interactive", "batch"}


def test_calls_outside_any_traffic_class_have_none(telemetry: Telemetry, sim: Simulator) -> None:
    call_every_kind(sim)
    assert all(seen == {None} for seen in call_metric_classes(telemetry).values())


def test_invalid_labels_warn_once_and_become_other(telemetry: Telemetry, sim: Simulator) -> None:
    call = sync_call("openai", sim)
    firsttoken.app._warned.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            with firsttoken.traffic_class("not a label!"):
                call()
        with firsttoken.action("ok", traffic_class=42):
            call()
        with firsttoken.action("x" * 65):
            pass
        firsttoken.traffic_class("not a label!")  # the same bad value again: no new warning
    messages = [str(w.message) for w in caught if issubclass(w.category, firsttoken.FirstTokenWarning)]
    assert len(messages) == 3, messages
    assert "'not a label!'" in messages[0] and sc.ERROR_TYPE_OTHER in messages[0]
    assert "of type int" in messages[1]
    classes = call_metric_classes(telemetry)
    assert classes[sc.M_OPERATION_DURATION] == {sc.ERROR_TYPE_OTHER}
    assert len(actions(telemetry, sc.ERROR_TYPE_OTHER)) == 1, "a bad action name is reported as _OTHER"
    assert attrs_of(the_action(telemetry, "ok"))[sc.FT_TRAFFIC_CLASS] == sc.ERROR_TYPE_OTHER


def test_own_labels_are_accepted(telemetry: Telemetry, sim: Simulator) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", firsttoken.FirstTokenWarning)
        with firsttoken.traffic_class("tenant-a.priority:1"):
            sync_call("anthropic", sim)()
    assert call_metric_classes(telemetry)[sc.M_OPERATION_DURATION] == {"tenant-a.priority:1"}


# -- calls made with plain httpx, and cancellation ---------------------------------------------------------


def test_plain_httpx_calls_belong_to_the_action(telemetry: Telemetry, sim: Simulator) -> None:
    with firsttoken.action("direct", traffic_class="batch"):
        httpx.post(f"{sim.openai_base_url}/chat/completions", json={"model": "gpt-4o-mini", "messages": MESSAGES})
    (span,) = telemetry.calls()
    assert parent_of(span) == the_action(telemetry).context.span_id
    assert attrs_of(span).get(sc.FT_TRAFFIC_CLASS) == "batch"
    assert attrs_of(the_action(telemetry))[sc.FT_ACTION_LLM_CALLS] == 1


async def test_cancelled_action_is_not_an_error(telemetry: Telemetry) -> None:
    inside = asyncio.Event()

    @firsttoken.action("cancelled")
    async def handler() -> None:
        inside.set()
        await asyncio.Event().wait()  # until cancelled

    task = asyncio.create_task(handler())
    await inside.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    action = the_action(telemetry)
    assert action.status.status_code is StatusCode.UNSET
    assert sc.ERROR_TYPE not in attrs_of(action)
