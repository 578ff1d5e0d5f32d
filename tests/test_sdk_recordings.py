"""Responses recorded against the real services (tests/recordings/sdks, provenance in each ``note``, and the
Groq and Mistral cassettes of tests/recordings/endpoints), replayed through the real SDKs: every field the
call span carries is checked against the recorded bytes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.version import Version

from firsttoken import semconv as sc
from firsttoken.sim import LatencyModel, Simulator

from .conftest import Telemetry

cohere = pytest.importorskip("cohere", reason="cohere is in the dev extra")
groq = pytest.importorskip("groq", reason="groq is in the dev extra")
genai = pytest.importorskip("google.genai", reason="google-genai is in the dev extra")
types = pytest.importorskip("google.genai.types")
oauth2 = pytest.importorskip("google.oauth2.credentials", reason="google-auth comes with google-genai")
pytest.importorskip("mistralai", reason="mistralai is in the dev extra")
try:
    from mistralai import Mistral
except ImportError:  # mistralai 2 and later keep the client in mistralai.client
    from mistralai.client import Mistral  # type: ignore[no-redef]

HERE = Path(__file__).parent / "recordings"
FAST = LatencyModel(queue_ms=1, decode_tokens_per_s=2000, jitter=0)
STEP = 0.02
PACED = LatencyModel(queue_ms=1, decode_tokens_per_s=1 / STEP, jitter=0)  # one recorded event every STEP seconds


def _recorded(cassette: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The recorded request body and the response's JSON objects (one, or each SSE event's)."""
    interaction = yaml.safe_load(cassette.read_text())["interactions"][0]
    body = interaction["response"]["body"]["string"]
    if "text/event-stream" in interaction["response"]["headers"]["content-type"][0]:
        events = [json.loads(line[5:]) for line in body.splitlines() if line.startswith("data: {")]
    else:
        events = [json.loads(body)]
    return json.loads(interaction["request"]["body"]), events


def _metric_total(points: list[Any], provider: str, token_type: str | None = None) -> float:
    """The sum of a metric's points of one provider (and token type): histogram sums or counter values."""
    return sum(
        pt.sum if hasattr(pt, "sum") else pt.value
        for pt in points
        if pt.attributes.get(sc.GEN_AI_PROVIDER_NAME) == provider
        and (token_type is None or pt.attributes.get(sc.GEN_AI_TOKEN_TYPE) == token_type)
    )


def _metrics_agree_with_the_spans(telemetry: Telemetry) -> None:
    """The metrics carry what the call spans carry, per provider: token counts (the conventions'
    histogram and firsttoken's counters, cached and reasoning included) and a time-to-first-token
    point per call with a first token."""
    metrics = telemetry.metrics()
    calls = [dict(c.attributes or {}) for c in telemetry.calls()]
    for provider in {a[sc.GEN_AI_PROVIDER_NAME] for a in calls}:
        mine = [a for a in calls if a[sc.GEN_AI_PROVIDER_NAME] == provider]
        spans = {key: sum(int(a.get(key, 0)) for a in mine) for key in (
            sc.GEN_AI_USAGE_INPUT_TOKENS, sc.GEN_AI_USAGE_OUTPUT_TOKENS,
            sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
        )}  # fmt: skip
        usage = metrics.get(sc.M_TOKEN_USAGE, [])
        assert _metric_total(usage, provider, sc.TOKEN_TYPE_INPUT) == spans[sc.GEN_AI_USAGE_INPUT_TOKENS] > 0
        assert _metric_total(usage, provider, sc.TOKEN_TYPE_OUTPUT) == spans[sc.GEN_AI_USAGE_OUTPUT_TOKENS] > 0
        for metric, key in (
            (sc.M_INPUT_TOKENS, sc.GEN_AI_USAGE_INPUT_TOKENS),
            (sc.M_OUTPUT_TOKENS, sc.GEN_AI_USAGE_OUTPUT_TOKENS),
            (sc.M_CACHE_READ_INPUT_TOKENS, sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS),
            (sc.M_REASONING_OUTPUT_TOKENS, sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS),
        ):
            assert _metric_total(metrics.get(metric, []), provider) == spans[key], (provider, metric)
        first_tokens = [a[sc.FT_TIME_TO_FIRST_TOKEN] for a in mine if sc.FT_TIME_TO_FIRST_TOKEN in a]
        ttft = [
            pt
            for pt in metrics.get(sc.M_TIME_TO_FIRST_TOKEN, [])
            if pt.attributes.get(sc.GEN_AI_PROVIDER_NAME) == provider
        ]
        assert sum(pt.count for pt in ttft) == len(first_tokens)
        assert sum(pt.sum for pt in ttft) == pytest.approx(sum(first_tokens))


@pytest.fixture(autouse=True)
def _check_metrics(telemetry: Telemetry) -> Iterator[None]:
    yield
    _metrics_agree_with_the_spans(telemetry)


def test_gemini_stream_with_thought_summaries(telemetry: Telemetry) -> None:
    cassette = HERE / "sdks" / "gemini_stream_thinking.yaml"
    _, events = _recorded(cassette)
    last = events[-1]["usageMetadata"]
    with Simulator(replay=[cassette], latency=FAST) as sim:
        client = genai.Client(api_key="k", http_options=types.HttpOptions(base_url=sim.url, api_version="v1beta"))
        config = types.GenerateContentConfig(thinking_config=types.ThinkingConfig(include_thoughts=True))
        chunks = list(
            client.models.generate_content_stream(
                model="gemini-2.5-pro", contents="How do I cross the street?", config=config
            )
        )
    assert len(chunks) == len(events)
    (served,) = sim.requests  # the simulator's own log reads Gemini's usageMetadata too
    assert (served.input_tokens, served.output_tokens, served.reasoning_tokens) == (34, 387 + 759, 759)
    a = telemetry.call().attributes
    assert a[sc.GEN_AI_OPERATION_NAME] == "generate_content"
    assert a[sc.GEN_AI_PROVIDER_NAME] == "gcp.gemini"
    assert a[sc.GEN_AI_REQUEST_MODEL] == "gemini-2.5-pro"
    assert a[sc.GEN_AI_RESPONSE_MODEL] == events[-1]["modelVersion"]
    assert a[sc.GEN_AI_RESPONSE_ID] == events[-1]["responseId"]
    assert a[sc.GEN_AI_USAGE_INPUT_TOKENS] == last["promptTokenCount"] == 34
    assert a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == last["candidatesTokenCount"] + last["thoughtsTokenCount"] == 387 + 759
    assert a[sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] == 759
    assert a[sc.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)
    assert a[sc.FT_END_REASON] == sc.END_COMPLETED
    assert a[sc.FT_CHUNK_COUNT] == len(events)
    assert a[sc.FT_TIME_TO_FIRST_TOKEN] > 0  # the first thought summary: streamed, so not hidden
    # TPOT spreads the first-to-last token time over every output token, the streamed thoughts too.
    decode = a[sc.FT_PHASE_DURATION_PREFIX + "decode"]
    assert a[sc.FT_TIME_PER_OUTPUT_TOKEN] * (387 + 759 - 1) == pytest.approx(decode, rel=0.05, abs=2e-4)


def test_cohere_v2_cached_tokens(telemetry: Telemetry) -> None:
    cassette = HERE / "sdks" / "cohere_v2_chat_cached.yaml"
    request, (recorded,) = _recorded(cassette)
    with Simulator(replay=[cassette], latency=FAST) as sim:
        client = cohere.ClientV2(api_key="k", base_url=sim.url)
        result = client.chat(model=request["model"], messages=request["messages"])
    assert result.usage is not None and result.usage.cached_tokens == 2928
    a = telemetry.call().attributes
    assert a[sc.GEN_AI_PROVIDER_NAME] == "cohere"
    assert a[sc.GEN_AI_REQUEST_MODEL] == "command-r7b-12-2024"
    assert a[sc.GEN_AI_RESPONSE_ID] == recorded["id"]
    assert a[sc.GEN_AI_USAGE_INPUT_TOKENS] == recorded["usage"]["tokens"]["input_tokens"] == 2935
    assert a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == recorded["usage"]["tokens"]["output_tokens"] == 4
    assert a[sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == recorded["usage"]["cached_tokens"]
    assert a[sc.GEN_AI_RESPONSE_FINISH_REASONS] == ("complete",)


def test_groq_sdk_replays_groq_recordings(telemetry: Telemetry) -> None:
    whole_cassette = HERE / "endpoints" / "groq_chat.yaml"
    stream_cassette = HERE / "endpoints" / "groq_chat_stream.yaml"
    whole_request, (whole,) = _recorded(whole_cassette)
    stream_request, events = _recorded(stream_cassette)
    with Simulator(replay=[whole_cassette, stream_cassette], latency=FAST) as sim:
        client = groq.Groq(api_key="k", base_url=sim.url)
        client.chat.completions.create(**whole_request)
        list(client.chat.completions.create(**stream_request))
    first, second = (c.attributes for c in telemetry.calls())
    for a, usage in ((first, whole["usage"]), (second, events[-1]["x_groq"]["usage"])):
        assert a[sc.GEN_AI_PROVIDER_NAME] == "groq"
        assert a[sc.GEN_AI_USAGE_INPUT_TOKENS] == usage["prompt_tokens"]
        assert a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == usage["completion_tokens"]
        assert a[sc.FT_SERVER_TIMING_SOURCE] == "groq"
        assert a[sc.FT_SERVER_QUEUE_TIME] == usage["queue_time"]
    assert second[sc.FT_TIME_TO_FIRST_TOKEN] > 0


def test_mistral_sdk_replays_a_mistral_recording(telemetry: Telemetry) -> None:
    cassette = HERE / "endpoints" / "mistral_chat.yaml"
    request, (recorded,) = _recorded(cassette)
    with Simulator(replay=[cassette], latency=FAST) as sim:
        Mistral(api_key="k", server_url=sim.url).chat.complete(**request)
    a = telemetry.call().attributes
    assert a[sc.GEN_AI_PROVIDER_NAME] == "mistral_ai"
    assert a[sc.GEN_AI_RESPONSE_ID] == recorded["id"]
    assert a[sc.GEN_AI_RESPONSE_MODEL] == recorded["model"]
    assert a[sc.GEN_AI_USAGE_INPUT_TOKENS] == recorded["usage"]["prompt_tokens"]
    assert a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == recorded["usage"]["completion_tokens"]


def test_cohere_v2_stream(telemetry: Telemetry) -> None:
    cassette = HERE / "sdks" / "cohere_v2_chat_stream.yaml"
    request, events = _recorded(cassette)
    start, end = events[0], events[-1]
    usage = end["delta"]["usage"]
    with Simulator(replay=[cassette], latency=FAST) as sim:
        client = cohere.ClientV2(api_key="k", base_url=sim.url)
        received = list(client.chat_stream(model=request["model"], messages=request["messages"]))
    assert [e.type for e in received] == [e["type"] for e in events]
    a = telemetry.call().attributes
    assert a[sc.GEN_AI_OPERATION_NAME] == "chat"
    assert a[sc.GEN_AI_PROVIDER_NAME] == "cohere"
    assert a[sc.GEN_AI_REQUEST_MODEL] == "command"
    assert a[sc.GEN_AI_REQUEST_STREAM] is True
    assert a[sc.GEN_AI_RESPONSE_ID] == start["id"] == "6cd6ce61-bb3b-46f6-907e-fcfab45e51b6"
    # usage.tokens (what the model saw and wrote), not billed_units (7 and 109)
    assert a[sc.GEN_AI_USAGE_INPUT_TOKENS] == usage["tokens"]["input_tokens"] == 69
    assert a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == usage["tokens"]["output_tokens"] == 110
    assert a[sc.GEN_AI_RESPONSE_FINISH_REASONS] == ("complete",)
    assert a[sc.FT_END_REASON] == sc.END_COMPLETED
    assert a[sc.FT_CHUNK_COUNT] == len(events)
    assert a[sc.FT_TIME_TO_FIRST_TOKEN] > 0


@pytest.mark.parametrize("name", ["mistral_chat_stream.yaml", "mistral_chat_stream_thinking.yaml"])
def test_mistral_sdk_replays_mistral_streams(telemetry: Telemetry, name: str) -> None:
    """Mistral sends the usage on the chunk with finish_reason, without stream_options; magistral's
    thinking chunks carry a list of thinking parts as their delta's content."""
    if "thinking" in name and Version(metadata.version("mistralai")) < Version("1.9.3"):
        pytest.skip("mistralai before 1.9.3 cannot parse thinking chunks (its own ValidationError, with or without us)")
    cassette = HERE / "sdks" / name
    request, events = _recorded(cassette)
    last = events[-1]
    assert "stream_options" not in request and last["choices"][0]["finish_reason"] == "stop"
    first_output = next(i for i, e in enumerate(events) if e["choices"][0]["delta"].get("content"))
    with Simulator(replay=[cassette], latency=PACED) as sim:
        client = Mistral(api_key="k", server_url=sim.url)
        chunks = list(client.chat.stream(model=request["model"], messages=request["messages"]))
    assert len(chunks) == len(events)
    a = telemetry.call().attributes
    assert a[sc.GEN_AI_OPERATION_NAME] == "chat"
    assert a[sc.GEN_AI_PROVIDER_NAME] == "mistral_ai"
    assert a[sc.GEN_AI_REQUEST_MODEL] == request["model"]
    assert a[sc.GEN_AI_REQUEST_STREAM] is True
    assert a[sc.GEN_AI_RESPONSE_ID] == events[0]["id"] == last["id"]
    assert a[sc.GEN_AI_RESPONSE_MODEL] == last["model"]
    assert a[sc.GEN_AI_USAGE_INPUT_TOKENS] == last["usage"]["prompt_tokens"]
    assert a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == last["usage"]["completion_tokens"]
    assert a[sc.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)
    assert a[sc.FT_END_REASON] == sc.END_COMPLETED
    assert a[sc.FT_CHUNK_COUNT] == len(events)
    # The first token is the first chunk with content (magistral's is a thinking chunk, four chunks before the
    # first text): it came first_output steps after the first chunk; a bound, since late reads only bunch events.
    ttft_after_first_chunk = a[sc.FT_TIME_TO_FIRST_TOKEN] - a[sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK]
    assert 0 <= ttft_after_first_chunk < (first_output + 2) * STEP


def test_vertex_ai_through_google_genai(telemetry: Telemetry) -> None:
    """google-genai's Vertex AI client needs credentials: a static OAuth token is valid as it is, so the
    SDK never refreshes it and nothing leaves the machine (AnonymousCredentials fail: the SDK refreshes them)."""
    whole_cassette = HERE / "sdks" / "vertex_ai_generate.yaml"
    stream_cassette = HERE / "sdks" / "vertex_ai_stream.yaml"
    whole_request, (whole,) = _recorded(whole_cassette)
    stream_request, (event,) = _recorded(stream_cassette)
    with Simulator(replay=[whole_cassette, stream_cassette], latency=FAST) as sim:
        client = genai.Client(
            vertexai=True,
            project="pydantic-ai",
            location="global",
            credentials=oauth2.Credentials(token="recorded"),
            http_options=types.HttpOptions(base_url=sim.url),
        )
        system = whole_request["systemInstruction"]["parts"][0]["text"]
        answer = client.models.generate_content(
            model="gemini-2.0-flash",
            contents=whole_request["contents"][0]["parts"][0]["text"],
            config=types.GenerateContentConfig(system_instruction=system),
        )
        chunks = list(
            client.models.generate_content_stream(
                model="gemini-3-flash-preview",
                contents=stream_request["contents"][0]["parts"][0]["text"],
                config=types.GenerateContentConfig(response_modalities=["TEXT"]),
            )
        )
    served = [s.path for s in sim.requests]
    assert served == [
        "/v1beta1/projects/pydantic-ai/locations/global/publishers/google/models/gemini-2.0-flash:generateContent",
        "/v1beta1/projects/pydantic-ai/locations/global/publishers/google/models/gemini-3-flash-preview:streamGenerateContent",
    ]
    assert answer.text == "The capital of France is Paris.\n" and [c.text for c in chunks] == ["OK"]
    first, second = (c.attributes for c in telemetry.calls())
    for a, data, model in ((first, whole, "gemini-2.0-flash"), (second, event, "gemini-3-flash-preview")):
        assert a[sc.GEN_AI_OPERATION_NAME] == "generate_content"
        assert a[sc.GEN_AI_PROVIDER_NAME] == "gcp.vertex_ai"
        assert a[sc.GEN_AI_REQUEST_MODEL] == model
        assert a[sc.GEN_AI_RESPONSE_MODEL] == data["modelVersion"] == model
        assert a[sc.GEN_AI_RESPONSE_ID] == data["responseId"]
        assert a[sc.GEN_AI_USAGE_INPUT_TOKENS] == data["usageMetadata"]["promptTokenCount"]
        assert a[sc.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)
        assert a[sc.FT_END_REASON] == sc.END_COMPLETED
    assert sc.GEN_AI_REQUEST_STREAM not in first and second[sc.GEN_AI_REQUEST_STREAM] is True  # set when streamed
    assert first[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == whole["usageMetadata"]["candidatesTokenCount"] == 8
    assert sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS not in first
    # Thinking that was not streamed: counted in the output and as reasoning, one chunk, one visible token.
    assert second[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 1 + 100
    assert second[sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] == event["usageMetadata"]["thoughtsTokenCount"] == 100
    assert second[sc.FT_CHUNK_COUNT] == 1
    assert second[sc.FT_TIME_TO_FIRST_TOKEN] > 0
