"""aiohttp: LLM calls sent with aiohttp are measured like httpx ones, over real sockets against the simulator.

google-genai's async client sends through aiohttp whenever aiohttp is importable; apps call the
OpenAI, Anthropic and Gemini APIs with aiohttp directly. Each wire format is sent through httpx and
through aiohttp with the same request, and the two call spans must say the same.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Any

import httpx
import pytest

from firsttoken import semconv as sc
from firsttoken.sim import FAULT_HEADER, LatencyModel, Simulator

from .conftest import Telemetry

aiohttp = pytest.importorskip("aiohttp", reason="aiohttp is in the dev extra")

MODEL = LatencyModel(queue_ms=30, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=800, jitter=0, output_tokens=24)


@pytest.fixture
def sim() -> Any:
    with Simulator(latency=MODEL, seed=3) as s:
        yield s


# (wire format, path, body, streamed?) -- one request per format, sent by both clients.
def _requests(stream: bool) -> list[tuple[str, str, dict[str, Any]]]:
    messages = [{"role": "user", "content": "Say hello"}]
    openai: dict[str, Any] = {"model": "gpt-4o-mini", "messages": messages}
    anthropic: dict[str, Any] = {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": messages}
    if stream:
        openai |= {"stream": True, "stream_options": {"include_usage": True}}
        anthropic |= {"stream": True}
    method = "streamGenerateContent?alt=sse" if stream else "generateContent"
    gemini_path = f"/v1beta/models/gemini-2.0-flash:{method}"
    gemini = {"contents": [{"role": "user", "parts": [{"text": "Say hello"}]}]}
    return [
        ("openai", "/v1/chat/completions", openai),
        ("anthropic", "/v1/messages", anthropic),
        ("gemini", gemini_path, gemini),
    ]


CASES = [(fmt, path, body, stream) for stream in (False, True) for fmt, path, body in _requests(stream)]
IDS = [f"{fmt}-{'stream' if stream else 'whole'}" for fmt, _, _, stream in CASES]


def _send_httpx(url: str, body: dict[str, Any], stream: bool) -> int:
    with httpx.Client() as client:
        if not stream:
            return client.post(url, json=body).status_code
        with client.stream("POST", url, json=body) as response:
            for _ in response.iter_lines():
                pass
            return response.status_code


async def _send_aiohttp(url: str, body: dict[str, Any], stream: bool) -> int:
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as response:
        if stream:
            async for _ in response.content:
                pass
        else:
            await response.json()
        return response.status


# What must be the same whichever client carried the call.
SAME = (
    sc.GEN_AI_PROVIDER_NAME,
    sc.GEN_AI_OPERATION_NAME,
    sc.GEN_AI_REQUEST_MODEL,
    sc.GEN_AI_REQUEST_STREAM,
    sc.GEN_AI_USAGE_INPUT_TOKENS,
    sc.GEN_AI_USAGE_OUTPUT_TOKENS,
    sc.GEN_AI_RESPONSE_FINISH_REASONS,
    sc.FT_END_REASON,
    sc.HTTP_RESPONSE_STATUS_CODE,
    sc.FT_ATTEMPTS,
)


@pytest.mark.parametrize(("fmt", "path", "body", "stream"), CASES, ids=IDS)
def test_each_wire_format_says_the_same_through_httpx_and_aiohttp(
    telemetry: Telemetry, sim: Simulator, fmt: str, path: str, body: dict[str, Any], stream: bool
) -> None:
    assert _send_httpx(sim.url + path, body, stream) == 200
    assert asyncio.run(_send_aiohttp(sim.url + path, body, stream)) == 200
    by_httpx, by_aiohttp = (dict(s.attributes or {}) for s in telemetry.calls())
    assert {k: by_aiohttp.get(k) for k in SAME} == {k: by_httpx.get(k) for k in SAME}
    assert by_aiohttp[sc.FT_END_REASON] == sc.END_COMPLETED
    assert by_aiohttp[sc.GEN_AI_USAGE_OUTPUT_TOKENS] > 0
    assert isinstance(by_aiohttp.get(sc.GEN_AI_RESPONSE_ID), str)
    if stream:  # TTFT, and the time per output token, from the bytes the app consumed
        assert 0.02 < by_aiohttp[sc.FT_TIME_TO_FIRST_TOKEN] < 5.0
        assert by_aiohttp[sc.FT_TIME_TO_FIRST_TOKEN] >= by_aiohttp[sc.FT_TIME_TO_RESPONSE_HEADERS]
        assert by_aiohttp[sc.FT_CHUNK_COUNT] > 1
    else:
        assert sc.FT_TIME_TO_FIRST_TOKEN not in by_aiohttp
    # The wire phases, from aiohttp's TraceConfig: a new connection, then the server's wait.
    phases = {k.rpartition(".")[2] for k in by_aiohttp if k.startswith("firsttoken.phase_duration.")}
    assert {sc.PHASE_CONNECT, sc.PHASE_SERVER_WAIT} <= phases
    assert by_aiohttp[sc.FT_CONNECTION_REUSED] is False
    assert by_aiohttp[sc.SERVER_ADDRESS] == "127.0.0.1"


def test_google_genai_async_client_through_aiohttp(telemetry: Telemetry, sim: Simulator) -> None:
    """The issue's figure: 2 async Gemini calls made 0 spans with aiohttp installed; now 2, with wire phases."""
    genai = pytest.importorskip("google.genai")
    types = pytest.importorskip("google.genai.types")
    client = genai.Client(api_key="test-key", http_options=types.HttpOptions(base_url=sim.url))
    assert client._api_client._use_aiohttp()  # the SDK sends through aiohttp here

    async def two_calls() -> None:
        await client.aio.models.generate_content(model="gemini-2.0-flash", contents="Hi")
        async for _ in await client.aio.models.generate_content_stream(model="gemini-2.0-flash", contents="Hi"):
            pass

    asyncio.run(two_calls())
    whole, streamed = (dict(s.attributes or {}) for s in telemetry.calls())
    for a in (whole, streamed):
        assert a[sc.GEN_AI_PROVIDER_NAME] == "gcp.gemini"
        assert a[sc.GEN_AI_OPERATION_NAME] == sc.OP_GENERATE_CONTENT
        assert a[sc.GEN_AI_REQUEST_MODEL] == "gemini-2.0-flash"
        assert a[sc.FT_END_REASON] == sc.END_COMPLETED
        assert a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 24
        assert "firsttoken.phase_duration.server_wait" in a
    assert streamed[sc.GEN_AI_REQUEST_STREAM] is True
    assert streamed[sc.FT_TIME_TO_FIRST_TOKEN] > 0.02


def test_an_early_release_ends_the_call_as_closed(telemetry: Telemetry, sim: Simulator) -> None:
    _fmt, path, body = _requests(stream=True)[0]

    async def run() -> None:
        async with aiohttp.ClientSession() as session, session.post(sim.url + path, json=body) as response:
            await response.content.readline()
            await response.content.readline()
            assert telemetry.calls() == []
        assert telemetry.call().attributes[sc.FT_END_REASON] == sc.END_CLOSED  # at the release, not later

    asyncio.run(run())


@pytest.mark.parametrize(("fmt", "path", "body"), _requests(stream=True), ids=lambda v: v if isinstance(v, str) else "")
def test_a_stream_dropped_after_its_headers_is_an_error_at_that_moment(
    telemetry: Telemetry, sim: Simulator, fmt: str, path: str, body: dict[str, Any]
) -> None:
    held: list[Any] = []

    async def run() -> None:
        async with aiohttp.ClientSession() as session:
            response = await session.post(sim.url + path, json=body, headers={FAULT_HEADER: "drop_after;chunks=2"})
            held.append(response)  # the app still holds the response: the span must not wait for it
            with pytest.raises(aiohttp.ClientPayloadError):
                async for _ in response.content:
                    pass

    asyncio.run(run())
    a = dict(telemetry.call().attributes or {})
    assert a[sc.FT_END_REASON] == sc.END_ERROR
    assert a[sc.ERROR_TYPE] == "ClientPayloadError"
    assert telemetry.call().status.status_code.name == "ERROR"


def test_a_read_timeout_is_an_error_and_a_cancellation_is_cancelled(telemetry: Telemetry, sim: Simulator) -> None:
    _fmt, path, body = _requests(stream=True)[0]
    stall = {FAULT_HEADER: "stall;after_chunks=2;seconds=5"}

    async def timed_out() -> None:
        timeout = aiohttp.ClientTimeout(sock_read=0.3)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.post(sim.url + path, json=body, headers=stall) as response,
        ):
            with pytest.raises(asyncio.TimeoutError):
                async for _ in response.content:
                    pass

    async def cancelled() -> None:
        async with (
            aiohttp.ClientSession() as session,
            session.post(sim.url + path, json=body, headers=stall) as response,
        ):

            async def read() -> None:
                async for _ in response.content:
                    pass

            task = asyncio.ensure_future(read())
            await asyncio.sleep(0.3)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(timed_out())
    asyncio.run(cancelled())
    timeout_span, cancelled_span = (dict(s.attributes or {}) for s in telemetry.calls())
    assert timeout_span[sc.FT_END_REASON] == sc.END_ERROR
    assert timeout_span[sc.ERROR_TYPE] in ("SocketTimeoutError", "ServerTimeoutError", "TimeoutError")
    assert cancelled_span[sc.FT_END_REASON] == sc.END_CANCELLED


def test_a_connection_refused_is_an_error(telemetry: Telemetry, sim: Simulator) -> None:
    _fmt, path, body = _requests(stream=False)[0]
    url = sim.url.rsplit(":", 1)[0] + ":9" + path  # the discard port: nothing listens

    async def run() -> None:
        async with aiohttp.ClientSession() as session:
            with pytest.raises(aiohttp.ClientConnectorError):
                await session.post(url, json=body)

    asyncio.run(run())
    a = dict(telemetry.call().attributes or {})
    assert a[sc.FT_END_REASON] == sc.END_ERROR
    assert a[sc.ERROR_TYPE] == "ClientConnectorError"


def test_other_aiohttp_requests_pass_straight_through(telemetry: Telemetry, sim: Simulator) -> None:
    async def run() -> int:
        async with aiohttp.ClientSession() as session, session.get(sim.url + "/v1/models") as response:
            await response.read()
            return response.status

    assert asyncio.run(run()) == 200
    assert telemetry.calls() == []
    assert "aiohttp" in sys.modules


def test_a_failure_of_firsttoken_before_the_send_never_reaches_the_app(
    telemetry: Telemetry, sim: Simulator, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The async seam's ``sending`` hook failing (a bug of firsttoken's) is logged, and the request
    still goes (it raised into the app)."""
    from firsttoken._internal import ENV_VAR
    from firsttoken.transport_aiohttp import AiohttpAdapter

    def broken(*_: Any) -> None:
        raise KeyError("a request the hook did not expect")

    monkeypatch.delenv(ENV_VAR)  # as in production: logged, not raised
    monkeypatch.setattr(AiohttpAdapter, "sending", broken)
    _fmt, path, body = _requests(stream=False)[0]
    with caplog.at_level(logging.DEBUG, logger="firsttoken"):
        assert asyncio.run(_send_aiohttp(sim.url + path, body, stream=False)) == 200
    assert [r.getMessage() for r in caplog.records if r.exc_info] == ["firsttoken: before a aiohttp request"]
    assert telemetry.call().attributes[sc.FT_END_REASON] == sc.END_COMPLETED  # type: ignore[index]


def test_wire_phases_over_tls_and_a_reused_connection(telemetry: Telemetry) -> None:
    """aiohttp's TraceConfig gives the set-up phases (DNS, then TCP and TLS as one ``connect``: aiohttp
    does not separate them), TLS facts, and a reused connection for the second call; the phases tile."""
    import ssl

    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    _fmt, path, body = _requests(stream=True)[0]

    async def run(url: str) -> None:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client)) as session:
            for _ in range(2):
                async with session.post(url, json=body) as response:
                    async for _ in response.content:
                        pass

    with Simulator(latency=MODEL, seed=3, ssl_context=server) as tls_sim:
        asyncio.run(run(f"https://localhost:{tls_sim.port}{path}"))  # a host name: a DNS lookup
    first, second = telemetry.calls()
    a, b = dict(first.attributes or {}), dict(second.attributes or {})
    phases = [c.attributes[sc.FT_PHASE] for c in telemetry.children(first)]  # type: ignore[index]
    assert phases[:4] == [sc.PHASE_PREPARE, sc.PHASE_POOL_WAIT, sc.PHASE_DNS, sc.PHASE_CONNECT]
    assert phases.index(sc.PHASE_CONNECT) < phases.index(sc.PHASE_SERVER_WAIT)
    assert a[sc.TLS_PROTOCOL_NAME] == "tls" and a[sc.TLS_PROTOCOL_VERSION] in ("1.2", "1.3")
    assert a[sc.FT_CONNECTION_REUSED] is False and b[sc.FT_CONNECTION_REUSED] is True
    assert sc.PHASE_CONNECT not in {c.attributes[sc.FT_PHASE] for c in telemetry.children(second)}  # type: ignore[index]
    assert a[sc.FT_REQUEST_BODY_SIZE] > 0 and a[sc.FT_RESPONSE_BODY_SIZE] > 0
    for call in (first, second):
        kids = telemetry.children(call)
        assert kids[0].start_time == call.start_time and kids[-1].end_time == call.end_time
