"""Provider-reported server timing: OpenAI's header, Groq's and Cerebras's body fields.

Every value must be the split the latency model actually applied to that request, so the timing
checks compare it with what the client observes: never earlier, at most ``SLACK`` later plus the
scheduler lateness measured during the same test (tests/jitter.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from firsttoken.sim import PROVIDER_HEADER, LatencyModel, Simulator
from firsttoken.sim.cli import build_parser

from ..jitter import SchedulerProbe

SLACK = 0.100  # s: scheduling noise allowed on top of a configured delay
MESSAGES = [{"role": "user", "content": "Summarize the plot of a long novel in a few words. " * 20}]
FIXED = LatencyModel.fixed(queue_ms=30, prefill_ms_per_1k_tokens=200, decode_tokens_per_s=500, output_tokens=20)
GROQ = {PROVIDER_HEADER: "groq"}
CEREBRAS = {PROVIDER_HEADER: "cerebras"}
TIMES = ("queue_time", "prompt_time", "completion_time", "total_time")


@pytest.fixture
def sim() -> Iterator[Simulator]:
    with Simulator(latency=FIXED, seed=5) as s:
        yield s


@pytest.fixture
def client(sim: Simulator) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0) as c:
        yield c


def _expected(prompt_tokens: int, output_tokens: int = 20) -> dict[str, float]:
    prompt = 0.200 * prompt_tokens / 1000
    completion = output_tokens / 500
    return {"queue_time": 0.030, "prompt_time": prompt, "completion_time": completion}


def _extra(obj: Any) -> dict[str, Any]:
    return dict(obj.model_extra or {})


# -- OpenAI ------------------------------------------------------------------------------------------


def test_openai_processing_ms_is_queue_for_streams_and_everything_for_whole_responses(client: openai.OpenAI) -> None:
    whole = client.chat.completions.with_raw_response.create(model="m", messages=MESSAGES)
    usage = whole.parse().usage
    assert usage is not None
    expected = _expected(usage.prompt_tokens)
    assert int(whole.headers["openai-processing-ms"]) == pytest.approx(sum(expected.values()) * 1000, abs=1)
    with client.chat.completions.with_streaming_response.create(model="m", messages=MESSAGES, stream=True) as stream:
        assert stream.headers["openai-processing-ms"] == "30"
    assert "x_groq" not in _extra(whole.parse()) and "time_info" not in _extra(whole.parse())
    assert not any(key in _extra(usage) for key in TIMES)


# -- Groq ----------------------------------------------------------------------------------------------


def test_groq_whole_response(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(model="m", messages=MESSAGES, extra_headers=GROQ)
    assert "openai-processing-ms" not in raw.headers
    completion = raw.parse()
    assert completion.usage is not None
    usage = _extra(completion.usage)
    expected = _expected(completion.usage.prompt_tokens)
    assert {k: usage[k] for k in expected} == pytest.approx(expected, abs=1e-6)
    assert usage["total_time"] == pytest.approx(expected["prompt_time"] + expected["completion_time"], abs=1e-6)
    assert _extra(completion)["x_groq"]["id"].startswith("req_")
    assert "usage" not in _extra(completion)["x_groq"]  # a different type on whole responses


@pytest.mark.parametrize("include_usage", [False, True])
def test_groq_stream(client: openai.OpenAI, include_usage: bool) -> None:
    chunks = list(
        client.chat.completions.create(
            model="m",
            messages=MESSAGES,
            stream=True,
            stream_options={"include_usage": include_usage},
            extra_headers=GROQ,
        )
    )
    first, *middle, final = chunks
    assert set(_extra(first)["x_groq"]) == {"id"}
    assert not [c for c in middle if "x_groq" in _extra(c)]
    x_groq = _extra(final)["x_groq"]
    assert x_groq["id"] == _extra(first)["x_groq"]["id"]
    timing = x_groq["usage"]
    expected = _expected(timing["prompt_tokens"])
    assert {k: timing[k] for k in expected} == pytest.approx(expected, abs=1e-6)
    assert timing["total_time"] == pytest.approx(expected["prompt_time"] + expected["completion_time"], abs=1e-6)
    assert (timing["completion_tokens"], timing["total_tokens"]) == (20, timing["prompt_tokens"] + 20)
    # Groq's own usage shape (the groq SDK's CompletionUsage): the cache reads, no OpenAI audio counts.
    assert timing["prompt_tokens_details"] == {"cached_tokens": 0}
    assert "completion_tokens_details" not in timing  # not a reasoning model
    if include_usage:
        assert final.usage is not None and not final.choices
    else:
        assert final.choices[0].finish_reason == "stop"


def test_groq_legacy_completions_stream(client: openai.OpenAI) -> None:
    chunks = list(client.completions.create(model="m", prompt="Say something.", stream=True, extra_headers=GROQ))
    assert set(_extra(chunks[0])["x_groq"]) == {"id"}
    assert _extra(chunks[-1])["x_groq"]["usage"]["completion_time"] == pytest.approx(0.04, abs=1e-6)
    whole = client.completions.create(model="m", prompt="Say something.", extra_headers=GROQ)
    assert whole.usage is not None and _extra(whole.usage)["queue_time"] == pytest.approx(0.03)


# -- Cerebras -------------------------------------------------------------------------------------------


def test_cerebras_whole_response_and_stream(client: openai.OpenAI) -> None:
    before = time.time()
    raw = client.chat.completions.with_raw_response.create(model="m", messages=MESSAGES, extra_headers=CEREBRAS)
    assert "openai-processing-ms" not in raw.headers
    completion = raw.parse()
    assert completion.usage is not None
    info = _extra(completion)["time_info"]
    expected = _expected(completion.usage.prompt_tokens)
    assert {k: info[k] for k in expected} == pytest.approx(expected, abs=1e-6)
    assert info["total_time"] == pytest.approx(sum(expected.values()), abs=1e-6)
    assert before <= info["created"] <= time.time()
    assert not any(key in _extra(completion.usage) for key in TIMES)

    chunks = list(client.chat.completions.create(model="m", messages=MESSAGES, stream=True, extra_headers=CEREBRAS))
    assert [c for c in chunks if "time_info" in _extra(c)] == [chunks[-1]]
    assert _extra(chunks[-1])["time_info"]["completion_time"] == pytest.approx(0.04, abs=1e-6)


# -- choosing the style ------------------------------------------------------------------------------------


def test_style_for_every_request_and_the_header_overrides_it() -> None:
    with (
        Simulator(latency=FIXED, provider_timing="cerebras") as sim,
        openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0) as client,
    ):
        assert "time_info" in _extra(client.chat.completions.create(model="m", messages=MESSAGES))
        groq = client.chat.completions.create(model="m", messages=MESSAGES, extra_headers=GROQ)
        assert "x_groq" in _extra(groq) and "time_info" not in _extra(groq)
        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=MESSAGES, extra_headers={PROVIDER_HEADER: "OpenAI"}
        )
        assert "openai-processing-ms" in raw.headers and "time_info" not in _extra(raw.parse())
        with pytest.raises(openai.BadRequestError, match="unknown provider timing 'fireworks'"):
            client.chat.completions.create(model="m", messages=MESSAGES, extra_headers={PROVIDER_HEADER: "fireworks"})
    with pytest.raises(ValueError, match="unknown provider timing"):
        Simulator(provider_timing="together")  # type: ignore[arg-type]


# -- consistent with what the client observes --------------------------------------------------------------


def test_reported_split_matches_observed_timing_under_jitter() -> None:
    model = LatencyModel(
        queue_ms=20,
        prefill_ms_per_1k_tokens=200,
        decode_tokens_per_s=400,
        jitter=0.5,
        tail_probability=0.0,
        output_tokens=12,
    )
    with (
        Simulator(latency=model, seed=9) as sim,
        openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0) as client,
        SchedulerProbe() as probe,
    ):
        client.models.list()  # open the connection
        seen = set()
        for provider in ("groq", "cerebras", "groq", "cerebras"):
            start = time.perf_counter()
            stream = client.chat.completions.create(
                model="m", messages=MESSAGES, stream=True, extra_headers={PROVIDER_HEADER: provider}
            )
            headers_at = time.perf_counter() - start
            first_token_at = None
            for chunk in stream:
                if first_token_at is None and chunk.choices and chunk.choices[0].delta.content:
                    first_token_at = time.perf_counter() - start
                final = chunk
            done_at = time.perf_counter() - start
            extra = _extra(final)
            timing = extra["x_groq"]["usage"] if provider == "groq" else extra["time_info"]
            queue, prompt, completion = timing["queue_time"], timing["prompt_time"], timing["completion_time"]
            seen.add(queue)
            assert first_token_at is not None
            # Never earlier than reported, and not much later.
            slack = probe.allow(SLACK)
            assert queue <= headers_at < queue + slack
            assert queue + prompt <= first_token_at < queue + prompt + completion + slack
            assert queue + prompt + completion <= done_at < queue + prompt + completion + slack
        assert len(seen) == 4, "jitter draws a different queue for each request"


def test_cli_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert build_parser().parse_args(["--provider-timing", "groq"]).provider_timing == "groq"
    assert build_parser().parse_args([]).provider_timing == "openai"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--provider-timing", "fireworks"])
    assert "invalid choice" in capsys.readouterr().err
