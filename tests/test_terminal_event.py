"""A stream whose terminal event the app read ends ``completed``, however the response is closed
afterwards; one closed before its terminal event ends ``closed`` (issue 29, item 3).

The terminal events (docs/semantics.md, "End reasons"): Anthropic's ``message_stop``; a Chat
Completions or Completions chunk that finishes every choice asked for (``finish_reason``), and
``[DONE]``; the Responses API's ``response.completed`` (``.incomplete``, ``.failed``); Gemini's
chunk whose candidate has a ``finishReason``; Cohere's ``message-end``. Mistral's API is the Chat
Completions format.

The app reads up to and including the terminal event, stops there (``break``), and closes the
stream or response without reading to the end of the body, as LiteLLM does, or drops it. Real SDKs
(openai, anthropic, google-genai, cohere, mistralai) and plain httpx, aiohttp and requests, over real sockets,
against the simulator.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from importlib import metadata
from typing import Any

import anthropic
import httpx
import openai
import pytest
from packaging.version import Version

from firsttoken import semconv as sc
from firsttoken.sim import LatencyModel, Simulator

from .conftest import Telemetry

aiohttp = pytest.importorskip("aiohttp", reason="aiohttp is in the dev extra")
genai = pytest.importorskip("google.genai", reason="google-genai is in the dev extra")
genai_types = pytest.importorskip("google.genai.types")
cohere = pytest.importorskip("cohere", reason="cohere is in the dev extra")
pytest.importorskip("mistralai", reason="mistralai is in the dev extra")
try:
    from mistralai import Mistral
except ImportError:  # mistralai 2 moved the client
    from mistralai.client import Mistral  # type: ignore[no-redef]

# Quick, but with a real stream: a few dozen events over some milliseconds.
MODEL = LatencyModel(queue_ms=2, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=2000, jitter=0, output_tokens=24)
MESSAGES = [{"role": "user", "content": "Tell me a story."}]
CLAUDE = "claude-test-model"  # not in the SDK's deprecation list


@pytest.fixture
def tsim() -> Any:
    with Simulator(latency=MODEL, seed=5) as s:
        yield s


def _end(telemetry: Telemetry) -> dict[str, Any]:
    span = telemetry.call()  # exactly one call span: the call ended once
    return dict(span.attributes or {})


def _oa(sim: Simulator) -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.openai_base_url, api_key="sk-test", max_retries=0)


def _an(sim: Simulator) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=sim.anthropic_base_url, api_key="sk-ant-test", max_retries=0)


def _read_until(stream: Any, last: Callable[[Any], bool]) -> Any:
    """Iterate ``stream`` up to and including the first item ``last`` accepts; that item."""
    for item in stream:
        if last(item):
            return item
    raise AssertionError("the stream ended before the item looked for")


def _finishes(chunk: Any) -> bool:
    return bool(chunk.choices) and all(c.finish_reason is not None for c in chunk.choices)


def _has_text(chunk: Any) -> bool:
    return bool(chunk.choices) and bool(chunk.choices[0].delta.content)


# -- the official SDKs: read the terminal event, break, close --------------------------------------


def test_openai_chat_finish_reason_then_close(telemetry: Telemetry, tsim: Simulator) -> None:
    # The chunk finishing the only choice is the end of the answer; the usage chunk and [DONE] are
    # left unread (the SDK never hands [DONE] to the app).
    stream = _oa(tsim).chat.completions.create(
        model="gpt-4o-mini", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    _read_until(stream, _finishes)
    stream.close()
    a = _end(telemetry)
    assert a[sc.FT_END_REASON] == sc.END_COMPLETED
    assert a[sc.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)


def test_openai_chat_usage_chunk_then_close(telemetry: Telemetry, tsim: Simulator) -> None:
    stream = _oa(tsim).chat.completions.create(
        model="gpt-4o-mini", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    _read_until(stream, lambda chunk: chunk.usage is not None)
    stream.close()
    a = _end(telemetry)
    assert a[sc.FT_END_REASON] == sc.END_COMPLETED
    assert a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 24


def test_openai_chat_two_choices_end_when_both_finished(telemetry: Telemetry, tsim: Simulator) -> None:
    client = _oa(tsim)
    kwargs: dict[str, Any] = {"model": "gpt-4o-mini", "messages": MESSAGES, "stream": True, "n": 2}
    kwargs["stream_options"] = {"include_usage": True}
    stream = client.chat.completions.create(**kwargs)
    _read_until(stream, lambda c: any(ch.finish_reason for ch in c.choices))  # one of two choices finished
    stream.close()
    assert _end(telemetry)[sc.FT_END_REASON] == sc.END_CLOSED
    telemetry.exporter.clear()
    stream = client.chat.completions.create(**kwargs)
    finished: set[int] = set()

    def both(chunk: Any) -> bool:
        finished.update(choice.index for choice in chunk.choices if choice.finish_reason)
        return finished == {0, 1}

    _read_until(stream, both)
    stream.close()
    assert _end(telemetry)[sc.FT_END_REASON] == sc.END_COMPLETED


def test_openai_completions_finish_reason_then_close(telemetry: Telemetry, tsim: Simulator) -> None:
    stream = _oa(tsim).completions.create(model="gpt-3.5-turbo-instruct", prompt="Once upon", stream=True)
    _read_until(stream, _finishes)
    stream.close()
    assert _end(telemetry)[sc.FT_END_REASON] == sc.END_COMPLETED


def test_openai_responses_completed_then_close(telemetry: Telemetry, tsim: Simulator) -> None:
    stream = _oa(tsim).responses.create(model="gpt-4o-mini", input="Tell me a story.", stream=True)
    _read_until(stream, lambda event: event.type == "response.completed")
    stream.close()
    a = _end(telemetry)
    assert a[sc.FT_END_REASON] == sc.END_COMPLETED
    assert a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 24


def test_anthropic_message_stop_then_close(telemetry: Telemetry, tsim: Simulator) -> None:
    stream = _an(tsim).messages.create(model=CLAUDE, max_tokens=64, messages=MESSAGES, stream=True)
    _read_until(stream, lambda event: event.type == "message_stop")
    stream.close()
    a = _end(telemetry)
    assert a[sc.FT_END_REASON] == sc.END_COMPLETED
    assert a[sc.GEN_AI_RESPONSE_FINISH_REASONS] == ("end_turn",)
    assert a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 24


def test_anthropic_stop_reason_then_close(telemetry: Telemetry, tsim: Simulator) -> None:
    """The message_delta carrying the stop reason is the answer's end: only message_stop follows, and
    LiteLLM, for one, stops reading there (issue 37, item 12)."""
    stream = _an(tsim).messages.create(model=CLAUDE, max_tokens=64, messages=MESSAGES, stream=True)
    _read_until(stream, lambda event: event.type == "message_delta" and event.delta.stop_reason is not None)
    stream.close()
    a = _end(telemetry)
    assert a[sc.FT_END_REASON] == sc.END_COMPLETED
    assert a[sc.GEN_AI_RESPONSE_FINISH_REASONS] == ("end_turn",)
    assert a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 24


def test_anthropic_stream_helper_message_stop_then_leave(telemetry: Telemetry, tsim: Simulator) -> None:
    with _an(tsim).messages.stream(model=CLAUDE, max_tokens=64, messages=MESSAGES) as stream:
        _read_until(stream, lambda event: event.type == "message_stop")
    assert _end(telemetry)[sc.FT_END_REASON] == sc.END_COMPLETED


def test_anthropic_message_stop_then_dropped(telemetry: Telemetry, tsim: Simulator) -> None:
    stream = _an(tsim).messages.create(model=CLAUDE, max_tokens=64, messages=MESSAGES, stream=True)
    _read_until(stream, lambda event: event.type == "message_stop")
    del stream
    telemetry.settle_abandoned()
    assert _end(telemetry)[sc.FT_END_REASON] == sc.END_COMPLETED


def test_openai_responses_completed_then_dropped(telemetry: Telemetry, tsim: Simulator) -> None:
    stream = _oa(tsim).responses.create(model="gpt-4o-mini", input="Tell me a story.", stream=True)
    _read_until(stream, lambda event: event.type == "response.completed")
    del stream
    telemetry.settle_abandoned()
    assert _end(telemetry)[sc.FT_END_REASON] == sc.END_COMPLETED


async def test_async_sdks_terminal_event_then_close(telemetry: Telemetry, tsim: Simulator) -> None:
    an = anthropic.AsyncAnthropic(base_url=tsim.anthropic_base_url, api_key="sk-ant-test", max_retries=0)
    stream = await an.messages.create(model=CLAUDE, max_tokens=64, messages=MESSAGES, stream=True)
    async for event in stream:
        if event.type == "message_stop":
            break
    await stream.close()
    oa = openai.AsyncOpenAI(base_url=tsim.openai_base_url, api_key="sk-test", max_retries=0)
    chat = await oa.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True)
    async for chunk in chat:
        if _finishes(chunk):
            break
    await chat.close()
    ends = [dict(s.attributes or {})[sc.FT_END_REASON] for s in telemetry.calls()]
    assert ends == [sc.END_COMPLETED, sc.END_COMPLETED]


# -- the official SDKs: stopped before the terminal event ------------------------------------------


def test_sdk_streams_closed_before_their_terminal_event_are_closed(telemetry: Telemetry, tsim: Simulator) -> None:
    oa, an = _oa(tsim), _an(tsim)
    chat = oa.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True)
    _read_until(chat, _has_text)
    chat.close()
    text = oa.completions.create(model="gpt-3.5-turbo-instruct", prompt="Once upon", stream=True)
    _read_until(text, lambda chunk: bool(chunk.choices and chunk.choices[0].text))
    text.close()
    responses = oa.responses.create(model="gpt-4o-mini", input="Tell me a story.", stream=True)
    _read_until(responses, lambda event: event.type == "response.output_text.delta")
    responses.close()
    messages = an.messages.create(model=CLAUDE, max_tokens=64, messages=MESSAGES, stream=True)
    _read_until(messages, lambda event: event.type == "content_block_delta")
    messages.close()
    with an.messages.stream(model=CLAUDE, max_tokens=64, messages=MESSAGES) as helper:
        _read_until(helper, lambda event: event.type == "content_block_delta")
    ends = [dict(s.attributes or {})[sc.FT_END_REASON] for s in telemetry.calls()]
    assert ends == [sc.END_CLOSED] * 5


# -- SDKs read on the wire: google-genai, cohere, mistralai ----------------------------------------


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal-read", "stopped-before"])
def test_google_genai(telemetry: Telemetry, tsim: Simulator, terminal: bool) -> None:
    client = genai.Client(api_key="test-key", http_options=genai_types.HttpOptions(base_url=tsim.url))
    chunks = client.models.generate_content_stream(model="gemini-2.0-flash", contents="Tell me a story.")
    if terminal:
        _read_until(chunks, lambda c: any(cand.finish_reason for cand in c.candidates or ()))
    else:
        next(iter(chunks))
    chunks.close()  # a generator: closing it closes the SDK's response (3.6; 1.20 leaves it to the collector)
    del chunks
    telemetry.settle_abandoned()
    end = _end(telemetry)[sc.FT_END_REASON]
    if terminal:
        assert end == sc.END_COMPLETED
    elif Version(genai.__version__) >= Version("3.6"):
        assert end == sc.END_CLOSED
    else:
        assert end in (sc.END_CLOSED, sc.END_ABANDONED)


# cohere 5.9-5.15's chat_stream generator raises "generator ignored GeneratorExit" on close() and again
# when it is collected (with firsttoken or without): only that is let pass (as in test_more_sdks.py).
@pytest.mark.filterwarnings(
    "ignore:Exception ignored in. <generator object V2Client.chat_stream:pytest.PytestUnraisableExceptionWarning"
)
@pytest.mark.parametrize("terminal", [True, False], ids=["terminal-read", "stopped-before"])
def test_cohere(telemetry: Telemetry, tsim: Simulator, terminal: bool) -> None:
    co = cohere.ClientV2(api_key="test-key", base_url=tsim.url)
    stream = co.chat_stream(model="command-a-03-2025", messages=MESSAGES)
    if terminal:
        _read_until(stream, lambda event: event.type == "message-end")
    else:
        _read_until(stream, lambda event: event.type == "content-delta")
    try:
        stream.close()  # type: ignore[attr-defined]
    except RuntimeError as e:
        assert "ignored GeneratorExit" in str(e) and Version(metadata.version("cohere")) < Version("5.16")
    del stream
    telemetry.settle_abandoned()
    end = _end(telemetry)[sc.FT_END_REASON]
    if terminal:
        assert end == sc.END_COMPLETED
    else:
        assert end in (
            (sc.END_CLOSED,)
            if Version(metadata.version("cohere")) >= Version("5.16")
            else (sc.END_CLOSED, sc.END_ABANDONED)
        )


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal-read", "stopped-before"])
def test_mistral(telemetry: Telemetry, tsim: Simulator, terminal: bool) -> None:
    m = Mistral(api_key="test-key", server_url=tsim.url)
    with m.chat.stream(model="mistral-small-latest", messages=MESSAGES) as stream:  # closes its response on exit
        if terminal:
            _read_until(stream, lambda e: _finishes(e.data))
        else:
            _read_until(stream, lambda e: _has_text(e.data))
    assert _end(telemetry)[sc.FT_END_REASON] == (sc.END_COMPLETED if terminal else sc.END_CLOSED)


# -- plain httpx and aiohttp: the app reads SSE lines itself -----------------------------------------


def _event(line: str) -> Any:
    """The JSON of an SSE ``data:`` line, ``"[DONE]"``, or None for any other line."""
    if not line.startswith("data:"):
        return None
    data = line[5:].strip()
    return data if data == "[DONE]" else json.loads(data)


def _choices_done(e: Any) -> bool:
    return isinstance(e, dict) and bool(e.get("choices")) and all(c.get("finish_reason") for c in e["choices"])


def _gemini_done(e: Any) -> bool:
    return isinstance(e, dict) and any(c.get("finishReason") for c in e.get("candidates") or ())


def _typed(kind: str) -> Callable[[Any], bool]:
    return lambda e: isinstance(e, dict) and e.get("type") == kind


def _chat_text(e: Any) -> bool:
    return isinstance(e, dict) and bool(e.get("choices")) and bool(e["choices"][0].get("delta", {}).get("content"))


_CHAT = {"model": "gpt-4o-mini", "messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True}}
# (id, path, body, the terminal event, an event well before it)
WIRE = [
    ("chat-finish-reason", "/v1/chat/completions", _CHAT, _choices_done, _chat_text),
    ("chat-done", "/v1/chat/completions", _CHAT, lambda e: e == "[DONE]", _chat_text),
    (
        "completions",
        "/v1/completions",
        {"model": "gpt-3.5-turbo-instruct", "prompt": "Once upon", "stream": True},
        _choices_done,
        lambda e: isinstance(e, dict) and bool(e.get("choices")) and bool(e["choices"][0].get("text")),
    ),
    (
        "responses",
        "/v1/responses",
        {"model": "gpt-4o-mini", "input": "Tell me a story.", "stream": True},
        _typed("response.completed"),
        _typed("response.output_text.delta"),
    ),
    (
        "anthropic",
        "/v1/messages",
        {"model": CLAUDE, "max_tokens": 64, "messages": MESSAGES, "stream": True},
        _typed("message_stop"),
        _typed("content_block_delta"),
    ),
    (  # where LiteLLM stops reading (issue 37, item 12)
        "anthropic-stop-reason",
        "/v1/messages",
        {"model": CLAUDE, "max_tokens": 64, "messages": MESSAGES, "stream": True},
        lambda e: _typed("message_delta")(e) and bool(e.get("delta", {}).get("stop_reason")),
        _typed("content_block_delta"),
    ),
    (
        "gemini",
        "/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse",
        {"contents": [{"role": "user", "parts": [{"text": "Tell me a story."}]}]},
        _gemini_done,
        lambda e: isinstance(e, dict) and not _gemini_done(e),
    ),
    (
        "cohere",
        "/v2/chat",
        {"model": "command-a-03-2025", "messages": MESSAGES, "stream": True},
        _typed("message-end"),
        _typed("content-delta"),
    ),
]


def _httpx(url: str, body: dict[str, Any], stop: Callable[[Any], bool]) -> None:
    with httpx.Client() as client:
        response = client.send(client.build_request("POST", url, json=body), stream=True)
        for line in response.iter_lines():
            if stop(_event(line)):
                break
        else:
            raise AssertionError("the stream ended before the event looked for")
        response.close()


def _requests(url: str, body: dict[str, Any], stop: Callable[[Any], bool]) -> None:
    import requests

    response = requests.post(url, json=body, stream=True, timeout=10)
    for line in response.iter_lines(decode_unicode=True):
        if stop(_event(line)):
            break
    else:
        raise AssertionError("the stream ended before the event looked for")
    response.close()


async def _aiohttp(url: str, body: dict[str, Any], stop: Callable[[Any], bool]) -> None:
    async with aiohttp.ClientSession() as session:
        response = await session.post(url, json=body)
        async for raw in response.content:
            if stop(_event(raw.decode().strip())):
                break
        else:
            raise AssertionError("the stream ended before the event looked for")
        response.close()


@pytest.mark.parametrize("client", ["httpx", "aiohttp", "requests"])
@pytest.mark.parametrize(("path", "body", "terminal", "early"), [w[1:] for w in WIRE], ids=[w[0] for w in WIRE])
def test_on_the_wire(
    telemetry: Telemetry,
    tsim: Simulator,
    client: str,
    path: str,
    body: dict[str, Any],
    terminal: Callable[[Any], bool],
    early: Callable[[Any], bool],
) -> None:
    for stop, expected in ((terminal, sc.END_COMPLETED), (early, sc.END_CLOSED)):
        telemetry.exporter.clear()
        if client == "httpx":
            _httpx(tsim.url + path, body, stop)
        elif client == "requests":
            _requests(tsim.url + path, body, stop)
        else:
            asyncio.run(_aiohttp(tsim.url + path, body, stop))
        telemetry.settle_abandoned()
        assert _end(telemetry)[sc.FT_END_REASON] == expected
