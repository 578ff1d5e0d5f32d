"""aiobotocore's ``bedrock-runtime`` client (async boto, what ``aioboto3`` uses), measured on botocore's
seam as boto3's is: ``converse``, ``converse_stream``, ``invoke_model`` and
``invoke_model_with_response_stream`` against the simulator speaking Bedrock Runtime (AWS event-stream
frames, parsed by aiobotocore's own parser), signed with fake credentials over real loopback sockets,
sent with aiohttp (aiobotocore's default backend). Before these hooks the calls were seen only on
aiohttp's seam: a ``converse_stream`` read to its end had no TTFT and no usage and ended ``abandoned``.

Timings: the simulator's queue is 30 ms and it decodes 400 tokens/s, so the first content delta comes
at least 30 ms after the request and after the response's headers; the upper bounds are generous (5 s)
for a busy machine with 2 shared cores.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from firsttoken import semconv as sc
from firsttoken.sim import Fault, Simulator

from .conftest import Telemetry
from .test_boto3_bedrock import (  # the same simulator, requests and fixtures as boto3's tests
    ANTHROPIC_BODY,
    CONVERSE,
    LATENCY,
    MODEL_ID,
    NOVA_ID,
    SLOW_S,
    _instrumented,
    captured,
    check_captured,
    check_closed,
    check_dropped,
    check_slow_start,
    check_throttled,
    check_two_streams,
    check_whole,
    client_options,
    sim,
    telemetry,
)

aiobotocore_session = pytest.importorskip(
    "aiobotocore.session",
    reason="aiobotocore pins an older botocore than the dev extra's boto3: its tests run in scripts/compat.sh's venv",
)
from botocore.exceptions import ClientError, EventStreamError  # noqa: E402
from botocore.parsers import ResponseParserError  # noqa: E402

__all__ = ["captured", "sim", "telemetry"]  # fixtures, imported to be used here


@contextlib.asynccontextmanager
async def _client(sim: Simulator, attempts: int = 1) -> AsyncIterator[Any]:
    async with aiobotocore_session.get_session().create_client(
        "bedrock-runtime", **client_options(sim, attempts)
    ) as runtime:
        yield runtime


def _attrs(t: Telemetry) -> dict[str, Any]:
    return dict(t.call().attributes or {})


def _points(t: Telemetry, name: str) -> int:
    """How many measurements metric ``name`` holds (histogram counts, summed over its label sets)."""
    return sum(p.count for p in t.metrics().get(name, []))


async def test_converse_stream_ttft_tokens_and_cache(telemetry: Telemetry, sim: Simulator) -> None:
    async with _client(sim) as runtime:
        for _ in range(2):  # the second reads the system prompt's cache the first wrote
            events = [e async for e in (await runtime.converse_stream(**CONVERSE))["stream"]]
            assert "metadata" in events[-1], "what aiobotocore returns is untouched"
    first, second = check_two_streams(telemetry, sim)
    for a in (first, second):
        assert a[sc.FT_RESPONSE_BODY_SIZE] > 0  # aiohttp's StreamReader counts what it received
        assert a[sc.NETWORK_PROTOCOL_VERSION] == "1.1"
    # Wire phases from aiohttp's TraceConfig, for this call: a new connection, then the same one again.
    assert first[sc.FT_CONNECTION_REUSED] is False and second[sc.FT_CONNECTION_REUSED] is True


async def test_each_call_is_counted_once(telemetry: Telemetry, sim: Simulator) -> None:
    """aiobotocore sends with aiohttp, whose seam measures LLM requests too: the request is the
    aiobotocore call's attempt there (it passes through), so one API call is one call span and one
    measurement in each metric, and its HTTP phases are the call's children."""
    async with _client(sim) as runtime:
        await runtime.converse(**CONVERSE)
        [e async for e in (await runtime.converse_stream(**CONVERSE))["stream"]]
    calls = telemetry.calls()
    assert len(calls) == 2
    assert len({s.context.trace_id for s in calls}) == 2
    assert _points(telemetry, sc.M_OPERATION_DURATION) == 2
    assert _points(telemetry, sc.M_TIME_TO_FIRST_TOKEN) == 1
    assert _points(telemetry, sc.M_TOKEN_USAGE) == 4  # input and output, per call
    ours = {s.context.span_id for s in calls}
    for span in telemetry.spans():
        assert span in calls or (span.parent is not None and span.parent.span_id in ours), span.name
    connections = sum(p.value for p in telemetry.metrics()[sc.M_CONNECTIONS])
    assert connections == 2, "one new connection, one reused: each counted once"


async def test_converse_whole_and_invoke_model(telemetry: Telemetry, sim: Simulator) -> None:
    async with _client(sim) as runtime:
        answer = await runtime.converse(**CONVERSE)
        response = await runtime.invoke_model(modelId=MODEL_ID, body=ANTHROPIC_BODY)
        body = json.loads(await response["body"].read())
    check_whole(telemetry, answer, body)


async def test_invoke_model_read_in_pieces_then_closed(telemetry: Telemetry, sim: Simulator) -> None:
    """``read(n)`` to the end, then an empty read: completed with the usage; the later close changes nothing."""
    async with _client(sim) as runtime:
        response = await runtime.invoke_model(modelId=MODEL_ID, body=ANTHROPIC_BODY)
        stream = response["body"]
        pieces = [await stream.read(100)]
        while pieces[-1]:
            pieces.append(await stream.read(100))
        assert len(telemetry.calls()) == 1
        stream.close()
    a = _attrs(telemetry)
    assert a[sc.FT_END_REASON] == sc.END_COMPLETED
    assert a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == json.loads(b"".join(pieces))["usage"]["output_tokens"] == 12


async def test_invoke_model_with_response_stream_anthropic_and_nova(telemetry: Telemetry, sim: Simulator) -> None:
    nova_body = json.dumps({"messages": CONVERSE["messages"], "inferenceConfig": {"maxTokens": 64}})
    async with _client(sim) as runtime:
        for model, body in ((MODEL_ID, ANTHROPIC_BODY), (NOVA_ID, nova_body)):
            stream = (await runtime.invoke_model_with_response_stream(modelId=model, body=body))["body"]
            chunks = [json.loads(e["chunk"]["bytes"]) async for e in stream]
            last = chunks[-1]  # Claude's message_stop; Nova's with Bedrock's invocation metrics
            assert last.get("type") == "message_stop" or last["amazon-bedrock-invocationMetrics"]["outputTokenCount"]
    claude, nova = (dict(s.attributes or {}) for s in telemetry.calls())
    assert claude[sc.GEN_AI_REQUEST_MODEL] == MODEL_ID and nova[sc.GEN_AI_REQUEST_MODEL] == NOVA_ID
    for a in (claude, nova):
        assert a[sc.FT_END_REASON] == sc.END_COMPLETED
        assert a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 12 and a[sc.GEN_AI_USAGE_INPUT_TOKENS] > 0
        assert a[sc.GEN_AI_RESPONSE_FINISH_REASONS] == ("end_turn",)
        assert 0.03 <= a[sc.FT_TIME_TO_RESPONSE_HEADERS] <= a[sc.FT_TIME_TO_FIRST_TOKEN] < 5.0


async def test_an_early_close_ends_the_call_as_closed(telemetry: Telemetry, sim: Simulator) -> None:
    async with _client(sim) as runtime:
        stream = (await runtime.converse_stream(**CONVERSE))["stream"]
        async for event in stream:
            if "contentBlockDelta" in event:
                break
        assert telemetry.calls() == []
        stream.close()
        check_closed(telemetry)


async def test_a_stream_left_unread_is_abandoned(telemetry: Telemetry, sim: Simulator) -> None:
    async with _client(sim) as runtime:
        response = await runtime.converse_stream(**CONVERSE)
        assert telemetry.calls() == []
        del response
        telemetry.settle_abandoned()
        a = _attrs(telemetry)
    assert a[sc.FT_END_REASON] == sc.END_ABANDONED
    assert sc.FT_TIME_TO_FIRST_TOKEN not in a


async def test_an_exception_event_is_an_error_event(telemetry: Telemetry, sim: Simulator) -> None:
    sim.inject(Fault.error_event(after_chunks=2))
    async with _client(sim) as runtime:
        stream = (await runtime.invoke_model_with_response_stream(modelId=MODEL_ID, body=ANTHROPIC_BODY))["body"]
        with pytest.raises(EventStreamError):
            [e async for e in stream]
    a = _attrs(telemetry)
    assert a[sc.FT_END_REASON] == sc.END_ERROR
    assert a[sc.ERROR_TYPE] == "APIError"


async def test_a_dropped_connection_is_an_error_at_that_moment(telemetry: Telemetry, sim: Simulator) -> None:
    sim.inject(Fault.drop_after(chunks=3))
    async with _client(sim) as runtime:
        stream = (await runtime.converse_stream(**CONVERSE))["stream"]
        with pytest.raises(Exception) as raised:
            [e async for e in stream]
        check_dropped(telemetry, raised.value)


async def test_throttling_retried_by_aiobotocore_is_one_call(telemetry: Telemetry, sim: Simulator) -> None:
    """aiobotocore's retries (standard mode, backoff up to 1 s for the one retry) are one call's
    attempts; given up, the call ends with the last attempt's class: throttling is the rate-limit one."""
    async with _client(sim, attempts=2) as runtime:
        sim.inject(Fault.rate_limit(retry_after=0))
        await runtime.converse(**CONVERSE)  # throttled, then answered
        for _ in range(2):
            sim.inject(Fault.rate_limit(retry_after=0))
        with pytest.raises(ClientError) as raised:
            await runtime.converse_stream(**CONVERSE)
    check_throttled(telemetry, sim, raised.value)
    assert _points(telemetry, sc.M_OPERATION_DURATION) == 2


async def test_concurrent_calls_in_one_event_loop(telemetry: Telemetry, sim: Simulator) -> None:
    """Five streams at once on one client: five calls, each with its own TTFT, tokens and end."""

    async def one(runtime: Any, i: int) -> str:
        request = {**CONVERSE, "messages": [{"role": "user", "content": [{"text": f"Say hello {i}"}]}]}
        events = [e async for e in (await runtime.converse_stream(**request))["stream"]]
        return "".join(e["contentBlockDelta"]["delta"]["text"] for e in events if "contentBlockDelta" in e)

    async with _client(sim) as runtime:
        texts = await asyncio.gather(*(one(runtime, i) for i in range(5)))
    assert all(texts)
    calls = [dict(s.attributes or {}) for s in telemetry.calls()]
    assert len(calls) == 5
    for a in calls:
        assert a[sc.FT_END_REASON] == sc.END_COMPLETED
        assert a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 12
        assert 0.03 <= a[sc.FT_TIME_TO_FIRST_TOKEN] < 5.0
        assert sc.FT_ATTEMPTS not in a
    assert _points(telemetry, sc.M_OPERATION_DURATION) == 5


async def test_capture_on_keeps_the_content_and_never_the_credentials(captured: Telemetry, sim: Simulator) -> None:
    async with _client(sim) as runtime:
        check_captured(captured, [e async for e in (await runtime.converse_stream(**CONVERSE))["stream"]])


async def _both(sim: Simulator) -> tuple[list[Any], dict[str, Any], Any]:
    """What the app gets, less what differs from call to call: the request id and date, and the
    simulator's own latency figure (``metrics``)."""
    async with _client(sim) as runtime:
        events = [e async for e in (await runtime.converse_stream(**CONVERSE))["stream"]]
        events[-1]["metadata"].pop("metrics")
        whole = await runtime.converse(**CONVERSE)
        whole.pop("ResponseMetadata"), whole.pop("metrics")
        body = await (await runtime.invoke_model(modelId=MODEL_ID, body=ANTHROPIC_BODY))["body"].read()
    return events, whole, json.loads(body)["content"]


async def test_aiobotocore_returns_the_same_with_and_without_firsttoken() -> None:
    with Simulator(latency=LATENCY, seed=9) as sim:
        plain = await _both(sim)
    with Simulator(latency=LATENCY, seed=9) as sim, _instrumented() as t:
        measured = await _both(sim)
    assert len(t.calls()) == 3
    assert measured == plain


async def test_time_before_the_first_attempt_counts_in_ttft_and_prepare(telemetry: Telemetry, sim: Simulator) -> None:
    """An async ``before-sign`` handler that takes 300 ms (what a credential refresh costs inside signing)
    runs inside the app's ``converse_stream``: in TTFT, the duration and the ``prepare`` phase; throttled
    once and retried (signed again: 300 ms more, in ``retry_wait``), it is still one call, two attempts."""

    async def slow(**_: Any) -> None:
        await asyncio.sleep(SLOW_S)

    async with _client(sim, attempts=2) as runtime:
        runtime.meta.events.register("before-sign.bedrock-runtime.ConverseStream", slow)
        sim.inject(Fault.rate_limit(retry_after=0))
        started = time.perf_counter()
        events = [e async for e in (await runtime.converse_stream(**CONVERSE))["stream"]]
        observed = time.perf_counter() - started
    assert "metadata" in events[-1]
    span = telemetry.call()
    a = dict(span.attributes or {})
    assert a[sc.FT_ATTEMPTS] == 2 and a[sc.FT_END_REASON] == sc.END_COMPLETED
    check_slow_start(a, span, observed)


async def test_other_aws_clients_record_nothing(telemetry: Telemetry, sim: Simulator) -> None:
    """An ``sts`` client (what a credential refresh calls), answered 404 by the simulator: no span, no metric."""
    async with aiobotocore_session.get_session().create_client("sts", **client_options(sim)) as sts:
        with pytest.raises((ClientError, ResponseParserError)):  # the simulator's JSON 404 is no STS XML
            await sts.get_caller_identity()
    assert telemetry.spans() == []
    assert not any(p.count for points in telemetry.metrics().values() for p in points)
