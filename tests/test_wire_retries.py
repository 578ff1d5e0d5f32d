"""An SDK read on the wire that retries a call itself: the call and its retries are one call span.

google-genai (its ``HttpRetryOptions``; sync over httpx, async over httpx or aiohttp), mistralai (a
``RetryConfig``; sync and async) and cohere (``max_retries``, on by default) send every attempt as a
request of its own. Each attempt was a call span of its own, the failed one an error in every error
rate; now the call is one span with its attempts, as through the openai SDK: ``firsttoken.attempts``,
``http.request.resend_count``, an attempt event per attempt with its status, the ``retry_wait``
phase, the retry counted once, and an error only when the SDK gave up. The real SDKs, over real
sockets, against the simulator's injected faults; the app's results are the SDK's own.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import httpx
import pytest

from firsttoken import semconv as sc
from firsttoken.sim import Fault, LatencyModel, Simulator

from .conftest import Telemetry

MODEL = LatencyModel(queue_ms=5, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=2000, jitter=0, output_tokens=12)
FAULTS = {
    "429": (Fault.rate_limit(retry_after=0.01), 429),
    "503": (Fault.server_error(status=503), 503),
}


@pytest.fixture
def rsim() -> Any:
    with Simulator(latency=MODEL, seed=3) as s:
        yield s


def _points(telemetry: Telemetry, name: str) -> list[Any]:
    return telemetry.metrics().get(name, [])


def assert_one_retried_call(telemetry: Telemetry, sim: Simulator, status: int, stream: bool) -> dict[str, Any]:
    """One call span for two requests: attempts 2, one resend, the failed attempt's status in its event."""
    assert len(sim.requests) == 2, [r.path for r in sim.requests]
    span = telemetry.call()  # exactly one call span (it was one per attempt)
    a = dict(span.attributes or {})
    assert a[sc.FT_ATTEMPTS] == 2
    assert a[sc.HTTP_REQUEST_RESEND_COUNT] == 1
    assert a[sc.FT_END_REASON] == sc.END_COMPLETED
    assert sc.ERROR_TYPE not in a and span.status.status_code.name != "ERROR"
    assert a.get(sc.GEN_AI_REQUEST_STREAM, False) is stream
    assert a[sc.HTTP_RESPONSE_STATUS_CODE] == 200  # the answered attempt's
    events = [dict(e.attributes or {}) for e in span.events if e.name == sc.EVENT_ATTEMPT]
    assert [(e[sc.FT_ATTEMPT], e.get(sc.HTTP_RESPONSE_STATUS_CODE)) for e in events] == [(1, status), (2, 200)]
    wait = a["firsttoken.phase_duration." + sc.PHASE_RETRY_WAIT]  # the wait between the attempts
    waits = [p.value for p in _points(telemetry, sc.M_PHASE_TIME) if p.attributes[sc.FT_PHASE] == sc.PHASE_RETRY_WAIT]
    assert waits == [pytest.approx(wait)]  # counted once, as long as the span says
    assert wait >= 0.01  # each SDK here sleeps 10 ms or more before its retry: that time is the wait's
    if status == 429:  # the rate limit's Retry-After, kept as the SDK path keeps it
        assert a[sc.FT_RETRY_AFTER] == pytest.approx(0.01)
    # Counted once: one retry, one call, no error in the error rate.
    retries = _points(telemetry, sc.M_RETRIES)
    assert sum(p.value for p in retries) == 1
    duration = _points(telemetry, sc.M_OPERATION_DURATION)
    assert sum(p.count for p in duration) == 1
    assert [p.attributes.get(sc.ERROR_TYPE) for p in duration] == [None]
    return a


def assert_one_failed_call(telemetry: Telemetry, sim: Simulator, attempts: int, error_type: str) -> None:
    """The SDK gave up: one call span, an error with the last attempt's status, every attempt in it."""
    assert len(sim.requests) == attempts
    span = telemetry.call()
    a = dict(span.attributes or {})
    assert a[sc.FT_ATTEMPTS] == attempts
    assert a[sc.FT_END_REASON] == sc.END_ERROR
    assert a[sc.ERROR_TYPE] == error_type
    assert span.status.status_code.name == "ERROR"
    events = [dict(e.attributes or {}) for e in span.events if e.name == sc.EVENT_ATTEMPT]
    assert [e[sc.FT_ATTEMPT] for e in events] == (list(range(1, attempts + 1)) if attempts > 1 else [])
    assert sum(p.value for p in _points(telemetry, sc.M_RETRIES)) == attempts - 1
    duration = _points(telemetry, sc.M_OPERATION_DURATION)
    assert [p.attributes.get(sc.ERROR_TYPE) for p in duration] == [error_type]


# -- google-genai: HttpRetryOptions, over httpx (sync, async) and aiohttp (async) ---------------------

genai = pytest.importorskip("google.genai", reason="google-genai is in the dev extra")
types = pytest.importorskip("google.genai.types")
GEMINI_CLIENTS = ("sync", "async-httpx", "async-aiohttp")


def _gemini(sim: Simulator, client: str, attempts: int, held: list[Any], delay: float = 0.01) -> Any:
    if not hasattr(types, "HttpRetryOptions"):
        pytest.skip("this google-genai has no HttpRetryOptions (its calls are not retried)")
    options: dict[str, Any] = {
        "base_url": sim.url,
        "retry_options": types.HttpRetryOptions(attempts=attempts, initial_delay=delay, max_delay=delay * 2, jitter=0),
    }
    if client == "async-httpx":  # an httpx client of the app's: the SDK sends with it, not with aiohttp
        async_client = httpx.AsyncClient()
        held.append(async_client)
        options["httpx_async_client"] = async_client
    c = genai.Client(api_key="test-key", http_options=types.HttpOptions(**options))
    held.append(c)
    if client == "async-aiohttp":
        pytest.importorskip("aiohttp", reason="aiohttp is in the dev extra")
        assert c._api_client._use_aiohttp()
    elif client == "async-httpx":
        assert not c._api_client._use_aiohttp()
    return c


def _gemini_call(c: Any, client: str, stream: bool) -> str:
    """Call as an app would; the text it got."""
    model, contents = "gemini-2.0-flash", "Say hello"
    if client == "sync":
        if stream:
            chunks = c.models.generate_content_stream(model=model, contents=contents)
            return "".join(chunk.text or "" for chunk in chunks)
        return str(c.models.generate_content(model=model, contents=contents).text)

    async def run() -> str:
        if stream:
            chunks = await c.aio.models.generate_content_stream(model=model, contents=contents)
            return "".join([chunk.text or "" async for chunk in chunks])
        return str((await c.aio.models.generate_content(model=model, contents=contents)).text)

    return asyncio.run(run())


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("client", GEMINI_CLIENTS)
@pytest.mark.parametrize("fault", FAULTS)
def test_gemini_retries_are_one_call(
    telemetry: Telemetry, rsim: Simulator, fault: str, client: str, stream: bool
) -> None:
    held: list[Any] = []
    c = _gemini(rsim, client, 3, held)
    rsim.inject(FAULTS[fault][0])
    text = _gemini_call(c, client, stream)
    a = assert_one_retried_call(telemetry, rsim, FAULTS[fault][1], stream)
    assert text  # the app's answer, as without firsttoken
    assert a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 12
    assert a[sc.GEN_AI_PROVIDER_NAME] == "gcp.gemini"


@pytest.mark.parametrize("client", GEMINI_CLIENTS)
def test_gemini_gives_up_one_failed_call(telemetry: Telemetry, rsim: Simulator, client: str) -> None:
    from google.genai import errors

    held: list[Any] = []
    c = _gemini(rsim, client, 2, held)
    rsim.inject(Fault.rate_limit(retry_after=0.01), times=2)
    with pytest.raises(errors.ClientError) as raised:  # the SDK's own exception, as without firsttoken
        _gemini_call(c, client, stream=True)
    assert raised.value.code == 429
    assert_one_failed_call(telemetry, rsim, 2, "RateLimitError")


def test_gemini_a_dropped_connection_retried_is_one_call(telemetry: Telemetry, rsim: Simulator) -> None:
    """An attempt that raised (the server closed the connection before answering; google-genai retries
    aiohttp's ServerDisconnectedError): the call goes on, as an openai SDK call does."""
    held: list[Any] = []
    c = _gemini(rsim, "async-aiohttp", 3, held)
    rsim.inject(Fault.drop_after(chunks=0))
    assert _gemini_call(c, "async-aiohttp", stream=True)
    assert len(rsim.requests) == 2
    a = dict(telemetry.call().attributes or {})
    assert a[sc.FT_ATTEMPTS] == 2 and a[sc.FT_END_REASON] == sc.END_COMPLETED and sc.ERROR_TYPE not in a
    assert sum(p.value for p in _points(telemetry, sc.M_RETRIES)) == 1


@pytest.mark.parametrize("client", ["async-httpx", "async-aiohttp"])
def test_gemini_cancelled_in_its_backoff_is_one_cancelled_call(
    telemetry: Telemetry, rsim: Simulator, client: str
) -> None:
    """The app cancels while the SDK waits to retry a 429: the call ends cancelled then, not as an error."""
    held: list[Any] = []
    c = _gemini(rsim, client, 3, held, delay=30.0)  # a backoff the test cancels
    rsim.inject(Fault.rate_limit(retry_after=0.01))

    async def run() -> None:
        task = asyncio.ensure_future(c.aio.models.generate_content(model="gemini-2.0-flash", contents="Hi"))
        for _ in range(500):  # until the 429 has come back (5 s at most)
            await asyncio.sleep(0.01)
            if rsim.requests:
                break
        await asyncio.sleep(0.05)
        assert telemetry.calls() == []  # the 429 did not end the call: the SDK is waiting to retry
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())
    assert len(rsim.requests) == 1
    span = telemetry.call()
    a = dict(span.attributes or {})
    assert a[sc.FT_END_REASON] == sc.END_CANCELLED
    assert sc.ERROR_TYPE not in a and span.status.status_code.name != "ERROR"
    assert sc.FT_ATTEMPTS not in a  # absent: one attempt


# -- mistralai: a RetryConfig (none by default) ----------------------------------------------------

mistralai = pytest.importorskip("mistralai", reason="mistralai is in the dev extra")
try:
    from mistralai import Mistral
    from mistralai.utils import BackoffStrategy, RetryConfig
except ImportError:  # mistralai 2 moved the client
    from mistralai.client import Mistral  # type: ignore[no-redef]
    from mistralai.client.utils import BackoffStrategy, RetryConfig  # type: ignore[no-redef]


def _mistral_retries() -> Any:
    backoff: dict[str, Any] = {}
    if "jitter_ms" in inspect.signature(BackoffStrategy).parameters:
        backoff["jitter_ms"] = 0  # else up to a second of jitter per retry
    return RetryConfig("backoff", BackoffStrategy(10, 20, 1.5, 10_000, **backoff), False)


def _mistral_call(sim: Simulator, is_async: bool, stream: bool) -> str:
    m = Mistral(api_key="test-key", server_url=sim.url, retry_config=_mistral_retries())
    messages: Any = [{"role": "user", "content": "Hi"}]
    model = "mistral-small-latest"
    if not is_async:
        if stream:
            return "".join(e.data.choices[0].delta.content or "" for e in m.chat.stream(model=model, messages=messages))
        return str(m.chat.complete(model=model, messages=messages).choices[0].message.content)

    async def run() -> str:
        if stream:
            events = await m.chat.stream_async(model=model, messages=messages)
            return "".join([e.data.choices[0].delta.content or "" async for e in events])
        result = await m.chat.complete_async(model=model, messages=messages)
        return str(result.choices[0].message.content)

    return asyncio.run(run())


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("fault", FAULTS)
def test_mistral_retries_are_one_call(
    telemetry: Telemetry, rsim: Simulator, fault: str, is_async: bool, stream: bool
) -> None:
    rsim.inject(FAULTS[fault][0])
    text = _mistral_call(rsim, is_async, stream)
    a = assert_one_retried_call(telemetry, rsim, FAULTS[fault][1], stream)
    assert text
    assert a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 12
    assert a[sc.GEN_AI_PROVIDER_NAME] == "mistral_ai"


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_mistral_a_refusal_after_a_retry_is_one_failed_call(
    telemetry: Telemetry, rsim: Simulator, is_async: bool
) -> None:
    """A 503 retried, then a status outside the SDK's retry list (501): the SDK's error, one call span."""
    rsim.inject(Fault.server_error(status=503))
    rsim.inject(Fault.server_error(status=501))
    with pytest.raises(Exception) as raised:
        _mistral_call(rsim, is_async, stream=True)
    assert getattr(raised.value, "status_code", None) == 501
    assert_one_failed_call(telemetry, rsim, 2, "InternalServerError")


# -- cohere: max_retries (2 by default in cohere 7.3, 0 in 5.9) for a whole answer ------------------------

cohere = pytest.importorskip("cohere", reason="cohere is in the dev extra")
RETRIES: Any = {"max_retries": 2}  # cohere 7's default; cohere 5 retried none unless asked


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("fault", FAULTS)
def test_cohere_retries_are_one_call(telemetry: Telemetry, rsim: Simulator, fault: str, is_async: bool) -> None:
    messages: Any = [{"role": "user", "content": "Say hello"}]
    rsim.inject(FAULTS[fault][0])
    if is_async:

        async def run() -> Any:
            co = cohere.AsyncClientV2(api_key="test-key", base_url=rsim.url)
            return await co.chat(model="command-a-03-2025", messages=messages, request_options=RETRIES)

        result = asyncio.run(run())
    else:
        result = cohere.ClientV2(api_key="test-key", base_url=rsim.url).chat(
            model="command-a-03-2025", messages=messages, request_options=RETRIES
        )
    a = assert_one_retried_call(telemetry, rsim, FAULTS[fault][1], stream=False)
    assert a[sc.GEN_AI_RESPONSE_ID] == result.id
    assert a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == result.usage.tokens.output_tokens == 12


def test_every_retry_loop_is_hooked_when_its_module_is_imported() -> None:
    """The SDK modules firsttoken waits for are the ones whose loops it knows (two lists, kept equal)."""
    from firsttoken import _install
    from firsttoken.providers import retries

    hooked = {name for name, action in _install._HOOKS if action is _install._retry_loop}
    assert hooked == set(retries.LOOPS)
