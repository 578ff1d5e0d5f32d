"""A streamed call's span ends exactly once, with the right status, however the app stops reading."""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any

import httpx2
import openai
import pytest
from opentelemetry.trace import StatusCode
from packaging.version import Version

from firsttoken import semconv as sc
from firsttoken.sim import Fault, LatencyModel, Simulator

from .conftest import Telemetry

MESSAGES = [{"role": "user", "content": "Tell me a story."}]
# Slow enough that an app stopping after a few chunks really stops before the end.
SLOW = LatencyModel(queue_ms=1, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=200, jitter=0, output_tokens=40)
# What a connection dropped mid-stream raises in the app: openai wraps transport errors in its own from 3.14.
DROPPED: type[Exception] = (
    openai.APIConnectionError if Version(openai.__version__) >= Version("3.14") else httpx2.RemoteProtocolError
)


@pytest.fixture
def slow_sim() -> Any:
    with Simulator(latency=SLOW, seed=2) as s:
        yield s


def _client(sim: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.openai_base_url, api_key="sk-test", max_retries=0)


def _aclient(sim: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=sim.openai_base_url, api_key="sk-test", max_retries=0)


def _ended(t: Telemetry, reason: str, *, error: str | None = None) -> Any:
    span = t.call()  # exactly one call span: ended once
    attrs = span.attributes or {}
    assert attrs[sc.FT_END_REASON] == reason
    if error is None:
        assert span.status.status_code is StatusCode.UNSET
        assert sc.ERROR_TYPE not in attrs
    else:
        assert span.status.status_code is StatusCode.ERROR
        assert attrs[sc.ERROR_TYPE] == error
    duration = t.metrics()[sc.M_OPERATION_DURATION]
    assert sum(p.count for p in duration) == 1, "the call's metrics were recorded once"
    return span


def _create(c: openai.OpenAI) -> Any:
    return c.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)


def test_exhausted(telemetry: Telemetry, slow_sim: Any) -> None:
    stream = _create(_client(slow_sim))
    for _ in stream:
        pass
    stream.close()  # closing after the end changes nothing
    _ended(telemetry, sc.END_COMPLETED)


def test_break_then_close(telemetry: Telemetry, slow_sim: Any) -> None:
    stream = _create(_client(slow_sim))
    for n, _ in enumerate(stream):
        if n == 3:
            break
    assert not telemetry.calls(), "breaking out of the loop alone does not end the call"
    stream.close()
    span = _ended(telemetry, sc.END_CLOSED)
    assert span.attributes[sc.FT_CHUNK_COUNT] == 4
    assert span.attributes[sc.FT_TIME_TO_FIRST_TOKEN] > 0


def test_with_block_left_early(telemetry: Telemetry, slow_sim: Any) -> None:
    with _create(_client(slow_sim)) as stream:
        next(iter(stream))
    _ended(telemetry, sc.END_CLOSED)


def test_stream_helper_left_early(telemetry: Telemetry, slow_sim: Any) -> None:
    with _client(slow_sim).chat.completions.stream(model="gpt-4o", messages=MESSAGES) as stream:
        for event in stream:
            if event.type == "content.delta":
                break
    _ended(telemetry, sc.END_CLOSED)


def test_dropped_stream_is_abandoned_at_last_chunk(telemetry: Telemetry, slow_sim: Any) -> None:
    stream = _create(_client(slow_sim))
    iterator = iter(stream)
    next(iterator)
    next(iterator)
    read_at_ns = time.time_ns()
    time.sleep(0.2)
    del stream, iterator
    telemetry.settle_abandoned()
    span = _ended(telemetry, sc.END_ABANDONED)
    # The end is the last chunk seen, not the moment the garbage collector ran.
    assert span.end_time <= read_at_ns
    assert span.attributes[sc.FT_CHUNK_COUNT] == 2


def test_never_iterated_stream_is_abandoned(telemetry: Telemetry, slow_sim: Any) -> None:
    stream = _create(_client(slow_sim))
    del stream
    telemetry.settle_abandoned()
    span = _ended(telemetry, sc.END_ABANDONED)
    assert span.attributes[sc.FT_CHUNK_COUNT] == 0


def test_connection_dropped_mid_stream(telemetry: Telemetry, slow_sim: Any) -> None:
    slow_sim.inject(Fault.drop_after(chunks=3))
    received = 0
    with pytest.raises(DROPPED):
        for _ in _create(_client(slow_sim)):
            received += 1
    assert received == 3
    span = _ended(telemetry, sc.END_ERROR, error=DROPPED.__qualname__)
    assert span.status.description == DROPPED.__qualname__  # no API's words: the exception's text is the app's


def test_error_event_mid_stream(telemetry: Telemetry, slow_sim: Any) -> None:
    slow_sim.inject(Fault.error_event(after_chunks=2))
    with pytest.raises(openai.APIError) as caught:
        for _ in _create(_client(slow_sim)):
            pass
    span = _ended(telemetry, sc.END_ERROR, error=type(caught.value).__qualname__)
    assert span.status.description == caught.value.body["message"], "the API's words, not the class again"


async def test_async_exhausted_and_closed(telemetry: Telemetry, slow_sim: Any) -> None:
    c = _aclient(slow_sim)
    stream = await c.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
    async for _ in stream:
        pass
    _ended(telemetry, sc.END_COMPLETED)
    telemetry.exporter.clear()
    stream = await c.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
    async for _ in stream:
        break
    await stream.close()
    span = telemetry.call()
    assert span.attributes[sc.FT_END_REASON] == sc.END_CLOSED
    await c.close()


async def test_async_with_block_left_early(telemetry: Telemetry, slow_sim: Any) -> None:
    c = _aclient(slow_sim)
    async with await c.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True) as stream:
        async for _ in stream:
            break
    _ended(telemetry, sc.END_CLOSED)
    await c.close()


async def test_async_cancelled_is_not_an_error(telemetry: Telemetry, slow_sim: Any) -> None:
    slow_sim.inject(Fault.stall(after_chunks=2, seconds=30))
    c = _aclient(slow_sim)
    got_two = asyncio.Event()

    async def consume() -> None:
        n = 0
        async for _ in await c.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True):
            n += 1
            if n == 2:
                got_two.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(got_two.wait(), 10)
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    _ended(telemetry, sc.END_CANCELLED)
    await c.close()


async def test_async_cancelled_before_headers(telemetry: Telemetry) -> None:
    with Simulator(latency=LatencyModel(queue_ms=5000, jitter=0), seed=3) as slow:
        c = _aclient(slow)
        task = asyncio.create_task(c.chat.completions.create(model="gpt-4o", messages=MESSAGES))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        _ended(telemetry, sc.END_CANCELLED)
        await c.close()


async def test_async_dropped_stream_is_abandoned(telemetry: Telemetry, slow_sim: Any) -> None:
    c = _aclient(slow_sim)
    stream = await c.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
    await stream.__anext__()
    del stream
    gc.collect()
    await asyncio.sleep(0.05)  # let asyncio finalize the async generator
    telemetry.settle_abandoned()
    _ended(telemetry, sc.END_ABANDONED)
    await c.close()


def test_error_status_before_stream(telemetry: Telemetry, sim: Any) -> None:
    sim.inject(Fault.server_error())
    with pytest.raises(openai.InternalServerError) as caught:
        _create(_client(sim))
    span = _ended(telemetry, sc.END_ERROR, error="InternalServerError")
    assert isinstance(caught.value.body, dict) and caught.value.body["message"]
    assert span.status.description == caught.value.body["message"], "the API's words, not the class again"
    assert span.attributes[sc.HTTP_RESPONSE_STATUS_CODE] == 500
    point = telemetry.metrics()[sc.M_OPERATION_DURATION][0]
    assert point.attributes[sc.ERROR_TYPE] == "InternalServerError"


def test_rate_limited_then_success_is_one_call_with_two_attempts(telemetry: Telemetry, sim: Any) -> None:
    sim.inject(Fault.rate_limit(retry_after=0.05))
    c = openai.OpenAI(base_url=sim.openai_base_url, api_key="sk-test", max_retries=2)
    list(_create(c))
    span = _ended(telemetry, sc.END_COMPLETED)
    assert span.attributes[sc.FT_ATTEMPTS] == 2
    assert span.attributes[sc.HTTP_REQUEST_RESEND_COUNT] == 1
    # The call includes the SDK's wait before retrying: rate-limit time is not hidden.
    assert (span.end_time - span.start_time) / 1e9 >= 0.05
