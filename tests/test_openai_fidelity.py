"""What firsttoken records matches what the app observes, and the app sees exactly what it would without it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx2
import openai
import pytest

import firsttoken
from firsttoken import semconv as sc
from firsttoken.sim import Fault, LatencyModel, Simulator

from .conftest import Telemetry
from .jitter import SchedulerProbe, assert_stamps_agree

# The set delays: queue 50 ms, prefill 120 ms, 20 ms per token.
PROMPT = "Summarize the plot of a long novel in a few words. " * 20
PROMPT_TOKENS_HINT = 1000


def _ttft_model(prompt_tokens: int) -> LatencyModel:
    return LatencyModel(
        queue_ms=50,
        prefill_ms_per_1k_tokens=120 * 1000 / prompt_tokens,
        decode_tokens_per_s=50,
        jitter=0,
        output_tokens=10,
    )


def _prompt_tokens(sim_cls: type[Simulator]) -> int:
    with sim_cls(latency=LatencyModel(queue_ms=0, jitter=0, output_tokens=1), seed=0) as s:
        c = openai.OpenAI(base_url=s.openai_base_url, api_key="k", max_retries=0)
        return c.chat.completions.create(model="m", messages=[{"role": "user", "content": PROMPT}]).usage.prompt_tokens


def test_ttft_matches_the_apps_own_loop_within_2ms(telemetry: Telemetry) -> None:
    tokens = _prompt_tokens(Simulator)
    telemetry.exporter.clear()
    with Simulator(latency=_ttft_model(tokens), seed=0) as sim, SchedulerProbe() as probe:
        c = openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0)
        c.chat.completions.create(model="warmup", messages=[{"role": "user", "content": "hi"}])  # warm the pool
        telemetry.exporter.clear()
        observed = []
        for _ in range(5):
            start = time.perf_counter()
            first = None
            for chunk in c.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": PROMPT}], stream=True
            ):
                if first is None and chunk.choices and chunk.choices[0].delta.content:
                    first = time.perf_counter() - start
            observed.append(first)
    recorded = [s.attributes[sc.FT_TIME_TO_FIRST_TOKEN] for s in telemetry.calls()]
    assert len(recorded) == 5
    # The server's set delays put TTFT at >= 170 ms (queue + prefill) ...
    assert all(ours >= 0.170 for ours in recorded)
    # ... and firsttoken's clock agrees with the app's (within 2 ms at best, 20 ms + noise each).
    assert_stamps_agree([a for a in observed if a is not None], recorded, probe)
    tpots = [s.attributes[sc.FT_TIME_PER_OUTPUT_TOKEN] for s in telemetry.calls()]
    # 20 ms/token set; a late first or last chunk moves the per-token figure by a ninth of the delay.
    noise = probe.allow(0) / 9
    for tpot in tpots:
        assert 0.018 - noise <= tpot <= 0.040 + noise


async def test_async_ttft_matches_the_apps_own_loop_within_2ms(telemetry: Telemetry) -> None:
    tokens = await asyncio.to_thread(_prompt_tokens, Simulator)
    with Simulator(latency=_ttft_model(tokens), seed=0) as sim, SchedulerProbe() as probe:
        c = openai.AsyncOpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0)
        await c.chat.completions.create(model="warmup", messages=[{"role": "user", "content": "hi"}])
        telemetry.exporter.clear()
        observed = []
        for _ in range(5):
            start = time.perf_counter()
            first = None
            async for chunk in await c.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": PROMPT}], stream=True
            ):
                if first is None and chunk.choices and chunk.choices[0].delta.content:
                    first = time.perf_counter() - start
            observed.append(first)
        await c.close()
    recorded = [s.attributes[sc.FT_TIME_TO_FIRST_TOKEN] for s in telemetry.calls()]
    assert all(ours >= 0.170 for ours in recorded)
    assert len(recorded) == 5 and None not in observed
    assert_stamps_agree([a for a in observed if a is not None], recorded, probe)  # as above


# -- differential: the app sees the same results with and without firsttoken ----------------------


def _normalize(value: Any) -> Any:
    """Results as comparable data; fields a server stamps with the wall clock are dropped."""
    if hasattr(value, "model_dump"):
        value = value.model_dump()
    if isinstance(value, dict):
        return {k: _normalize(v) for k, v in value.items() if k not in ("created", "created_at")}
    if isinstance(value, (list, tuple)):
        return type(value)(_normalize(v) for v in value)
    return value


def _workload(sim: Simulator) -> list[Any]:
    """Every API, streamed and not, plus the exceptions an app would catch."""
    c = openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0)
    msgs = [{"role": "user", "content": "Tell me something."}]
    out: list[Any] = []
    out.append(c.chat.completions.create(model="a", messages=msgs))
    stream = c.chat.completions.create(model="a", messages=msgs, stream=True, stream_options={"include_usage": True})
    out.append(type(stream))
    out.extend(stream)
    with c.chat.completions.stream(model="a", messages=msgs) as helper:
        out.append(type(helper))
        out.extend(e.type for e in helper)
        out.append(helper.get_final_completion())
    out.append(c.responses.create(model="b", input="x"))
    out.extend(c.responses.create(model="b", input="x", stream=True))
    out.append(c.completions.create(model="c", prompt="x"))
    out.append(c.embeddings.create(model="e", input="x"))
    raw = c.chat.completions.with_raw_response.create(model="a", messages=msgs)
    out.append((type(raw), raw.status_code, raw.parse()))
    sim.inject(Fault.server_error())
    try:
        c.chat.completions.create(model="a", messages=msgs)
    except openai.APIStatusError as exc:
        out.append((type(exc), exc.status_code, exc.body))
    sim.inject(Fault.drop_after(chunks=2))
    try:
        for chunk in c.chat.completions.create(model="a", messages=msgs, stream=True):
            out.append(chunk)
    except (openai.APIConnectionError, httpx2.TransportError) as exc:  # openai < 3.14 lets httpx2's through
        out.append(type(exc))
    c.close()
    return [_normalize(x) for x in out]


def test_app_receives_identical_results_with_and_without_instrumentation() -> None:
    firsttoken.uninstrument()
    with Simulator(latency=LatencyModel(queue_ms=0, decode_tokens_per_s=5000, jitter=0, output_tokens=8), seed=5) as s:
        plain = _workload(s)
    t = Telemetry()
    assert firsttoken.instrument(tracer_provider=t.tracer_provider, meter_provider=t.meter_provider)
    try:
        with Simulator(
            latency=LatencyModel(queue_ms=0, decode_tokens_per_s=5000, jitter=0, output_tokens=8), seed=5
        ) as s:
            measured = _workload(s)
    finally:
        firsttoken.uninstrument()
    assert len(t.calls()) == 10  # it was measuring
    assert measured == plain


def test_uninstrument_restores_the_originals_exactly() -> None:
    from openai import _base_client, _streaming
    from openai.resources.chat.completions import completions

    originals = (
        _base_client.SyncAPIClient.__dict__["request"],
        _base_client.AsyncAPIClient.__dict__["request"],
        _streaming.Stream.__dict__["__stream__"],
        completions.Completions.__dict__["create"],
    )
    t = Telemetry()
    assert firsttoken.instrument(tracer_provider=t.tracer_provider, meter_provider=t.meter_provider)
    assert firsttoken.instrument(tracer_provider=t.tracer_provider), "idempotent"
    assert _base_client.SyncAPIClient.__dict__["request"] is not originals[0]
    firsttoken.uninstrument()
    firsttoken.uninstrument()  # safe twice
    assert (
        _base_client.SyncAPIClient.__dict__["request"],
        _base_client.AsyncAPIClient.__dict__["request"],
        _streaming.Stream.__dict__["__stream__"],
        completions.Completions.__dict__["create"],
    ) == originals
    import httpx2

    assert not hasattr(httpx2.Client.send, "__wrapped__")


@pytest.mark.parametrize("capture", [False, True])
def test_prompts_and_keys_are_never_recorded_unless_content_capture_is_on(capture: bool, sim: Any) -> None:
    secret_prompt = "PROMPT-SECRET-7d1f"
    api_key = "sk-KEY-SECRET-91ab"
    t = Telemetry()
    assert firsttoken.instrument(
        tracer_provider=t.tracer_provider, meter_provider=t.meter_provider, capture_content=capture
    )
    try:
        c = openai.OpenAI(base_url=sim.openai_base_url, api_key=api_key, max_retries=0)
        c.chat.completions.create(model="m", messages=[{"role": "user", "content": secret_prompt}])
        list(c.chat.completions.create(model="m", messages=[{"role": "user", "content": secret_prompt}], stream=True))
    finally:
        firsttoken.uninstrument()
    dumped = "".join(s.to_json() for s in t.spans()) + t.reader.get_metrics_data().to_json()
    assert api_key not in dumped
    assert "Bearer" not in dumped
    assert (secret_prompt in dumped) is capture
    if capture:
        outputs = [s.attributes.get(sc.GEN_AI_OUTPUT_MESSAGES) for s in t.calls()]
        assert all(outputs), "completions are captured too, streamed or not"
