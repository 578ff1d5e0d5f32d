"""Metric cardinality stays bounded when an app has values without end: a model name per
fine-tuned id, a traffic class per tenant, an action name per user. Real SDK calls against the
simulator; the spans keep every real value, the metrics fold values past the limit into ``_OTHER``
and lose no call."""

from __future__ import annotations

import asyncio
import warnings
from collections import Counter
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

import firsttoken
from firsttoken import semconv as sc
from firsttoken.sim import Simulator

from .conftest import Telemetry

LIMIT = 4
USER: Any = {"role": "user", "content": "Where is my parcel?"}


@pytest.fixture
def bounded() -> Iterator[Telemetry]:
    t = Telemetry()
    assert firsttoken.instrument(
        tracer_provider=t.tracer_provider, meter_provider=t.meter_provider, metric_value_limit=LIMIT
    )
    try:
        yield t
    finally:
        firsttoken.uninstrument()


def points_by(t: Telemetry, metric: str, key: str) -> Counter[Any]:
    """The number of calls per value of ``key`` in a histogram (count) or counter (value)."""
    out: Counter[Any] = Counter()
    for p in t.metrics().get(metric, []):
        out[p.attributes.get(key)] += getattr(p, "count", None) or p.value
    return out


def test_model_names_past_the_limit_are_folded_into_other(bounded: Telemetry, sim: Simulator) -> None:
    client = openai.OpenAI(base_url=sim.openai_base_url, api_key="sk-test", max_retries=0)
    models = [f"ft:gpt-4o-mini:acme:tenant-{n}:x{n}" for n in range(11)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n, model in enumerate(models):
            if n % 2:
                client.chat.completions.create(model=model, messages=[USER], max_tokens=3)
            else:
                stream = client.chat.completions.create(
                    model=model, messages=[USER], max_tokens=3, stream=True, stream_options={"include_usage": True}
                )
                for _ in stream:
                    pass
        client.chat.completions.create(model=models[1], messages=[USER], max_tokens=3)  # kept before the limit
    # Spans: every real name.
    assert [c.attributes[sc.GEN_AI_REQUEST_MODEL] for c in bounded.calls()] == [*models, models[1]]
    # Metrics: the first LIMIT names, then _OTHER, every call counted.
    calls = points_by(bounded, sc.M_OPERATION_DURATION, sc.GEN_AI_REQUEST_MODEL)
    assert calls == {**{m: 1 for m in models[:LIMIT]}, models[1]: 2, sc.METRIC_VALUE_OTHER: len(models) - LIMIT}
    responses = points_by(bounded, sc.M_OPERATION_DURATION, sc.GEN_AI_RESPONSE_MODEL)
    assert len(responses) == LIMIT + 1 and responses[sc.METRIC_VALUE_OTHER] == len(models) - LIMIT
    assert sum(responses.values()) == len(models) + 1
    output = points_by(bounded, sc.M_OUTPUT_TOKENS, sc.GEN_AI_REQUEST_MODEL)
    assert set(output) == {*models[:LIMIT], sc.METRIC_VALUE_OTHER}
    assert sum(output.values()) == sum(c.attributes[sc.GEN_AI_USAGE_OUTPUT_TOKENS] for c in bounded.calls())
    # Every metric, every point: no request model outside the kept ones.
    for name, points in bounded.metrics().items():
        for p in points:
            model = p.attributes.get(sc.GEN_AI_REQUEST_MODEL)
            assert model is None or model in {*models[:LIMIT], sc.METRIC_VALUE_OTHER}, (name, model)
    # One warning per attribute that overflowed, naming it and the way out.
    said = [str(w.message) for w in caught if issubclass(w.category, firsttoken.FirstTokenWarning)]
    assert len([m for m in said if sc.GEN_AI_REQUEST_MODEL in m]) == 1, said
    assert "metric_value_limit" in said[0] and "FIRSTTOKEN_METRIC_VALUE_LIMIT" in said[0]


def test_traffic_classes_and_actions_are_bounded_apart_from_models(bounded: Telemetry, sim: Simulator) -> None:
    client = anthropic.AsyncAnthropic(base_url=sim.anthropic_base_url, api_key="sk-ant-test", max_retries=0)

    async def main() -> None:
        for n in range(LIMIT + 3):
            async with firsttoken.action(f"answer-{n}", traffic_class=f"tenant-{n}"):
                stream = await client.messages.create(
                    model="claude-test-model", messages=[USER], max_tokens=3, stream=True
                )
                async for _ in stream:
                    pass

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", firsttoken.FirstTokenWarning)
        asyncio.run(main())
    classes = points_by(bounded, sc.M_TIME_TO_FIRST_TOKEN, sc.FT_TRAFFIC_CLASS)
    assert classes == {**{f"tenant-{n}": 1 for n in range(LIMIT)}, sc.METRIC_VALUE_OTHER: 3}
    assert points_by(bounded, sc.M_TIME_TO_FIRST_TOKEN, sc.GEN_AI_REQUEST_MODEL) == {"claude-test-model": LIMIT + 3}
    actions = points_by(bounded, sc.M_ACTION_DURATION, sc.FT_ACTION_NAME)
    assert actions == {**{f"answer-{n}": 1 for n in range(LIMIT)}, sc.METRIC_VALUE_OTHER: 3}
    assert {c.attributes[sc.FT_TRAFFIC_CLASS] for c in bounded.calls()} == {f"tenant-{n}" for n in range(LIMIT + 3)}


def test_the_default_keeps_a_hundred_models(sim: Simulator) -> None:
    t = Telemetry()
    assert firsttoken.instrument(tracer_provider=t.tracer_provider, meter_provider=t.meter_provider)
    try:
        client = openai.OpenAI(base_url=sim.openai_base_url, api_key="sk-test", max_retries=0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for n in range(102):
                client.chat.completions.create(model=f"model-{n}", messages=[USER], max_tokens=1)
    finally:
        firsttoken.uninstrument()
    calls = points_by(t, sc.M_OPERATION_DURATION, sc.GEN_AI_REQUEST_MODEL)
    assert len(calls) == 101 and calls[sc.METRIC_VALUE_OTHER] == 2 and calls["model-99"] == 1
    assert any(sc.GEN_AI_REQUEST_MODEL in str(w.message) for w in caught)
