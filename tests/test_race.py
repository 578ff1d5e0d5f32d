"""``firsttoken.race`` / ``firsttoken.arace`` with the real SDKs against two simulated providers, and
``firsttoken bench --race`` as a subprocess."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

import firsttoken
from firsttoken import semconv as sc
from firsttoken.race import carries_output
from firsttoken.sim import LatencyModel, Simulator

from .conftest import Telemetry
from .test_bench import run_bench

MSGS: Any = [{"role": "user", "content": "Which is faster?"}]


@pytest.fixture
def quick() -> Iterator[Simulator]:
    with Simulator(latency=LatencyModel.fixed(queue_ms=20, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=400)) as s:
        yield s


@pytest.fixture
def sluggish() -> Iterator[Simulator]:
    with Simulator(latency=LatencyModel.fixed(queue_ms=600, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=400)) as s:
        yield s


def _end_reasons(telemetry: Telemetry) -> dict[int | None, str]:
    return {
        (c.attributes or {}).get(sc.SERVER_PORT): str((c.attributes or {}).get(sc.FT_END_REASON))  # type: ignore[misc]
        for c in telemetry.calls()
    }


async def test_arace_keeps_the_first_token_and_cancels_the_loser(
    telemetry: Telemetry, quick: Simulator, sluggish: Simulator
) -> None:
    fast = openai.AsyncOpenAI(base_url=quick.openai_base_url, api_key="k")
    slow = openai.AsyncOpenAI(base_url=sluggish.openai_base_url, api_key="k")

    def ask(client: openai.AsyncOpenAI) -> Any:
        return lambda: client.chat.completions.create(model="m", messages=MSGS, max_tokens=12, stream=True)

    started = time.perf_counter()
    result = await firsttoken.arace(ask(slow), ask(fast))
    decided = time.perf_counter() - started
    assert result.winner == 1 and result.losers == [0]
    assert decided < 0.5  # the loser's 600 ms queue was not waited for
    assert carries_output(result.items[-1]) and not any(carries_output(i) for i in result.items[:-1])
    text = "".join(c.choices[0].delta.content or "" for c in [i async for i in result] if c.choices)
    assert len(text.split()) >= 10  # the whole answer: the buffered items, then the rest of the stream
    await fast.close()
    await slow.close()

    reasons = _end_reasons(telemetry)
    assert reasons == {quick.port: sc.END_COMPLETED, sluggish.port: sc.END_CANCELLED}
    # One action, the parent of both calls; the loser ended when it was cancelled, not at 600 ms.
    races = [s for s in telemetry.spans() if s.name == "race"]
    assert len(races) == 1
    calls = telemetry.calls()
    assert {c.parent.span_id for c in calls if c.parent} == {races[0].context.span_id}
    loser = next(c for c in calls if (c.attributes or {}).get(sc.SERVER_PORT) == sluggish.port)
    assert loser.end_time is not None and loser.start_time is not None
    assert (loser.end_time - loser.start_time) / 1e9 < 0.5
    assert loser.status.is_ok


async def test_arace_until_finish_and_when_every_contender_fails(
    telemetry: Telemetry, quick: Simulator, sluggish: Simulator
) -> None:
    fast = anthropic.AsyncAnthropic(base_url=quick.anthropic_base_url, api_key="k", max_retries=0)
    slow = anthropic.AsyncAnthropic(base_url=sluggish.anthropic_base_url, api_key="k", max_retries=0)
    result = await firsttoken.arace(
        lambda: slow.messages.create(model="m", max_tokens=8, messages=MSGS),
        lambda: fast.messages.create(model="m", max_tokens=8, messages=MSGS),
        until="finish",
    )
    assert result.winner == 1 and result.value.content[0].text
    assert _end_reasons(telemetry)[sluggish.port] == sc.END_CANCELLED

    from firsttoken.sim import Fault

    quick.inject(Fault.server_error(status=500), times=2)
    with pytest.raises(anthropic.InternalServerError):
        await firsttoken.arace(
            lambda: fast.messages.create(model="m", max_tokens=8, messages=MSGS),
            lambda: fast.messages.create(model="m", max_tokens=8, messages=MSGS),
        )
    with pytest.raises(ValueError, match="at least two"):
        await firsttoken.arace(lambda: None)
    with pytest.raises(ValueError, match="until must be"):
        await firsttoken.arace(lambda: None, lambda: None, until="first")
    await fast.close()
    await slow.close()


def test_race_sync_returns_at_the_first_token_and_closes_the_loser(
    telemetry: Telemetry, quick: Simulator, sluggish: Simulator
) -> None:
    fast = openai.OpenAI(base_url=quick.openai_base_url, api_key="k")
    slow = openai.OpenAI(base_url=sluggish.openai_base_url, api_key="k")
    started = time.perf_counter()
    result = firsttoken.race(
        lambda: slow.chat.completions.create(model="m", messages=MSGS, max_tokens=12, stream=True),
        lambda: fast.chat.completions.create(model="m", messages=MSGS, max_tokens=12, stream=True),
    )
    assert time.perf_counter() - started < 0.5
    assert result.winner == 1
    assert sum(1 for item in result if carries_output(item)) >= 10
    # The loser's thread gets control back when its headers arrive (600 ms), and closes its stream.
    deadline = time.monotonic() + 5
    while len(telemetry.calls()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _end_reasons(telemetry) == {quick.port: sc.END_COMPLETED, sluggish.port: sc.END_CLOSED}
    assert len([s for s in telemetry.spans() if s.name == "race"]) == 1
    fast.close()
    slow.close()


def test_bench_race_beats_both_singles_and_counts_what_the_losers_wasted(tmp_path: Path) -> None:
    # Two providers with different queue times, each with a slow tail (x10 / x8) one request in
    # eight. A single provider's p95 is in its tail (with 150 requests, fewer than the 8 tails that
    # takes happen with probability < 0.5%); the race is slow only when both are (1.4%, so its p95
    # stays out of the tail with probability > 99.9%). Bodies 50-80 ms, tails 1,000-1,280 ms: on a
    # 2-core machine under a load average of 17, the raced p95 was seen at up to 640 ms.
    common: dict[str, Any] = dict(prefill_ms_per_1k_tokens=0, decode_tokens_per_s=500, output_tokens=10)
    a = LatencyModel(queue_ms=50, jitter=0.1, tail_probability=0.12, tail_multiplier=20, **common)
    b = LatencyModel(queue_ms=80, jitter=0.2, tail_probability=0.12, tail_multiplier=16, **common)
    out = tmp_path / "race.json"
    requests = 150
    with Simulator(latency=a, seed=11) as sim_a, Simulator(latency=b, seed=12) as sim_b:
        result = run_bench(
            "--target", f"a=openai:m@{sim_a.openai_base_url}", "--target", f"b=openai:m@{sim_b.openai_base_url}",
            "--race", "a,b", "--requests", str(requests), "--concurrency", "4", "--warmup", "1",
            "--input-tokens", "50", "--json", str(out), "--html", str(out.with_suffix(".html")), "--no-progress",
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    doc = json.loads(out.read_text())
    p95 = {n: s["quantiles"]["ttft_s"]["p95"] for n, s in doc["summaries"].items()}
    raced = p95.pop("race(a,b)")
    assert raced < min(p95.values()), (raced, p95)
    info = doc["race"]
    assert info["requests"] == requests and sum(info["wins"].values()) == requests
    assert all(0 < share < 1 for share in info["win_share"].values())  # both providers win sometimes
    # Every loser's call ended cancelled, and its prompt counts as wasted: ~50 input tokens each.
    races = [r for r in doc["requests"] if r["target"] == "race(a,b)" and not r["warmup"]]
    for r in races:
        winner = r["race"]["winner"]
        ends = {name: c["end_reason"] for name, c in r["race"]["contenders"].items()}
        assert ends[winner] == sc.END_COMPLETED
        assert all(end == sc.END_CANCELLED for name, end in ends.items() if name != winner), ends
    assert requests * 45 <= info["wasted_input_tokens"] <= requests * 60
    assert 0 < info["wasted_share"] < 1
    assert "Race race(a,b)" in result.stdout and "wasted by the cancelled losers" in result.stdout
    page = out.with_suffix(".html").read_text()
    assert "<h2>Race race(a,b)</h2>" in page and "race(a,b): where the time went" in page
    # A raced request's timeline is its winner's, from the start of the race: phases that tile it.
    for r in races:
        assert r["phases"] and r["ttft_s"] <= r["e2e_s"]
        assert r["phases"][0]["start_s"] >= 0
        assert r["phases"][-1]["start_s"] + r["phases"][-1]["duration_s"] == pytest.approx(r["e2e_s"], abs=1e-6)
