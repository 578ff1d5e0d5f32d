"""Phase spans for the tail only (the default): which calls get a waterfall, and what every call keeps."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import openai
import pytest

import firsttoken
from firsttoken import semconv as sc
from firsttoken import tail, targets
from firsttoken.sim import Fault, LatencyModel, Simulator

from .conftest import Telemetry

MESSAGES = [{"role": "user", "content": "hi"}]


def test_slow_tail_is_the_top_tenth_of_recent_calls() -> None:
    slow = tail.SlowTail()
    # No call is slow before MIN_CALLS have been seen, however long it took.
    assert not any(slow.is_slow("k", 100.0 if i == 5 else 1.0 + i / 10) for i in range(tail.MIN_CALLS))
    values = [1.0 + i / 10 for i in range(tail.MIN_CALLS)]
    values[5] = 100.0
    ordered = sorted(values)
    # Spread values: the p90 is well above the median plus the margin, so it is the threshold.
    threshold = ordered[int(tail.QUANTILE * len(ordered))]
    assert threshold > ordered[len(ordered) // 2] * (1 + tail.MARGIN)
    assert slow.is_slow("k", threshold + 0.001)
    assert not slow.is_slow("k", threshold)
    assert not slow.is_slow("other kind", 1000.0), "every kind has its own tail"


def test_slow_tail_forgets_old_calls() -> None:
    slow = tail.SlowTail()
    for _ in range(tail.WINDOW):
        slow.is_slow("k", 10.0)
    for _ in range(tail.WINDOW):  # the kind got faster: the old 10 s calls leave the window
        slow.is_slow("k", 1.0)
    assert slow.is_slow("k", 2.0)


def _slow_share(values: list[float]) -> float:
    slow = tail.SlowTail()
    flags = [slow.is_slow("k", v) for v in values]
    return sum(flags[tail.MIN_CALLS :]) / len(flags[tail.MIN_CALLS :])


def test_alike_calls_drifting_slowly_are_not_all_slow() -> None:
    # Calls that are all alike (0.5 % noise) and get slower by 0.05 % per call, as a warming cache
    # or a filling batch makes them: each is above the p90 of the calls a few rounds before, so a
    # threshold recomputed every 16 calls called most of them slow. None is a call to drill into.
    rng = random.Random(3)
    drifting = [1.0 * (1 + 0.0005 * i) * (1 + rng.uniform(-0.005, 0.005)) for i in range(2000)]
    assert _slow_share(drifting) <= 0.02
    # The same calls with a genuine outlier now and then: the outliers are still slow.
    slow = tail.SlowTail()
    for value in drifting[:500]:
        slow.is_slow("k", value)
    assert slow.is_slow("k", drifting[500] * 2)


def test_spread_calls_give_a_tenth_their_waterfall() -> None:
    # A realistic spread (lognormal, p90 about twice the median), steady or drifting slowly: about a
    # tenth of the calls are over the running p90, whatever the drift.
    rng = random.Random(4)
    steady = [rng.lognormvariate(0, 0.5) for _ in range(4000)]
    drifting = [v * (1 + 0.0002 * i) for i, v in enumerate(steady)]
    for values in (steady, drifting):
        assert 0.06 <= _slow_share(values) <= 0.16


@pytest.fixture
def sim() -> Iterator[Simulator]:
    # A first token spread over a few milliseconds (lognormal, no rare tail), so that "the slowest
    # tenth" is a property of the server's delays, not of loopback noise or drift among calls that
    # are all alike (with exact delays, a tenth of a millisecond of drift put 19 of 49 over the p90).
    model = LatencyModel(
        queue_ms=8,
        prefill_ms_per_1k_tokens=0,
        decode_tokens_per_s=2000,
        jitter=0.4,
        tail_probability=0,
        output_tokens=12,
    )
    with Simulator(latency=model, seed=1) as s:
        yield s


@pytest.fixture
def tail_telemetry() -> Iterator[Telemetry]:
    t = Telemetry()
    assert firsttoken.instrument(tracer_provider=t.tracer_provider, meter_provider=t.meter_provider)
    try:
        yield t
    finally:
        firsttoken.uninstrument()


def _stream(client: Any, **kwargs: Any) -> None:
    for _ in client.chat.completions.create(model="m", messages=MESSAGES, stream=True, **kwargs):
        pass


def test_default_gives_waterfalls_to_the_slow_tail_only(tail_telemetry: Telemetry, sim: Simulator) -> None:
    t = tail_telemetry
    client = openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0)
    for _ in range(3 * tail.MIN_CALLS):
        _stream(client)
    # A first token 300 ms late, against calls whose first token takes about a millisecond.
    _stream(client, extra_headers={"x-firsttoken-sim-fault": "stall;after_chunks=1;seconds=0.3"})
    calls = t.calls()
    with_waterfall = [c for c in calls if t.children(c)]
    assert calls[-1] in with_waterfall, "the slow call has its phase spans"
    # Loopback calls of one kind: about a tenth are over the running p90 (ties and noise aside).
    assert len(with_waterfall) < len(calls) // 3, [c.attributes[sc.FT_TIME_TO_FIRST_TOKEN] for c in with_waterfall]
    for call in calls:  # every call keeps where its time went, as attributes
        durations = {
            k[len(sc.FT_PHASE_DURATION_PREFIX) :]: v
            for k, v in (call.attributes or {}).items()
            if k.startswith(sc.FT_PHASE_DURATION_PREFIX)
        }
        assert {sc.PHASE_SERVER_WAIT, sc.PHASE_WAIT_FIRST_TOKEN, sc.PHASE_DECODE} <= set(durations)
        assert call.end_time is not None and call.start_time is not None
        assert sum(durations.values()) == pytest.approx((call.end_time - call.start_time) / 1e9, abs=1e-6)
    slow = calls[-1]
    assert slow.attributes[sc.FT_PHASE_DURATION_PREFIX + sc.PHASE_WAIT_FIRST_TOKEN] >= 0.25  # type: ignore[index,operator]
    assert {c.attributes[sc.FT_PHASE] for c in t.children(slow)} >= {sc.PHASE_WAIT_FIRST_TOKEN}  # type: ignore[index]


def test_failed_and_retried_calls_get_their_waterfall(tail_telemetry: Telemetry, sim: Simulator) -> None:
    t = tail_telemetry
    client = openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0)
    sim.inject(Fault.server_error(status=500))
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="m", messages=MESSAGES)
    retrying = openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=1)
    sim.inject(Fault.rate_limit(retry_after=0.01))
    retrying.chat.completions.create(model="m", messages=MESSAGES)
    failed, retried = t.calls()
    assert failed.attributes[sc.ERROR_TYPE] == "InternalServerError"  # type: ignore[index]
    assert t.children(failed)
    assert retried.attributes[sc.FT_ATTEMPTS] == 2  # type: ignore[index]
    assert sc.PHASE_RETRY_WAIT in {c.attributes[sc.FT_PHASE] for c in t.children(retried)}  # type: ignore[index]


@pytest.mark.parametrize(("mode", "expected"), [("always", True), ("never", False)])
def test_phase_spans_always_and_never(sim: Simulator, mode: str, expected: bool) -> None:
    t = Telemetry()
    assert firsttoken.instrument(tracer_provider=t.tracer_provider, meter_provider=t.meter_provider, phase_spans=mode)
    try:
        client = openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0)
        for _ in range(3):
            _stream(client)
    finally:
        firsttoken.uninstrument()
    assert [bool(t.children(c)) for c in t.calls()] == [expected] * 3
    assert all(sc.FT_PHASE_DURATION_PREFIX + sc.PHASE_DECODE in (c.attributes or {}) for c in t.calls())


def test_targets_are_the_collectors() -> None:
    """The in-process thresholds are the targets the Collector's tail-sampling policies are written
    from (the values themselves: tests/test_targets.py)."""
    from firsttoken.stack import sampling

    assert (targets.record(targets.TTFT), targets.record(targets.E2E)) == (sampling.TTFT_TARGET, sampling.E2E_TARGET)
    assert tail.SLOW_TPOT_S == sampling.SLOW_DECODE_SECONDS


def test_a_traffic_class_with_targets_gets_waterfalls_over_them_only(tail_telemetry: Telemetry, sim: Simulator) -> None:
    t = tail_telemetry
    client = openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0)
    stall = {"x-firsttoken-sim-fault": "stall;after_chunks=1;seconds=0.3"}
    with firsttoken.traffic_class("interactive"):
        for _ in range(2 * tail.MIN_CALLS):
            _stream(client)
        _stream(client, extra_headers=stall)  # 300 ms: slow for its kind, well under the 1 s target
    calls = t.calls()
    assert calls[-1].attributes[sc.FT_TIME_TO_FIRST_TOKEN] >= 0.25  # type: ignore[index,operator]
    assert not any(t.children(c) for c in calls)


def _fail(sim: Simulator, calls: int) -> None:
    """``calls`` calls that fail with a 500, each in the tail for failing."""
    client = openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0)
    for _ in range(calls):
        with pytest.raises(openai.InternalServerError):
            client.chat.completions.create(
                model="m", messages=MESSAGES, extra_headers={"x-firsttoken-sim-fault": "server_error;status=500"}
            )


def test_tail_share_caps_the_waterfalls_when_most_calls_are_in_the_tail(sim: Simulator) -> None:
    """Every call failing puts every call in the tail; ``tail_share`` bounds how many get phase spans:
    the burst, then the share of the calls after it (credited one share per finished call)."""
    t = Telemetry()
    assert firsttoken.instrument(tracer_provider=t.tracer_provider, meter_provider=t.meter_provider, tail_share=0.1)
    calls = 200
    try:
        _fail(sim, calls)
    finally:
        firsttoken.uninstrument()
    spans = t.calls()
    assert len(spans) == calls and all(sc.ERROR_TYPE in (c.attributes or {}) for c in spans)
    with_waterfall = [c for c in spans if t.children(c)]
    capped = [c for c in spans if (c.attributes or {}).get(sc.FT_WATERFALL_CAPPED) is True]
    # The first BURST calls get theirs; after that one call in ten (the last share may land either way).
    budget = tail.BURST + 0.1 * calls
    assert int(budget) - 1 <= len(with_waterfall) <= int(budget), len(with_waterfall)
    assert spans[: int(tail.BURST)] == with_waterfall[: int(tail.BURST)]
    assert len(capped) == calls - len(with_waterfall) and not any(t.children(c) for c in capped)
    for call in capped:  # where the time went stays on the span
        assert sc.FT_PHASE_DURATION_PREFIX + sc.PHASE_SERVER_WAIT in (call.attributes or {})


def test_tail_share_one_gives_every_call_in_the_tail_its_waterfall(sim: Simulator) -> None:
    t = Telemetry()
    assert firsttoken.instrument(tracer_provider=t.tracer_provider, meter_provider=t.meter_provider, tail_share=1)
    try:
        _fail(sim, int(tail.BURST) + 20)
    finally:
        firsttoken.uninstrument()
    assert all(t.children(c) for c in t.calls()) and len(t.calls()) == int(tail.BURST) + 20
