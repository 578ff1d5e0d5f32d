"""One call lifecycle on every path: a call read on the wire (httpx, aiohttp) is opened exactly as an
SDK's (content capture, chunk gaps, prompt-prefix hash, client reuse), against the simulator.

The same OpenAI and Anthropic requests go through their SDK, plain httpx and aiohttp; what the call
span and metrics say about capture, chunk gaps, the prefix and the client must be the same.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import firsttoken
from firsttoken import semconv as sc
from firsttoken.sim import Simulator

from .conftest import Telemetry

aiohttp = pytest.importorskip("aiohttp", reason="aiohttp is in the dev extra")

SYSTEM = "You are terse. Answer in one line."
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}]
OPENAI = {
    "model": "gpt-4o-mini",
    "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Say hello"}],
    "tools": TOOLS,
    "stream": True,
    "stream_options": {"include_usage": True},
}
ANTHROPIC = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 64,
    "system": SYSTEM,
    "messages": [{"role": "user", "content": "Say hello"}],
    "stream": True,
}
GEMINI = {
    "systemInstruction": {"parts": [{"text": SYSTEM}]},
    "contents": [{"role": "user", "parts": [{"text": "Say hello"}]}],
}
COHERE = {
    "model": "command-r-plus",
    "messages": [{"role": "user", "content": "Say hello"}],
    "stream": True,
    "tools": TOOLS,
}
PATHS = {
    "openai": "/v1/chat/completions",
    "anthropic": "/v1/messages",
    "gemini": "/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse",
    "cohere": "/v2/chat",
}
BODIES = {"openai": OPENAI, "anthropic": ANTHROPIC, "gemini": GEMINI, "cohere": COHERE}


@pytest.fixture
def captured() -> Iterator[Telemetry]:
    t = Telemetry()
    assert firsttoken.instrument(
        tracer_provider=t.tracer_provider, meter_provider=t.meter_provider, capture_content=True, chunk_metrics=True
    )
    try:
        yield t
    finally:
        firsttoken.uninstrument()


def _sdk(fmt: str, sim: Simulator, times: int) -> None:
    if fmt == "openai":
        import openai

        client: Any = openai.OpenAI(api_key="k", base_url=sim.openai_base_url)
        body = {k: v for k, v in OPENAI.items() if k != "stream"}
        for _ in range(times):
            for _ in client.chat.completions.create(stream=True, **body):
                pass
    else:
        import anthropic

        client = anthropic.Anthropic(api_key="k", base_url=sim.url)
        body = {k: v for k, v in ANTHROPIC.items() if k != "stream"}
        for _ in range(times):
            for _ in client.messages.create(stream=True, **body):
                pass


def _httpx(fmt: str, sim: Simulator, times: int) -> None:
    with httpx.Client() as client:
        for _ in range(times):
            with client.stream("POST", sim.url + PATHS[fmt], json=BODIES[fmt]) as response:
                for _ in response.iter_lines():
                    pass


def _aiohttp(fmt: str, sim: Simulator, times: int) -> None:
    async def run() -> None:
        async with aiohttp.ClientSession() as session:
            for _ in range(times):
                async with session.post(sim.url + PATHS[fmt], json=BODIES[fmt]) as response:
                    async for _ in response.content:
                        pass

    asyncio.run(run())


CLIENTS = {"sdk": _sdk, "httpx": _httpx, "aiohttp": _aiohttp}


CASES = [(fmt, client) for fmt in PATHS for client in CLIENTS if client != "sdk" or fmt in ("openai", "anthropic")]


@pytest.mark.parametrize(("fmt", "client"), CASES, ids=[f"{f}-{c}" for f, c in CASES])
def test_capture_chunk_gaps_prefix_and_client_reuse_on_every_path(
    captured: Telemetry, sim: Simulator, fmt: str, client: str
) -> None:
    CLIENTS[client](fmt, sim, 2)
    first, second = (dict(s.attributes or {}) for s in captured.calls())
    for a in (first, second):
        assert a[sc.FT_END_REASON] == sc.END_COMPLETED
        assert "Say hello" in str(a[sc.GEN_AI_INPUT_MESSAGES])  # content capture
        assert isinstance(a.get(sc.GEN_AI_OUTPUT_MESSAGES), str) and a[sc.GEN_AI_OUTPUT_MESSAGES]
        assert isinstance(a.get(sc.FT_PREFIX_HASH), str)  # the system prompt and tools, hashed
    assert first[sc.FT_PREFIX_HASH] == second[sc.FT_PREFIX_HASH]
    assert first.get(sc.FT_SDK_CLIENT_NEW) is True and sc.FT_SDK_CLIENT_NEW not in second  # one client, reused
    gaps = captured.metrics().get(sc.M_TIME_PER_OUTPUT_CHUNK, [])
    assert sum(p.count for p in gaps) > 4  # chunk gaps, opt-in
