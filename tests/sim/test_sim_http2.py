"""HTTP/2 over TLS (ALPN ``h2``): the real SDKs with ``http2=True``, many streams, flow control, faults."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import socket
import ssl
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import anthropic
import h2.config
import h2.connection
import h2.errors
import h2.events
import httpx2
import openai
import pytest

import firsttoken.sim._h2
import firsttoken.sim._server
import firsttoken.sim.tls
from firsttoken.sim import FAULT_HEADER, Fault, LatencyModel, Simulator
from firsttoken.sim.tls import ca_pem, test_certificates

MESSAGES = [{"role": "user", "content": "Go."}]
CLAUDE = "claude-sim-1"
QUICK = LatencyModel.fixed(queue_ms=1, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=5000, output_tokens=12)


def _wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.005)


@pytest.fixture
def tls_sim() -> Iterator[tuple[Simulator, ssl.SSLContext]]:
    server_ctx, client_ctx = test_certificates()
    with Simulator(latency=QUICK, seed=11, ssl_context=server_ctx) as sim:
        yield sim, client_ctx


@pytest.fixture
def oai2(tls_sim: tuple[Simulator, ssl.SSLContext]) -> Iterator[openai.OpenAI]:
    sim, ctx = tls_sim
    http = openai.DefaultHttpxClient(http2=True, verify=ctx)
    with openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0, http_client=http) as client:
        yield client


@pytest.fixture
async def aoai2(tls_sim: tuple[Simulator, ssl.SSLContext]) -> AsyncIterator[openai.AsyncOpenAI]:
    sim, ctx = tls_sim
    http = openai.DefaultAsyncHttpxClient(http2=True, verify=ctx)
    async with openai.AsyncOpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0, http_client=http) as c:
        yield c


@pytest.fixture
def ant2(tls_sim: tuple[Simulator, ssl.SSLContext]) -> Iterator[anthropic.Anthropic]:
    sim, ctx = tls_sim
    http = anthropic.DefaultHttpxClient(http2=True, verify=ctx)
    with anthropic.Anthropic(base_url=sim.anthropic_base_url, api_key="k", max_retries=0, http_client=http) as c:
        yield c


@pytest.fixture
async def aant2(tls_sim: tuple[Simulator, ssl.SSLContext]) -> AsyncIterator[anthropic.AsyncAnthropic]:
    sim, ctx = tls_sim
    http = anthropic.DefaultAsyncHttpxClient(http2=True, verify=ctx)
    async with anthropic.AsyncAnthropic(
        base_url=sim.anthropic_base_url, api_key="k", max_retries=0, http_client=http
    ) as c:
        yield c


# -- the SDKs over HTTP/2 -----------------------------------------------------------------------------


def served(sim: Simulator, n: int, timeout: float = 10.0) -> list[Any]:
    """The simulator's log once it holds ``n`` requests. A client that has read a stream's last event
    (``[DONE]``) is done with it before the server thread has logged the request: on a busy machine the
    log can trail the client by a scheduling slice."""
    deadline = time.monotonic() + timeout
    while len(sim.requests) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    return sim.requests


def test_openai_sync(oai2: openai.OpenAI, tls_sim: tuple[Simulator, ssl.SSLContext]) -> None:
    sim, _ = tls_sim
    raw = oai2.chat.completions.with_raw_response.create(model="gpt-4o", messages=MESSAGES)
    assert raw.http_response.http_version == "HTTP/2"
    assert raw.headers["x-request-id"] and int(raw.headers["openai-processing-ms"]) >= 0
    assert raw.parse().choices[0].message.content
    with oai2.chat.completions.create(
        model="gpt-4o", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    ) as stream:
        assert stream.response.http_version == "HTTP/2"
        chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 12
    with oai2.responses.stream(model="gpt-4o", input="Go.") as events:
        assert events.get_final_response().output_text
    embedded = oai2.embeddings.create(model="text-embedding-3-small", input=["a", "b"])
    assert len(embedded.data) == 2
    served_now = served(sim, 4)
    assert [s.http_version for s in served_now] == ["2"] * 4
    assert len({s.connection for s in served_now}) == 1  # one connection, one stream per call


async def test_openai_async(aoai2: openai.AsyncOpenAI, tls_sim: tuple[Simulator, ssl.SSLContext]) -> None:
    raw = await aoai2.chat.completions.with_raw_response.create(model="gpt-4o", messages=MESSAGES)
    assert raw.http_response.http_version == "HTTP/2"
    stream = await aoai2.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
    assert stream.response.http_version == "HTTP/2"
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert len(text.split()) >= 1
    assert [s.http_version for s in served(tls_sim[0], 2)] == ["2", "2"]


def test_anthropic_sync(ant2: anthropic.Anthropic) -> None:
    raw = ant2.messages.with_raw_response.create(model=CLAUDE, max_tokens=64, messages=MESSAGES)
    assert raw.http_response.http_version == "HTTP/2"
    assert raw.headers["request-id"]
    assert raw.parse().content[0].type == "text"
    with ant2.messages.stream(model=CLAUDE, max_tokens=64, messages=MESSAGES) as stream:
        assert stream.response.http_version == "HTTP/2"
        assert len(list(stream.text_stream)) == 12
        assert stream.get_final_message().usage.output_tokens == 12
    assert ant2.messages.count_tokens(model=CLAUDE, messages=MESSAGES).input_tokens > 0


async def test_anthropic_async(aant2: anthropic.AsyncAnthropic) -> None:
    raw = await aant2.messages.with_raw_response.create(model=CLAUDE, max_tokens=64, messages=MESSAGES)
    assert raw.http_response.http_version == "HTTP/2"
    async with aant2.messages.stream(model=CLAUDE, max_tokens=64, messages=MESSAGES) as stream:
        assert stream.response.http_version == "HTTP/2"
        assert len([t async for t in stream.text_stream]) == 12


async def test_twenty_concurrent_streams_share_one_connection() -> None:
    # The server paces each stream for 420 ms (20 ms queue, 20 tokens at 20 ms): one after another,
    # 20 streams cannot take less than 8.4 s, however fast the machine. Taking less than half of it
    # proves they ran concurrently; what is left (~4 s) is room for the CPU work of 20 TLS HTTP/2
    # streams on a loaded machine (2.3 s seen with both cores busy).
    model = LatencyModel.fixed(queue_ms=20, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=50, output_tokens=20)
    sequential = 20 * (0.020 + 20 / 50)
    server_ctx, client_ctx = test_certificates()
    with Simulator(latency=model, ssl_context=server_ctx) as sim:
        http = openai.DefaultAsyncHttpxClient(http2=True, verify=client_ctx)
        client = openai.AsyncOpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0, http_client=http)
        await client.models.list()  # open the connection first, so every stream finds it

        async def one() -> tuple[str, int]:
            stream = await client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
            count = len([c async for c in stream if c.choices and c.choices[0].delta.content])
            return stream.response.http_version, count

        start = time.perf_counter()
        results = await asyncio.gather(*(one() for _ in range(20)))
        elapsed = time.perf_counter() - start
        await client.close()
        assert results == [("HTTP/2", 20)] * 20
        assert elapsed < sequential / 2, elapsed
        served = sim.requests
        assert len(served) == 21 and {s.http_version for s in served} == {"2"}
        assert len({s.connection for s in served}) == 1


# -- flow control ---------------------------------------------------------------------------------


async def test_bodies_larger_than_the_flow_control_windows() -> None:
    # Every response is several times the default 64 KiB stream window, and together they exceed the
    # connection window many times over: only WINDOW_UPDATEs let them through.
    model = LatencyModel.fixed(
        queue_ms=0, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=1e6, output_tokens=40_000, chunk_tokens=200
    )
    server_ctx, client_ctx = test_certificates()
    with Simulator(latency=model, ssl_context=server_ctx) as sim:
        http = openai.DefaultAsyncHttpxClient(http2=True, verify=client_ctx)
        client = openai.AsyncOpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0, http_client=http)

        async def streamed() -> int:
            stream = await client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
            return sum(len(c.choices[0].delta.content or "") for c in [c async for c in stream] if c.choices)

        async def whole() -> int:
            result = await client.embeddings.create(model="text-embedding-3-large", input=[f"x{i}" for i in range(12)])
            return sum(len(d.embedding) for d in result.data)

        big = "word " * 300_000  # a 1.5 MB request body: more than the 1 MiB stream window the server offers
        sizes = await asyncio.gather(*(streamed() for _ in range(6)), *(whole() for _ in range(4)))
        completion = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": big}])
        await client.close()
    assert all(size > 150_000 for size in sizes[:6])
    assert sizes[6:] == [12 * 3072] * 4
    assert completion.usage is not None and completion.usage.prompt_tokens > 200_000
    assert {s.http_version for s in sim.requests} == {"2"}


class _RawH2Client:
    """A bare HTTP/2 client (the ``h2`` package over a TLS socket) that acknowledges data only when told."""

    def __init__(self, port: int) -> None:
        ctx = test_certificates().client
        ctx.set_alpn_protocols(["h2"])
        self.sock = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="127.0.0.1")
        assert self.sock.selected_alpn_protocol() == "h2"
        self.sock.settimeout(0.02)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
        self.conn.initiate_connection()
        self.body: dict[int, bytearray] = {}
        self.status: dict[int, bytes] = {}
        self.ended: set[int] = set()
        self.auto_ack: set[int] = set()
        self.flush()

    def flush(self) -> None:
        self.sock.sendall(self.conn.data_to_send())

    def post(self, path: str, body: dict[str, object], *extra: tuple[str, str]) -> int:
        stream_id = self.conn.get_next_available_stream_id()
        data = json.dumps(body).encode()
        headers = [(":method", "POST"), (":path", path), (":scheme", "https"), (":authority", "127.0.0.1")]
        self.conn.send_headers(stream_id, [*headers, ("content-type", "application/json"), *extra])
        self.conn.send_data(stream_id, data, end_stream=True)
        self.body[stream_id] = bytearray()
        self.flush()
        return stream_id

    def pump(self, until: Callable[[], bool], seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not until() and time.monotonic() < deadline:
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            for event in self.conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    self.status[event.stream_id] = dict(event.headers)[b":status"]
                elif isinstance(event, h2.events.DataReceived):
                    self.body[event.stream_id] += event.data
                    if event.stream_id in self.auto_ack:
                        self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    self.ended.add(event.stream_id)
            self.flush()

    def close(self) -> None:
        self.conn.close_connection()
        self.flush()
        self.sock.close()


def test_flow_control_windows_are_respected_per_stream_and_per_connection() -> None:
    model = LatencyModel.fixed(
        queue_ms=0, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=1e6, output_tokens=20_000, chunk_tokens=100
    )
    window = 65_535  # the client's default stream and connection windows: it never widens them here
    server_ctx, _ = test_certificates()
    with Simulator(latency=model, ssl_context=server_ctx) as sim:
        client = _RawH2Client(sim.port)
        big = client.post("/v1/chat/completions", {"model": "m", "messages": MESSAGES, "stream": True})
        client.pump(lambda: len(client.body[big]) >= window, 5)
        client.pump(lambda: False, 0.1)
        assert client.status[big] == b"200" and len(client.body[big]) == window  # not one byte more
        # The connection window is used up too: a second stream gets its headers but no data ...
        small = client.post("/v1/chat/completions", {"model": "m", "messages": MESSAGES, "max_tokens": 3})
        client.pump(lambda: small in client.ended, 0.2)
        assert client.status[small] == b"200" and not client.body[small] and small not in client.ended
        # ... until the connection window opens: then the small stream completes, the big one stays put
        # (its own stream window is still shut).
        client.conn.increment_flow_control_window(1 << 24)
        client.flush()
        client.pump(lambda: small in client.ended, 5)
        assert json.loads(client.body[small])["usage"]["completion_tokens"] == 3
        assert len(client.body[big]) == window
        assert [s.path for s in sim.requests] == ["/v1/chat/completions"]  # the big one is not done
        # Acknowledging what was read reopens the big stream's window, and it runs to the end.
        client.auto_ack.add(big)
        client.conn.acknowledge_received_data(window, big)
        client.flush()
        client.pump(lambda: big in client.ended, 10)
        client.close()
    events = bytes(client.body[big]).split(b"\n\n")
    assert events[-2:] == [b"data: [DONE]", b""]
    assert len(events) == 1 + 200 + 1 + 1 + 1  # role, 200 content chunks, finish, [DONE], tail
    assert len(client.body[big]) > 2 * window
    assert len(sim.requests) == 2 and {s.http_version for s in sim.requests} == {"2"}


# -- faults and disconnects -----------------------------------------------------------------------------


def test_faults_over_http2(oai2: openai.OpenAI, tls_sim: tuple[Simulator, ssl.SSLContext]) -> None:
    sim, _ = tls_sim
    sim.inject(Fault.rate_limit(retry_after=0.01))
    with pytest.raises(openai.RateLimitError) as caught:
        oai2.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert caught.value.response.http_version == "HTTP/2"
    sim.inject(Fault.error_event(after_chunks=2))
    with pytest.raises(openai.APIError, match="The server had an error"):
        for _ in oai2.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True):
            pass
    sim.inject(Fault.stall(after_chunks=1, seconds=0.15))
    start = time.perf_counter()
    assert len(list(oai2.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True))) == 14
    assert time.perf_counter() - start >= 0.15
    sim.inject(Fault.drop_after(chunks=0))  # a whole response: reset before any byte
    with pytest.raises(openai.APIConnectionError):
        oai2.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    _wait_for(lambda: len(sim.requests) == 4)
    assert [(s.status, s.disconnected) for s in sim.requests] == [(429, False), (200, False), (200, False), (0, True)]
    # Resetting one stream leaves the connection usable.
    assert oai2.chat.completions.create(model="gpt-4o", messages=MESSAGES).choices
    assert len({s.connection for s in sim.requests}) == 1


async def test_drop_resets_only_its_own_stream() -> None:
    model = LatencyModel.fixed(queue_ms=0, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=200, output_tokens=20)
    server_ctx, client_ctx = test_certificates()
    with Simulator(latency=model, ssl_context=server_ctx) as sim:
        http = openai.DefaultAsyncHttpxClient(http2=True, verify=client_ctx)
        client = openai.AsyncOpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0, http_client=http)
        await client.models.list()

        async def one(fault: str | None) -> int:
            headers = {"x-firsttoken-sim-fault": fault} if fault else {}
            stream = await client.chat.completions.create(
                model="m", messages=MESSAGES, stream=True, extra_headers=headers
            )
            return len([c async for c in stream])

        results = await asyncio.gather(one(None), one("drop_after;chunks=5"), one(None), return_exceptions=True)
        await client.close()
    assert results[0] == results[2] == 22
    assert isinstance(results[1], openai.APIConnectionError)
    dropped = [s for s in sim.requests if s.fault is not None]
    assert len(dropped) == 1 and dropped[0].disconnected
    assert len({s.connection for s in sim.requests}) == 1


def test_stall_until_the_client_gives_up(tls_sim: tuple[Simulator, ssl.SSLContext]) -> None:
    sim, ctx = tls_sim
    http = openai.DefaultHttpxClient(http2=True, verify=ctx)
    client = openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0, http_client=http, timeout=0.3)
    sim.inject(Fault.stall(after_chunks=2, seconds=None))
    with pytest.raises(openai.APITimeoutError):
        for _ in client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True):
            pass
    client.close()
    _wait_for(lambda: bool(sim.requests))
    (served,) = sim.requests
    assert served.disconnected and served.status == 200


def test_client_closing_a_stream_early_is_quiet(
    tls_sim: tuple[Simulator, ssl.SSLContext], caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    # httpcore does not reset an HTTP/2 stream whose response is closed early (it just stops reading
    # it), so the server finishes the stream into the client's window; the connection stays usable.
    caplog.set_level(logging.WARNING)
    sim, ctx = tls_sim
    sim.latency = LatencyModel.fixed(queue_ms=0, decode_tokens_per_s=1000, output_tokens=50)
    http = openai.DefaultHttpxClient(http2=True, verify=ctx)
    client = openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0, http_client=http)
    stream = client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    for n, _ in enumerate(stream):
        if n == 3:
            break
    stream.close()
    assert client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=2).choices
    client.close()
    _wait_for(lambda: len(sim.requests) == 2)
    assert len({s.connection for s in sim.requests}) == 1
    assert not caplog.records
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err


def test_a_stream_reset_by_the_client_stops_its_handler(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    model = LatencyModel.fixed(queue_ms=0, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=200, output_tokens=1000)
    with Simulator(latency=model, ssl_context=test_certificates().server) as sim:
        client = _RawH2Client(sim.port)
        doomed = client.post("/v1/chat/completions", {"model": "m", "messages": MESSAGES, "stream": True})
        stall = (FAULT_HEADER, "stall;after_chunks=1;seconds=none")  # until the client leaves
        stalled = client.post("/v1/chat/completions", {"model": "m", "messages": MESSAGES, "stream": True}, stall)
        client.auto_ack.update({doomed, stalled})
        client.pump(lambda: len(client.body[doomed]) > 1000 and bool(client.body[stalled]), 5)
        client.conn.reset_stream(doomed, h2.errors.ErrorCodes.CANCEL)
        client.flush()
        _wait_for(lambda: len(sim.requests) == 1)
        assert sim.requests[0].disconnected and sim.requests[0].status == 200
        client.conn.reset_stream(stalled, h2.errors.ErrorCodes.CANCEL)
        client.flush()
        _wait_for(lambda: len(sim.requests) == 2)
        assert all(s.disconnected for s in sim.requests)
        # The connection carries on.
        quick = client.post("/v1/chat/completions", {"model": "m", "messages": MESSAGES, "max_tokens": 2})
        client.pump(lambda: quick in client.ended, 5)
        client.close()
    assert json.loads(client.body[quick])["usage"]["completion_tokens"] == 2
    assert len({s.connection for s in sim.requests}) == 1
    assert not caplog.records


def test_oversized_request_body_gets_413(
    tls_sim: tuple[Simulator, ssl.SSLContext], monkeypatch: pytest.MonkeyPatch
) -> None:
    sim, ctx = tls_sim
    monkeypatch.setattr(firsttoken.sim._h2, "MAX_BODY", 100_000)
    with httpx2.Client(http2=True, verify=ctx) as http:
        response = http.post(sim.openai_base_url + "/embeddings", content=b"x" * 300_000)
        assert (response.http_version, response.status_code) == ("HTTP/2", 413)
        ok = http.post(sim.openai_base_url + "/embeddings", json={"model": "e", "input": "x"})
        assert ok.status_code == 200
    assert len(sim.requests) == 1


def test_close_with_streams_in_flight_frees_everything(capfd: pytest.CaptureFixture[str]) -> None:
    gc.collect()
    threads = len([t for t in threading.enumerate() if t.name == "firsttoken-sim"])
    fds = len(os.listdir("/proc/self/fd"))
    server_ctx, client_ctx = test_certificates()
    sim = Simulator(ssl_context=server_ctx, latency=LatencyModel.fixed(queue_ms=0, decode_tokens_per_s=20)).start()
    http = openai.DefaultHttpxClient(http2=True, verify=client_ctx)
    client = openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0, http_client=http)
    streams = [client.chat.completions.create(model="m", messages=MESSAGES, stream=True) for _ in range(3)]
    for stream in streams:
        next(iter(stream))
    started = time.perf_counter()
    sim.close()
    assert time.perf_counter() - started < 2
    for stream in streams:
        with pytest.raises(openai.APIConnectionError):
            for _ in stream:
                pass
    client.close()
    gc.collect()
    assert len([t for t in threading.enumerate() if t.name == "firsttoken-sim"]) == threads
    assert len(os.listdir("/proc/self/fd")) <= fds
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err


# -- options and the TLS helper ---------------------------------------------------------------------


def test_http1_still_served_over_tls(tls_sim: tuple[Simulator, ssl.SSLContext]) -> None:
    sim, ctx = tls_sim
    with httpx2.Client(verify=ctx) as http:  # no http2: ALPN offers only http/1.1
        response = http.get(sim.openai_base_url + "/models")
    assert (response.http_version, response.status_code) == ("HTTP/1.1", 200)
    assert sim.requests[0].http_version == "1.1"


def test_http2_disabled() -> None:
    server_ctx, client_ctx = test_certificates()
    with (
        Simulator(latency=QUICK, ssl_context=server_ctx, http2=False) as sim,
        httpx2.Client(http2=True, verify=client_ctx) as http,
    ):
        assert http.get(sim.openai_base_url + "/models").http_version == "HTTP/1.1"
    assert not Simulator(http2=True).http2  # no TLS, no ALPN: HTTP/1.1 only


def test_http2_required_without_h2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(firsttoken.sim._server, "h2_available", lambda: False)
    with pytest.raises(ImportError, match="'h2'"):
        Simulator(ssl_context=test_certificates().server, http2=True)
    assert not Simulator(ssl_context=test_certificates().server).http2


def test_certificates_helper() -> None:
    certs = test_certificates()
    server, client = certs
    assert (server, client) == (certs.server, certs.client)
    assert isinstance(server, ssl.SSLContext) and client.verify_mode == ssl.CERT_REQUIRED
    assert test_certificates().client is not client  # fresh contexts every time
    assert ca_pem().startswith(b"-----BEGIN CERTIFICATE-----")
    with Simulator(latency=QUICK, ssl_context=test_certificates("localhost").server) as sim:
        url = sim.openai_base_url.replace("127.0.0.1", "localhost")
        with httpx2.Client(verify=test_certificates().client) as http:
            assert http.get(url + "/models").status_code == 200


def test_certificates_without_trustme(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "trustme", None)
    firsttoken.sim.tls._authority.cache_clear()
    firsttoken.sim.tls._leaf.cache_clear()
    try:
        with pytest.raises(ImportError, match="trustme"):
            test_certificates()
    finally:
        firsttoken.sim.tls._authority.cache_clear()
        firsttoken.sim.tls._leaf.cache_clear()
