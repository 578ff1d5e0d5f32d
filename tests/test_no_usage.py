"""Streams that ask for no usage: their tokens go uncounted, and firsttoken says so once per process,
where the provider follows OpenAI's rule (usage only when asked): not for Mistral's API or Groq's, whose
streams carry usage unasked (``openai.USAGE_UNASKED``), through their own SDKs or on the wire."""

from __future__ import annotations

import asyncio
import warnings

import httpx
import openai
import pytest

import firsttoken
from firsttoken import semconv as sc
from firsttoken.config import FirstTokenWarning
from firsttoken.providers import openai as openai_hooks
from firsttoken.sim import Simulator

from .conftest import Telemetry

MESSAGES = [{"role": "user", "content": "hi"}]


def _said(record: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, FirstTokenWarning) and "usage" in str(w.message)]


def test_a_stream_without_usage_is_said_once(
    sim: Simulator, telemetry: Telemetry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(openai_hooks, "_warned_no_usage", False)
    client = openai.OpenAI(base_url=sim.openai_base_url, api_key="sk-test", max_retries=0)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in range(2):
            for _ in client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True):
                pass
        with client.chat.completions.stream(model="gpt-4o-mini", messages=MESSAGES) as stream:
            for _ in stream:
                pass
    said = _said(record)
    assert len(said) == 1, said
    assert 'stream_options={"include_usage": True}' in said[0] and "docs/semantics.md" in said[0]
    assert [w.filename for w in record if "usage" in str(w.message)] == [__file__]  # the app's line
    calls = telemetry.calls()
    assert len(calls) == 3
    assert all(sc.GEN_AI_USAGE_OUTPUT_TOKENS not in (c.attributes or {}) for c in calls)


def test_streams_that_ask_for_usage_and_responses_are_not_warned(
    sim: Simulator, telemetry: Telemetry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(openai_hooks, "_warned_no_usage", False)
    client = openai.OpenAI(base_url=sim.openai_base_url, api_key="sk-test", max_retries=0)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in client.chat.completions.create(
            model="gpt-4o-mini", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        ):
            pass
        for _ in client.responses.create(model="gpt-4o-mini", input="hi", stream=True):
            pass
        client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)  # not streamed: usage comes anyway
    assert _said(record) == []
    assert len(telemetry.calls()) == 3
    assert all(sc.GEN_AI_USAGE_OUTPUT_TOKENS in (c.attributes or {}) for c in telemetry.calls())


# -- providers that send usage unasked: no warning, the tokens counted -----------------------------------

groq = pytest.importorskip("groq", reason="groq is in the dev extra")
pytest.importorskip("mistralai", reason="mistralai is in the dev extra")
try:
    from mistralai import Mistral
except ImportError:  # mistralai 2 moved the client
    from mistralai.client import Mistral  # type: ignore[no-redef]


def _then_openai_is_warned(sim: Simulator, telemetry: Telemetry, record: list[warnings.WarningMessage]) -> None:
    """The same process's next unasked OpenAI stream, on the wire this time, is still warned about."""
    assert _said(record) == []
    body = {"model": "gpt-4o-mini", "messages": MESSAGES, "stream": True}
    with httpx.Client(timeout=10) as http, http.stream("POST", sim.url + "/v1/chat/completions", json=body) as r:
        for _ in r.iter_lines():
            pass
    assert len(_said(record)) == 1
    a = telemetry.calls()[-1].attributes or {}
    assert a[sc.GEN_AI_PROVIDER_NAME] == "openai" and sc.GEN_AI_USAGE_OUTPUT_TOKENS not in a


def test_mistral_streams_carry_usage_unasked_and_are_not_warned(
    sim: Simulator, telemetry: Telemetry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(openai_hooks, "_warned_no_usage", False)
    client = Mistral(api_key="test-key", server_url=sim.url)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in client.chat.stream(model="mistral-small-latest", messages=MESSAGES):
            pass

        async def stream_async() -> None:
            async with httpx.AsyncClient() as http:
                aclient = Mistral(api_key="test-key", server_url=sim.url, async_client=http)
                async for _ in await aclient.chat.stream_async(model="mistral-small-latest", messages=MESSAGES):
                    pass

        asyncio.run(stream_async())
        calls = [c.attributes or {} for c in telemetry.calls()]
        assert [a[sc.GEN_AI_PROVIDER_NAME] for a in calls] == ["mistral_ai"] * 2
        assert [a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] for a in calls] == [r.output_tokens for r in sim.requests]
        _then_openai_is_warned(sim, telemetry, record)


def test_groq_streams_carry_usage_unasked_and_are_not_warned(
    sim: Simulator, telemetry: Telemetry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(openai_hooks, "_warned_no_usage", False)
    model = "llama-3.3-70b-versatile"
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with groq.Groq(api_key="test-key", base_url=sim.url, max_retries=0) as client:
            for _ in client.chat.completions.create(model=model, messages=MESSAGES, stream=True):
                pass

        async def stream_async() -> None:
            async with groq.AsyncGroq(api_key="test-key", base_url=sim.url, max_retries=0) as aclient:
                async for _ in await aclient.chat.completions.create(model=model, messages=MESSAGES, stream=True):
                    pass

        asyncio.run(stream_async())
        calls = [c.attributes or {} for c in telemetry.calls()]
        assert [a[sc.GEN_AI_PROVIDER_NAME] for a in calls] == ["groq"] * 2
        assert [a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] for a in calls] == [r.output_tokens for r in sim.requests]
        _then_openai_is_warned(sim, telemetry, record)


def test_the_openai_sdk_to_mistrals_host_is_not_warned(sim: Simulator, monkeypatch: pytest.MonkeyPatch) -> None:
    """The provider is told by the host, whichever client sent the call."""
    monkeypatch.setattr(openai_hooks, "_warned_no_usage", False)
    t = Telemetry()
    hosts = {f"127.0.0.1:{sim.port}": "mistral_ai"}
    assert firsttoken.instrument(
        tracer_provider=t.tracer_provider, meter_provider=t.meter_provider, provider_hosts=hosts
    )
    served = len(sim.requests)
    try:
        client = openai.OpenAI(base_url=sim.openai_base_url, api_key="sk-test", max_retries=0)
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            for _ in client.chat.completions.create(model="mistral-small-latest", messages=MESSAGES, stream=True):
                pass
    finally:
        firsttoken.uninstrument()
    assert _said(record) == []
    a = t.call().attributes or {}
    assert a[sc.GEN_AI_PROVIDER_NAME] == "mistral_ai"
    # The simulator lists a request after its last byte, which the SDK may have read before that.
    assert a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == sim.wait_for_requests(served + 1)[-1].output_tokens
