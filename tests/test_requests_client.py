"""requests: LLM calls sent with plain ``requests`` are measured like httpx ones, over real sockets
against the simulator, and the app reads the same bytes with and without firsttoken.

Apps call the OpenAI, Anthropic and Gemini APIs with ``requests.post(..., stream=True)`` and
``iter_lines()``; google-auth's ``AuthorizedSession`` (google-genai on Vertex with mTLS) is a
``requests.Session``. Each wire format is sent through httpx and through requests with the same
request, and the two call spans must say the same.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest

from firsttoken import semconv as sc
from firsttoken.sim import FAULT_HEADER, LatencyModel, Simulator

from .conftest import Telemetry

requests = pytest.importorskip("requests", reason="requests is in the dev extra")

MODEL = LatencyModel(queue_ms=30, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=800, jitter=0, output_tokens=24)


@pytest.fixture
def sim() -> Any:
    with Simulator(latency=MODEL, seed=3) as s:
        yield s


def _requests(stream: bool) -> list[tuple[str, str, dict[str, Any]]]:
    messages = [{"role": "user", "content": "Say hello"}]
    openai: dict[str, Any] = {"model": "gpt-4o-mini", "messages": messages}
    anthropic: dict[str, Any] = {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": messages}
    if stream:
        openai |= {"stream": True, "stream_options": {"include_usage": True}}
        anthropic |= {"stream": True}
    method = "streamGenerateContent?alt=sse" if stream else "generateContent"
    gemini = {"contents": [{"role": "user", "parts": [{"text": "Say hello"}]}]}
    return [
        ("openai", "/v1/chat/completions", openai),
        ("anthropic", "/v1/messages", anthropic),
        ("gemini", f"/v1beta/models/gemini-2.0-flash:{method}", gemini),
    ]


CASES = [(fmt, path, body, stream) for stream in (False, True) for fmt, path, body in _requests(stream)]
IDS = [f"{fmt}-{'stream' if stream else 'whole'}" for fmt, _, _, stream in CASES]

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


def _send_httpx(url: str, body: dict[str, Any], stream: bool) -> None:
    with httpx.Client() as client:
        if not stream:
            client.post(url, json=body).raise_for_status()
            return
        with client.stream("POST", url, json=body) as response:
            for _ in response.iter_lines():
                pass


def _send_requests(url: str, body: dict[str, Any], stream: bool) -> None:
    if not stream:
        response = requests.post(url, json=body, timeout=10)
        response.raise_for_status()
        assert response.json()
        return
    with requests.post(url, json=body, stream=True, timeout=10) as response:
        for _ in response.iter_lines():
            pass


@pytest.mark.parametrize(("fmt", "path", "body", "stream"), CASES, ids=IDS)
def test_each_wire_format_says_the_same_through_httpx_and_requests(
    telemetry: Telemetry, sim: Simulator, fmt: str, path: str, body: dict[str, Any], stream: bool
) -> None:
    _send_httpx(sim.url + path, body, stream)
    _send_requests(sim.url + path, body, stream)
    by_httpx, by_requests = (dict(s.attributes or {}) for s in telemetry.calls())
    assert {k: by_requests.get(k) for k in SAME} == {k: by_httpx.get(k) for k in SAME}
    assert by_requests[sc.FT_END_REASON] == sc.END_COMPLETED
    assert by_requests[sc.GEN_AI_USAGE_OUTPUT_TOKENS] > 0
    assert isinstance(by_requests.get(sc.GEN_AI_RESPONSE_ID), str)
    assert by_requests[sc.FT_REQUEST_BODY_SIZE] > 0 and by_requests[sc.FT_RESPONSE_BODY_SIZE] > 0
    if stream:  # TTFT from the bytes the app consumed, after the headers
        assert 0.02 < by_requests[sc.FT_TIME_TO_FIRST_TOKEN] < 5.0
        assert by_requests[sc.FT_TIME_TO_FIRST_TOKEN] >= by_requests[sc.FT_TIME_TO_RESPONSE_HEADERS]
        assert by_requests[sc.FT_CHUNK_COUNT] > 1
    else:
        assert sc.FT_TIME_TO_FIRST_TOKEN not in by_requests
    # The wire phases, from urllib3's connection: a new connection, the upload, the server's wait.
    phases = {k.rpartition(".")[2] for k in by_requests if k.startswith("firsttoken.phase_duration.")}
    assert {sc.PHASE_CONNECT, sc.PHASE_UPLOAD, sc.PHASE_SERVER_WAIT} <= phases
    assert by_requests[sc.FT_CONNECTION_REUSED] is False
    assert by_requests[sc.SERVER_ADDRESS] == "127.0.0.1"


def test_a_session_reuses_its_connection_and_the_phases_tile(telemetry: Telemetry, sim: Simulator) -> None:
    _fmt, path, body = _requests(stream=True)[0]
    with requests.Session() as session:
        for _ in range(2):
            with session.post(sim.url + path, json=body, stream=True, timeout=10) as response:
                for _ in response.iter_lines():
                    pass
    first, second = telemetry.calls()
    assert first.attributes[sc.FT_CONNECTION_REUSED] is False  # type: ignore[index]
    assert second.attributes[sc.FT_CONNECTION_REUSED] is True  # type: ignore[index]
    assert sc.PHASE_CONNECT not in {c.attributes[sc.FT_PHASE] for c in telemetry.children(second)}  # type: ignore[index]
    for call in (first, second):
        kids = telemetry.children(call)
        assert kids[0].start_time == call.start_time and kids[-1].end_time == call.end_time


def _read_all(url: str, body: dict[str, Any], how: str) -> list[Any]:
    """What the app reads, by each of requests' ways of reading a body."""
    response = requests.post(url, json=body, stream=True, timeout=10)
    with response:
        if how == "iter_lines":
            return list(response.iter_lines())
        if how == "iter_lines-unicode":
            return list(response.iter_lines(decode_unicode=True))
        if how == "iter_content":
            return list(response.iter_content(chunk_size=7))
        if how == "content":
            return [response.content, response.text]
        return [response.json()]


@pytest.mark.parametrize("how", ["iter_lines", "iter_lines-unicode", "iter_content", "content", "json"])
def test_the_app_reads_the_same_bytes_with_and_without_firsttoken(telemetry: Telemetry, how: str) -> None:
    import firsttoken

    _fmt, path, body = _requests(stream=how != "json")[1]
    fixed = LatencyModel(queue_ms=5, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=2000, jitter=0, output_tokens=24)
    with Simulator(latency=fixed, seed=7) as s:
        measured = _read_all(s.url + path, body, how)
    (call,) = telemetry.calls()
    if how == "content":  # the body's bytes on the wire: all of it, counted once
        assert call.attributes[sc.FT_RESPONSE_BODY_SIZE] == len(measured[0])  # type: ignore[index]
    firsttoken.uninstrument()
    with Simulator(latency=fixed, seed=7) as s:
        plain = _read_all(s.url + path, body, how)
    assert len(telemetry.calls()) == 1  # not measured: the reference read
    strip = _ids_out if how != "json" else (lambda v: v)
    assert strip(measured) == strip(plain) and measured


def _ids_out(read: list[Any]) -> list[Any]:
    """The simulator names each message with a fresh id: the one difference two runs may have."""
    import re

    def clean(v: Any) -> Any:
        if isinstance(v, bytes):
            return re.sub(rb'"msg_[A-Za-z0-9]+"', b'"msg"', v)
        if isinstance(v, str):
            return re.sub(r'"msg_[A-Za-z0-9]+"', '"msg"', v)
        return v

    return [clean(v) for v in read]


def test_an_early_close_ends_the_call_as_closed(telemetry: Telemetry, sim: Simulator) -> None:
    _fmt, path, body = _requests(stream=True)[0]
    with requests.post(sim.url + path, json=body, stream=True, timeout=10) as response:
        lines = response.iter_lines()
        next(lines)
        next(lines)
        assert telemetry.calls() == []
    a = dict(telemetry.call().attributes or {})  # at the close, not when the response is collected
    assert a[sc.FT_END_REASON] == sc.END_CLOSED


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_an_error_status_is_an_error_at_once(telemetry: Telemetry, sim: Simulator, stream: bool) -> None:
    _fmt, path, body = _requests(stream)[1]
    response = requests.post(
        sim.url + path, json=body, stream=stream, headers={FAULT_HEADER: "rate_limit;retry_after=0"}, timeout=10
    )
    assert response.status_code == 429
    span = telemetry.call()  # while the app holds the response
    a = dict(span.attributes or {})
    assert a[sc.FT_END_REASON] == sc.END_ERROR
    assert a[sc.ERROR_TYPE] == "RateLimitError"  # the vocabulary of every path
    assert a[sc.HTTP_RESPONSE_STATUS_CODE] == 429
    assert span.status.status_code.name == "ERROR"
    response.close()


@pytest.mark.parametrize(("fmt", "path", "body"), _requests(stream=True)[:2], ids=["openai", "anthropic"])
def test_a_stream_dropped_after_its_headers_is_an_error_at_that_moment(
    telemetry: Telemetry, sim: Simulator, fmt: str, path: str, body: dict[str, Any]
) -> None:
    response = requests.post(
        sim.url + path, json=body, stream=True, headers={FAULT_HEADER: "drop_after;chunks=3"}, timeout=10
    )
    with pytest.raises(requests.exceptions.ChunkedEncodingError):
        for _ in response.iter_lines():
            pass
    span = telemetry.call()  # the app still holds the response: the span does not wait for it
    a = dict(span.attributes or {})
    assert a[sc.FT_END_REASON] == sc.END_ERROR
    assert a[sc.ERROR_TYPE] == "ChunkedEncodingError"  # what the app caught
    assert span.status.status_code.name == "ERROR"
    assert [p.attributes.get(sc.ERROR_TYPE) for p in telemetry.metrics()["gen_ai.client.operation.duration"]] == [
        "ChunkedEncodingError"
    ]
    response.close()


def test_an_error_event_in_a_stream_is_an_error(telemetry: Telemetry, sim: Simulator) -> None:
    _fmt, path, body = _requests(stream=True)[1]
    with requests.post(
        sim.url + path, json=body, stream=True, headers={FAULT_HEADER: "error_event;after_chunks=3"}, timeout=10
    ) as response:
        for _ in response.iter_lines():
            pass
    a = dict(telemetry.call().attributes or {})
    assert a[sc.FT_END_REASON] == sc.END_ERROR
    assert a[sc.ERROR_TYPE] == "APIError"


def test_a_read_timeout_is_an_error(telemetry: Telemetry, sim: Simulator) -> None:
    _fmt, path, body = _requests(stream=True)[0]
    stall = {FAULT_HEADER: "stall;after_chunks=2;seconds=3"}
    response = requests.post(sim.url + path, json=body, stream=True, headers=stall, timeout=(5, 0.3))
    with pytest.raises(requests.exceptions.ConnectionError) as raised:  # requests' class for a read timeout here
        for _ in response.iter_lines():
            pass
    a = dict(telemetry.call().attributes or {})
    assert a[sc.FT_END_REASON] == sc.END_ERROR
    assert a[sc.ERROR_TYPE] == type(raised.value).__qualname__
    response.close()


def test_a_connection_refused_is_an_error(telemetry: Telemetry, sim: Simulator) -> None:
    _fmt, path, body = _requests(stream=False)[0]
    url = sim.url.rsplit(":", 1)[0] + ":9" + path  # the discard port: nothing listens
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.post(url, json=body, timeout=5)
    a = dict(telemetry.call().attributes or {})
    assert a[sc.FT_END_REASON] == sc.END_ERROR
    assert a[sc.ERROR_TYPE] == "ConnectionError"


def test_other_requests_pass_straight_through(telemetry: Telemetry, sim: Simulator) -> None:
    _fmt, path, body = _requests(stream=False)[0]
    assert requests.get(sim.url + "/v1/models", timeout=10).status_code == 200
    assert requests.post(sim.url + "/v1/models", json=body, timeout=10).status_code in (404, 405)
    assert requests.post(sim.url + path, json=body, timeout=10).status_code == 200
    (call,) = telemetry.calls()  # the LLM call only
    assert call.attributes[sc.GEN_AI_REQUEST_MODEL] == "gpt-4o-mini"  # type: ignore[index]


def test_a_failure_of_firsttoken_before_the_send_never_reaches_the_app(
    telemetry: Telemetry, sim: Simulator, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The client seam's ``sending`` hook failing (a bug of firsttoken's) is logged, and the request
    still goes and is answered as without firsttoken (it raised into the app)."""
    from firsttoken._internal import ENV_VAR
    from firsttoken.transport_requests import RequestsAdapter

    def broken(*_: Any) -> None:
        raise KeyError("a request the hook did not expect")

    monkeypatch.delenv(ENV_VAR)  # as in production: logged, not raised
    monkeypatch.setattr(RequestsAdapter, "sending", broken)
    _fmt, path, body = _requests(stream=False)[0]
    with caplog.at_level(logging.DEBUG, logger="firsttoken"):
        response = requests.post(sim.url + path, json=body, timeout=10)
    assert response.status_code == 200 and response.json()["choices"]
    assert [r.getMessage() for r in caplog.records if r.exc_info] == ["firsttoken: before a requests request"]
    assert telemetry.call().attributes[sc.FT_END_REASON] == sc.END_COMPLETED  # type: ignore[index]


def test_wire_phases_over_tls(telemetry: Telemetry, tmp_path: Any) -> None:
    """urllib3's connection gives DNS, then TCP and TLS as one ``connect``, and the TLS facts; a
    second call on the session reuses the connection; the phases tile each call."""
    import ssl

    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(server)
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    _fmt, path, body = _requests(stream=True)[0]
    with Simulator(latency=MODEL, seed=3, ssl_context=server) as tls_sim, requests.Session() as session:
        for _ in range(2):  # a host name: a DNS lookup
            url = f"https://localhost:{tls_sim.port}{path}"
            with session.post(url, json=body, stream=True, verify=str(ca_file), timeout=10) as response:
                for _ in response.iter_lines():
                    pass
    first, second = telemetry.calls()
    a, b = dict(first.attributes or {}), dict(second.attributes or {})
    phases = [c.attributes[sc.FT_PHASE] for c in telemetry.children(first)]  # type: ignore[index]
    assert phases[:4] == [sc.PHASE_PREPARE, sc.PHASE_POOL_WAIT, sc.PHASE_DNS, sc.PHASE_CONNECT]
    assert phases.index(sc.PHASE_CONNECT) < phases.index(sc.PHASE_UPLOAD) < phases.index(sc.PHASE_SERVER_WAIT)
    assert a[sc.TLS_PROTOCOL_NAME] == "tls" and a[sc.TLS_PROTOCOL_VERSION] in ("1.2", "1.3")
    assert a[sc.FT_CONNECTION_REUSED] is False and b[sc.FT_CONNECTION_REUSED] is True
    assert a[sc.FT_END_REASON] == b[sc.FT_END_REASON] == sc.END_COMPLETED
    for call in (first, second):
        kids = telemetry.children(call)
        assert kids[0].start_time == call.start_time and kids[-1].end_time == call.end_time


def test_google_auth_authorized_session_is_measured(telemetry: Telemetry, sim: Simulator) -> None:
    """google-auth's ``AuthorizedSession`` (google-genai's sync client on Vertex, mTLS included) is a
    ``requests.Session``: its Gemini calls on a Vertex path are measured."""
    credentials = pytest.importorskip("google.auth.credentials")
    transport = pytest.importorskip("google.auth.transport.requests")
    model = "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.0-flash"
    path = f"{model}:streamGenerateContent?alt=sse"
    body = _requests(stream=True)[2][2]
    session = transport.AuthorizedSession(credentials.AnonymousCredentials())
    with session, session.post(sim.url + path, json=body, stream=True, timeout=10) as response:
        assert response.status_code == 200
        for _ in response.iter_lines():
            pass
    a = dict(telemetry.call().attributes or {})
    assert a[sc.GEN_AI_REQUEST_MODEL] == "gemini-2.0-flash"
    assert a[sc.FT_END_REASON] == sc.END_COMPLETED
    assert a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 24
    assert a[sc.FT_TIME_TO_FIRST_TOKEN] > 0.02


def test_calls_from_several_threads_are_each_their_own(telemetry: Telemetry, sim: Simulator) -> None:
    """requests is used from worker threads: each thread's call gets its own span, connection and TTFT."""
    from concurrent.futures import ThreadPoolExecutor

    _fmt, path, body = _requests(stream=True)[1]

    def one(i: int) -> int:
        with requests.post(sim.url + path, json={**body, "model": f"claude-{i}"}, stream=True, timeout=10) as r:
            return sum(1 for _ in r.iter_lines())

    with ThreadPoolExecutor(4) as pool:
        assert all(n > 0 for n in pool.map(one, range(8)))
    spans = [dict(s.attributes or {}) for s in telemetry.calls()]
    assert sorted(a[sc.GEN_AI_REQUEST_MODEL] for a in spans) == sorted(f"claude-{i}" for i in range(8))
    for a in spans:
        assert a[sc.FT_END_REASON] == sc.END_COMPLETED
        assert a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 24
        assert a[sc.FT_CONNECTION_REUSED] is False  # requests.post: a new session, a new connection
        assert a[sc.FT_TIME_TO_FIRST_TOKEN] >= a[sc.FT_TIME_TO_RESPONSE_HEADERS]
