"""The Anthropic Messages API of the simulator, through the real anthropic SDK (sync and async)."""

from __future__ import annotations

import json

import anthropic
import httpx2
import pytest
from pydantic import BaseModel

from firsttoken.sim import Simulator

from .conftest import QUICK

MODEL = "claude-sim-1"
MESSAGES = [{"role": "user", "content": "Say hello."}]
WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
LONG_SYSTEM = "You are a careful assistant for a shipping company. " * 40  # > SMALL_CACHE.min_tokens


class Answer(BaseModel):
    title: str
    score: int


def test_create(ant: anthropic.Anthropic, sim: Simulator) -> None:
    raw = ant.messages.with_raw_response.create(model=MODEL, max_tokens=64, messages=MESSAGES)
    message = raw.parse()
    assert message.id.startswith("msg_") and message.type == "message" and message.role == "assistant"
    assert message.stop_reason == "end_turn"
    assert message.content[0].type == "text" and message.content[0].text
    assert message.usage.output_tokens == 12 and message.usage.input_tokens > 0
    assert message.usage.cache_read_input_tokens == 0 and message.usage.cache_creation_input_tokens == 0
    assert raw.headers["request-id"].startswith("req_")
    for kind in ("requests", "tokens", "input-tokens", "output-tokens"):
        for part in ("limit", "remaining", "reset"):
            assert raw.headers[f"anthropic-ratelimit-{kind}-{part}"]
    truncated = ant.messages.create(model=MODEL, max_tokens=5, messages=MESSAGES)
    assert truncated.stop_reason == "max_tokens" and truncated.usage.output_tokens == 5
    assert [r.path for r in sim.requests] == ["/v1/messages", "/v1/messages"]


def test_raw_stream_has_the_real_event_sequence(sim: Simulator) -> None:
    body = {"model": MODEL, "max_tokens": 3, "messages": MESSAGES, "stream": True}
    with httpx2.stream("POST", sim.url + "/v1/messages", json=body, headers={"anthropic-version": "2023-06-01"}) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        text = r.read().decode()
    events = [block.split("\n")[0].removeprefix("event: ") for block in text.strip().split("\n\n")]
    assert events == [
        "message_start",
        "content_block_start",
        "ping",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = json.loads(text.split("\n")[1].removeprefix("data: "))
    assert start["message"]["usage"]["output_tokens"] == 1


def test_stream(ant: anthropic.Anthropic) -> None:
    events = list(ant.messages.create(model=MODEL, max_tokens=64, messages=MESSAGES, stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds.count("content_block_delta") == 12
    delta = events[-2]
    assert delta.type == "message_delta" and delta.delta.stop_reason == "end_turn"
    assert delta.usage.output_tokens == 12
    with ant.messages.stream(model=MODEL, max_tokens=64, messages=MESSAGES) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text and final.content[0].type == "text" and final.content[0].text == text


def test_thinking_comes_first(ant: anthropic.Anthropic) -> None:
    thinking = {"type": "enabled", "budget_tokens": 1024}
    events = list(ant.messages.create(model=MODEL, max_tokens=2048, messages=MESSAGES, thinking=thinking, stream=True))
    deltas = [e.delta.type for e in events if e.type == "content_block_delta"]
    assert deltas[0] == "thinking_delta" and "signature_delta" in deltas and deltas[-1] == "text_delta"
    assert deltas.index("text_delta") > deltas.index("signature_delta")
    message = ant.messages.create(model=MODEL, max_tokens=2048, messages=MESSAGES, thinking=thinking)
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.usage.output_tokens == QUICK.reasoning_tokens + QUICK.output_tokens


def test_forced_tool_use(ant: anthropic.Anthropic) -> None:
    message = ant.messages.create(
        model=MODEL, max_tokens=256, messages=MESSAGES, tools=[WEATHER], tool_choice={"type": "any"}
    )
    assert message.stop_reason == "tool_use"
    (block,) = message.content
    assert block.type == "tool_use" and block.name == "get_weather" and block.input == {"city": "example"}
    with ant.messages.stream(
        model=MODEL,
        max_tokens=256,
        messages=MESSAGES,
        tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather"},
    ) as stream:
        kinds = [e.delta.type for e in stream if e.type == "content_block_delta"]
        final = stream.get_final_message()
    assert "input_json_delta" in kinds
    assert final.content[0].type == "tool_use" and final.content[0].input == {"city": "example"}


def test_parse_structured_output(ant: anthropic.Anthropic) -> None:
    parsed = ant.messages.parse(model=MODEL, max_tokens=256, messages=MESSAGES, output_format=Answer)
    assert isinstance(parsed.parsed_output, Answer)


def test_count_tokens_and_beta(ant: anthropic.Anthropic, sim: Simulator) -> None:
    counted = ant.messages.count_tokens(model=MODEL, messages=MESSAGES, system="Be kind.")
    created = ant.messages.create(model=MODEL, max_tokens=8, messages=MESSAGES, system="Be kind.")
    assert counted.input_tokens == created.usage.input_tokens > 0
    beta = ant.beta.messages.create(model=MODEL, max_tokens=8, messages=MESSAGES)
    assert beta.content[0].type == "text"
    with ant.beta.messages.stream(model=MODEL, max_tokens=8, messages=MESSAGES) as stream:
        assert stream.get_final_message().usage.output_tokens == 8
    beta_count = ant.beta.messages.count_tokens(model=MODEL, messages=MESSAGES, system="Be kind.")
    assert beta_count.input_tokens == counted.input_tokens
    assert all(r.status == 200 for r in sim.requests)


def test_prompt_cache_creation_then_read(ant: anthropic.Anthropic) -> None:
    system = [{"type": "text", "text": LONG_SYSTEM, "cache_control": {"type": "ephemeral"}}]
    first = ant.messages.create(model=MODEL, max_tokens=8, system=system, messages=MESSAGES)
    turn = [*MESSAGES, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "More, please."}]
    second = ant.messages.create(model=MODEL, max_tokens=8, system=system, messages=turn)
    assert first.usage.cache_creation_input_tokens > 0 and first.usage.cache_read_input_tokens == 0
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert second.usage.cache_creation_input_tokens == 0
    # input_tokens excludes cache tokens: it is only the uncached rest of the prompt.
    assert first.usage.input_tokens < first.usage.cache_creation_input_tokens
    assert second.usage.input_tokens > first.usage.input_tokens
    # Streaming reports the same in message_start.
    events = list(ant.messages.create(model=MODEL, max_tokens=8, system=system, messages=MESSAGES, stream=True))
    assert events[0].type == "message_start"
    assert events[0].message.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens


def test_no_breakpoint_or_changed_prefix_misses(ant: anthropic.Anthropic) -> None:
    plain = ant.messages.create(model=MODEL, max_tokens=8, system=LONG_SYSTEM, messages=MESSAGES)
    again = ant.messages.create(model=MODEL, max_tokens=8, system=LONG_SYSTEM, messages=MESSAGES)
    assert plain.usage.cache_creation_input_tokens == again.usage.cache_read_input_tokens == 0
    for prefix in ("Version one. ", "Version two. "):
        system = [{"type": "text", "text": prefix + LONG_SYSTEM, "cache_control": {"type": "ephemeral"}}]
        message = ant.messages.create(model=MODEL, max_tokens=8, system=system, messages=MESSAGES)
        assert message.usage.cache_read_input_tokens == 0 and message.usage.cache_creation_input_tokens > 0


def test_tool_breakpoint_and_short_prompts(ant: anthropic.Anthropic) -> None:
    tools = [{**WEATHER, "description": LONG_SYSTEM, "cache_control": {"type": "ephemeral"}}]
    first = ant.messages.create(model=MODEL, max_tokens=8, tools=tools, messages=MESSAGES)
    second = ant.messages.create(model=MODEL, max_tokens=8, tools=tools, messages=MESSAGES)
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens > 0
    short = [{"type": "text", "text": "Short.", "cache_control": {"type": "ephemeral"}}]
    for _ in range(2):  # below min_tokens: never cached
        message = ant.messages.create(model=MODEL, max_tokens=8, system=short, messages=MESSAGES)
        assert message.usage.cache_creation_input_tokens == message.usage.cache_read_input_tokens == 0


def test_errors_are_anthropic_shaped(ant: anthropic.Anthropic, sim: Simulator) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        ant.messages.create(model=MODEL, max_tokens=0, messages=MESSAGES)
    assert caught.value.body["type"] == "error"
    response = httpx2.post(sim.url + "/v1/nothing", json={}, headers={"anthropic-version": "2023-06-01"})
    assert response.status_code == 404
    assert response.json() == {
        "type": "error",
        "error": {"type": "not_found_error", "message": "Invalid URL (POST /v1/nothing)"},
    }


async def test_async(aant: anthropic.AsyncAnthropic) -> None:
    message = await aant.messages.create(model=MODEL, max_tokens=64, messages=MESSAGES)
    assert message.usage.output_tokens == 12
    async with aant.messages.stream(model=MODEL, max_tokens=64, messages=MESSAGES) as stream:
        text = "".join([t async for t in stream.text_stream])
    assert text
    raw = await aant.messages.create(model=MODEL, max_tokens=64, messages=MESSAGES, stream=True)
    assert len([e async for e in raw]) == 12 + 5
    counted = await aant.messages.count_tokens(model=MODEL, messages=MESSAGES)
    assert counted.input_tokens > 0
