"""Every OpenAI API firsttoken measures, through the real SDK over loopback, sync and async."""

from __future__ import annotations

import itertools
from typing import Any

import openai
import pytest
from opentelemetry.trace import SpanKind, StatusCode

from firsttoken import semconv as sc
from firsttoken.sim import LatencyModel, Simulator

from .conftest import Telemetry

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello to the test."}]


def client(sim: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.openai_base_url, api_key="sk-test-key", max_retries=0)


def aclient(sim: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=sim.openai_base_url, api_key="sk-test-key", max_retries=0)


def check_call(
    t: Telemetry,
    *,
    operation: str,
    model: str,
    stream: bool,
    api_type: str | None = None,
    end_reason: str = sc.END_COMPLETED,
    usage: bool = True,
) -> dict[str, Any]:
    """The one call span has the attributes every call of this kind must have; returns them."""
    span = t.call()
    attrs = dict(span.attributes or {})
    assert span.kind is SpanKind.CLIENT
    assert span.name == f"{operation} {model}"
    assert attrs[sc.GEN_AI_OPERATION_NAME] == operation
    assert attrs[sc.GEN_AI_PROVIDER_NAME] == "openai"
    assert attrs[sc.GEN_AI_REQUEST_MODEL] == model
    assert attrs[sc.SERVER_ADDRESS] == "127.0.0.1"
    assert isinstance(attrs[sc.SERVER_PORT], int)
    assert attrs.get(sc.GEN_AI_REQUEST_STREAM, False) is stream
    assert attrs[sc.FT_END_REASON] == end_reason
    assert attrs.get(sc.OPENAI_API_TYPE) == api_type
    assert attrs[sc.HTTP_RESPONSE_STATUS_CODE] == 200
    assert sc.FT_ATTEMPTS not in attrs  # absent: one attempt
    assert attrs[sc.FT_REQUEST_ID]
    assert span.status.status_code is StatusCode.UNSET
    assert sc.ERROR_TYPE not in attrs
    if usage:
        assert attrs[sc.GEN_AI_USAGE_INPUT_TOKENS] > 0
        if operation != sc.OP_EMBEDDINGS:
            assert attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] > 0
            assert attrs[sc.GEN_AI_RESPONSE_ID]
            assert attrs[sc.GEN_AI_RESPONSE_FINISH_REASONS]
        assert attrs[sc.GEN_AI_RESPONSE_MODEL]
    if stream and operation != sc.OP_EMBEDDINGS and end_reason == sc.END_COMPLETED:
        ttfc = attrs[sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK]
        ttft = attrs[sc.FT_TIME_TO_FIRST_TOKEN]
        duration = (span.end_time - span.start_time) / 1e9
        assert 0 < ttfc <= ttft <= duration
        assert attrs[sc.FT_TIME_PER_OUTPUT_TOKEN] > 0
        assert attrs[sc.FT_OUTPUT_TOKENS_PER_SECOND] == pytest.approx(1 / attrs[sc.FT_TIME_PER_OUTPUT_TOKEN])
        assert attrs[sc.FT_CHUNK_COUNT] >= 2
    # The leaf phases tile the call: they start at its start, end at its end, and do not overlap.
    phases = t.children(span)
    assert phases, "the call has phase spans"
    assert phases[0].start_time == span.start_time
    assert phases[-1].end_time == span.end_time
    for a, b in itertools.pairwise(phases):
        assert a.end_time == b.start_time
    return attrs


def check_metrics(t: Telemetry, *, stream: bool, model: str) -> None:
    """Metrics were recorded once, in the call span's context (exemplars carry its trace id)."""
    span = t.call()
    metrics = t.metrics()
    duration = metrics[sc.M_OPERATION_DURATION]
    assert sum(p.count for p in duration) == 1
    point = duration[0]
    assert point.attributes[sc.GEN_AI_REQUEST_MODEL] == model
    assert point.exemplars and point.exemplars[0].trace_id == span.context.trace_id
    assert point.exemplars[0].span_id == span.context.span_id
    assert point.sum == pytest.approx((span.end_time - span.start_time) / 1e9, abs=1e-6)
    if stream:
        for name in (sc.M_TIME_TO_FIRST_CHUNK, sc.M_TIME_TO_FIRST_TOKEN, sc.M_TIME_PER_OUTPUT_TOKEN):
            assert sum(p.count for p in metrics[name]) == 1, name
        ttft = metrics[sc.M_TIME_TO_FIRST_TOKEN][0]
        assert ttft.sum == pytest.approx(span.attributes[sc.FT_TIME_TO_FIRST_TOKEN])
    else:
        assert sc.M_TIME_TO_FIRST_TOKEN not in metrics
    assert sc.M_TIME_PER_OUTPUT_CHUNK not in metrics, "the per-chunk metric is opt-in"
    inputs = metrics[sc.M_INPUT_TOKENS]
    assert sum(p.value for p in inputs) == span.attributes[sc.GEN_AI_USAGE_INPUT_TOKENS]
    usage_types = {p.attributes[sc.GEN_AI_TOKEN_TYPE] for p in metrics[sc.M_TOKEN_USAGE]}
    assert sc.TOKEN_TYPE_INPUT in usage_types


# -- chat completions ---------------------------------------------------------------------------


def test_chat_create(telemetry: Telemetry, sim: Any) -> None:
    result = client(sim).chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, max_tokens=50, temperature=0.2)
    assert result.choices[0].message.content
    attrs = check_call(telemetry, operation="chat", model="gpt-4o-mini", stream=False, api_type="chat_completions")
    assert attrs[sc.GEN_AI_REQUEST_MAX_TOKENS] == 50
    assert attrs[sc.GEN_AI_REQUEST_TEMPERATURE] == 0.2
    assert attrs[sc.GEN_AI_USAGE_INPUT_TOKENS] == result.usage.prompt_tokens
    assert attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == result.usage.completion_tokens
    assert attrs[sc.GEN_AI_RESPONSE_ID] == result.id
    assert attrs[sc.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)
    check_metrics(telemetry, stream=False, model="gpt-4o-mini")


def test_chat_stream_with_usage(telemetry: Telemetry, sim: Any) -> None:
    stream = client(sim).chat.completions.create(
        model="gpt-4o", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    assert isinstance(stream, openai.Stream)
    chunks = list(stream)
    usage = chunks[-1].usage
    attrs = check_call(telemetry, operation="chat", model="gpt-4o", stream=True, api_type="chat_completions")
    assert attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == usage.completion_tokens
    assert sc.FT_DECODE_TOKEN_SOURCE not in attrs  # absent: from usage
    assert attrs[sc.FT_CHUNK_COUNT] == len(chunks)
    check_metrics(telemetry, stream=True, model="gpt-4o")


def test_a_plain_call_leaves_out_what_its_absence_says(telemetry: Telemetry, sim: Any) -> None:
    """Attributes whose value is the documented default cost each span an encoding and carry nothing
    (docs/semantics.md, "Absent means"): one attempt, the decode rate's tokens from usage, the provider
    named after the SDK's API, no reasoning tokens."""
    list(
        client(sim).chat.completions.create(
            model="gpt-4o", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
    )
    attrs = dict(telemetry.call().attributes or {})
    assert attrs[sc.FT_TIME_PER_OUTPUT_TOKEN] > 0 and attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] > 0
    for default in (
        sc.FT_ATTEMPTS,
        sc.HTTP_REQUEST_RESEND_COUNT,
        sc.FT_DECODE_TOKEN_SOURCE,
        sc.FT_PROVIDER_SOURCE,
        sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
    ):
        assert default not in attrs, default


def test_chat_stream_without_usage_counts_chunks(telemetry: Telemetry, sim: Any) -> None:
    chunks = list(client(sim).chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True))
    attrs = check_call(
        telemetry, operation="chat", model="gpt-4o", stream=True, api_type="chat_completions", usage=False
    )
    assert sc.GEN_AI_USAGE_OUTPUT_TOKENS not in attrs
    assert attrs[sc.FT_DECODE_TOKEN_SOURCE] == sc.TOKEN_SOURCE_CHUNKS
    assert attrs[sc.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)
    assert attrs[sc.FT_CHUNK_COUNT] == len(chunks)


def test_chat_stream_multiple_choices(telemetry: Telemetry, sim: Any) -> None:
    list(client(sim).chat.completions.create(model="gpt-4o", messages=MESSAGES, n=2, stream=True))
    attrs = dict(telemetry.call().attributes or {})
    assert attrs[sc.GEN_AI_REQUEST_CHOICE_COUNT] == 2
    assert attrs[sc.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop", "stop")


def test_chat_max_tokens_finish_reason_length(telemetry: Telemetry, sim: Any) -> None:
    client(sim).chat.completions.create(model="gpt-4o", messages=MESSAGES, max_tokens=3)
    attrs = dict(telemetry.call().attributes or {})
    assert attrs[sc.GEN_AI_RESPONSE_FINISH_REASONS] == ("length",)
    assert attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 3


def test_chat_stream_tool_call_counts_as_first_token(telemetry: Telemetry, sim: Any) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    chunks = list(
        client(sim).chat.completions.create(
            model="gpt-4o", messages=MESSAGES, tools=tools, tool_choice="required", stream=True
        )
    )
    assert any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
    attrs = dict(telemetry.call().attributes or {})
    assert attrs[sc.FT_TIME_TO_FIRST_TOKEN] > 0
    assert attrs[sc.GEN_AI_RESPONSE_FINISH_REASONS] == ("tool_calls",)


def test_chat_stream_helper(telemetry: Telemetry, sim: Any) -> None:
    with client(sim).chat.completions.stream(
        model="gpt-4o-mini", messages=MESSAGES, stream_options={"include_usage": True}
    ) as stream:
        deltas = [e.delta for e in stream if e.type == "content.delta"]
        final = stream.get_final_completion()
    assert "".join(deltas) == final.choices[0].message.content
    check_call(telemetry, operation="chat", model="gpt-4o-mini", stream=True, api_type="chat_completions")
    check_metrics(telemetry, stream=True, model="gpt-4o-mini")


def test_chat_parse(telemetry: Telemetry, sim: Any) -> None:
    parsed = client(sim).chat.completions.parse(model="gpt-4o-mini", messages=MESSAGES)
    assert parsed.choices[0].message.content
    check_call(telemetry, operation="chat", model="gpt-4o-mini", stream=False, api_type="chat_completions")


async def test_chat_async_create_and_stream(telemetry: Telemetry, sim: Any) -> None:
    c = aclient(sim)
    result = await c.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    assert result.choices[0].message.content
    check_call(telemetry, operation="chat", model="gpt-4o-mini", stream=False, api_type="chat_completions")
    telemetry.exporter.clear()
    stream = await c.chat.completions.create(
        model="gpt-4o-mini", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    assert isinstance(stream, openai.AsyncStream)
    async for _ in stream:
        pass
    check_call(telemetry, operation="chat", model="gpt-4o-mini", stream=True, api_type="chat_completions")
    await c.close()


async def test_chat_async_stream_helper_and_parse(telemetry: Telemetry, sim: Any) -> None:
    c = aclient(sim)
    async with c.chat.completions.stream(
        model="gpt-4o", messages=MESSAGES, stream_options={"include_usage": True}
    ) as stream:
        async for _ in stream:
            pass
        final = await stream.get_final_completion()
    assert final.choices[0].message.content
    check_call(telemetry, operation="chat", model="gpt-4o", stream=True, api_type="chat_completions")
    telemetry.exporter.clear()
    parsed = await c.chat.completions.parse(model="gpt-4o", messages=MESSAGES)
    assert parsed.choices[0].message.content
    check_call(telemetry, operation="chat", model="gpt-4o", stream=False, api_type="chat_completions")
    await c.close()


# -- responses --------------------------------------------------------------------------------


def test_responses_create(telemetry: Telemetry, sim: Any) -> None:
    response = client(sim).responses.create(model="gpt-4o", input="Say hello.", max_output_tokens=40)
    assert response.output_text
    attrs = check_call(telemetry, operation="chat", model="gpt-4o", stream=False, api_type="responses")
    assert attrs[sc.GEN_AI_RESPONSE_ID] == response.id
    assert attrs[sc.GEN_AI_USAGE_INPUT_TOKENS] == response.usage.input_tokens
    assert attrs[sc.GEN_AI_REQUEST_MAX_TOKENS] == 40


def test_responses_stream_events(telemetry: Telemetry, sim: Any) -> None:
    events = list(client(sim).responses.create(model="gpt-4o", input="Say hello.", stream=True))
    completed = events[-1]
    assert completed.type == "response.completed"
    attrs = check_call(telemetry, operation="chat", model="gpt-4o", stream=True, api_type="responses")
    assert attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == completed.response.usage.output_tokens
    check_metrics(telemetry, stream=True, model="gpt-4o")


def test_responses_stream_helper_and_parse(telemetry: Telemetry, sim: Any) -> None:
    c = client(sim)
    with c.responses.stream(model="gpt-4o-mini", input="Say hello.") as stream:
        text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert text == final.output_text
    check_call(telemetry, operation="chat", model="gpt-4o-mini", stream=True, api_type="responses")
    telemetry.exporter.clear()
    parsed = c.responses.parse(model="gpt-4o-mini", input="Say hello.")
    assert parsed.output_text
    check_call(telemetry, operation="chat", model="gpt-4o-mini", stream=False, api_type="responses")


async def test_responses_async(telemetry: Telemetry, sim: Any) -> None:
    c = aclient(sim)
    response = await c.responses.create(model="gpt-4o", input="Say hello.")
    assert response.output_text
    check_call(telemetry, operation="chat", model="gpt-4o", stream=False, api_type="responses")
    telemetry.exporter.clear()
    async with c.responses.stream(model="gpt-4o", input="Say hello.") as stream:
        async for _ in stream:
            pass
        await stream.get_final_response()
    check_call(telemetry, operation="chat", model="gpt-4o", stream=True, api_type="responses")
    await c.close()


# -- legacy completions and embeddings ----------------------------------------------------------


def test_completions(telemetry: Telemetry, sim: Any) -> None:
    c = client(sim)
    result = c.completions.create(model="gpt-3.5-turbo-instruct", prompt="Say hello.", max_tokens=20)
    assert result.choices[0].text
    check_call(telemetry, operation="text_completion", model="gpt-3.5-turbo-instruct", stream=False)
    telemetry.exporter.clear()
    chunks = list(
        c.completions.create(
            model="gpt-3.5-turbo-instruct", prompt="Say hello.", stream=True, stream_options={"include_usage": True}
        )
    )
    assert chunks
    check_call(telemetry, operation="text_completion", model="gpt-3.5-turbo-instruct", stream=True)


async def test_completions_async(telemetry: Telemetry, sim: Any) -> None:
    c = aclient(sim)
    stream = await c.completions.create(
        model="gpt-3.5-turbo-instruct", prompt="Say hello.", stream=True, stream_options={"include_usage": True}
    )
    async for _ in stream:
        pass
    check_call(telemetry, operation="text_completion", model="gpt-3.5-turbo-instruct", stream=True)
    await c.close()


def test_embeddings(telemetry: Telemetry, sim: Any) -> None:
    result = client(sim).embeddings.create(model="text-embedding-3-small", input=["hello", "world"], dimensions=64)
    assert len(result.data) == 2
    attrs = check_call(telemetry, operation="embeddings", model="text-embedding-3-small", stream=False)
    assert attrs[sc.GEN_AI_EMBEDDINGS_DIMENSION_COUNT] == 64
    assert sc.GEN_AI_USAGE_OUTPUT_TOKENS not in attrs


@pytest.mark.parametrize("how", ["base64", "raw", "streaming_response"])
def test_embeddings_dimensions_from_base64(telemetry: Telemetry, sim: Any, how: str) -> None:
    # The SDK asks for base64 by default and decodes it itself, except in raw responses; with
    # encoding_format="base64" the app gets the string. The count comes from the string's length.
    c = client(sim)
    kwargs: dict[str, Any] = {"model": "text-embedding-3-small", "input": ["hello", "world"], "dimensions": 48}
    if how == "base64":
        result = c.embeddings.create(**kwargs, encoding_format="base64")
        assert isinstance(result.data[0].embedding, str)
    elif how == "raw":
        raw = c.embeddings.with_raw_response.create(**kwargs)
        assert isinstance(raw.http_response.json()["data"][0]["embedding"], str)
        raw.parse()
    else:
        with c.embeddings.with_streaming_response.create(**kwargs) as response:
            assert isinstance(response.json()["data"][0]["embedding"], str)
    attrs = check_call(telemetry, operation="embeddings", model="text-embedding-3-small", stream=False)
    assert attrs[sc.GEN_AI_EMBEDDINGS_DIMENSION_COUNT] == 48


@pytest.mark.parametrize(
    ("encoded", "count"),
    [("AACAPw==", 1), ("AACAPwAAAEA=", 2), ("AACA", None), ("AACAPwAAAEAAAEBA", 3), ("", None), ("abc", None)],
)
def test_base64_float32_count(encoded: str, count: int | None) -> None:
    from firsttoken.providers.openai import base64_float32_count

    assert base64_float32_count(encoded) == count


async def test_embeddings_async(telemetry: Telemetry, sim: Any) -> None:
    c = aclient(sim)
    await c.embeddings.create(model="text-embedding-3-small", input="hello", encoding_format="float")
    attrs = check_call(telemetry, operation="embeddings", model="text-embedding-3-small", stream=False)
    assert attrs[sc.GEN_AI_REQUEST_ENCODING_FORMATS] == ("float",)
    await c.close()


# -- raw and streaming responses ----------------------------------------------------------------


def test_with_raw_response(telemetry: Telemetry, sim: Any) -> None:
    c = client(sim)
    raw = c.chat.completions.with_raw_response.create(model="gpt-4o", messages=MESSAGES)
    assert raw.headers["x-request-id"]
    completion = raw.parse()
    attrs = check_call(telemetry, operation="chat", model="gpt-4o", stream=False, api_type="chat_completions")
    assert attrs[sc.GEN_AI_RESPONSE_ID] == completion.id
    assert attrs[sc.FT_REQUEST_ID] == raw.headers["x-request-id"]
    telemetry.exporter.clear()
    raw = c.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    assert not telemetry.calls(), "a raw streamed call ends when its stream does"
    for _ in raw.parse():
        pass
    check_call(telemetry, operation="chat", model="gpt-4o", stream=True, api_type="chat_completions")


def test_with_streaming_response(telemetry: Telemetry, sim: Any) -> None:
    c = client(sim)
    with c.chat.completions.with_streaming_response.create(model="gpt-4o", messages=MESSAGES) as response:
        assert not telemetry.calls(), "the body has not been read yet"
        completion = response.parse()
    attrs = check_call(telemetry, operation="chat", model="gpt-4o", stream=False, api_type="chat_completions")
    assert attrs[sc.GEN_AI_RESPONSE_ID] == completion.id
    telemetry.exporter.clear()
    with c.chat.completions.with_streaming_response.create(
        model="gpt-4o", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    ) as response:
        for _ in response.parse():
            pass
    check_call(telemetry, operation="chat", model="gpt-4o", stream=True, api_type="chat_completions")


def test_with_streaming_response_lines(telemetry: Telemetry, sim: Any) -> None:
    """An app that reads the SSE lines itself still gets a call that ends with its response."""
    c = client(sim)
    with c.chat.completions.with_streaming_response.create(model="gpt-4o", messages=MESSAGES, stream=True) as r:
        lines = [line for line in r.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    span = telemetry.call()
    assert span.attributes[sc.FT_END_REASON] == sc.END_COMPLETED


async def test_async_with_raw_and_streaming_response(telemetry: Telemetry, sim: Any) -> None:
    c = aclient(sim)
    raw = await c.chat.completions.with_raw_response.create(model="gpt-4o", messages=MESSAGES)
    assert raw.parse().choices  # the legacy raw response parses synchronously
    check_call(telemetry, operation="chat", model="gpt-4o", stream=False, api_type="chat_completions")
    telemetry.exporter.clear()
    async with c.chat.completions.with_streaming_response.create(
        model="gpt-4o", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    ) as response:
        async for _ in await response.parse():
            pass
    check_call(telemetry, operation="chat", model="gpt-4o", stream=True, api_type="chat_completions")
    await c.close()


# -- providers behind other hosts ---------------------------------------------------------------


def test_other_endpoints_are_left_alone(telemetry: Telemetry, sim: Any) -> None:
    assert client(sim).models.list().data
    assert not telemetry.calls(), "listing models is not an LLM call"


def test_reasoning_tokens_are_not_part_of_the_decode(telemetry: Telemetry) -> None:
    """OpenAI reasoning tokens are spent before the first visible token: TPOT must not be diluted."""
    latency = LatencyModel(queue_ms=1, decode_tokens_per_s=100, jitter=0, output_tokens=10)
    with Simulator(latency=latency, seed=0) as s:
        chunks = list(
            client(s).chat.completions.create(
                model="o3-mini", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
            )
        )
    usage = chunks[-1].usage
    assert usage.completion_tokens_details.reasoning_tokens > 0
    attrs = dict(telemetry.call().attributes or {})
    assert attrs[sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] == usage.completion_tokens_details.reasoning_tokens
    assert attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == usage.completion_tokens  # reasoning included, per the conventions
    # 10 ms per token set. Diluted by the hidden reasoning tokens it would be near 10 * 10 / 42 = 2.4 ms;
    # the floor leaves room for a late first token that the server's absolute deadlines catch up on.
    assert 0.006 <= attrs[sc.FT_TIME_PER_OUTPUT_TOKEN] <= 0.030
