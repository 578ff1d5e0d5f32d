"""Fixtures for the simulator's own tests: a fast exact simulator and real SDK clients pointed at it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import anthropic
import openai
import pytest

from firsttoken.sim import CacheConfig, LatencyModel, Simulator

# Exact and quick: these tests check wire formats, not durations.
QUICK = LatencyModel.fixed(queue_ms=1, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=5000, output_tokens=12)
SMALL_CACHE = CacheConfig(min_tokens=256, block_tokens=64)


@pytest.fixture
def sim() -> Iterator[Simulator]:
    with Simulator(latency=QUICK, seed=7, cache=SMALL_CACHE) as s:
        yield s


@pytest.fixture
def oai(sim: Simulator) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=sim.openai_base_url, api_key="sk-test", max_retries=0) as client:
        yield client


@pytest.fixture
async def aoai(sim: Simulator) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(base_url=sim.openai_base_url, api_key="sk-test", max_retries=0) as client:
        yield client


@pytest.fixture
def ant(sim: Simulator) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=sim.anthropic_base_url, api_key="sk-ant-test", max_retries=0) as client:
        yield client


@pytest.fixture
async def aant(sim: Simulator) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with anthropic.AsyncAnthropic(base_url=sim.anthropic_base_url, api_key="sk-ant-test", max_retries=0) as c:
        yield c
