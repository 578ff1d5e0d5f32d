"""Cohere v2 (``cohere``), Mistral (``mistralai``) and Groq (``groq``) through their real SDKs, over a
real socket, against the simulator. All three send their requests with httpx and none is patched:
firsttoken reads their calls on the plain-httpx path (Cohere's own wire format; Mistral's and
Groq's are OpenAI's, with Mistral's usage on the last streamed chunk and Groq's ``x_groq`` timing).
"""

from __future__ import annotations

import asyncio
from importlib import metadata
from typing import Any

import pytest
from packaging.version import Version

from firsttoken import semconv as sc
from firsttoken.sim import LatencyModel, Simulator

from .conftest import Telemetry

cohere = pytest.importorskip("cohere", reason="cohere is in the dev extra")
groq = pytest.importorskip("groq", reason="groq is in the dev extra")
mistralai = pytest.importorskip("mistralai", reason="mistralai is in the dev extra")

try:
    from mistralai import Mistral
except ImportError:  # mistralai 2 moved the client
    from mistralai.client import Mistral  # type: ignore[no-redef]

TIMED = LatencyModel(queue_ms=30, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=800, jitter=0, output_tokens=24)


@pytest.fixture
def tsim() -> Any:
    with Simulator(latency=TIMED, seed=4) as s:
        yield s


def attrs(span: Any) -> dict[str, Any]:
    return dict(span.attributes or {})


def assert_streamed(a: dict[str, Any], provider: str) -> None:
    assert a[sc.GEN_AI_PROVIDER_NAME] == provider
    assert a[sc.GEN_AI_REQUEST_STREAM] is True
    assert a[sc.FT_END_REASON] == sc.END_COMPLETED
    ttft = a[sc.FT_TIME_TO_FIRST_TOKEN]
    assert isinstance(ttft, float) and ttft >= 0.03  # the simulator's 30 ms queue comes first
    assert a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 24
    assert sc.FT_DECODE_TOKEN_SOURCE not in a  # absent: from usage
    assert a[sc.FT_TIME_PER_OUTPUT_TOKEN] > 0


# -- Cohere v2 ---------------------------------------------------------------------------------------


def test_cohere_whole_and_streamed(telemetry: Telemetry, tsim: Simulator) -> None:
    co = cohere.ClientV2(api_key="test-key", base_url=tsim.url)
    messages = [{"role": "user", "content": "Say hello"}]
    whole = co.chat(model="command-a-03-2025", messages=messages)
    events = list(co.chat_stream(model="command-a-03-2025", messages=messages))
    first, second = (attrs(s) for s in telemetry.calls())
    assert first[sc.GEN_AI_PROVIDER_NAME] == "cohere" and first[sc.GEN_AI_REQUEST_MODEL] == "command-a-03-2025"
    assert first[sc.GEN_AI_RESPONSE_ID] == whole.id
    assert first[sc.GEN_AI_USAGE_INPUT_TOKENS] == whole.usage.tokens.input_tokens
    assert first[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == whole.usage.tokens.output_tokens == 24
    assert first[sc.GEN_AI_RESPONSE_FINISH_REASONS] == ("complete",)
    assert_streamed(second, "cohere")
    assert [e.type for e in events][-1] == "message-end"
    assert second[sc.GEN_AI_RESPONSE_ID] == events[0].id


# cohere 5.9-5.15's chat_stream generator raises "generator ignored GeneratorExit" again when it is
# collected (its own finaliser, with firsttoken or without): only that unraisable exception is let pass.
@pytest.mark.filterwarnings(
    "ignore:Exception ignored in. <generator object V2Client.chat_stream:pytest.PytestUnraisableExceptionWarning"
)
def test_cohere_cache_reads_and_early_close(telemetry: Telemetry, tsim: Simulator) -> None:
    co = cohere.ClientV2(api_key="test-key", base_url=tsim.url)
    messages = [{"role": "system", "content": "You are careful. " * 400}, {"role": "user", "content": "Hi"}]
    co.chat(model="command-a-03-2025", messages=messages)
    co.chat(model="command-a-03-2025", messages=messages)
    stream = co.chat_stream(model="command-a-03-2025", messages=messages)
    next(iter(stream))
    try:
        stream.close()  # type: ignore[attr-defined]
    except RuntimeError as e:
        # cohere 5.9-5.15's chat_stream catches the GeneratorExit of close() and goes on reading (the
        # same with firsttoken or without); 5.16 and later close cleanly.
        assert "ignored GeneratorExit" in str(e) and Version(metadata.version("cohere")) < Version("5.16")
    del stream
    telemetry.settle_abandoned()
    cold, warm, closed = (attrs(s) for s in telemetry.calls())
    assert cold.get(sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, 0) == 0
    assert 0 < warm[sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] <= warm[sc.GEN_AI_USAGE_INPUT_TOKENS]
    assert closed[sc.FT_END_REASON] in (sc.END_CLOSED, sc.END_ABANDONED), closed[sc.FT_END_REASON]


async def test_cohere_async(telemetry: Telemetry, tsim: Simulator) -> None:
    co = cohere.AsyncClientV2(api_key="test-key", base_url=tsim.url)
    async for _ in co.chat_stream(model="command-r-plus", messages=[{"role": "user", "content": "Hi"}]):
        pass
    assert_streamed(attrs(telemetry.call()), "cohere")


# -- Mistral -----------------------------------------------------------------------------------------


def test_mistral_streamed_usage_comes_on_the_last_chunk(telemetry: Telemetry, tsim: Simulator) -> None:
    m = Mistral(api_key="test-key", server_url=tsim.url)
    events = list(m.chat.stream(model="mistral-small-latest", messages=[{"role": "user", "content": "Hi"}]))
    last = events[-1].data
    assert last.usage is not None and last.choices[0].finish_reason == "stop"  # with no stream_options asked
    a = attrs(telemetry.call())
    assert_streamed(a, "mistral_ai")  # a loopback host: the SDK's User-Agent names the provider
    assert a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == last.usage.completion_tokens


async def test_mistral_async_whole(telemetry: Telemetry, tsim: Simulator) -> None:
    m = Mistral(api_key="test-key", server_url=tsim.url)
    result = await m.chat.complete_async(model="mistral-small-latest", messages=[{"role": "user", "content": "Hi"}])
    a = attrs(telemetry.call())
    assert a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == result.usage.completion_tokens == 24
    assert a[sc.FT_END_REASON] == sc.END_COMPLETED


async def test_mistral_async_streamed_and_closed_early(telemetry: Telemetry, tsim: Simulator) -> None:
    m = Mistral(api_key="test-key", server_url=tsim.url)
    messages = [{"role": "user", "content": "Hi"}]
    async for _ in await m.chat.stream_async(model="mistral-small-latest", messages=messages):
        pass
    stream = m.chat.stream(model="mistral-small-latest", messages=messages)
    with stream:  # the SDK's event stream closes its response on exit
        next(e for e in stream if e.data.choices[0].delta.content)  # the first chunk only names the role
    whole, closed = (attrs(s) for s in telemetry.calls())
    assert_streamed(whole, "mistral_ai")
    assert closed[sc.FT_END_REASON] == sc.END_CLOSED
    assert closed[sc.FT_TIME_TO_FIRST_TOKEN] >= 0.03 and sc.GEN_AI_USAGE_OUTPUT_TOKENS not in closed


# -- Groq ----------------------------------------------------------------------------------------------


def test_groq_sdk_reads_usage_and_server_timing(telemetry: Telemetry, tsim: Simulator) -> None:
    g = groq.Groq(api_key="test-key", base_url=tsim.url)
    whole = g.chat.completions.create(model="llama-3.3-70b-versatile", messages=[{"role": "user", "content": "Hi"}])
    stream = g.chat.completions.create(
        model="llama-3.3-70b-versatile", messages=[{"role": "user", "content": "Hi"}], stream=True
    )
    chunks = list(stream)
    first, second = (attrs(s) for s in telemetry.calls())
    assert [r.path for r in tsim.requests] == ["/openai/v1/chat/completions"] * 2
    assert first[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == whole.usage.completion_tokens == 24
    assert_streamed(second, "groq")  # loopback: the groq SDK's User-Agent names the provider
    # Groq's own timing, read as the openai path reads it: whole from usage, streamed from x_groq.usage.
    for a in (first, second):
        server = {k: v for k, v in a.items() if k.startswith("firsttoken.server.")}
        assert server, f"no server timing in {sorted(a)}"
    assert chunks[-1].x_groq is not None and chunks[-1].x_groq.usage is not None


async def test_groq_async_concurrent(telemetry: Telemetry, tsim: Simulator) -> None:
    g = groq.AsyncGroq(api_key="test-key", base_url=tsim.url)

    async def one() -> None:
        stream = await g.chat.completions.create(
            model="llama-3.1-8b-instant", messages=[{"role": "user", "content": "Hi"}], stream=True
        )
        async for _ in stream:
            pass

    await asyncio.gather(one(), one(), one())
    calls = [attrs(s) for s in telemetry.calls()]
    assert len(calls) == 3
    for a in calls:
        assert_streamed(a, "groq")


def test_groq_stream_closed_early(telemetry: Telemetry, tsim: Simulator) -> None:
    g = groq.Groq(api_key="test-key", base_url=tsim.url)
    stream = g.chat.completions.create(
        model="llama-3.3-70b-versatile", messages=[{"role": "user", "content": "Hi"}], stream=True
    )
    next(c for c in stream if c.choices[0].delta.content)  # the first chunk only names the role
    stream.close()
    a = attrs(telemetry.call())
    assert a[sc.GEN_AI_PROVIDER_NAME] == "groq" and a[sc.FT_END_REASON] == sc.END_CLOSED
    assert a[sc.FT_TIME_TO_FIRST_TOKEN] >= 0.03


def test_groq_retries_are_one_call_span_with_its_attempts(telemetry: Telemetry, tsim: Simulator) -> None:
    """groq's SDK retries a 429 itself: one call, two attempts (on the wire it was a span per attempt)."""
    from firsttoken.sim import Fault

    tsim.inject(Fault.rate_limit(retry_after=0))
    g = groq.Groq(api_key="test-key", base_url=tsim.url, max_retries=2)
    stream = g.chat.completions.create(
        model="llama-3.3-70b-versatile", messages=[{"role": "user", "content": "Hi"}], stream=True
    )
    for _ in stream:
        pass
    a = attrs(telemetry.call())
    assert [r.path for r in tsim.requests] == ["/openai/v1/chat/completions"] * 2
    assert a[sc.FT_ATTEMPTS] == 2
    assert a[sc.FT_END_REASON] == sc.END_COMPLETED
    assert a[sc.GEN_AI_PROVIDER_NAME] == "groq"
