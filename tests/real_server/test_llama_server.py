"""The real ``openai`` and ``anthropic`` SDKs against a real inference server (llama.cpp's llama-server).

What firsttoken records is checked against two independent witnesses: the app's own clock around
the SDK calls, and what the server reports about its own work (``usage``, ``timings``).

Bounds, and why they hold on a loaded 2-core machine:

* firsttoken's call starts inside ``create()`` and its first token is stamped in the SDK's stream
  generator just before the chunk reaches the app, so its TTFT is never longer than the app's
  (1 ms of slack for clock reads) and shorter only by the time between that stamp and the app's
  loop body: the same thread, no I/O, only preemption; 0.25 s allows for heavy preemption.
* The server cannot send a token before its prefill ends, so client TTFT >= server prompt time.
* The server's ``predicted_ms`` spans the same decode the client sees between its first and last
  token, shifted by when each of those two chunks was delivered and read: the difference is at
  most two delivery delays (0.25 s each, generously) plus 25 % of the decode for the one token the
  two counts differ by and for batching of chunks.
* Prompt caching: a cached call evaluates a handful of tokens instead of ~450, so its TTFT is
  below the cold call's; only the ordering is asserted, the figures are printed.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from firsttoken import semconv as sc

from ..conftest import Telemetry
from ..jitter import SchedulerProbe
from .conftest import LlamaServer

MAX_TOKENS = 24
PREEMPTION_S = 0.25
QUESTION = "List the numbers from one to thirty, separated by commas."

# About 420 tokens of stable instructions: the prefix a provider (here, llama.cpp's slot) caches.
_RULES = [
    "You are a careful assistant for a small hardware shop that sells tools, screws, paint and garden supplies.",
    "Answer in one short paragraph, in plain English, without lists unless the customer asks for one.",
    "Always check that the product you mention is one the shop sells; if you are not sure, say so.",
    "Prices are in euros and include tax; never invent a discount or a delivery date.",
    "Opening hours are Monday to Friday from eight to six, and Saturday from nine to one.",
    "Returns are accepted within thirty days with a receipt, except for mixed paint and cut timber.",
]
SYSTEM = " ".join(_RULES * 3 + _RULES[:4])


def _no_reuse() -> dict[str, Any]:
    """A connection per call. llama-server closes the connection right after every streamed response
    while its headers say ``Keep-Alive: timeout=5, max=100``; the client pools it, and its next call
    checks the connection is still open before sending. On an idle machine the close has arrived by
    then (a new connection is made); on a busy one it can come just after the check, and that call
    fails with "Server disconnected without sending a response" (18 of 176 rounds of the demo's
    six calls with two busy loops on the 2 cores; none of 109 without reuse). What these tests check
    is what the server answers, not that race: with max_retries=0, no connection is reused."""
    return {"limits": httpx2.Limits(max_keepalive_connections=0)}


def _openai(server: LlamaServer) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{server.base_url}/v1", api_key="sk-no-key", max_retries=0, timeout=120,
        http_client=openai.DefaultHttpxClient(**_no_reuse()),
    )  # fmt: skip


def _anthropic(server: LlamaServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=server.base_url, api_key="sk-no-key", max_retries=0, timeout=120,
        http_client=anthropic.DefaultHttpxClient(**_no_reuse()),
    )  # fmt: skip


def _messages(system: str | None = None, question: str = QUESTION) -> list[dict[str, str]]:
    out = [] if system is None else [{"role": "system", "content": system}]
    return [*out, {"role": "user", "content": question}]


def _stream_openai(client: openai.OpenAI, messages: list[dict[str, str]]) -> tuple[float, list[Any]]:
    """A streamed chat call; (the app's own TTFT, the chunks)."""
    start = time.perf_counter()
    first = None
    chunks = []
    stream = client.chat.completions.create(
        model="smollm2",
        messages=messages,  # type: ignore[arg-type]
        max_tokens=MAX_TOKENS,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    for chunk in stream:
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.perf_counter() - start
        chunks.append(chunk)
    assert first is not None
    return first, chunks


def test_openai_streamed_call_against_the_app_and_the_server(llama_server: LlamaServer, telemetry: Telemetry) -> None:
    with SchedulerProbe() as probe:  # on a busy machine the app may be preempted longer than PREEMPTION_S
        app_ttft, chunks = _stream_openai(_openai(llama_server), _messages())
    attrs = dict(telemetry.call().attributes or {})
    timings = chunks[-1].model_extra["timings"]
    usage = next(c.usage for c in chunks if c.usage is not None)

    assert attrs[sc.GEN_AI_PROVIDER_NAME] == "llama.cpp"
    assert attrs[sc.GEN_AI_RESPONSE_MODEL] == chunks[0].model == llama_server.model_path  # the GGUF path
    assert attrs[sc.GEN_AI_REQUEST_MODEL] == "smollm2"

    ttft = attrs[sc.FT_TIME_TO_FIRST_TOKEN]
    assert app_ttft - probe.allow(PREEMPTION_S) <= ttft <= app_ttft + 0.001
    prompt_s = timings["prompt_ms"] / 1000
    assert attrs[sc.FT_SERVER_PROMPT_TIME] == pytest.approx(prompt_s)
    assert ttft >= prompt_s - 0.001

    assert attrs[sc.GEN_AI_USAGE_INPUT_TOKENS] == usage.prompt_tokens
    assert attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == usage.completion_tokens == timings["predicted_n"] == MAX_TOKENS
    cached = usage.prompt_tokens_details.cached_tokens if usage.prompt_tokens_details else 0
    assert attrs.get(sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, 0) == cached == timings["cache_n"]
    assert attrs[sc.FT_SERVER_PROMPT_TOKENS] + attrs[sc.FT_SERVER_CACHED_TOKENS] == usage.prompt_tokens

    tpot = attrs[sc.FT_TIME_PER_OUTPUT_TOKEN]
    client_decode = tpot * (MAX_TOKENS - 1)
    server_decode = timings["predicted_ms"] / 1000
    assert attrs[sc.FT_SERVER_COMPLETION_TIME] == pytest.approx(server_decode)
    assert abs(client_decode - server_decode) <= 2 * PREEMPTION_S + 0.25 * server_decode
    print(
        f"\nllama-server streamed: TTFT client {ttft * 1000:.1f} ms (app {app_ttft * 1000:.1f} ms), "
        f"server prompt {prompt_s * 1000:.1f} ms for {timings['prompt_n']} tokens; TPOT client {tpot * 1000:.2f} ms, "
        f"server {timings['predicted_per_token_ms']:.2f} ms"
    )


def test_openai_whole_call(llama_server: LlamaServer, telemetry: Telemetry) -> None:
    client = _openai(llama_server)
    start = time.perf_counter()
    result = client.chat.completions.create(
        model="smollm2", messages=_messages(), max_tokens=MAX_TOKENS, temperature=0, extra_body={"ignore_eos": True}
    )  # type: ignore[arg-type]
    app_duration = time.perf_counter() - start
    span = telemetry.call()
    attrs = dict(span.attributes or {})
    timings = (result.model_extra or {})["timings"]
    assert attrs[sc.GEN_AI_PROVIDER_NAME] == "llama.cpp"
    assert attrs[sc.FT_SERVER_TIMING_SOURCE] == "llama.cpp"
    assert attrs[sc.GEN_AI_RESPONSE_ID] == result.id
    assert attrs[sc.GEN_AI_USAGE_INPUT_TOKENS] == result.usage.prompt_tokens  # type: ignore[union-attr]
    assert attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == result.usage.completion_tokens == MAX_TOKENS  # type: ignore[union-attr]
    duration = (span.end_time - span.start_time) / 1e9  # type: ignore[operator]
    server_s = (timings["prompt_ms"] + timings["predicted_ms"]) / 1000
    assert server_s - 0.001 <= duration <= app_duration + 0.001


def test_anthropic_messages_streamed_and_whole(llama_server: LlamaServer, telemetry: Telemetry) -> None:
    client = _anthropic(llama_server)
    start = time.perf_counter()
    first = None
    with (
        SchedulerProbe() as probe,
        client.messages.stream(
            model="smollm2",
            max_tokens=MAX_TOKENS,
            messages=[{"role": "user", "content": QUESTION}],
            extra_body={"ignore_eos": True, "temperature": 0},
        ) as stream,
    ):
        for _text in stream.text_stream:
            if first is None:
                first = time.perf_counter() - start
        final = stream.get_final_message()
    assert first is not None
    message = client.messages.create(
        model="smollm2",
        max_tokens=MAX_TOKENS,
        messages=[{"role": "user", "content": QUESTION}],
        extra_body={"temperature": 0},
    )
    calls = telemetry.calls()
    assert len(calls) == 2  # one span per call
    streamed, whole = (dict(c.attributes or {}) for c in calls)
    for attrs, answer in ((streamed, final), (whole, message)):
        usage = answer.usage
        assert attrs[sc.GEN_AI_PROVIDER_NAME] == "llama.cpp"  # the Server header: this API has no timings
        assert attrs[sc.GEN_AI_RESPONSE_MODEL] == answer.model
        assert attrs[sc.GEN_AI_USAGE_INPUT_TOKENS] == usage.input_tokens + (usage.cache_read_input_tokens or 0)
        assert attrs.get(sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, 0) == (usage.cache_read_input_tokens or 0)
        assert attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == usage.output_tokens
    assert streamed[sc.GEN_AI_REQUEST_STREAM] is True
    assert first - probe.allow(PREEMPTION_S) <= streamed[sc.FT_TIME_TO_FIRST_TOKEN] <= first + 0.001


def test_prompt_caching_cold_then_cached(llama_server: LlamaServer, telemetry: Telemetry) -> None:
    """A fresh ~420-token system prompt is evaluated once; the next calls take it from the cache."""
    client = _openai(llama_server)
    system = f"Session {uuid.uuid4().hex}. {SYSTEM}"  # a prefix no earlier call left in the cache
    questions = [QUESTION, "Name three colours.", "Say hello to the customer.", "What day comes after Monday?"]
    for question in questions:
        _stream_openai(client, _messages(system, question))
    calls = [dict(c.attributes or {}) for c in telemetry.calls()]
    assert len(calls) == len(questions)
    cold, cached = calls[0], calls[1:]
    prompt_tokens = cold[sc.GEN_AI_USAGE_INPUT_TOKENS]
    assert prompt_tokens >= 400
    # At most the chat template's opening tokens, shared with whatever the slot held before.
    assert cold.get(sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, 0) < 0.05 * prompt_tokens
    for attrs in cached:
        # Everything up to where the user's question starts is reused.
        assert attrs[sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] >= 0.8 * prompt_tokens
        assert attrs[sc.FT_SERVER_CACHED_TOKENS] == attrs[sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS]
        assert attrs[sc.FT_SERVER_PROMPT_TIME] < cold[sc.FT_SERVER_PROMPT_TIME]
    cold_ttft = cold[sc.FT_TIME_TO_FIRST_TOKEN]
    cached_ttft = statistics.median(a[sc.FT_TIME_TO_FIRST_TOKEN] for a in cached)
    assert cached_ttft < cold_ttft
    print(
        f"\nllama-server prompt cache: {prompt_tokens} prompt tokens; cold TTFT {cold_ttft * 1000:.0f} ms "
        f"(server prompt {cold[sc.FT_SERVER_PROMPT_TIME] * 1000:.0f} ms), cached TTFT median "
        f"{cached_ttft * 1000:.0f} ms with {cached[0][sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS]} cached tokens "
        f"(server prompt {statistics.median(a[sc.FT_SERVER_PROMPT_TIME] for a in cached) * 1000:.0f} ms)"
    )


def test_demo_against_llama_server(llama_server: LlamaServer) -> None:
    """``firsttoken demo --server URL`` drives both SDKs' calls to the real server and reports them."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FIRSTTOKEN_"))}
    args = ["--server", llama_server.base_url, "--server-anthropic", "--actions", "2", "--concurrency", "1"]
    done = subprocess.run(
        [sys.executable, "-m", "firsttoken.cli", "demo", *args, "--html", ""],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "Where the time went" in done.stdout
    assert "a call failed" not in done.stderr


def test_the_demos_conversation_turns_are_accepted_by_llama_server(llama_server: LlamaServer) -> None:
    """The demo sends a conversation's history on every turn, through each API kind; llama-server's
    Responses API refuses input items without a "type" (400 "Cannot determine type of 'item'"),
    which the official API allows leaving out."""
    from firsttoken.cli import demo

    client, claude = _openai(llama_server), _anthropic(llama_server)
    history = [("Is there a warranty on wheels?", "Yes, two years.")]
    clients = type("Clients", (), {"openai": client, "anthropic": claude})()
    for provider in ("openai", "anthropic"):
        for kind in ("stream", "chat", "responses"):
            call = demo._Call(provider, "default", kind, "And on frames?", 4, False, list(history))
            assert isinstance(call.run(clients), str), (provider, kind)  # type: ignore[arg-type]
    client.close()
    claude.close()
