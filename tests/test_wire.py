"""The wire under each call: connection set-up or reuse, upload, server wait, retries, tiling phases."""

from __future__ import annotations

import asyncio
import itertools
import ssl
import threading
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest
import trustme
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from packaging.version import Version

from firsttoken import semconv as sc
from firsttoken.sim import Fault, LatencyModel, Simulator

from .conftest import FAST, Telemetry

MESSAGES = [{"role": "user", "content": "Say hello."}]
SETUP = {sc.PHASE_DNS, sc.PHASE_TCP_CONNECT, sc.PHASE_TLS_HANDSHAKE}


@pytest.fixture(scope="module")
def certs() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return server, client


@pytest.fixture
def tls_sim(certs: tuple[ssl.SSLContext, ssl.SSLContext]) -> Iterator[Simulator]:
    with Simulator(latency=FAST, seed=1, ssl_context=certs[0]) as s:
        yield s


def _url(sim: Simulator) -> str:
    return f"https://localhost:{sim.port}/v1"  # a host name, so there is a DNS lookup


def _phases(t: Telemetry, call: Any) -> list[str]:
    return [c.attributes[sc.FT_PHASE] for c in t.children(call)]


def _check_tiles(t: Telemetry, call: Any) -> None:
    """The leaf phases tile the call: contiguous, no overlap, summing to its duration."""
    phases = t.children(call)
    assert phases[0].start_time == call.start_time
    assert phases[-1].end_time == call.end_time
    for a, b in itertools.pairwise(phases):
        assert a.end_time == b.start_time
    total = sum(p.end_time - p.start_time for p in phases)
    assert abs(total - (call.end_time - call.start_time)) <= 1_000_000  # within 1 ms


def test_first_call_sets_up_a_connection_and_the_second_reuses_it(
    telemetry: Telemetry, tls_sim: Simulator, certs: Any
) -> None:
    c = openai.OpenAI(
        base_url=_url(tls_sim), api_key="k", max_retries=0, http_client=openai.DefaultHttpxClient(verify=certs[1])
    )
    c.chat.completions.create(model="m", messages=MESSAGES)
    c.chat.completions.create(model="m", messages=MESSAGES)
    first, second = telemetry.calls()
    phases = _phases(telemetry, first)
    assert [p for p in phases if p in SETUP] == [sc.PHASE_DNS, sc.PHASE_TCP_CONNECT, sc.PHASE_TLS_HANDSHAKE]
    assert phases.index(sc.PHASE_UPLOAD) < phases.index(sc.PHASE_SERVER_WAIT)
    assert first.attributes[sc.FT_CONNECTION_REUSED] is False
    assert first.attributes[sc.TLS_PROTOCOL_NAME] == "tls"
    assert first.attributes[sc.TLS_PROTOCOL_VERSION] in ("1.2", "1.3")
    assert first.attributes[sc.TLS_NEXT_PROTOCOL] == "http/1.1"
    assert first.attributes[sc.NETWORK_PROTOCOL_VERSION] == "1.1"
    assert first.attributes[sc.FT_REQUEST_BODY_SIZE] > 0
    assert first.attributes[sc.FT_RESPONSE_BODY_SIZE] > 0
    assert not SETUP & set(_phases(telemetry, second))
    assert second.attributes[sc.FT_CONNECTION_REUSED] is True
    for call in (first, second):
        _check_tiles(telemetry, call)
    outcomes = {p.attributes[sc.FT_CONNECTION_OUTCOME]: p.value for p in telemetry.metrics()[sc.M_CONNECTIONS]}
    assert outcomes == {"new": 1, "reused": 1}
    phase_points = {p.attributes[sc.FT_PHASE] for p in telemetry.metrics()[sc.M_PHASE_TIME]}
    assert SETUP | {sc.PHASE_UPLOAD, sc.PHASE_SERVER_WAIT} <= phase_points


async def test_async_first_call_sets_up_and_second_reuses(telemetry: Telemetry, tls_sim: Simulator, certs: Any) -> None:
    c = openai.AsyncOpenAI(
        base_url=_url(tls_sim), api_key="k", max_retries=0, http_client=openai.DefaultAsyncHttpxClient(verify=certs[1])
    )
    for _ in range(2):
        async for _chunk in await c.chat.completions.create(model="m", messages=MESSAGES, stream=True):
            pass
    first, second = telemetry.calls()
    assert [p for p in _phases(telemetry, first) if p in SETUP] == [
        sc.PHASE_DNS,
        sc.PHASE_TCP_CONNECT,
        sc.PHASE_TLS_HANDSHAKE,
    ]
    if Version(openai.__version__) >= Version("3.30"):
        assert not SETUP & set(_phases(telemetry, second)), "async streams drain and reuse the connection"
        assert second.attributes[sc.FT_CONNECTION_REUSED] is True
    else:  # before 3.30 an async stream closes its response at [DONE] undrained: the connection is lost
        assert set(_phases(telemetry, second)) >= SETUP
        assert second.attributes[sc.FT_CONNECTION_REUSED] is False
    _check_tiles(telemetry, first)
    await c.close()


def test_a_new_client_per_call_sets_up_every_time(telemetry: Telemetry, tls_sim: Simulator, certs: Any) -> None:
    for _ in range(3):
        c = openai.OpenAI(
            base_url=_url(tls_sim), api_key="k", max_retries=0, http_client=openai.DefaultHttpxClient(verify=certs[1])
        )
        c.chat.completions.create(model="m", messages=MESSAGES)
        c.close()
    for call in telemetry.calls():
        assert set(_phases(telemetry, call)) >= SETUP
        assert call.attributes[sc.FT_CONNECTION_REUSED] is False
        assert call.attributes[sc.FT_SDK_CLIENT_NEW] is True


def test_anthropic_wire_phases(telemetry: Telemetry, tls_sim: Simulator, certs: Any) -> None:
    c = anthropic.Anthropic(
        base_url=f"https://localhost:{tls_sim.port}",
        api_key="k",
        max_retries=0,
        http_client=anthropic.DefaultHttpxClient(verify=certs[1]),
    )
    with c.messages.stream(model="claude-test", max_tokens=32, messages=MESSAGES) as stream:
        stream.get_final_text()
    c.messages.create(model="claude-test", max_tokens=32, messages=MESSAGES)
    first, second = telemetry.calls()
    assert set(_phases(telemetry, first)) >= SETUP
    assert second.attributes[sc.FT_CONNECTION_REUSED] is True, "anthropic streams read to the end and reuse"
    _check_tiles(telemetry, first)


def test_pool_of_one_makes_the_second_call_wait(telemetry: Telemetry) -> None:
    slow = LatencyModel(queue_ms=300, decode_tokens_per_s=5000, jitter=0, output_tokens=4)
    with Simulator(latency=slow, seed=0) as sim:
        c = openai.OpenAI(
            base_url=sim.openai_base_url,
            api_key="k",
            max_retries=0,
            http_client=openai.DefaultHttpxClient(limits=httpx2.Limits(max_connections=1)),
        )
        c.chat.completions.create(model="m", messages=MESSAGES)  # open the one connection
        telemetry.exporter.clear()
        threads = [threading.Thread(target=c.chat.completions.create, kwargs={"model": "m", "messages": MESSAGES})]
        threads.append(threading.Thread(target=c.chat.completions.create, kwargs={"model": "m", "messages": MESSAGES}))
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    waits = []
    for call in telemetry.calls():
        spans = {p.attributes[sc.FT_PHASE]: p for p in telemetry.children(call)}
        pool = spans.get(sc.PHASE_POOL_WAIT)
        waits.append(0 if pool is None else (pool.end_time - pool.start_time) / 1e9)
    # One call had the connection at once; the other waited for it (about the first's 300 ms).
    assert min(waits) < 0.05
    assert max(waits) >= 0.25


def test_rate_limit_then_success_shows_both_attempts_and_the_wait(telemetry: Telemetry, sim: Simulator) -> None:
    sim.inject(Fault.rate_limit(retry_after=0.2))
    c = openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=2)
    c.chat.completions.create(model="m", messages=MESSAGES)
    call = telemetry.call()
    assert call.attributes[sc.FT_ATTEMPTS] == 2
    events = [e for e in call.events if e.name == sc.EVENT_ATTEMPT]
    assert [e.attributes[sc.HTTP_RESPONSE_STATUS_CODE] for e in events] == [429, 200]
    assert call.attributes[sc.FT_RETRY_AFTER] == pytest.approx(0.2)
    phases = {p.attributes[sc.FT_PHASE]: p for p in telemetry.children(call)}
    wait = phases[sc.PHASE_RETRY_WAIT]
    assert (wait.end_time - wait.start_time) / 1e9 >= 0.2, "the backoff is its own phase, not model time"
    _check_tiles(telemetry, call)
    retries = telemetry.metrics()[sc.M_RETRIES]
    assert sum(p.value for p in retries) == 1


def test_openai_processing_time_header_is_server_timing(telemetry: Telemetry, sim: Simulator) -> None:
    openai.OpenAI(base_url=sim.openai_base_url, api_key="k").chat.completions.create(model="m", messages=MESSAGES)
    call = telemetry.call()
    assert call.attributes[sc.FT_SERVER_PROCESSING_TIME] >= 0
    points = telemetry.metrics()[sc.M_SERVER_TIMING_TIME]
    assert {p.attributes[sc.FT_SERVER_TIMING_PHASE] for p in points} == {"processing"}


# -- LLM calls made with plain httpx ---------------------------------------------------------------


def test_plain_httpx_calls_are_measured(telemetry: Telemetry, sim: Simulator) -> None:
    body = {"model": "m", "messages": MESSAGES}
    with httpx.Client() as client:
        assert client.post(f"{sim.openai_base_url}/chat/completions", json=body).status_code == 200
        with client.stream(
            "POST",
            f"{sim.openai_base_url}/chat/completions",
            json={**body, "stream": True, "stream_options": {"include_usage": True}},
        ) as response:
            lines = [line for line in response.iter_lines() if line]
        with client.stream(
            "POST",
            f"{sim.anthropic_base_url}/v1/messages",
            headers={"anthropic-version": "2023-06-01"},
            json={"model": "claude-test", "max_tokens": 16, "messages": MESSAGES, "stream": True},
        ) as response:
            list(response.iter_lines())
        client.get(f"{sim.openai_base_url}/models")  # not an LLM call
        client.post(f"{sim.url}/healthz", json={})  # nor this
    whole, streamed, claude = telemetry.calls()
    assert whole.attributes[sc.GEN_AI_USAGE_OUTPUT_TOKENS] > 0
    assert whole.attributes[sc.FT_END_REASON] == sc.END_COMPLETED
    assert lines[-1] == "data: [DONE]"
    assert streamed.attributes[sc.FT_TIME_TO_FIRST_TOKEN] > 0
    assert streamed.attributes[sc.GEN_AI_USAGE_INPUT_TOKENS] > 0
    assert streamed.attributes[sc.FT_END_REASON] == sc.END_COMPLETED
    assert claude.attributes[sc.GEN_AI_PROVIDER_NAME] == "anthropic"
    assert claude.attributes[sc.FT_TIME_TO_FIRST_TOKEN] > 0
    assert claude.attributes[sc.GEN_AI_RESPONSE_FINISH_REASONS]
    for call in (whole, streamed, claude):
        assert call.attributes[sc.FT_REQUEST_BODY_SIZE] > 0
        _check_tiles(telemetry, call)


async def test_plain_async_httpx_stream_is_measured(telemetry: Telemetry, sim: Simulator) -> None:
    async with (
        httpx.AsyncClient() as client,
        client.stream(
            "POST",
            f"{sim.openai_base_url}/chat/completions",
            json={"model": "m", "messages": MESSAGES, "stream": True},
        ) as response,
    ):
        async for _ in response.aiter_lines():
            pass
    call = telemetry.call()
    assert call.attributes[sc.FT_TIME_TO_FIRST_TOKEN] > 0
    assert call.attributes[sc.FT_END_REASON] == sc.END_COMPLETED


def test_plain_httpx_error_status(telemetry: Telemetry, sim: Simulator) -> None:
    sim.inject(Fault.server_error(status=503))
    with httpx.Client() as client:
        r = client.post(f"{sim.openai_base_url}/chat/completions", json={"model": "m", "messages": MESSAGES})
    assert r.status_code == 503
    call = telemetry.call()
    # One error.type vocabulary on every path: the class the SDKs raise for a 503.
    assert call.attributes[sc.ERROR_TYPE] == "InternalServerError"


# -- alongside opentelemetry-instrumentation-httpx ------------------------------------------------


def test_http_spans_of_the_httpx_instrumentation_nest_under_the_call(telemetry: Telemetry, sim: Simulator) -> None:
    from opentelemetry.instrumentation.httpx import HTTPX2ClientInstrumentor

    instrumentor = HTTPX2ClientInstrumentor()
    instrumentor.instrument(tracer_provider=telemetry.tracer_provider)
    try:
        sim.inject(Fault.rate_limit(retry_after=0.01))
        c = openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=2)
        for _ in c.chat.completions.create(model="m", messages=MESSAGES, stream=True):
            pass
    finally:
        instrumentor.uninstrument()
    call = telemetry.call()
    http = [s for s in telemetry.spans() if s.instrumentation_scope and "httpx" in s.instrumentation_scope.name]
    assert len(http) == 2, "one HTTP span per attempt, no duplicates"
    for span in http:
        assert span.parent is not None and span.parent.span_id == call.context.span_id, "no orphans"
        assert span.context.trace_id == call.context.trace_id


# -- the phases tile every call ---------------------------------------------------------------------


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    queue_ms=st.integers(0, 40),
    tps=st.integers(200, 3000),
    tokens=st.integers(1, 30),
    stream=st.booleans(),
    retry=st.booleans(),
)
def test_leaf_phases_tile_every_call(
    telemetry: Telemetry, queue_ms: int, tps: int, tokens: int, stream: bool, retry: bool
) -> None:
    telemetry.exporter.clear()
    latency = LatencyModel(queue_ms=queue_ms, decode_tokens_per_s=tps, jitter=0.3, output_tokens=tokens)
    with Simulator(latency=latency, seed=queue_ms) as sim:
        if retry:
            sim.inject(Fault.rate_limit(retry_after=0.01))
        c = openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=2)
        if stream:
            for _ in c.chat.completions.create(model="m", messages=MESSAGES, stream=True):
                pass
        else:
            c.chat.completions.create(model="m", messages=MESSAGES)
        c.close()
    call = telemetry.call()
    _check_tiles(telemetry, call)
    names = _phases(telemetry, call)
    assert (sc.PHASE_RETRY_WAIT in names) is retry
    assert (sc.PHASE_DECODE in names) is (stream and tokens > 1)


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_a_stream_whose_whole_budget_went_on_reasoning_names_that_wait(telemetry: Telemetry, api: str) -> None:
    """o3-mini spends all of max_output_tokens on hidden reasoning: no output token, so no TTFT. The
    wait for output that never came is its own phase, not ``finish`` ("trailing usage chunk, close")."""
    latency = LatencyModel(queue_ms=5, decode_tokens_per_s=400, jitter=0, reasoning_tokens=200)
    with Simulator(latency=latency, seed=1) as sim:
        c = openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0)
        if api == "responses":
            stream: Any = c.responses.create(model="o3-mini", input="hi", max_output_tokens=160, stream=True)
        else:
            stream = c.chat.completions.create(
                model="o3-mini", messages=MESSAGES, max_completion_tokens=160, stream=True
            )
        for _ in stream:
            pass
        c.close()
    call = telemetry.call()
    if api == "responses":
        assert call.attributes[sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] == 160
    assert sc.FT_TIME_TO_FIRST_TOKEN not in call.attributes
    _check_tiles(telemetry, call)
    phases = {c.attributes[sc.FT_PHASE]: (c.end_time - c.start_time) / 1e9 for c in telemetry.children(call)}
    # 160 hidden tokens at 400 tokens/s: 0.4 s of reasoning, seen as waiting after the headers.
    assert phases[sc.PHASE_WAIT_NO_OUTPUT] >= 0.35, phases
    assert phases.get(sc.PHASE_FINISH, 0.0) < 0.1, phases
    assert call.attributes[f"{sc.FT_PHASE_DURATION_PREFIX}{sc.PHASE_WAIT_NO_OUTPUT}"] >= 0.35
    phase_time = {
        p.attributes[sc.FT_PHASE]: p.value for p in telemetry.metrics()[sc.M_PHASE_TIME]
    }  # fmt: skip
    assert phase_time[sc.PHASE_WAIT_NO_OUTPUT] >= 0.35 and phase_time.get(sc.PHASE_FINISH, 0.0) < 0.1


def test_wire_hooks_leave_unrelated_asyncio_dns_alone(telemetry: Telemetry) -> None:
    """The DNS hooks time only a call's own connection: other lookups pass through untouched."""

    async def lookup() -> Any:
        return await asyncio.get_running_loop().getaddrinfo("localhost", 80)

    assert asyncio.run(lookup())
    assert not telemetry.calls()


# -- HTTP/2 and provider-reported server timing ------------------------------------------------------


def test_http2_is_labelled_and_shares_one_connection(telemetry: Telemetry) -> None:
    from firsttoken.sim.tls import test_certificates

    tls = test_certificates()
    with Simulator(latency=FAST, seed=1, ssl_context=tls.server) as sim:
        c = openai.OpenAI(
            base_url=_url(sim),
            api_key="k",
            max_retries=0,
            http_client=openai.DefaultHttpxClient(http2=True, verify=tls.client),
        )
        for _ in range(2):
            for _chunk in c.chat.completions.create(model="m", messages=MESSAGES, stream=True):
                pass
        c.close()
    first, second = telemetry.calls()
    assert first.attributes[sc.TLS_NEXT_PROTOCOL] == "h2"
    assert first.attributes[sc.NETWORK_PROTOCOL_VERSION] == "2"
    assert set(_phases(telemetry, first)) >= SETUP
    # HTTP/2 streams close without closing the connection: the second call reuses it.
    assert second.attributes[sc.FT_CONNECTION_REUSED] is True
    assert not SETUP & set(_phases(telemetry, second))
    for call in (first, second):
        _check_tiles(telemetry, call)


async def test_http2_async_concurrent_calls(telemetry: Telemetry) -> None:
    from firsttoken.sim.tls import test_certificates

    tls = test_certificates()
    with Simulator(latency=FAST, seed=1, ssl_context=tls.server) as sim:
        c = openai.AsyncOpenAI(
            base_url=_url(sim),
            api_key="k",
            max_retries=0,
            http_client=openai.DefaultAsyncHttpxClient(http2=True, verify=tls.client),
        )

        async def one() -> None:
            async for _ in await c.chat.completions.create(model="m", messages=MESSAGES, stream=True):
                pass

        await one()
        await asyncio.gather(*(one() for _ in range(5)))
        await c.close()
    calls = telemetry.calls()
    assert len(calls) == 6
    assert all(call.attributes[sc.NETWORK_PROTOCOL_VERSION] == "2" for call in calls)
    assert sum(1 for call in calls if not call.attributes[sc.FT_CONNECTION_REUSED]) == 1
    for call in calls:
        _check_tiles(telemetry, call)


@pytest.mark.parametrize("provider", ["groq", "cerebras"])
@pytest.mark.parametrize("stream", [False, True])
def test_provider_timing_splits_server_time(telemetry: Telemetry, provider: str, stream: bool) -> None:
    latency = LatencyModel(queue_ms=60, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=100, jitter=0, output_tokens=5)
    with Simulator(latency=latency, seed=0, provider_timing=provider) as sim:  # type: ignore[arg-type]
        c = openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0)
        if stream:
            for _ in c.chat.completions.create(
                model="m", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
            ):
                pass
        else:
            c.chat.completions.create(model="m", messages=MESSAGES)
    call = telemetry.call()
    attrs = call.attributes
    assert attrs[sc.FT_SERVER_TIMING_SOURCE] == provider
    assert attrs[sc.FT_SERVER_QUEUE_TIME] == pytest.approx(0.060, abs=0.005)
    assert attrs[sc.FT_SERVER_COMPLETION_TIME] == pytest.approx(0.050, abs=0.01)
    # The server's own account fits inside what the client measured.
    assert attrs[sc.FT_SERVER_TOTAL_TIME] <= (call.end_time - call.start_time) / 1e9
    phases = {p.attributes[sc.FT_SERVER_TIMING_PHASE] for p in telemetry.metrics()[sc.M_SERVER_TIMING_TIME]}
    assert {"queue", "prompt", "completion"} <= phases
