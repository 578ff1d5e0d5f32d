"""The latency model: validation, randomness, and what a real client observes over loopback.

Every delay is asserted to be at least what was configured (the server cannot be early) and less
than configured + 100 ms + the scheduler lateness measured during the same test (tests/jitter.py),
so a busy machine widens a bound only by the noise it actually had.
"""

from __future__ import annotations

import itertools
import random
import statistics
import time

import openai
import pytest

from firsttoken.sim import CacheConfig, LatencyModel, Simulator
from firsttoken.sim._latency import Schedule

from ..jitter import SchedulerProbe

SLACK = 0.100  # s: scheduling noise allowed on top of a configured delay
PROMPT = "Summarize the plot of a long novel in a few words. " * 20


def _client(sim: Simulator) -> openai.OpenAI:
    client = openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0)
    client.chat.completions.create(model="warmup", messages=[{"role": "user", "content": "hi"}])  # open the connection
    return client


# -- validation -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"queue_ms": -1}, "queue_ms must be >= 0"),
        ({"prefill_ms_per_1k_tokens": -0.5}, "prefill_ms_per_1k_tokens must be >= 0"),
        ({"decode_tokens_per_s": 0}, "decode_tokens_per_s must be > 0"),
        ({"jitter": float("nan")}, "jitter must be finite"),
        ({"jitter": True}, "jitter must be a number"),
        ({"tail_probability": 1.5}, "tail_probability must be <= 1"),
        ({"tail_multiplier": 0.5}, "tail_multiplier must be >= 1"),
        ({"output_tokens": 2.5}, "output_tokens must be an integer"),
        ({"chunk_tokens": 0}, "chunk_tokens must be >= 1"),
        ({"reasoning_tokens": -1}, "reasoning_tokens must be >= 0"),
    ],
)
def test_latency_model_validation(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LatencyModel(**kwargs)


def test_cache_config_validation() -> None:
    for bad in ({"min_tokens": 0}, {"block_tokens": -1}, {"ttl_s": 0}):
        with pytest.raises(ValueError, match="CacheConfig"):
            CacheConfig(**bad)


def test_simulator_rejects_non_models() -> None:
    with pytest.raises(TypeError, match="LatencyModel"):
        Simulator(models={"x": {"queue_ms": 1}})


# -- randomness -------------------------------------------------------------------------------------


def _deadlines(model: LatencyModel, seed: int) -> list[float]:
    schedule = Schedule(model, random.Random(seed), 0.0, 1000)
    return [schedule.headers_at, schedule.prefill_done_at, *(schedule.next_token() for _ in range(20))]


def test_fixed_model_is_exact() -> None:
    model = LatencyModel.fixed(queue_ms=50, prefill_ms_per_1k_tokens=120, decode_tokens_per_s=50)
    got = _deadlines(model, 1)
    assert got[:3] == pytest.approx([0.050, 0.170, 0.190], abs=1e-12)
    assert [b - a for a, b in itertools.pairwise(got[2:])] == pytest.approx([0.020] * 19, abs=1e-12)
    assert got == _deadlines(model, 2), "no randomness at all"


def test_jitter_is_seeded_and_has_a_long_tail() -> None:
    model = LatencyModel(jitter=0.2, tail_probability=0.05, tail_multiplier=10)
    assert _deadlines(model, 3) == _deadlines(model, 3)
    assert _deadlines(model, 3) != _deadlines(model, 4)
    rng = random.Random(0)
    factors = sorted(model.noise(rng) for _ in range(4000))
    assert 0.9 < statistics.median(factors) < 1.1
    assert factors[int(0.99 * len(factors))] > 5, "p99 is in the tail"


def test_seed_makes_answers_reproducible() -> None:
    texts = []
    for _ in range(2):
        with Simulator(latency=LatencyModel.fixed(queue_ms=0, decode_tokens_per_s=5000), seed=42) as sim:
            c = openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0)
            texts.append(
                [c.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}]).id for _ in range(3)]
            )
            c.close()
    assert texts[0] == texts[1]


# -- observed timing ---------------------------------------------------------------------------------


def test_stream_timing_queue_prefill_decode() -> None:
    with Simulator(latency=LatencyModel.fixed(queue_ms=0, output_tokens=1), seed=0) as probe:
        c = openai.OpenAI(base_url=probe.openai_base_url, api_key="k", max_retries=0)
        usage = c.chat.completions.create(model="m", messages=[{"role": "user", "content": PROMPT}]).usage
        c.close()
    assert usage is not None
    # queue 50 ms, prefill 120 ms for this prompt, 20 ms per token, 10 tokens.
    model = LatencyModel.fixed(
        queue_ms=50, prefill_ms_per_1k_tokens=120_000 / usage.prompt_tokens, decode_tokens_per_s=50, output_tokens=10
    )
    with Simulator(latency=model, seed=0) as sim, SchedulerProbe() as probe:
        c = _client(sim)
        start = time.perf_counter()
        stream = c.chat.completions.create(model="m", messages=[{"role": "user", "content": PROMPT}], stream=True)
        headers = time.perf_counter() - start
        arrivals = [time.perf_counter() - start for ch in stream if ch.choices and ch.choices[0].delta.content]
        start = time.perf_counter()
        c.chat.completions.create(model="m", messages=[{"role": "user", "content": PROMPT}])
        whole = time.perf_counter() - start
        c.close()
    slack = probe.allow(SLACK)
    assert 0.050 <= headers < 0.050 + slack, "headers come after the queue, before prefill"
    assert len(arrivals) == 10
    assert 0.190 <= arrivals[0] < 0.190 + slack, "first token: queue + prefill + one decode step"
    assert 0.370 <= arrivals[-1] < 0.370 + slack
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    # The mean gap is (last - first) / 9: a late first or last arrival moves it by a ninth of that.
    assert statistics.mean(gaps) == pytest.approx(0.020, abs=0.005 + probe.allow(0) / 9)
    assert 0.370 <= whole < 0.370 + slack, "a non-streamed body arrives whole at the end"


def test_pacing_does_not_drift() -> None:
    # 200 tokens at 1 ms each: summing sleeps would overshoot by the timer slack of every token.
    model = LatencyModel.fixed(queue_ms=0, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=1000, output_tokens=200)
    with Simulator(latency=model) as sim, SchedulerProbe() as probe:
        c = _client(sim)
        start = time.perf_counter()
        count = sum(
            1 for _ in c.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], stream=True)
        )
        elapsed = time.perf_counter() - start
        c.close()
    assert count == 200 + 2
    assert 0.200 <= elapsed < 0.200 + probe.allow(SLACK)


def test_cached_tokens_are_not_prefilled() -> None:
    model = LatencyModel.fixed(queue_ms=0, prefill_ms_per_1k_tokens=1000, decode_tokens_per_s=1000, output_tokens=1)
    with Simulator(latency=model, cache=CacheConfig(min_tokens=128, block_tokens=64)) as sim, SchedulerProbe() as probe:
        c = _client(sim)
        timings, cached = [], []
        for _ in range(2):
            start = time.perf_counter()
            r = c.chat.completions.create(model="m", messages=[{"role": "user", "content": PROMPT}])
            timings.append(time.perf_counter() - start)
            assert r.usage is not None and r.usage.prompt_tokens_details is not None
            cached.append(r.usage.prompt_tokens_details.cached_tokens)
            prompt_tokens = r.usage.prompt_tokens
        c.close()
    assert cached[0] == 0 and 0 < (cached[1] or 0) <= prompt_tokens
    assert (cached[1] or 0) % 64 == 128 % 64
    uncached = prompt_tokens - (cached[1] or 0)
    assert timings[0] >= prompt_tokens / 1000
    assert uncached / 1000 <= timings[1] < uncached / 1000 + 0.001 + probe.allow(SLACK)


def test_per_model_profiles() -> None:
    slow = LatencyModel.fixed(queue_ms=150, output_tokens=1)
    with Simulator(latency=LatencyModel.fixed(queue_ms=0, output_tokens=1), models={"slow-model": slow}) as sim:
        c = _client(sim)
        durations = {}
        for name in ("fast-model", "slow-model"):
            start = time.perf_counter()
            c.chat.completions.create(model=name, messages=[{"role": "user", "content": "x"}])
            durations[name] = time.perf_counter() - start
        c.close()
    assert durations["slow-model"] >= 0.150 > durations["fast-model"]


def test_openai_cache_reports_and_misses_on_changed_system_prompt() -> None:
    with Simulator(
        latency=LatencyModel.fixed(queue_ms=0, decode_tokens_per_s=5000), cache=CacheConfig(min_tokens=128)
    ) as sim:
        c = openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0)

        def cached(system: str) -> int:
            messages = [{"role": "system", "content": system}, {"role": "user", "content": PROMPT}]
            usage = c.chat.completions.create(model="gpt-4o", messages=messages).usage
            assert usage is not None and usage.prompt_tokens_details is not None
            return usage.prompt_tokens_details.cached_tokens or 0

        assert cached("You are terse.") == 0
        assert cached("You are terse.") > 0
        assert cached("You are verbose.") == 0
        response = c.responses.create(model="gpt-4o", instructions="Be kind.", input=PROMPT)
        again = c.responses.create(model="gpt-4o", instructions="Be kind.", input=PROMPT)
        assert response.usage is not None and response.usage.input_tokens_details.cached_tokens == 0
        assert again.usage is not None and again.usage.input_tokens_details.cached_tokens > 0
        assert sim.requests[-1].cached_tokens == again.usage.input_tokens_details.cached_tokens
        c.close()
