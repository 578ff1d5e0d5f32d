"""Every behaviour over every path: each wire format of the registry (``providers/direct.FORMATS``)
through every client it can travel by -- its real SDK (sync, and async: google-genai's sends through
aiohttp), plain httpx and aiohttp -- against the simulator over real sockets.

The behaviours: TTFT is the first content token (not the headers, not a role-only or start event);
the input, output and cached tokens are the simulator's; prompts and completions are recorded only
when capture is on; chunk gaps are measured only when ``chunk_metrics`` is on, one per chunk after
the first; the prompt-prefix hash follows the system prompt; a stream the app closes early ends
``closed``; a stream that fails mid-way (the connection dropped, an error event) ends with an error
status and one ``error.type``. Retries are tested in tests/test_wire_retries.py.

The routes are the wire formats as the registry reads them: OpenAI's family (Chat Completions,
Completions, Responses; Mistral's and Groq's APIs speak it too, each with its own SDK), Anthropic
Messages, Gemini and Cohere v2. A combination that does not apply is skipped with its reason; a
cell that fails on a known bug not fixed yet is a strict xfail with the bug (``Route.known_bugs``),
so its fix turns it into a failure that asks to drop the mark.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

import firsttoken
from firsttoken import semconv as sc
from firsttoken.providers import _levers, direct
from firsttoken.sim import FAULT_HEADER, Fault, LatencyModel, Simulator

from .conftest import Telemetry

aiohttp = pytest.importorskip("aiohttp", reason="aiohttp is in the dev extra")
openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")
genai = pytest.importorskip("google.genai", reason="google-genai is in the dev extra")
genai_types = pytest.importorskip("google.genai.types", reason="google-genai is in the dev extra")
cohere = pytest.importorskip("cohere", reason="cohere is in the dev extra")
groq = pytest.importorskip("groq", reason="groq is in the dev extra")
pytest.importorskip("mistralai", reason="mistralai is in the dev extra")

# google-genai's async client subclasses aiohttp's ClientSession, which aiohttp warns about: theirs.
pytestmark = pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession:DeprecationWarning")

try:
    from mistralai import Mistral
except ImportError:  # mistralai 2 moved the client
    from mistralai.client import Mistral  # type: ignore[no-redef]

FAST = LatencyModel(queue_ms=1, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=4000, jitter=0, output_tokens=12)
"""Quick and exact: what is recorded, not how long it took."""
PREFILL_MS_PER_1K = 8000.0
LONG = LatencyModel(queue_ms=1, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=400, jitter=0, output_tokens=40)
"""For an early close: its terminal event 100 ms after the first chunks, so it cannot have been received
(the call decided from the bytes received) by the time the app closes; FAST's 12 tokens come in 3 ms,
often in the reads that carry the first two chunks."""
SLOW_PREFILL = LatencyModel(
    queue_ms=1, prefill_ms_per_1k_tokens=PREFILL_MS_PER_1K, decode_tokens_per_s=4000, jitter=0, output_tokens=12
)
"""For the TTFT cases: a prefill of some 100 ms between the response headers (and the role-only or
start event the formats send at once) and the first content token."""

SYSTEM = "You are terse. Answer in one line."
OTHER_SYSTEM = "You are verbose. Answer at length."
LONG_SYSTEM = "You are careful and you check every fact twice before you answer. " * 120
"""Some 1,700 tokens: past the simulated cache's 1,024-token minimum, so a second call reads it."""
USER = "Say hello to the matrix"


# -- the routes: each wire format as the registry reads it ------------------------------------------


@dataclass(frozen=True)
class Route:
    """One wire format of the registry, as one provider's API speaks it."""

    name: str
    family: str
    """The registry row that reads it (``providers/direct.FORMATS``)."""
    provider: str
    """The ``gen_ai.provider.name`` every path must give it."""
    model: str
    path: Callable[[str], str]
    """The streamed request's path, for a model."""
    body: Callable[[str, str, str], dict[str, Any]]
    """The streamed request's JSON body, for (model, system prompt, user message)."""
    sdk: Callable[[Simulator, str, str, str], tuple[Any, Any]]
    """The SDK's streamed call for (sim, model, system, user): (its client, an iterator of its events);
    the client is held while the stream is read (google-genai's closes its HTTP client when collected)."""
    sdk_async: Callable[[Simulator, str, str, str], Awaitable[tuple[Callable[[], Awaitable[Any]], Any]]] | None = None
    """The same through the SDK's async client (google-genai's sends through aiohttp): (what closes the
    client, the stream)."""
    sim: str = "main"
    """Which simulator serves it: the provider is told by host and port, as for a real API's host."""
    first_event_has_content: bool = False
    """Whether the first streamed event may carry output (no role-only or start event before it)."""
    sdk_patched: bool = True
    """Whether firsttoken reads its SDK's calls through the SDK's own hooks (openai, anthropic, groq);
    else the SDK's calls are read on the wire like plain httpx ones (google-genai, cohere, mistralai)."""
    no_error_event: str | None = None
    """Why the simulator sends no in-stream error event in this format, if it sends none."""
    no_prefix: str | None = None
    """Why calls of this format have no prompt-prefix hash, if they have none."""
    sdk_yields_error_event: bool = False
    """Whether its SDK hands the app the in-stream error event instead of raising (the openai SDK's
    Responses ``error`` event, a ``ResponseErrorEvent``): the call fails there all the same."""
    known_bugs: dict[str, str] = field(default_factory=dict)
    """Cells that fail on a real bug not fixed here, by ``behaviour-client``: the reason (xfail, strict)."""


def _openai_client(sim: Simulator) -> Any:
    return openai.OpenAI(api_key="test-key", base_url=sim.openai_base_url, max_retries=0)


def _openai_async_client(sim: Simulator) -> Any:
    return openai.AsyncOpenAI(api_key="test-key", base_url=sim.openai_base_url, max_retries=0)


def _chat_body(model: str, system: str, user: str) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def _chat_sdk(sim: Simulator, model: str, system: str, user: str) -> Any:
    body = _chat_body(model, system, user)
    del body["stream"]
    client = _openai_client(sim)
    return client, client.chat.completions.create(stream=True, **body)


async def _chat_sdk_async(sim: Simulator, model: str, system: str, user: str) -> tuple[Any, Any]:
    body = _chat_body(model, system, user)
    del body["stream"]
    client = _openai_async_client(sim)
    return client.close, await client.chat.completions.create(stream=True, **body)


def _completions_body(model: str, system: str, user: str) -> dict[str, Any]:
    return {
        "model": model,
        "prompt": f"{system}\n\n{user}",
        "max_tokens": 64,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def _completions_sdk(sim: Simulator, model: str, system: str, user: str) -> Any:
    body = _completions_body(model, system, user)
    del body["stream"]
    client = _openai_client(sim)
    return client, client.completions.create(stream=True, **body)


async def _completions_sdk_async(sim: Simulator, model: str, system: str, user: str) -> tuple[Any, Any]:
    body = _completions_body(model, system, user)
    del body["stream"]
    client = _openai_async_client(sim)
    return client.close, await client.completions.create(stream=True, **body)


def _responses_body(model: str, system: str, user: str) -> dict[str, Any]:
    return {"model": model, "instructions": system, "input": user, "stream": True}


def _responses_sdk(sim: Simulator, model: str, system: str, user: str) -> Any:
    client = _openai_client(sim)
    return client, client.responses.create(model=model, instructions=system, input=user, stream=True)


async def _responses_sdk_async(sim: Simulator, model: str, system: str, user: str) -> tuple[Any, Any]:
    client = _openai_async_client(sim)
    return client.close, await client.responses.create(model=model, instructions=system, input=user, stream=True)


def _anthropic_body(model: str, system: str, user: str) -> dict[str, Any]:
    return {
        "model": model,
        "max_tokens": 64,
        "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": user}],
        "stream": True,
    }


def _anthropic_sdk(sim: Simulator, model: str, system: str, user: str) -> Any:
    body = _anthropic_body(model, system, user)
    del body["stream"]
    client = anthropic.Anthropic(api_key="test-key", base_url=sim.url, max_retries=0)
    return client, client.messages.create(stream=True, **body)


async def _anthropic_sdk_async(sim: Simulator, model: str, system: str, user: str) -> tuple[Any, Any]:
    body = _anthropic_body(model, system, user)
    del body["stream"]
    client = anthropic.AsyncAnthropic(api_key="test-key", base_url=sim.url, max_retries=0)
    return client.close, await client.messages.create(stream=True, **body)


def _gemini_body(model: str, system: str, user: str) -> dict[str, Any]:
    return {
        "systemInstruction": {"parts": [{"text": system}]},
        "contents": [{"role": "user", "parts": [{"text": user}]}],
    }


def _gemini_sdk(sim: Simulator, model: str, system: str, user: str) -> Any:
    client = genai.Client(api_key="test-key", http_options=genai_types.HttpOptions(base_url=sim.url))
    config = genai_types.GenerateContentConfig(system_instruction=system)
    return client, client.models.generate_content_stream(model=model, contents=user, config=config)


async def _gemini_sdk_async(sim: Simulator, model: str, system: str, user: str) -> tuple[Any, Any]:
    client = genai.Client(api_key="test-key", http_options=genai_types.HttpOptions(base_url=sim.url))
    config = genai_types.GenerateContentConfig(system_instruction=system)
    stream = await client.aio.models.generate_content_stream(model=model, contents=user, config=config)
    return client.aio.aclose, stream


def _cohere_body(model: str, system: str, user: str) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        "stream": True,
    }


def _cohere_sdk(sim: Simulator, model: str, system: str, user: str) -> Any:
    client = cohere.ClientV2(api_key="test-key", base_url=sim.url)
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    return client, client.chat_stream(model=model, messages=messages)


async def _cohere_sdk_async(sim: Simulator, model: str, system: str, user: str) -> tuple[Any, Any]:
    http = httpx.AsyncClient()
    client = cohere.AsyncClientV2(api_key="test-key", base_url=sim.url, httpx_client=http)
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    return http.aclose, client.chat_stream(model=model, messages=messages)


def _mistral_sdk(sim: Simulator, model: str, system: str, user: str) -> Any:
    client = Mistral(api_key="test-key", server_url=sim.url)
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    return client, client.chat.stream(model=model, messages=messages)


async def _mistral_sdk_async(sim: Simulator, model: str, system: str, user: str) -> tuple[Any, Any]:
    http = httpx.AsyncClient()
    client = Mistral(api_key="test-key", server_url=sim.url, async_client=http)
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    return http.aclose, await client.chat.stream_async(model=model, messages=messages)


def _groq_sdk(sim: Simulator, model: str, system: str, user: str) -> Any:
    client = groq.Groq(api_key="test-key", base_url=sim.url, max_retries=0)
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    return client, client.chat.completions.create(model=model, messages=messages, stream=True)


async def _groq_sdk_async(sim: Simulator, model: str, system: str, user: str) -> tuple[Any, Any]:
    client = groq.AsyncGroq(api_key="test-key", base_url=sim.url, max_retries=0)
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    return client.close, await client.chat.completions.create(model=model, messages=messages, stream=True)


def _mistral_body(model: str, system: str, user: str) -> dict[str, Any]:
    body = _chat_body(model, system, user)
    del body["stream_options"]  # Mistral's API sends its usage on the last chunk unasked
    return body


def _groq_body(model: str, system: str, user: str) -> dict[str, Any]:
    body = _chat_body(model, system, user)
    del body["stream_options"]  # Groq's usage comes in x_groq on the last chunk unasked
    return body


NO_ERROR_EVENT = (
    "no Cohere error event to send: the simulator's mid-stream error on /v2/chat is OpenAI's "
    "`{error: ...}` object, which is no Cohere stream event"
)

ROUTES = (
    Route(
        "openai-chat",
        "openai",
        "openai",
        "gpt-4o-mini",
        lambda m: "/v1/chat/completions",
        _chat_body,
        _chat_sdk,
        sdk_async=_chat_sdk_async,
    ),
    Route(
        "openai-completions",
        "openai",
        "openai",
        "gpt-3.5-turbo-instruct",
        lambda m: "/v1/completions",
        _completions_body,
        _completions_sdk,
        sdk_async=_completions_sdk_async,
        first_event_has_content=True,  # the legacy API sends no role-only chunk
        no_prefix="a Completions prompt is one string: no instructions or tools to hash (docs/app.md)",
    ),
    Route(
        "openai-responses",
        "openai",
        "openai",
        "gpt-4o-mini",
        lambda m: "/v1/responses",
        _responses_body,
        _responses_sdk,
        sdk_async=_responses_sdk_async,
        sdk_yields_error_event=True,
    ),
    Route(
        "anthropic-messages",
        "anthropic",
        "anthropic",
        "claude-haiku-4-5",
        lambda m: "/v1/messages",
        _anthropic_body,
        _anthropic_sdk,
        sdk_async=_anthropic_sdk_async,
    ),
    Route(
        "gemini",
        "gemini",
        "gcp.gemini",
        "gemini-2.0-flash",
        lambda m: f"/v1beta/models/{m}:streamGenerateContent?alt=sse",
        _gemini_body,
        _gemini_sdk,
        sdk_async=_gemini_sdk_async,
        first_event_has_content=True,
        sdk_patched=False,
    ),
    Route(
        "cohere",
        "cohere",
        "cohere",
        "command-r-plus",
        lambda m: "/v2/chat",
        _cohere_body,
        _cohere_sdk,
        sdk_async=_cohere_sdk_async,
        sdk_patched=False,
        no_error_event=NO_ERROR_EVENT,
    ),
    Route(
        "mistral",
        "openai",
        "mistral_ai",
        "mistral-small-latest",
        lambda m: "/v1/chat/completions",
        _mistral_body,
        _mistral_sdk,
        sdk_async=_mistral_sdk_async,
        sim="mistral",
        sdk_patched=False,
    ),
    Route(
        "groq",
        "openai",
        "groq",
        "llama-3.3-70b-versatile",
        lambda m: "/openai/v1/chat/completions",
        _groq_body,
        _groq_sdk,
        sdk_async=_groq_sdk_async,
        sim="groq",
    ),
)
CLIENTS = ("sdk", "sdk-async", "httpx", "aiohttp")


def cells(behaviour: str) -> list[Any]:
    """Every route through every client, for one behaviour; a known bug's cell is a strict xfail."""
    out = []
    for route in ROUTES:
        for client in CLIENTS:
            bug = route.known_bugs.get(f"{behaviour}-{client}")
            marks = [pytest.mark.xfail(strict=True, reason=bug)] if bug else []
            out.append(pytest.param(route, client, id=f"{route.name}-{client}", marks=marks))
    return out


ELSEWHERE = {"bedrock": "tests/test_boto3_bedrock.py"}
"""Wire formats whose only client is none of CLIENTS, with the file that runs the matrix's behaviours on them
(TTFT, tokens and cache, capture on and off, early close, dropped connection, error event, retries as one
call): Bedrock Runtime's event stream is spoken by botocore alone."""


def test_the_routes_cover_every_registered_wire_format() -> None:
    """A wire format added to the registry without a route here fails this (and so joins the matrix)."""
    assert {fmt.family for fmt in direct.FORMATS} == {route.family for route in ROUTES} | set(ELSEWHERE)
    for path in ELSEWHERE.values():
        assert (Path(__file__).parents[1] / path).is_file(), path


# -- the simulators, and firsttoken instrumented around each case ------------------------------------


@pytest.fixture(scope="module")
def sims() -> Iterator[dict[str, Simulator]]:
    slow = {f"{route.model}-slow": SLOW_PREFILL for route in ROUTES}
    slow |= {f"{route.model}-long": LONG for route in ROUTES}
    with (
        Simulator(latency=FAST, models=slow, seed=7) as main,
        Simulator(latency=FAST, models=slow, seed=7) as mistral,
        Simulator(latency=FAST, models=slow, seed=7, provider_timing="groq") as groq_sim,
    ):
        yield {"main": main, "mistral": mistral, "groq": groq_sim}


@contextlib.contextmanager
def instrumented(sims: dict[str, Simulator], **options: Any) -> Iterator[Telemetry]:
    # The lever signals are per process: its first 64 prefixes keep their hash, later ones are _OTHER.
    # Each case starts as a fresh process would (the suite's other tests, and this matrix's 30-odd
    # cache prompts, would use them up) and leaves none of its own behind.
    _levers.reset()
    t = Telemetry()
    # Mistral's and Groq's APIs are told by their hosts; here by the simulators' host and port.
    hosts = {f"127.0.0.1:{sims['mistral'].port}": "mistral_ai", f"127.0.0.1:{sims['groq'].port}": "groq"}
    assert firsttoken.instrument(
        tracer_provider=t.tracer_provider, meter_provider=t.meter_provider, provider_hosts=hosts, **options
    )
    try:
        yield t
    finally:
        firsttoken.uninstrument()
        _levers.reset()


# -- one streamed call, through one client ------------------------------------------------------------


@dataclass
class Sent:
    """What the app saw of one streamed call."""

    raised: BaseException | None = None
    events: int = 0


def _is_data(line: bytes | str) -> bool:
    """An SSE event's data line, other than OpenAI's closing ``[DONE]``."""
    text = line.decode() if isinstance(line, bytes) else line
    return text.startswith("data:") and "[DONE]" not in text


def call(
    route: Route,
    client: str,
    sim: Simulator,
    *,
    system: str = SYSTEM,
    model: str | None = None,
    stop_after: int | None = None,
    fault: str | None = None,
) -> Sent:
    """A streamed call as an app makes it; ``stop_after`` events, then closed early; ``fault``: a
    simulator fault for this request. Returns what the app saw (the exception it got, if any)."""
    model = model or route.model
    sent = Sent()
    try:
        if client == "sdk":
            if fault is not None:
                sim.inject(Fault.parse(fault))
            sdk_client, stream = route.sdk(sim, model, system, USER)
            try:
                for _ in stream:
                    sent.events += 1
                    if stop_after is not None and sent.events >= stop_after:
                        stream.close()
                        break
            finally:
                del stream, sdk_client
        elif client == "sdk-async":
            assert route.sdk_async is not None
            make = route.sdk_async

            async def run_sdk() -> None:
                if fault is not None:
                    sim.inject(Fault.parse(fault))
                close_client, stream = await make(sim, model, system, USER)
                try:
                    async for _ in stream:
                        sent.events += 1
                        if stop_after is not None and sent.events >= stop_after:
                            await (getattr(stream, "aclose", None) or stream.close)()
                            break
                finally:
                    del stream
                    await close_client()

            asyncio.run(run_sdk())
        else:
            url = sim.url + route.path(model)
            body = route.body(model, system, USER)
            headers = {FAULT_HEADER: fault} if fault else {}
            if client == "httpx":
                with httpx.Client(timeout=10) as http, http.stream("POST", url, json=body, headers=headers) as r:
                    for line in r.iter_lines():
                        if _is_data(line):
                            sent.events += 1
                            if stop_after is not None and sent.events >= stop_after:
                                break
            else:

                async def run() -> None:
                    async with aiohttp.ClientSession() as session, session.post(url, json=body, headers=headers) as r:
                        async for line in r.content:
                            if _is_data(line):
                                sent.events += 1
                                if stop_after is not None and sent.events >= stop_after:
                                    break

                asyncio.run(run())
    except Exception as exc:  # the app's view of a failed call
        sent.raised = exc
    return sent


def attrs(span: Any) -> dict[str, Any]:
    return dict(span.attributes or {})


def counter_total(t: Telemetry, name: str) -> float:
    return sum(p.value for p in t.metrics().get(name, []))


# -- the behaviours ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("route", "client"), cells("ttft"))
def test_ttft_is_the_first_content_token(sims: dict[str, Simulator], route: Route, client: str) -> None:
    sim = sims[route.sim]
    with instrumented(sims) as t:
        # A first call warms the path up: an SDK's first call may build its event models (openai's
        # Responses events: some 0.1 s) between the first event's bytes and handing it over.
        for model in (route.model, f"{route.model}-slow"):
            sent = call(route, client, sim, model=model)
            assert sent.raised is None, sent.raised
    a = attrs(t.calls()[-1])
    assert a[sc.GEN_AI_PROVIDER_NAME] == route.provider
    assert a[sc.FT_END_REASON] == sc.END_COMPLETED
    prefill = PREFILL_MS_PER_1K / 1000 * sim.requests[-1].input_tokens / 1000  # seconds, as the sim waited
    assert prefill > 0.05
    ttfh = a[sc.FT_TIME_TO_RESPONSE_HEADERS]
    ttfc = a[sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK]
    ttft = a[sc.FT_TIME_TO_FIRST_TOKEN]
    # Bounds of half the prefill: a busy machine may stamp the headers or the first chunk late, never
    # the token early; counting the headers or a content-less event as the token would give about 0.
    assert ttft >= ttfh + 0.5 * prefill, "TTFT is the first content token, not the response headers"
    assert ttfc <= ttft
    if route.first_event_has_content:
        assert ttft - ttfc < 0.5 * prefill, "the first chunk carried the first token"
    else:
        assert ttft - ttfc >= 0.5 * prefill, "the role-only or start event is a chunk, not the first token"


@pytest.mark.parametrize(("route", "client"), cells("tokens"))
def test_tokens_and_cache_are_the_simulators(sims: dict[str, Simulator], route: Route, client: str) -> None:
    sim = sims[route.sim]
    system = f"[{route.name} through {client}] {LONG_SYSTEM}"  # a prompt no other case cached
    with instrumented(sims) as t:
        for _ in range(2):  # the second call reads the first one's prompt cache
            assert call(route, client, sim, system=system).raised is None
        served = sim.requests[-2:]
        cold, warm = (attrs(s) for s in t.calls())
    assert served[0].cached_tokens == 0 and served[1].cached_tokens > 0, "the simulator cached the prompt"
    cached = [s.cached_tokens for s in served]  # Groq's: in x_groq.usage, as its API sends them
    for a, s, c in zip((cold, warm), served, cached, strict=True):
        assert a[sc.GEN_AI_USAGE_INPUT_TOKENS] == s.input_tokens  # the whole prompt, cached tokens included
        assert a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == s.output_tokens
        assert a.get(sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, 0) == c
    assert counter_total(t, sc.M_INPUT_TOKENS) == sum(s.input_tokens for s in served)
    assert counter_total(t, sc.M_OUTPUT_TOKENS) == sum(s.output_tokens for s in served)
    assert counter_total(t, sc.M_CACHE_READ_INPUT_TOKENS) == sum(cached)


@pytest.mark.parametrize("capture", [True, False], ids=["capture-on", "capture-off"])
@pytest.mark.parametrize(("route", "client"), cells("capture"))
def test_prompts_and_completions_only_when_captured(
    sims: dict[str, Simulator], route: Route, client: str, capture: bool
) -> None:
    with instrumented(sims, capture_content=capture) as t:
        assert call(route, client, sims[route.sim]).raised is None
    a = attrs(t.call())
    if capture:
        assert USER in str(a[sc.GEN_AI_INPUT_MESSAGES])
        assert SYSTEM in str(a.get(sc.GEN_AI_SYSTEM_INSTRUCTIONS, "")) + str(a[sc.GEN_AI_INPUT_MESSAGES])
        assert isinstance(a.get(sc.GEN_AI_OUTPUT_MESSAGES), str) and len(a[sc.GEN_AI_OUTPUT_MESSAGES]) > 20
    else:
        for span in t.spans():
            text = str(dict(span.attributes or {}))
            assert USER not in text and SYSTEM not in text
            assert not {sc.GEN_AI_INPUT_MESSAGES, sc.GEN_AI_OUTPUT_MESSAGES} & set(span.attributes or {})


@pytest.mark.parametrize("chunk_metrics", [True, False], ids=["chunk-metrics-on", "chunk-metrics-off"])
@pytest.mark.parametrize(("route", "client"), cells("chunks"))
def test_chunk_gaps_only_when_asked(sims: dict[str, Simulator], route: Route, client: str, chunk_metrics: bool) -> None:
    with instrumented(sims, chunk_metrics=chunk_metrics) as t:
        assert call(route, client, sims[route.sim]).raised is None
        gaps = t.metrics().get(sc.M_TIME_PER_OUTPUT_CHUNK, [])
    chunks = attrs(t.call())[sc.FT_CHUNK_COUNT]
    assert chunks > 3
    if chunk_metrics:
        assert sum(p.count for p in gaps) == chunks - 1, "one gap per chunk after the first"
    else:
        assert gaps == []


@pytest.mark.parametrize(("route", "client"), cells("prefix"))
def test_the_prefix_hash_follows_the_system_prompt(sims: dict[str, Simulator], route: Route, client: str) -> None:
    if route.no_prefix:
        pytest.skip(route.no_prefix)
    sim = sims[route.sim]
    with instrumented(sims) as t:
        for system in (SYSTEM, SYSTEM, OTHER_SYSTEM):
            assert call(route, client, sim, system=system).raised is None
    first, second, other = (attrs(s).get(sc.FT_PREFIX_HASH) for s in t.calls())
    assert isinstance(first, str) and first
    assert second == first
    assert isinstance(other, str) and other != first


@pytest.mark.parametrize(("route", "client"), cells("close"))
def test_an_early_close_ends_the_call_closed(sims: dict[str, Simulator], route: Route, client: str) -> None:
    with instrumented(sims) as t:
        sent = call(route, client, sims[route.sim], stop_after=2, model=f"{route.model}-long")
        span = t.call()  # at the close, not when the stream is collected
    assert sent.raised is None, sent.raised
    assert attrs(span)[sc.FT_END_REASON] == sc.END_CLOSED
    assert span.status.status_code.name != "ERROR"


def _failed(t: Telemetry) -> dict[str, Any]:
    span = t.call()
    a = attrs(span)
    assert a[sc.FT_END_REASON] == sc.END_ERROR
    assert span.status.status_code.name == "ERROR"
    assert [p.attributes.get(sc.ERROR_TYPE) for p in t.metrics()[sc.M_OPERATION_DURATION]] == [a[sc.ERROR_TYPE]]
    return a


@pytest.mark.parametrize(("route", "client"), cells("dropped"))
def test_a_stream_dropped_mid_way_is_an_error(sims: dict[str, Simulator], route: Route, client: str) -> None:
    with instrumented(sims) as t:
        sent = call(route, client, sims[route.sim], fault="drop_after;chunks=3")
        a = _failed(t)  # at once, while the app still holds what it made
    assert sent.raised is not None, "the app saw the connection drop"
    assert a[sc.ERROR_TYPE] == type(sent.raised).__qualname__  # one vocabulary: the class the app got


@pytest.mark.parametrize(("route", "client"), cells("error-event"))
def test_an_error_event_mid_way_is_an_error(sims: dict[str, Simulator], route: Route, client: str) -> None:
    if route.no_error_event:
        pytest.skip(route.no_error_event)
    with instrumented(sims) as t:
        sent = call(route, client, sims[route.sim], fault="error_event;after_chunks=3")
        a = _failed(t)
    # docs/semantics.md: an SDK firsttoken hooks names its own exception; read on the wire, or handed
    # to the app as an event (not raised), APIError.
    if client.startswith("sdk") and route.sdk_patched and not route.sdk_yields_error_event:
        assert sent.raised is not None
        assert a[sc.ERROR_TYPE] == type(sent.raised).__qualname__
    else:
        if client.startswith("sdk") and route.sdk_yields_error_event:
            assert sent.raised is None, "the SDK handed the error event over"
        assert a[sc.ERROR_TYPE] == "APIError"
