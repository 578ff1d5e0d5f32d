"""Failures of calls read on the wire: every fault, on every client, in each streamed wire format.

An error status (streamed or not), a stream dropped after its headers, an error event inside a
200 stream, a read timeout and a cancellation each end the call with the right status and one
``error.type`` vocabulary (the class the SDKs raise), at the moment they happen: the span is
exported while the app still holds the response. Against the simulator, over real sockets.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from firsttoken import semconv as sc
from firsttoken.sim import FAULT_HEADER, LatencyModel, Simulator

from .conftest import Telemetry

aiohttp = pytest.importorskip("aiohttp", reason="aiohttp is in the dev extra")

MODEL = LatencyModel(queue_ms=10, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=400, jitter=0, output_tokens=40)
MESSAGES = [{"role": "user", "content": "Say hello"}]
FORMATS = {
    "openai": ("/v1/chat/completions", {"model": "gpt-4o-mini", "messages": MESSAGES, "stream": True}),
    "anthropic": (
        "/v1/messages",
        {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": MESSAGES, "stream": True},
    ),
}
CLIENTS = ("httpx", "httpx-async", "aiohttp")

# fault header -> (end reason, error.type per client, or one for all)
FAULTS: dict[str, tuple[str, dict[str, str] | str]] = {
    "rate_limit;retry_after=0": (sc.END_ERROR, "RateLimitError"),
    "server_error;status=500": (sc.END_ERROR, "InternalServerError"),
    "drop_after;chunks=3": (
        sc.END_ERROR,
        {"httpx": "RemoteProtocolError", "httpx-async": "RemoteProtocolError", "aiohttp": "ClientPayloadError"},
    ),
    "error_event;after_chunks=3": (sc.END_ERROR, "APIError"),
}


@pytest.fixture
def sim() -> Any:
    with Simulator(latency=MODEL, seed=4) as s:
        yield s


def _read_sync(url: str, body: dict[str, Any], headers: dict[str, str], held: list[Any], timeout: float) -> None:
    client = httpx.Client(timeout=httpx.Timeout(5.0, read=timeout))
    held.append(client)
    response = client.send(client.build_request("POST", url, json=body, headers=headers), stream=True)
    held.append(response)
    for _ in response.iter_lines():
        pass


async def _read_httpx_async(
    url: str, body: dict[str, Any], headers: dict[str, str], held: list[Any], timeout: float
) -> None:
    client = httpx.AsyncClient(timeout=httpx.Timeout(5.0, read=timeout))
    held.append(client)
    response = await client.send(client.build_request("POST", url, json=body, headers=headers), stream=True)
    held.append(response)
    async for _ in response.aiter_lines():
        pass


async def _read_aiohttp(
    url: str, body: dict[str, Any], headers: dict[str, str], held: list[Any], timeout: float
) -> None:
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(sock_read=timeout))
    held.append(session)
    response = await session.post(url, json=body, headers=headers)
    held.append(response)
    async for _ in response.content:
        pass


def _send(
    client: str, url: str, body: dict[str, Any], headers: dict[str, str], held: list[Any], timeout: float = 5.0
) -> Any:
    """Send and read a streamed call as an app would; returns what it raised (None: nothing)."""
    try:
        if client == "httpx":
            _read_sync(url, body, headers, held, timeout)
        else:
            reader = _read_httpx_async if client == "httpx-async" else _read_aiohttp
            asyncio.run(reader(url, body, headers, held, timeout))
    except Exception as exc:
        return exc
    return None


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("fault", FAULTS)
def test_a_failed_stream_is_an_error_at_once(
    telemetry: Telemetry, sim: Simulator, fault: str, fmt: str, client: str
) -> None:
    path, body = FORMATS[fmt]
    held: list[Any] = []  # the app keeps everything: the span must not wait for the collector
    _send(client, sim.url + path, body, {FAULT_HEADER: fault}, held)
    reason, types = FAULTS[fault]
    span = telemetry.call()
    a = dict(span.attributes or {})
    assert a[sc.FT_END_REASON] == reason
    assert a[sc.ERROR_TYPE] == (types if isinstance(types, str) else types[client])
    assert span.status.status_code.name == "ERROR"
    metric = telemetry.metrics()["gen_ai.client.operation.duration"]
    assert [p.attributes.get(sc.ERROR_TYPE) for p in metric] == [a[sc.ERROR_TYPE]]  # in the error rate


@pytest.mark.parametrize("client", CLIENTS)
def test_a_read_timeout_is_an_error(telemetry: Telemetry, sim: Simulator, client: str) -> None:
    path, body = FORMATS["openai"]
    held: list[Any] = []
    raised = _send(client, sim.url + path, body, {FAULT_HEADER: "stall;after_chunks=2;seconds=3"}, held, timeout=0.3)
    assert raised is not None
    a = dict(telemetry.call().attributes or {})
    assert a[sc.FT_END_REASON] == sc.END_ERROR
    assert a[sc.ERROR_TYPE] == type(raised).__qualname__
    assert a[sc.ERROR_TYPE] in ("ReadTimeout", "SocketTimeoutError", "ServerTimeoutError")


@pytest.mark.parametrize("client", ["httpx-async", "aiohttp"])
def test_a_cancelled_stream_is_cancelled(telemetry: Telemetry, sim: Simulator, client: str) -> None:
    path, body = FORMATS["anthropic"]
    held: list[Any] = []
    reader = _read_httpx_async if client == "httpx-async" else _read_aiohttp

    async def run() -> None:
        task = asyncio.ensure_future(reader(sim.url + path, body, {FAULT_HEADER: "stall;after_chunks=2"}, held, 5.0))
        await asyncio.sleep(0.4)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert telemetry.call().attributes[sc.FT_END_REASON] == sc.END_CANCELLED  # before the loop ends

    asyncio.run(run())


@pytest.mark.parametrize("client", CLIENTS)
def test_an_error_event_is_not_a_chunk_and_the_tokens_before_it_count(
    telemetry: Telemetry, sim: Simulator, client: str
) -> None:
    path, body = FORMATS["anthropic"]
    _send(client, sim.url + path, body, {FAULT_HEADER: "error_event;after_chunks=4"}, [])
    a = dict(telemetry.call().attributes or {})
    assert a[sc.FT_CHUNK_COUNT] == 4
    assert sc.FT_TIME_TO_FIRST_TOKEN in a
