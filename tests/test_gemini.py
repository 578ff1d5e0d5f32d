"""Gemini's native API through the real ``google-genai`` SDK, over a real socket, against the simulator.

google-genai sends its requests with httpx (httpx2 where installed); firsttoken measures them on
the plain-httpx path, reading the model and the streaming from the request path and usage from
``usageMetadata``. No SDK method is patched: the app's results are the SDK's own.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from packaging.version import Version

from firsttoken import semconv as sc
from firsttoken.providers import gemini as gemini_wire
from firsttoken.sim import LatencyModel, Simulator

from .conftest import Telemetry

genai = pytest.importorskip("google.genai", reason="google-genai is in the dev extra")
types = pytest.importorskip("google.genai.types")

# 5 ms between 3-token chunks after a 40 ms queue: TTFT and decode are long enough to tell apart.
TIMED = LatencyModel(queue_ms=40, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=600, jitter=0, output_tokens=30)
THINKING = LatencyModel(queue_ms=10, decode_tokens_per_s=2000, jitter=0, output_tokens=12, reasoning_tokens=40)


@pytest.fixture
def gsim() -> object:
    with Simulator(models={"gemini-2.0-flash": TIMED, "gemini-2.5-flash": THINKING}, seed=2) as s:
        yield s


_clients: list[object] = []


def client(sim: Simulator) -> object:
    """A client kept alive for the test (google-genai closes its HTTP client when the Client is collected)."""
    c = genai.Client(api_key="test-key", http_options=types.HttpOptions(base_url=sim.url))
    _clients.append(c)
    return c


@pytest.fixture(autouse=True)
def _forget_clients() -> object:
    yield
    _clients.clear()


def attrs(span: object) -> dict[str, object]:
    return dict(span.attributes or {})  # type: ignore[attr-defined]


def test_a_whole_answer_is_one_call_span_with_usage(telemetry: Telemetry, gsim: Simulator) -> None:
    result = client(gsim).models.generate_content(model="gemini-2.0-flash", contents="Say hello")
    a = attrs(telemetry.call())
    assert a[sc.GEN_AI_PROVIDER_NAME] == "gcp.gemini"
    assert a[sc.GEN_AI_OPERATION_NAME] == sc.OP_GENERATE_CONTENT  # the conventions' name for Gemini
    assert a[sc.GEN_AI_REQUEST_MODEL] == "gemini-2.0-flash"
    assert a[sc.GEN_AI_RESPONSE_MODEL] == result.model_version
    # The simulator sends responseId as Gemini does; google-genai 1.20 does not read it, 3.6 does.
    assert isinstance(a[sc.GEN_AI_RESPONSE_ID], str) and a[sc.GEN_AI_RESPONSE_ID]
    assert getattr(result, "response_id", None) in (None, a[sc.GEN_AI_RESPONSE_ID])
    usage = result.usage_metadata
    assert a[sc.GEN_AI_USAGE_INPUT_TOKENS] == usage.prompt_token_count
    assert a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == usage.candidates_token_count == 30
    assert a[sc.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)
    assert a[sc.FT_END_REASON] == sc.END_COMPLETED
    assert sc.FT_TIME_TO_FIRST_TOKEN not in a  # not streamed: no first token to time


def test_a_streamed_answer_has_ttft_tpot_and_its_usage(telemetry: Telemetry, gsim: Simulator) -> None:
    config = types.GenerateContentConfig(max_output_tokens=200, temperature=0.5)
    chunks = list(client(gsim).models.generate_content_stream(model="gemini-2.0-flash", contents="Hi", config=config))
    span = telemetry.call()
    a = attrs(span)
    assert a[sc.GEN_AI_REQUEST_STREAM] is True
    assert a[sc.GEN_AI_REQUEST_MAX_TOKENS] == 200 and a[sc.GEN_AI_REQUEST_TEMPERATURE] == 0.5
    assert a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == chunks[-1].usage_metadata.candidates_token_count == 30
    ttft = a[sc.FT_TIME_TO_FIRST_TOKEN]
    duration = (span.end_time - span.start_time) / 1e9  # type: ignore[operator]
    # The simulator queues 40 ms before the first token; the last of 30 tokens at 600/s comes ~50 ms later.
    assert isinstance(ttft, float) and 0.04 <= ttft < duration
    tpot = a[sc.FT_TIME_PER_OUTPUT_TOKEN]
    assert isinstance(tpot, float) and tpot > 0
    assert a[sc.FT_END_REASON] == sc.END_COMPLETED
    assert telemetry.metrics()[sc.M_TIME_TO_FIRST_TOKEN][0].count == 1


def test_thinking_tokens_are_reasoning_and_hidden_output(telemetry: Telemetry, gsim: Simulator) -> None:
    chunks = list(client(gsim).models.generate_content_stream(model="gemini-2.5-flash", contents="Think"))
    a = attrs(telemetry.call())
    usage = chunks[-1].usage_metadata
    assert usage.thoughts_token_count == 40 and usage.candidates_token_count == 12
    assert a[sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] == 40
    assert a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 52  # the conventions' output includes the thinking
    # The time per output token is over the 12 streamed tokens: the thoughts came before the first one.
    assert sc.FT_DECODE_TOKEN_SOURCE not in a  # absent: from usage


def test_a_repeated_long_prompt_reads_the_cache(telemetry: Telemetry, gsim: Simulator) -> None:
    c = client(gsim)
    prompt = "You are a careful assistant. " * 300
    for _ in range(2):
        c.models.generate_content(model="gemini-2.0-flash", contents=prompt)
    first, second = (attrs(s) for s in telemetry.calls())
    assert first.get(sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, 0) == 0
    cached = second[sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS]
    assert isinstance(cached, int) and 0 < cached <= second[sc.GEN_AI_USAGE_INPUT_TOKENS]  # type: ignore[operator]


def test_an_early_close_ends_the_call(telemetry: Telemetry, gsim: Simulator) -> None:
    stream = client(gsim).models.generate_content_stream(model="gemini-2.0-flash", contents="Hi")
    next(iter(stream))
    stream.close()  # type: ignore[attr-defined]
    del stream
    if not telemetry.calls():
        # Older google-genai (1.20) leaves the response open when its generator is closed: the call
        # ends when the response is collected, as abandoned, at the last moment it was seen.
        telemetry.settle_abandoned()
    a = attrs(telemetry.call())
    assert a[sc.FT_END_REASON] in (sc.END_CLOSED, sc.END_ABANDONED)
    assert sc.FT_TIME_TO_FIRST_TOKEN in a
    if Version(genai.__version__) >= Version("3.6"):  # the newest tested closes its response at once
        assert a[sc.FT_END_REASON] == sc.END_CLOSED


async def test_async_calls_are_measured_too(telemetry: Telemetry, gsim: Simulator) -> None:
    aio = client(gsim).aio  # type: ignore[attr-defined]
    whole, stream = await asyncio.gather(
        aio.models.generate_content(model="gemini-2.0-flash", contents="one"),
        aio.models.generate_content_stream(model="gemini-2.0-flash", contents="two"),
    )
    async for _ in stream:
        pass
    calls = sorted((attrs(s) for s in telemetry.calls()), key=lambda a: bool(a.get(sc.GEN_AI_REQUEST_STREAM)))
    assert [a.get(sc.GEN_AI_REQUEST_STREAM, False) for a in calls] == [False, True]
    assert all(a[sc.FT_END_REASON] == sc.END_COMPLETED for a in calls)
    assert calls[0][sc.GEN_AI_USAGE_OUTPUT_TOKENS] == whole.usage_metadata.candidates_token_count
    assert sc.FT_TIME_TO_FIRST_TOKEN in calls[1]


def test_vertex_ai_paths_are_vertex_ai_wherever_served(telemetry: Telemetry, gsim: Simulator) -> None:
    """Vertex AI's publisher path, as google-genai sends it with vertexai=True (plain httpx here: the SDK
    would need Google credentials), on a host that is not Google's."""
    path = "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.0-flash:streamGenerateContent"
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    with httpx.Client() as http, http.stream("POST", gsim.url + path + "?alt=sse", json=body) as response:
        assert response.status_code == 200
        for _ in response.iter_lines():
            pass
    a = attrs(telemetry.call())
    assert a[sc.GEN_AI_PROVIDER_NAME] == "gcp.vertex_ai"
    assert a[sc.GEN_AI_REQUEST_MODEL] == "gemini-2.0-flash" and a[sc.GEN_AI_REQUEST_STREAM] is True
    assert a[sc.FT_END_REASON] == sc.END_COMPLETED and sc.FT_TIME_TO_FIRST_TOKEN in a


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/v1beta/models/gemini-2.5-pro:generateContent", ("gemini-2.5-pro", False)),
        ("/v1/models/gemini-2.0-flash:streamGenerateContent", ("gemini-2.0-flash", True)),
        (
            "/v1/projects/p/locations/l/publishers/google/models/gemini-2.5-flash:generateContent",
            ("gemini-2.5-flash", False),
        ),
        ("/v1beta/tunedModels/abc:generateContent", (None, False)),
        ("/v1beta/models/gemini-2.5-pro:countTokens", None),
    ],
)
def test_the_path_names_the_model_and_the_streaming(path: str, expected: object) -> None:
    assert gemini_wire.match(path) == expected


def test_a_stop_while_thinking_counts_its_thoughts_as_output(telemetry: Telemetry) -> None:
    """Gemini's MAX_TOKENS during thinking: ``thoughtsTokenCount`` and no ``candidatesTokenCount``
    (as Gemini sends it; the simulator sends a 0). The span and the metrics agree."""
    import json

    from firsttoken import _install
    from firsttoken.providers import direct
    from firsttoken.transport import WireRequest

    recorder = _install.active_recorder()
    assert recorder is not None
    calls = direct.DirectCalls(recorder, direct.common.provider_resolver({}))
    path = "/v1beta/models/gemini-2.5-flash:generateContent"
    started = calls.start(WireRequest("POST", "https", "generativelanguage.googleapis.com", None, path, {}, b"{}"))
    assert started is not None
    tl, family = started
    body = {
        "candidates": [{"content": {"role": "model"}, "finishReason": "MAX_TOKENS", "index": 0}],
        "usageMetadata": {"promptTokenCount": 7, "toolUsePromptTokenCount": 3, "thoughtsTokenCount": 64},
    }
    calls.finish_whole(tl, family, 200, json.dumps(body).encode())
    a = attrs(telemetry.call())
    assert a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 64
    assert a[sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] == 64
    assert a[sc.GEN_AI_USAGE_INPUT_TOKENS] == 10  # the tool-use prompt is input too
    assert a[sc.GEN_AI_RESPONSE_FINISH_REASONS] == ("max_tokens",)
    metrics = telemetry.metrics()
    usage = {p.attributes[sc.GEN_AI_TOKEN_TYPE]: p.sum for p in metrics[sc.M_TOKEN_USAGE]}
    assert usage == {"input": 10, "output": 64}
    assert [p.value for p in metrics[sc.M_REASONING_OUTPUT_TOKENS]] == [64]
