"""The clouds' routes to the same models: Claude on Amazon Bedrock and Google Vertex AI (the anthropic
SDK's ``AnthropicBedrock`` and ``AnthropicVertex``), and Azure OpenAI (the openai SDK's ``AzureOpenAI``).

The real SDKs, signing with fake credentials, over real loopback sockets against the simulator,
which answers the clouds' paths: Bedrock's ``/model/{model}/invoke`` and
``/invoke-with-response-stream`` (a stream of AWS event-stream frames, read by botocore's own parser,
which checks their CRCs), Vertex AI's ``...:rawPredict`` / ``:streamRawPredict`` (SSE), and Azure's
``/openai/deployments/{deployment}/...?api-version=...``. Each route gets the matrix's behaviours: the
provider the client names (its host is loopback), every phase, TTFT at the first content (not the
headers, not ``message_start`` or a role-only chunk), the simulator's tokens and cache, capture on and
off, early close, a dropped connection and an error event mid-stream.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.trace import StatusCode

import firsttoken
from firsttoken import semconv as sc
from firsttoken.providers import _levers
from firsttoken.sim import Fault, LatencyModel, Simulator

from .conftest import Telemetry

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")
pytest.importorskip("botocore", reason="anthropic[bedrock] is in the dev extra")
pytest.importorskip("google.auth", reason="anthropic[vertex] is in the dev extra")

FAST = LatencyModel(queue_ms=1, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=4000, jitter=0, output_tokens=12)
SLOW_PREFILL = LatencyModel(
    queue_ms=1, prefill_ms_per_1k_tokens=8000, decode_tokens_per_s=4000, jitter=0, output_tokens=12
)
"""8 ms of prefill per prompt token: USER is some 20 tokens, so 150 ms or so between the headers (and
``message_start`` or the role-only chunk, sent with them) and the first content."""
LONG = LatencyModel(queue_ms=1, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=400, jitter=0, output_tokens=40)
"""40 tokens at 400/s: the end comes 100 ms after the first chunks, so an early close is early."""

USER = "Say hello to the clouds, all of them, one after the other, in a single line please."
LONG_SYSTEM = "You are careful and you check every fact twice before you answer. " * 120
"""Some 1,700 tokens: past the simulated cache's 1,024-token minimum, so a second call reads it."""
AZURE_KEY = "azure-key-never-recorded-7f3a"
AWS_SECRET = "aws-secret-never-recorded-2b9c"


@dataclass(frozen=True)
class Route:
    name: str
    provider: str
    family: str
    """``anthropic`` or ``openai``: the SDK, and so the shape of calls and results."""
    model: str
    path: str
    """The tail of the path the simulator serves a streamed call on."""
    make: Callable[[Simulator, bool], Any]
    """(simulator, async) -> a client."""


def _bedrock(sim: Simulator, is_async: bool) -> Any:
    cls = anthropic.AsyncAnthropicBedrock if is_async else anthropic.AnthropicBedrock
    return cls(
        aws_access_key="AKIDEXAMPLE", aws_secret_key=AWS_SECRET, aws_region="us-east-1", base_url=sim.url, max_retries=0
    )


def _vertex(sim: Simulator, is_async: bool) -> Any:
    cls = anthropic.AsyncAnthropicVertex if is_async else anthropic.AnthropicVertex
    return cls(access_token="ya29.fake", project_id="proj", region="us-east5", base_url=sim.url + "/v1", max_retries=0)


def _azure(sim: Simulator, is_async: bool) -> Any:
    cls = openai.AsyncAzureOpenAI if is_async else openai.AzureOpenAI
    return cls(
        api_key=AZURE_KEY, api_version="2024-10-21", azure_endpoint=sim.url, azure_deployment="dep", max_retries=0
    )


ROUTES = [
    Route("bedrock", "aws.bedrock", "anthropic", "anthropic.claude-x-v1:0", "/invoke-with-response-stream", _bedrock),
    Route("vertex", "gcp.vertex_ai", "anthropic", "claude-x@20250101", ":streamRawPredict", _vertex),
    Route("azure", "azure.ai.openai", "openai", "gpt-x", "/openai/deployments/dep/chat/completions", _azure),
]
route_params = pytest.mark.parametrize("route", ROUTES, ids=[r.name for r in ROUTES])


def _kwargs(
    route: Route, *, system: str | None = None, stream: bool = False, model: str | None = None
) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": USER}]
    kwargs: dict[str, Any] = {"model": model or route.model}
    if route.family == "anthropic":
        kwargs["max_tokens"] = 64
        if system is not None:
            kwargs["system"] = [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]
    else:
        if system is not None:
            messages.insert(0, {"role": "system", "content": system})
        if stream:
            kwargs["stream_options"] = {"include_usage": True}
    kwargs["messages"] = messages
    if stream:
        kwargs["stream"] = True
    return kwargs


def _create(route: Route, client: Any, **kwargs: Any) -> Any:
    api = client.messages if route.family == "anthropic" else client.chat.completions
    return api.create(**_kwargs(route, **kwargs))


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    models = {"slow-prefill": SLOW_PREFILL, "long": LONG}
    with Simulator(latency=FAST, models=models, seed=7) as s:
        yield s


@contextlib.contextmanager
def instrumented(**options: Any) -> Iterator[Telemetry]:
    _levers.reset()
    t = Telemetry()
    assert firsttoken.instrument(
        tracer_provider=t.tracer_provider, meter_provider=t.meter_provider, phase_spans="always", **options
    )
    try:
        yield t
    finally:
        firsttoken.uninstrument()
        _levers.reset()


def _ended(t: Telemetry, reason: str, error: str | None = None) -> dict[str, Any]:
    span = t.call()
    attrs = dict(span.attributes or {})
    assert attrs[sc.FT_END_REASON] == reason
    assert (span.status.status_code is StatusCode.ERROR) is (error is not None)
    assert attrs.get(sc.ERROR_TYPE) == error
    return attrs


def _no_secret(t: Telemetry) -> None:
    for span in t.spans():
        text = repr(dict(span.attributes or {})) + repr([dict(e.attributes or {}) for e in span.events])
        assert AZURE_KEY not in text and AWS_SECRET not in text


# -- a whole call and a stream: provider, phases, tokens, finish reason -------------------------------------


@route_params
def test_whole_call(route: Route, sim: Simulator) -> None:
    sim.clear()
    with instrumented() as t:
        result = _create(route, route.make(sim, False))
    served = sim.wait_for_requests(1)[0]
    assert served.status == 200 and not served.stream
    attrs = _ended(t, sc.END_COMPLETED)
    assert attrs[sc.GEN_AI_PROVIDER_NAME] == route.provider
    assert sc.FT_PROVIDER_SOURCE not in attrs, "the client names it (absent: sdk): its host is loopback"
    assert attrs[sc.GEN_AI_REQUEST_MODEL] == route.model
    assert t.call().name == f"chat {route.model}"
    assert attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == served.output_tokens == 12
    assert attrs[sc.GEN_AI_USAGE_INPUT_TOKENS] == served.input_tokens > 0
    finish = "end_turn" if route.family == "anthropic" else "stop"
    assert attrs[sc.GEN_AI_RESPONSE_FINISH_REASONS] == (finish,)
    assert attrs[sc.GEN_AI_RESPONSE_ID] == result.id
    _no_secret(t)


@route_params
def test_stream_phases_and_ttft(route: Route, sim: Simulator) -> None:
    """TTFT is the first content, after the prefill; the first chunk (``message_start``, a role-only
    chunk) comes with the headers, before it. Every phase of the call is a child span."""
    sim.clear()
    with instrumented() as t:
        for _ in _create(route, route.make(sim, False), stream=True, model="slow-prefill"):
            pass
    served = sim.wait_for_requests(1)[0]
    assert served.path.endswith(route.path) and served.stream
    attrs = _ended(t, sc.END_COMPLETED)
    assert attrs[sc.GEN_AI_PROVIDER_NAME] == route.provider
    prefill = 8.0 * served.input_tokens / 1000  # seconds, as the simulator waited (8 ms a token)
    ttfh = attrs[sc.FT_TIME_TO_RESPONSE_HEADERS]
    ttfc, ttft = attrs[sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK], attrs[sc.FT_TIME_TO_FIRST_TOKEN]
    # Half the prefill, as in test_matrix: a busy machine can only delay the reads of the chunks sent
    # with the headers, shortening the gaps, by so much before the test is void anyway.
    assert ttft >= ttfh + 0.5 * prefill, "TTFT is the first content, not the response headers"
    assert ttft - ttfc >= 0.5 * prefill, "message_start / the role-only chunk is a chunk, not the first token"
    assert ttfh <= ttfc
    assert attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == served.output_tokens
    assert attrs[sc.GEN_AI_USAGE_INPUT_TOKENS] == served.input_tokens
    assert sc.FT_DECODE_TOKEN_SOURCE not in attrs  # absent: from usage
    phases = [c.attributes[sc.FT_PHASE] for c in t.children(t.call()) if c.attributes]
    expected = ["dns", "tcp_connect", "upload", "server_wait", "wait_first_token", "decode"]
    assert [p for p in phases if p in expected] == expected, phases
    duration = t.metrics()[sc.M_OPERATION_DURATION]
    assert sum(p.count for p in duration) == 1
    assert duration[0].attributes[sc.GEN_AI_PROVIDER_NAME] == route.provider
    _no_secret(t)


@route_params
async def test_async_stream(route: Route, sim: Simulator) -> None:
    sim.clear()
    with instrumented() as t:
        client = route.make(sim, True)
        api = client.messages if route.family == "anthropic" else client.chat.completions
        async for _ in await api.create(**_kwargs(route, stream=True)):
            pass
    attrs = _ended(t, sc.END_COMPLETED)
    assert attrs[sc.GEN_AI_PROVIDER_NAME] == route.provider
    assert attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == sim.wait_for_requests(1)[0].output_tokens
    assert 0 < attrs[sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] <= attrs[sc.FT_TIME_TO_FIRST_TOKEN]


# -- tokens and cache; capture ---------------------------------------------------------------------------


@route_params
def test_second_call_reads_the_cache(route: Route, sim: Simulator) -> None:
    sim.clear()
    with instrumented() as t:
        client = route.make(sim, False)
        for _ in range(2):
            for _ in _create(route, client, system=LONG_SYSTEM, stream=True):
                pass
    served = sim.wait_for_requests(2)
    assert served[0].cached_tokens == 0 and served[1].cached_tokens > 0, "the simulator cached the prompt"
    one, two = (dict(s.attributes or {}) for s in t.calls())
    assert two[sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == served[1].cached_tokens
    assert one.get(sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, 0) == 0
    if route.family == "anthropic":
        assert one[sc.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS] == served[0].cache_creation_tokens > 0
    for attrs, s in ((one, served[0]), (two, served[1])):
        assert attrs[sc.GEN_AI_USAGE_INPUT_TOKENS] == s.input_tokens, "input counts cache read and written"


@route_params
@pytest.mark.parametrize("capture", [True, False], ids=["capture", "no-capture"])
def test_capture(route: Route, sim: Simulator, capture: bool) -> None:
    sim.clear()
    with instrumented(capture_content=capture) as t:
        for _ in _create(route, route.make(sim, False), stream=True):
            pass
    attrs = _ended(t, sc.END_COMPLETED)
    if capture:
        assert USER in str(attrs[sc.GEN_AI_INPUT_MESSAGES])
        assert isinstance(attrs.get(sc.GEN_AI_OUTPUT_MESSAGES), str) and len(attrs[sc.GEN_AI_OUTPUT_MESSAGES]) > 20
    else:
        assert not {sc.GEN_AI_INPUT_MESSAGES, sc.GEN_AI_OUTPUT_MESSAGES} & set(attrs)
    _no_secret(t)


# -- endings: early close, dropped connection, error event -------------------------------------------------


@route_params
def test_early_close(route: Route, sim: Simulator) -> None:
    sim.clear()
    with instrumented() as t:
        stream = _create(route, route.make(sim, False), stream=True, model="long")
        for i, _ in enumerate(stream):
            if i == 3:
                break
        assert not t.calls()
        stream.close()
        _ended(t, sc.END_CLOSED)


@route_params
def test_dropped_connection(route: Route, sim: Simulator) -> None:
    sim.clear()
    sim.inject(Fault.drop_after(chunks=4))
    with instrumented() as t:
        with pytest.raises(Exception) as caught:
            for _ in _create(route, route.make(sim, False), stream=True, model="long"):
                pass
        _ended(t, sc.END_ERROR, type(caught.value).__qualname__)


@route_params
def test_error_event(route: Route, sim: Simulator) -> None:
    sim.clear()
    sim.inject(Fault.error_event(after_chunks=4))
    sdk = anthropic if route.family == "anthropic" else openai
    with instrumented() as t:
        with pytest.raises(sdk.APIError) as caught:
            for _ in _create(route, route.make(sim, False), stream=True, model="long"):
                pass
        _ended(t, sc.END_ERROR, type(caught.value).__qualname__)
    if route.name == "bedrock":  # an exception frame: the SDK raises the API's words, as from an SSE error event
        assert "modelStreamErrorException" in str(caught.value.body)


@route_params
def test_retry_is_one_call(route: Route, sim: Simulator) -> None:
    """The SDK's retry (here after a 429 that asks for 10 ms) and the re-signed request are one call."""
    sim.clear()
    sim.inject(Fault.rate_limit(retry_after=0.01))
    with instrumented() as t:
        for _ in _create(route, route.make(sim, False).with_options(max_retries=1), stream=True):
            pass
    assert [s.status for s in sim.wait_for_requests(2)] == [429, 200]
    attrs = _ended(t, sc.END_COMPLETED)
    assert attrs[sc.FT_ATTEMPTS] == 2
    assert attrs[sc.GEN_AI_PROVIDER_NAME] == route.provider


def test_bedrock_errors_are_bedrocks(sim: Simulator) -> None:
    """Bedrock answers a throttled call with its own error (``x-amzn-ErrorType``, ``{"message"}``) and no
    rate-limit headers: the SDK's RateLimitError, and no rate-limit attributes made up from Anthropic's."""
    sim.clear()
    sim.inject(Fault.rate_limit(retry_after=0))
    with instrumented() as t, pytest.raises(anthropic.RateLimitError) as raised:
        _create(ROUTES[0], _bedrock(sim, False), stream=True)
    assert raised.value.response.headers["x-amzn-errortype"].startswith("ThrottlingException:")
    assert raised.value.response.json() == {"message": "Rate limit reached for requests (simulated)."}
    attrs = _ended(t, sc.END_ERROR, "RateLimitError")
    assert not [k for k in attrs if k.startswith("firsttoken.ratelimit.")], attrs
