"""Every OpenAI endpoint of the simulator, through the real openai SDK (sync and async)."""

from __future__ import annotations

import json
import time

import httpx2
import openai
import pytest
from pydantic import BaseModel

from firsttoken.sim import LatencyModel, Simulator

from .conftest import QUICK

MESSAGES = [{"role": "user", "content": "Tell me something true."}]
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city", "days"],
            "additionalProperties": False,
        },
    },
}


class Forecast(BaseModel):
    city: str
    days: int
    sunny: bool
    temperatures: list[float]


# -- chat completions ------------------------------------------------------------------------------


def test_chat_create(oai: openai.OpenAI, sim: Simulator) -> None:
    raw = oai.chat.completions.with_raw_response.create(model="gpt-4o", messages=MESSAGES)
    completion = raw.parse()
    assert completion.object == "chat.completion"
    assert completion.id.startswith("chatcmpl-")
    assert completion.model == "gpt-4o"
    choice = completion.choices[0]
    assert choice.finish_reason == "stop"
    assert choice.message.role == "assistant" and choice.message.content
    usage = completion.usage
    assert usage is not None
    assert usage.completion_tokens == 12
    assert usage.prompt_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert usage.prompt_tokens_details is not None and usage.prompt_tokens_details.cached_tokens == 0
    assert usage.completion_tokens_details is not None and usage.completion_tokens_details.reasoning_tokens == 0
    headers = raw.headers
    assert raw.request_id is not None and raw.request_id.startswith("req_")
    assert int(headers["openai-processing-ms"]) >= 0
    assert headers["openai-version"] == "2020-10-01"
    for kind in ("limit", "remaining", "reset"):
        for what in ("requests", "tokens"):
            assert headers[f"x-ratelimit-{kind}-{what}"]
    (served,) = sim.requests
    assert (served.path, served.model, served.status, served.stream) == ("/v1/chat/completions", "gpt-4o", 200, False)
    assert (served.input_tokens, served.output_tokens) == (usage.prompt_tokens, 12)


def test_chat_stream_wire_sequence(oai: openai.OpenAI) -> None:
    chunks = list(
        oai.chat.completions.create(
            model="gpt-4o", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
    )
    first, *tokens, finish, usage_chunk = chunks
    assert first.choices[0].delta.role == "assistant" and first.choices[0].delta.content == ""
    assert len(tokens) == 12 and all(c.choices[0].delta.content for c in tokens)
    assert finish.choices[0].finish_reason == "stop" and finish.choices[0].delta.content is None
    assert usage_chunk.choices == [] and usage_chunk.usage is not None
    assert usage_chunk.usage.completion_tokens == 12
    assert len({c.id for c in chunks}) == 1


def test_chat_stream_without_usage_and_max_tokens(oai: openai.OpenAI) -> None:
    chunks = list(oai.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True, max_tokens=5))
    assert all(c.usage is None for c in chunks)
    assert sum(1 for c in chunks if c.choices[0].delta.content) == 5
    assert chunks[-1].choices[0].finish_reason == "length"


def test_chat_n_choices(oai: openai.OpenAI) -> None:
    completion = oai.chat.completions.create(model="gpt-4o", messages=MESSAGES, n=3, max_completion_tokens=4)
    assert [c.index for c in completion.choices] == [0, 1, 2]
    assert all(c.finish_reason == "length" for c in completion.choices)
    assert completion.usage is not None and completion.usage.completion_tokens == 12
    stream = oai.chat.completions.create(model="gpt-4o", messages=MESSAGES, n=2, stream=True)
    texts = {0: "", 1: ""}
    for chunk in stream:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
    assert all(texts.values())


def test_chat_stream_chunk_tokens() -> None:
    model = LatencyModel.fixed(queue_ms=0, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=5000, output_tokens=10)
    with Simulator(latency=model, models={"chunky": LatencyModel.fixed(decode_tokens_per_s=5000, chunk_tokens=4)}) as s:
        c = openai.OpenAI(base_url=s.openai_base_url, api_key="k", max_retries=0)
        deltas = [ch for ch in c.chat.completions.create(model="chunky", messages=MESSAGES, stream=True, max_tokens=10)]
        contents = [d.choices[0].delta.content for d in deltas if d.choices[0].delta.content]
        assert len(contents) == 3  # 4 + 4 + 2 tokens
        c.close()


def test_chat_required_tool_call_streams_arguments(oai: openai.OpenAI) -> None:
    completion = oai.chat.completions.create(
        model="gpt-4o", messages=MESSAGES, tools=[WEATHER_TOOL], tool_choice="required"
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "example", "days": 1}

    named = {"type": "function", "function": {"name": "get_weather"}}
    chunks = list(
        oai.chat.completions.create(
            model="gpt-4o", messages=MESSAGES, tools=[WEATHER_TOOL], tool_choice=named, stream=True
        )
    )
    deltas = [c.choices[0].delta.tool_calls for c in chunks if c.choices[0].delta.tool_calls]
    assert len(deltas) > 2, "arguments arrive in pieces"
    assert deltas[0][0].id and deltas[0][0].function and deltas[0][0].function.name == "get_weather"
    arguments = "".join(d[0].function.arguments or "" for d in deltas if d[0].function)
    assert json.loads(arguments) == {"city": "example", "days": 1}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_chat_auto_tool_choice_answers_in_text(oai: openai.OpenAI) -> None:
    completion = oai.chat.completions.create(model="gpt-4o", messages=MESSAGES, tools=[WEATHER_TOOL])
    assert completion.choices[0].message.content and not completion.choices[0].message.tool_calls


def test_chat_parse_and_stream_helper(oai: openai.OpenAI) -> None:
    parsed = oai.chat.completions.parse(model="gpt-4o", messages=MESSAGES, response_format=Forecast)
    result = parsed.choices[0].message.parsed
    assert isinstance(result, Forecast) and result.temperatures
    with oai.chat.completions.stream(
        model="gpt-4o", messages=MESSAGES, tools=[openai.pydantic_function_tool(Forecast)], tool_choice="required"
    ) as stream:
        kinds = {event.type for event in stream}
        final = stream.get_final_completion()
    assert "tool_calls.function.arguments.delta" in kinds
    (tool_call,) = final.choices[0].message.tool_calls or []
    assert isinstance(tool_call.function.parsed_arguments, Forecast)


def test_reasoning_model_spends_hidden_tokens(oai: openai.OpenAI) -> None:
    completion = oai.chat.completions.create(model="o3-mini", messages=MESSAGES)
    usage = completion.usage
    assert usage is not None and usage.completion_tokens_details is not None
    assert usage.completion_tokens_details.reasoning_tokens == QUICK.reasoning_tokens
    assert usage.completion_tokens == QUICK.reasoning_tokens + QUICK.output_tokens
    # Reasoning shares the max_completion_tokens budget, as on the real API.
    short = oai.chat.completions.create(model="o4-mini", messages=MESSAGES, max_completion_tokens=40)
    assert short.choices[0].finish_reason == "length"
    assert short.usage is not None and short.usage.completion_tokens == 40


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("limit", [20, 40])
def test_a_stream_spent_on_reasoning_ends_after_the_reasoning(api: str, limit: int) -> None:
    """With max tokens at or below the hidden reasoning, no visible token is sent, and the stream's
    end is due when the last reasoning token is: 10 ms of queue + limit x 5 ms. The simulator
    sleeps until absolute deadlines from the moment it read the request, so a client clock can only
    see more than that (the bug: the closing chunks went out right after the queue, at ~10 ms)."""
    thinking = LatencyModel.fixed(
        queue_ms=10, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=200, output_tokens=12, reasoning_tokens=40
    )
    with (
        Simulator(latency=thinking, seed=1) as s,
        openai.OpenAI(base_url=s.openai_base_url, api_key="sk-test", max_retries=0) as client,
    ):
        started = time.perf_counter()
        if api == "chat":
            stream = client.chat.completions.create(
                model="o3-mini", messages=MESSAGES, max_completion_tokens=limit, stream=True
            )
            chunks = list(stream)
            elapsed = time.perf_counter() - started
            assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
            assert not "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        else:
            events = list(client.responses.create(model="o3-mini", input="x", max_output_tokens=limit, stream=True))
            elapsed = time.perf_counter() - started
            assert events[-1].type == "response.incomplete"
    assert elapsed >= (10 + limit * 5) / 1000, elapsed


# -- responses --------------------------------------------------------------------------------------


def test_responses_create(oai: openai.OpenAI) -> None:
    response = oai.responses.create(model="gpt-4o", input="Say something.", instructions="Be brief.")
    assert response.status == "completed" and response.id.startswith("resp_")
    assert response.output_text
    usage = response.usage
    assert usage is not None and usage.output_tokens == 12
    assert usage.input_tokens_details.cached_tokens == 0
    assert usage.output_tokens_details.reasoning_tokens == 0
    truncated = oai.responses.create(model="gpt-4o", input="x", max_output_tokens=3)
    assert truncated.status == "incomplete"
    assert truncated.incomplete_details is not None and truncated.incomplete_details.reason == "max_output_tokens"


def test_responses_stream_event_sequence(oai: openai.OpenAI) -> None:
    events = list(oai.responses.create(model="gpt-4o", input=[{"role": "user", "content": "hi"}], stream=True))
    kinds = [e.type for e in events]
    assert kinds[:5] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
    ]
    assert kinds.count("response.output_text.delta") == 12
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    completed = events[-1]
    assert completed.type == "response.completed"
    assert completed.response.usage is not None and completed.response.usage.output_tokens == 12
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert completed.response.output_text == text


def test_responses_reasoning_model_and_stream_helper(oai: openai.OpenAI) -> None:
    with oai.responses.stream(model="o3-mini", input="think") as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_response()
    assert kinds.count("response.output_item.added") == 2  # reasoning item, then the message
    assert final.usage is not None and final.usage.output_tokens_details.reasoning_tokens == QUICK.reasoning_tokens
    assert final.output[0].type == "reasoning" and final.output_text


def test_responses_parse_and_function_call(oai: openai.OpenAI) -> None:
    parsed = oai.responses.parse(model="gpt-4o", input="forecast", text_format=Forecast)
    assert isinstance(parsed.output_parsed, Forecast)
    tool = {"type": "function", **WEATHER_TOOL["function"], "strict": True}
    events = list(
        oai.responses.create(model="gpt-4o", input="weather?", tools=[tool], tool_choice="required", stream=True)
    )
    kinds = [e.type for e in events]
    assert "response.function_call_arguments.delta" in kinds
    final = events[-1].response
    (call,) = final.output
    assert call.type == "function_call" and call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "example", "days": 1}


# -- legacy completions and embeddings ----------------------------------------------------------------


def test_completions(oai: openai.OpenAI) -> None:
    completion = oai.completions.create(model="gpt-3.5-turbo-instruct", prompt="Once upon a time")
    assert completion.object == "text_completion" and completion.choices[0].text
    assert completion.usage is not None and completion.usage.completion_tokens == 12
    chunks = list(
        oai.completions.create(
            model="gpt-3.5-turbo-instruct",
            prompt=["a", "b"],
            stream=True,
            stream_options={"include_usage": True},
            max_tokens=3,
        )
    )
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 3
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["length"]


def test_embeddings_float_base64_and_dimensions(oai: openai.OpenAI) -> None:
    default = oai.embeddings.create(model="text-embedding-3-small", input=["hello", "world"])  # SDK asks for base64
    assert [len(d.embedding) for d in default.data] == [1536, 1536]
    as_float = oai.embeddings.create(model="text-embedding-3-small", input="hello", encoding_format="float")
    assert as_float.data[0].embedding == pytest.approx(default.data[0].embedding, abs=1e-6)
    assert sum(x * x for x in as_float.data[0].embedding) == pytest.approx(1.0, abs=1e-4)
    small = oai.embeddings.create(model="text-embedding-3-large", input=[[1, 2, 3]], dimensions=8)
    assert len(small.data[0].embedding) == 8
    assert small.usage.prompt_tokens == 3


# -- errors -------------------------------------------------------------------------------------------


def test_unknown_path_is_openai_shaped_404(oai: openai.OpenAI, sim: Simulator) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        oai.post("/nope", body={}, cast_to=object)
    assert caught.value.body["type"] == "invalid_request_error"
    response = httpx2.post(sim.url + "/v1/nope", json={})
    assert response.status_code == 404
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}


def test_bad_request(oai: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError):
        oai.chat.completions.create(model="gpt-4o", messages=MESSAGES, n=0)
    with pytest.raises(openai.BadRequestError):
        oai.post("/chat/completions", body={"model": "gpt-4o"}, cast_to=object)


# -- async -----------------------------------------------------------------------------------------


async def test_async_endpoints(aoai: openai.AsyncOpenAI) -> None:
    completion = await aoai.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert completion.choices[0].message.content
    stream = await aoai.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
    contents = [c.choices[0].delta.content async for c in stream if c.choices and c.choices[0].delta.content]
    assert len(contents) == 12
    async with aoai.responses.stream(model="gpt-4o", input="hi") as rstream:
        async for _ in rstream:
            pass
        final = await rstream.get_final_response()
    assert final.output_text
    embedding = await aoai.embeddings.create(model="text-embedding-3-small", input="x")
    assert len(embedding.data[0].embedding) == 1536
    legacy = await aoai.completions.create(model="davinci-002", prompt="x", stream=True)
    assert [c async for c in legacy]
