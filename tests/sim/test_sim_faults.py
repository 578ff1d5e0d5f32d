"""Fault modes: what the real SDKs see when the simulator misbehaves on purpose."""

from __future__ import annotations

import itertools
import time

import anthropic
import httpx2
import openai
import pytest

from firsttoken.sim import FAULT_HEADER, Fault, LatencyModel, Simulator

from ..jitter import SchedulerProbe

MESSAGES = [{"role": "user", "content": "Go."}]
MODEL = "claude-sim-1"


@pytest.fixture
def sim() -> Simulator:
    model = LatencyModel.fixed(queue_ms=1, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=500, output_tokens=10)
    with Simulator(latency=model, seed=3) as s:
        yield s


def _oai(sim: Simulator, retries: int = 0, timeout: float = 10) -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=retries, timeout=timeout)


def _ant(sim: Simulator, retries: int = 0) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=sim.anthropic_base_url, api_key="k", max_retries=retries)


def test_rate_limit_is_retried_after_the_advertised_wait(sim: Simulator) -> None:
    sim.inject(Fault.rate_limit(retry_after=0.2))
    start = time.perf_counter()
    completion = _oai(sim, retries=2).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert time.perf_counter() - start >= 0.2
    assert completion.choices[0].message.content
    first, second = sim.requests
    assert (first.status, first.fault) == (429, Fault.rate_limit(retry_after=0.2))
    assert (second.status, second.fault) == (200, None)


def test_rate_limit_error_and_headers(sim: Simulator) -> None:
    sim.inject(Fault.rate_limit(retry_after=0.05), times=2)
    with pytest.raises(openai.RateLimitError) as caught:
        _oai(sim).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    headers = caught.value.response.headers
    assert (headers["retry-after"], headers["retry-after-ms"]) == ("0.05", "50")
    assert caught.value.code == "rate_limit_exceeded"
    with pytest.raises(anthropic.RateLimitError) as ant_caught:
        _ant(sim).messages.create(model=MODEL, max_tokens=8, messages=MESSAGES)
    assert ant_caught.value.body == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": ant_caught.value.body["error"]["message"]},
    }
    _oai(sim).chat.completions.create(model="gpt-4o", messages=MESSAGES)  # used up


def test_server_errors_and_overloaded(sim: Simulator) -> None:
    sim.inject(Fault.server_error())
    with pytest.raises(openai.InternalServerError):
        _oai(sim).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    sim.inject(Fault.server_error(status=503))
    with pytest.raises(anthropic.InternalServerError) as caught:
        _ant(sim).messages.create(model=MODEL, max_tokens=8, messages=MESSAGES)
    assert caught.value.status_code == 503
    sim.inject(Fault.overloaded())
    with pytest.raises(anthropic.OverloadedError):
        _ant(sim).messages.create(model=MODEL, max_tokens=8, messages=MESSAGES)
    sim.inject(Fault.server_error(), times=1)
    # The SDK retries a 500 and succeeds.
    assert _ant(sim, retries=1).messages.create(model=MODEL, max_tokens=8, messages=MESSAGES).content


def test_drop_after_chunks(sim: Simulator) -> None:
    sim.inject(Fault.drop_after(chunks=3))
    received = 0
    with pytest.raises(openai.APIConnectionError):
        for _ in _oai(sim).chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True):
            received += 1
    assert received == 3
    assert sim.requests[-1].disconnected and sim.requests[-1].fault == Fault.drop_after(chunks=3)
    sim.inject(Fault.drop_after(chunks=4))
    # anthropic 2.12 does not wrap transport errors raised while a stream is read: a live server
    # dropping the connection surfaces as httpx2's own exception too.
    with pytest.raises(httpx2.RemoteProtocolError):
        for _ in _ant(sim).messages.create(model=MODEL, max_tokens=8, messages=MESSAGES, stream=True):
            pass
    sim.inject(Fault.drop_after(chunks=0))
    with pytest.raises(openai.APIConnectionError):
        _oai(sim).chat.completions.create(model="gpt-4o", messages=MESSAGES)


def test_stall_for_a_while(sim: Simulator) -> None:
    sim.inject(Fault.stall(after_chunks=2, seconds=0.3))
    arrivals = []
    with SchedulerProbe() as probe:
        start = time.perf_counter()
        for _ in _oai(sim).chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True):
            arrivals.append(time.perf_counter() - start)
    assert len(arrivals) == 10 + 2
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    # The stall is the one long gap, as long as asked. A gap is read between two arrivals, so a late
    # read of the chunk before the stall shortens it by that lateness, and a late send or read of the
    # chunk after lengthens it: 300 ms, less one late wake-up measured meanwhile, to 400 ms plus two.
    assert max(gaps) == gaps[1]
    assert 0.3 - probe.allow(0, wakeups=1) <= gaps[1] < 0.3 + probe.allow(0.1), (gaps[1], probe.worst)


def test_stall_until_the_client_gives_up(sim: Simulator) -> None:
    sim.inject(Fault.stall(after_chunks=1, seconds=None))
    with pytest.raises(openai.APITimeoutError):
        for _ in _oai(sim, timeout=0.3).chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True):
            pass
    deadline = time.monotonic() + 5
    while not sim.requests and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sim.requests[-1].disconnected


def test_error_events_mid_stream(sim: Simulator) -> None:
    sim.inject(Fault.error_event(after_chunks=2))
    with pytest.raises(openai.APIError) as caught:
        for _ in _oai(sim).chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True):
            pass
    assert caught.value.body["type"] == "server_error"
    sim.inject(Fault.error_event(after_chunks=4))
    with (
        pytest.raises(anthropic.APIStatusError) as ant_caught,
        _ant(sim).messages.stream(model=MODEL, max_tokens=8, messages=MESSAGES) as stream,
    ):
        stream.get_final_message()
    assert "overloaded_error" in str(ant_caught.value)
    sim.inject(Fault.error_event(after_chunks=3))
    events = list(_oai(sim).responses.create(model="gpt-4o", input="x", stream=True))
    assert [e.type for e in events][-1] == "error"


def test_fault_header_and_filters(sim: Simulator) -> None:
    client = _oai(sim)
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(
            model="gpt-4o", messages=MESSAGES, extra_headers={FAULT_HEADER: "rate_limit;retry_after=0.05"}
        )
    with pytest.raises(openai.APIConnectionError):
        for _ in client.chat.completions.create(
            model="gpt-4o", messages=MESSAGES, stream=True, extra_headers={FAULT_HEADER: "drop_after;chunks=2"}
        ):
            pass
    with pytest.raises(openai.BadRequestError, match="unknown fault"):
        client.chat.completions.create(model="gpt-4o", messages=MESSAGES, extra_headers={FAULT_HEADER: "meteor"})
    sim.inject(Fault.server_error(), path="/embeddings", model="e1", times=None)
    client.chat.completions.create(model="e1", messages=MESSAGES)
    client.embeddings.create(model="e2", input="x")
    for _ in range(2):
        with pytest.raises(openai.InternalServerError):
            client.embeddings.create(model="e1", input="x")
    sim.clear()
    client.embeddings.create(model="e1", input="x")
    assert len(sim.requests) == 1


def test_fault_parse_and_validation() -> None:
    assert Fault.parse("stall;after_chunks=2;seconds=none") == Fault.stall(after_chunks=2, seconds=None)
    assert Fault.parse(" server_error ; status=502") == Fault.server_error(status=502)
    for bad in ("stall;after_chunks=x", "rate_limit;status=1", "drop_after;chunks=-1", "server_error;status=404"):
        with pytest.raises(ValueError):
            Fault.parse(bad)
    with pytest.raises(ValueError, match="times"):
        Simulator().inject(Fault.server_error(), times=0)


def test_raw_fault_header_on_anthropic_path(sim: Simulator) -> None:
    response = httpx2.post(
        sim.url + "/v1/messages",
        json={"model": MODEL, "max_tokens": 8, "messages": MESSAGES},
        headers={FAULT_HEADER: "overloaded", "anthropic-version": "2023-06-01"},
    )
    assert response.status_code == 529
    assert response.json()["error"]["type"] == "overloaded_error"
