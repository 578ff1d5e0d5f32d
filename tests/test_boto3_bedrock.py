"""boto3's ``bedrock-runtime`` client, measured on the client seam (botocore sends through urllib3):
``converse``, ``converse_stream``, ``invoke_model`` and ``invoke_model_with_response_stream`` against the
simulator speaking Bedrock Runtime (AWS event-stream frames, checked by botocore's own parser), signed
with fake credentials over real loopback sockets.

Timings: the simulator's queue is 30 ms and it decodes 400 tokens/s, so the first content delta comes
at least 30 ms after the request and after the response's headers; the bounds above are generous (5 s)
for a busy machine.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

import firsttoken
from firsttoken import semconv as sc
from firsttoken.sim import CacheConfig, Fault, LatencyModel, Simulator

from .conftest import Telemetry

boto3 = pytest.importorskip("boto3", reason="boto3 is in the dev extra")
import botocore.session  # noqa: E402
from botocore.config import Config  # noqa: E402
from botocore.credentials import CredentialProvider, RefreshableCredentials  # noqa: E402
from botocore.exceptions import ClientError, EventStreamError  # noqa: E402
from botocore.parsers import ResponseParserError  # noqa: E402

MODEL_ID = "anthropic.claude-x-v1:0"
NOVA_ID = "amazon.nova-lite-v1:0"
LATENCY = LatencyModel(queue_ms=30, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=400, jitter=0, output_tokens=12)
SYSTEM = [{"text": "You are a careful assistant for a shipping company. " * 40}, {"cachePoint": {"type": "default"}}]
CONVERSE: dict[str, Any] = {
    "modelId": MODEL_ID,
    "system": SYSTEM,
    "messages": [{"role": "user", "content": [{"text": "Say hello"}]}],
    "inferenceConfig": {"maxTokens": 64},
}
ANTHROPIC_BODY = json.dumps(
    {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64, "messages": [{"role": "user", "content": "Hi"}]}
)
SECRET = "wJalrXUtnFEMI-fake-secret"


@pytest.fixture
def sim() -> Iterator[Simulator]:
    with Simulator(latency=LATENCY, seed=5, cache=CacheConfig(min_tokens=256, block_tokens=64)) as s:
        yield s


def client_options(sim: Simulator, attempts: int = 1) -> dict[str, Any]:
    """A ``bedrock-runtime`` client's (boto3's or aiobotocore's) on the simulator, with fake credentials;
    ``total_max_attempts``: botocore's ``max_attempts`` counts the retries only."""
    return {
        "region_name": "us-east-1",
        "endpoint_url": sim.url,
        "aws_access_key_id": "AKIDEXAMPLE",
        "aws_secret_access_key": SECRET,
        "aws_session_token": "fake-session-token",
        "config": Config(retries={"total_max_attempts": attempts, "mode": "standard"}),
    }


def _client(sim: Simulator, attempts: int = 1) -> Any:
    return boto3.client("bedrock-runtime", **client_options(sim, attempts))


@contextlib.contextmanager
def _instrumented(**options: Any) -> Iterator[Telemetry]:
    t = Telemetry()
    assert firsttoken.instrument(tracer_provider=t.tracer_provider, meter_provider=t.meter_provider, **options)
    try:
        yield t
    finally:
        firsttoken.uninstrument()


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    with _instrumented() as t:
        yield t


@pytest.fixture
def captured() -> Iterator[Telemetry]:
    with _instrumented(capture_content=True) as t:
        yield t


def _attrs(t: Telemetry) -> dict[str, Any]:
    return dict(t.call().attributes or {})


def check_two_streams(t: Telemetry, sim: Simulator) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two ``converse_stream`` calls read to their end, the second reading the cache the first wrote."""
    first, second = (dict(s.attributes or {}) for s in t.calls())
    for a in (first, second):
        assert a[sc.GEN_AI_PROVIDER_NAME] == "aws.bedrock"
        assert a[sc.GEN_AI_REQUEST_MODEL] == MODEL_ID
        assert a[sc.GEN_AI_REQUEST_STREAM] is True
        assert a[sc.FT_END_REASON] == sc.END_COMPLETED
        assert a[sc.GEN_AI_RESPONSE_FINISH_REASONS] == ("end_turn",)
        assert a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 12
        assert a[sc.GEN_AI_REQUEST_MAX_TOKENS] == 64
        # TTFT at the first content delta (after messageStart), after the headers and the simulator's queue.
        assert 0.03 <= a[sc.FT_TIME_TO_RESPONSE_HEADERS] <= a[sc.FT_TIME_TO_FIRST_TOKEN] < 5.0
        assert a[sc.FT_CHUNK_COUNT] > 2
        assert sc.FT_ATTEMPTS not in a  # one attempt: absent (docs/semantics.md, "Absent means")
        assert a[sc.FT_REQUEST_BODY_SIZE] > 0
    served = sim.requests
    assert first[sc.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS] == served[0].cache_creation_tokens > 0
    assert second[sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == served[1].cached_tokens > 0
    assert first[sc.GEN_AI_USAGE_INPUT_TOKENS] == second[sc.GEN_AI_USAGE_INPUT_TOKENS] == served[0].input_tokens
    return first, second


def check_whole(t: Telemetry, answer: dict[str, Any], body: dict[str, Any]) -> None:
    """A ``converse`` (``answer``) and an ``invoke_model`` whose body (``body``) was read whole."""
    converse, invoke = (dict(s.attributes or {}) for s in t.calls())
    assert converse[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == answer["usage"]["outputTokens"] == 12
    assert converse[sc.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS] == answer["usage"]["cacheWriteInputTokens"] > 0
    assert invoke[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == body["usage"]["output_tokens"] == 12
    for a in (converse, invoke):
        assert a[sc.FT_END_REASON] == sc.END_COMPLETED
        assert a[sc.FT_RESPONSE_BODY_SIZE] > 0
        assert a[sc.GEN_AI_RESPONSE_FINISH_REASONS] == ("end_turn",)
        assert a.get(sc.GEN_AI_REQUEST_STREAM) is not True
        assert sc.FT_TIME_TO_FIRST_TOKEN not in a
        assert a[sc.GEN_AI_PROVIDER_NAME] == "aws.bedrock"


def check_closed(t: Telemetry) -> None:
    """A stream closed after its first token: ended ``closed`` at the close, not when it is collected."""
    a = _attrs(t)
    assert a[sc.FT_END_REASON] == sc.END_CLOSED
    assert sc.FT_TIME_TO_FIRST_TOKEN in a


def check_dropped(t: Telemetry, raised: BaseException) -> None:
    """A stream whose connection dropped: an error, with the class the client raised, at that moment."""
    span = t.call()  # the app still holds the stream
    a = dict(span.attributes or {})
    assert a[sc.FT_END_REASON] == sc.END_ERROR
    assert a[sc.ERROR_TYPE] == type(raised).__qualname__
    assert span.status.status_code.name == "ERROR"


def check_throttled(t: Telemetry, sim: Simulator, raised: ClientError) -> None:
    """A ``converse`` throttled then answered, and a ``converse_stream`` throttled twice and given up."""
    assert raised.response["Error"]["Code"] == "ThrottlingException", "Bedrock's error, as botocore reads it"
    answered, given_up = (dict(s.attributes or {}) for s in t.calls())
    assert answered[sc.FT_ATTEMPTS] == 2 and answered[sc.FT_END_REASON] == sc.END_COMPLETED
    assert answered[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 12
    assert given_up[sc.FT_ATTEMPTS] == 2 and given_up[sc.FT_END_REASON] == sc.END_ERROR
    assert given_up[sc.ERROR_TYPE] == "RateLimitError"
    assert given_up[sc.HTTP_RESPONSE_STATUS_CODE] == 429
    assert [r.status for r in sim.requests] == [429, 200, 429, 429]


def check_captured(t: Telemetry, events: list[dict[str, Any]]) -> None:
    """Content capture on: the prompt and the streamed answer kept, never the credentials or the signature."""
    text = "".join(e["contentBlockDelta"]["delta"]["text"] for e in events if "contentBlockDelta" in e)
    a = _attrs(t)
    assert "Say hello" in a[sc.GEN_AI_INPUT_MESSAGES]
    assert text and text in a[sc.GEN_AI_OUTPUT_MESSAGES]
    everything = repr([(s.attributes, s.events) for s in t.spans()]) + repr(t.metrics())
    for secret in ("AKIDEXAMPLE", SECRET, "fake-session-token", "Signature", "AWS4-HMAC-SHA256"):
        assert secret not in everything


def test_converse_stream_ttft_tokens_and_cache(telemetry: Telemetry, sim: Simulator) -> None:
    runtime = _client(sim)
    for _ in range(2):  # the second reads the system prompt's cache the first wrote
        events = list(runtime.converse_stream(**CONVERSE)["stream"])
        assert "metadata" in events[-1], "what boto3 returns is untouched"
    first, second = check_two_streams(telemetry, sim)
    assert sc.FT_RESPONSE_BODY_SIZE not in first  # not known: urllib3 does not count a chunked body
    assert second[sc.FT_CONNECTION_REUSED] is True


def test_converse_whole_and_invoke_model(telemetry: Telemetry, sim: Simulator) -> None:
    runtime = _client(sim)
    answer = runtime.converse(**CONVERSE)
    body = json.loads(runtime.invoke_model(modelId=MODEL_ID, body=ANTHROPIC_BODY)["body"].read())
    check_whole(telemetry, answer, body)


def test_invoke_model_read_by_its_length_then_closed_is_completed(telemetry: Telemetry, sim: Simulator) -> None:
    """``body.read(content_length)`` reads it all: the call completed with its usage, before the close
    (it waited for a read past the end, and the close made it ``closed`` with no usage)."""
    response = _client(sim).invoke_model(modelId=MODEL_ID, body=ANTHROPIC_BODY)
    length = int(response["ResponseMetadata"]["HTTPHeaders"]["content-length"])
    data = response["body"].read(length)
    assert len(telemetry.calls()) == 1
    response["body"].close()
    a = _attrs(telemetry)
    assert a[sc.FT_END_REASON] == sc.END_COMPLETED
    assert a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == json.loads(data)["usage"]["output_tokens"] == 12
    assert a[sc.FT_RESPONSE_BODY_SIZE] == length


def test_invoke_model_with_response_stream_reads_the_anthropic_events(telemetry: Telemetry, sim: Simulator) -> None:
    stream = _client(sim).invoke_model_with_response_stream(modelId=MODEL_ID, body=ANTHROPIC_BODY)["body"]
    chunks = [json.loads(e["chunk"]["bytes"]) for e in stream]
    assert chunks[-1]["type"] == "message_stop"
    a = _attrs(telemetry)
    assert a[sc.FT_END_REASON] == sc.END_COMPLETED
    assert a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 12 and a[sc.GEN_AI_USAGE_INPUT_TOKENS] > 0
    assert a[sc.GEN_AI_RESPONSE_FINISH_REASONS] == ("end_turn",)
    assert 0.03 <= a[sc.FT_TIME_TO_RESPONSE_HEADERS] <= a[sc.FT_TIME_TO_FIRST_TOKEN] < 5.0


def test_invoke_model_with_response_stream_reads_nova_and_its_invocation_metrics(
    telemetry: Telemetry, sim: Simulator
) -> None:
    """Nova's chunks have Converse's shapes (no ``type``), its last Bedrock's invocation metrics: read
    to its end, the stream completed with its TTFT and usage (it was read as Anthropic's: no TTFT, no
    usage, and ``closed``)."""
    body = json.dumps({"messages": CONVERSE["messages"], "inferenceConfig": {"maxTokens": 64}})
    stream = _client(sim).invoke_model_with_response_stream(modelId=NOVA_ID, body=body)["body"]
    chunks = [json.loads(e["chunk"]["bytes"]) for e in stream]
    assert chunks[-1]["amazon-bedrock-invocationMetrics"]["outputTokenCount"] == 12
    a = _attrs(telemetry)
    assert a[sc.FT_END_REASON] == sc.END_COMPLETED
    assert a[sc.GEN_AI_REQUEST_MODEL] == NOVA_ID
    assert a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 12 and a[sc.GEN_AI_USAGE_INPUT_TOKENS] == sim.requests[0].input_tokens
    assert a[sc.GEN_AI_RESPONSE_FINISH_REASONS] == ("end_turn",)
    assert 0.03 <= a[sc.FT_TIME_TO_RESPONSE_HEADERS] <= a[sc.FT_TIME_TO_FIRST_TOKEN] < 5.0


_METRICS = {"inputTokenCount": 3, "outputTokenCount": 2, "invocationLatency": 90, "firstByteLatency": 40}
_LLAMA = [
    {"generation": "", "prompt_token_count": 3, "generation_token_count": 0, "stop_reason": None},
    {"generation": "Hel", "prompt_token_count": None, "generation_token_count": 1, "stop_reason": None},
    {
        "generation": "lo",
        "generation_token_count": 2,
        "stop_reason": "stop",
        "amazon-bedrock-invocationMetrics": _METRICS,
    },
]
_MISTRAL = [
    {"outputs": [{"text": "", "stop_reason": None}]},
    {"outputs": [{"text": "Hel", "stop_reason": None}]},
    {"outputs": [{"text": "lo", "stop_reason": "stop"}], "amazon-bedrock-invocationMetrics": _METRICS},
]


@pytest.mark.parametrize(
    ("model", "chunks"),
    [("meta.llama3-8b-instruct-v1:0", _LLAMA), ("mistral.mistral-large-2407-v1:0", _MISTRAL)],
    ids=["llama", "mistral"],
)
def test_model_chunks_give_the_first_token_and_the_invocation_metrics_end_the_stream(
    telemetry: Telemetry, model: str, chunks: list[dict[str, Any]]
) -> None:
    """Llama's InvokeModel chunks (``generation``) and Mistral's (``outputs[].text``; it had no TTFT), as
    botocore hands them over (the simulator speaks neither): the first with text is the first token,
    the last (Bedrock's invocation metrics) the end."""
    from firsttoken import _install
    from firsttoken.providers import direct
    from firsttoken.transport import WireRequest

    recorder = _install.active_recorder()
    assert recorder is not None
    calls = direct.DirectCalls(recorder, direct.common.provider_resolver({}))
    path = f"/model/{model}/invoke-with-response-stream"
    started = calls.start(
        WireRequest("POST", "https", "bedrock-runtime.us-east-1.amazonaws.com", None, path, {}, b"{}")
    )
    assert started is not None
    tl, family = started
    reader = calls.sse_reader(tl, family)
    for i, chunk in enumerate(chunks):
        assert not reader.done
        reader.event({"chunk": {"bytes": json.dumps(chunk).encode()}})
        assert (tl.first_token_ns is None) == (i == 0)  # an empty text is no token
    assert reader.done
    tl.finish(sc.END_COMPLETED)
    a = _attrs(telemetry)
    assert a[sc.GEN_AI_USAGE_INPUT_TOKENS] == 3 and a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 2
    assert a[sc.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)
    assert sc.FT_TIME_TO_FIRST_TOKEN in a


def test_capture_on_keeps_the_content_and_never_the_credentials(captured: Telemetry, sim: Simulator) -> None:
    check_captured(captured, list(_client(sim).converse_stream(**CONVERSE)["stream"]))


def test_capture_off_keeps_no_content(telemetry: Telemetry, sim: Simulator) -> None:
    list(_client(sim).converse_stream(**CONVERSE)["stream"])
    a = _attrs(telemetry)
    assert sc.GEN_AI_INPUT_MESSAGES not in a and sc.GEN_AI_OUTPUT_MESSAGES not in a


def test_an_early_close_ends_the_call_as_closed(telemetry: Telemetry, sim: Simulator) -> None:
    stream = _client(sim).converse_stream(**CONVERSE)["stream"]
    for event in stream:
        if "contentBlockDelta" in event:
            break
    assert telemetry.calls() == []
    stream.close()
    check_closed(telemetry)


def test_a_dropped_connection_is_an_error_at_that_moment(telemetry: Telemetry, sim: Simulator) -> None:
    sim.inject(Fault.drop_after(chunks=3))
    stream = _client(sim).converse_stream(**CONVERSE)["stream"]
    with pytest.raises(Exception) as raised:
        list(stream)
    check_dropped(telemetry, raised.value)


def test_an_exception_event_is_an_error_event(telemetry: Telemetry, sim: Simulator) -> None:
    sim.inject(Fault.error_event(after_chunks=2))
    with pytest.raises(EventStreamError):
        list(_client(sim).invoke_model_with_response_stream(modelId=MODEL_ID, body=ANTHROPIC_BODY)["body"])
    a = _attrs(telemetry)
    assert a[sc.FT_END_REASON] == sc.END_ERROR
    assert a[sc.ERROR_TYPE] == "APIError"


def test_throttling_retried_by_botocore_is_one_call(telemetry: Telemetry, sim: Simulator) -> None:
    """botocore's own retries (standard mode, backoff up to 1 s for the one retry) are one call's attempts;
    given up, the call ends with the last attempt's class: throttling is the rate-limit one."""
    runtime = _client(sim, attempts=2)
    sim.inject(Fault.rate_limit(retry_after=0))
    runtime.converse(**CONVERSE)  # throttled, then answered
    for _ in range(2):
        sim.inject(Fault.rate_limit(retry_after=0))
    with pytest.raises(ClientError) as raised:
        runtime.converse_stream(**CONVERSE)
    check_throttled(telemetry, sim, raised.value)


def _converse_both(sim: Simulator) -> tuple[list[Any], dict[str, Any]]:
    """What the app gets, less what differs from call to call: the request id and date, and the
    simulator's own latency figure (``metrics``)."""
    runtime = _client(sim)
    events = list(runtime.converse_stream(**CONVERSE)["stream"])
    events[-1]["metadata"].pop("metrics")
    whole = runtime.converse(**CONVERSE)
    whole.pop("ResponseMetadata"), whole.pop("metrics")
    return events, whole


def test_boto3_returns_the_same_with_and_without_firsttoken() -> None:
    with Simulator(latency=LATENCY, seed=9) as sim:
        plain = _converse_both(sim)
    with Simulator(latency=LATENCY, seed=9) as sim, _instrumented() as t:
        measured = _converse_both(sim)
    assert len(t.calls()) == 2
    assert measured == plain


# -- the clock starts when the app calls the client's method -------------------------------------

SLOW_S = 0.3
"""What the tests' credential refresh or event handler sleeps before the first attempt is sent."""


class _SlowRefresh:
    """A credential provider (botocore's chain, first in line) whose credentials have expired: the
    first request's signing refreshes them, which takes ``SLOW_S`` (an STS or SSO round trip)."""

    METHOD = "slow-refresh"

    def __init__(self) -> None:
        self.refreshes = 0

    def refresh(self) -> dict[str, str]:
        self.refreshes += 1
        time.sleep(SLOW_S)
        expiry = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
        return {
            "access_key": "AKIDEXAMPLE",
            "secret_key": SECRET,
            "token": "fake-session-token",
            "expiry_time": expiry.isoformat(),
        }

    def load(self) -> Any:
        expired = {**self.refresh_metadata(), "expiry_time": "2000-01-01T00:00:00Z"}
        return RefreshableCredentials.create_from_metadata(expired, self.refresh, self.METHOD)

    @staticmethod
    def refresh_metadata() -> dict[str, str]:
        return {"access_key": "AKIDEXPIRED", "secret_key": "expired", "token": "expired"}


def _slow_client(sim: Simulator, attempts: int = 1) -> tuple[Any, _SlowRefresh]:
    """A ``bedrock-runtime`` client whose credentials are refreshed (``SLOW_S``) when it first signs."""
    provider = _SlowRefresh()
    session = botocore.session.Session()
    resolver = session.get_component("credential_provider")
    resolver.insert_before(
        "env",
        type(
            "SlowRefreshProvider",
            (CredentialProvider,),
            {"METHOD": provider.METHOD, "load": lambda self: provider.load()},
        )(),
    )
    options = {k: v for k, v in client_options(sim, attempts).items() if not k.startswith("aws_")}
    return boto3.Session(botocore_session=session).client("bedrock-runtime", **options), provider


def check_slow_start(a: dict[str, Any], span: Any, observed_s: float) -> None:
    """The ``SLOW_S`` spent inside the app's call before its first attempt was sent counts: in TTFT (when
    streamed), in the duration, and in the ``prepare`` phase; the duration is no longer than the app saw
    (plus 50 ms for the two clock reads on either side of a busy machine's scheduling)."""
    duration = ((span.end_time or 0) - (span.start_time or 0)) / 1e9
    assert SLOW_S <= a[sc.FT_PHASE_DURATION_PREFIX + sc.PHASE_PREPARE] <= duration
    assert SLOW_S + 0.03 <= duration <= observed_s + 0.05  # and the simulator's 30 ms queue
    if sc.FT_TIME_TO_FIRST_TOKEN in a:
        assert SLOW_S + 0.03 <= a[sc.FT_TIME_TO_FIRST_TOKEN] <= duration


def test_a_credential_refresh_before_the_first_attempt_counts_in_ttft_and_prepare(
    telemetry: Telemetry, sim: Simulator
) -> None:
    """Signing refreshes expired credentials (300 ms here; STS, SSO, IMDS or a credential_process on the
    first call after expiry): the app waits for it inside ``converse_stream``, so it is in TTFT, the
    duration and the ``prepare`` phase. (Before the clock started at the app's call, it started at the
    first attempt's send, after signing: none of it counted.)"""
    runtime, provider = _slow_client(sim)
    started = time.perf_counter()
    events = list(runtime.converse_stream(**CONVERSE)["stream"])
    observed = time.perf_counter() - started
    assert provider.refreshes == 1 and "metadata" in events[-1]
    span = telemetry.call()
    check_slow_start(dict(span.attributes or {}), span, observed)


def test_a_before_call_handler_counts_and_retries_stay_one_call(telemetry: Telemetry, sim: Simulator) -> None:
    """An app's ``before-call`` handler (run after serialization, before botocore's retry loop) that takes
    300 ms is inside the call: its first attempt throttled and retried is still one call, two attempts."""
    runtime = _client(sim, attempts=2)
    runtime.meta.events.register("before-call.bedrock-runtime.Converse", lambda **_: time.sleep(SLOW_S))
    sim.inject(Fault.rate_limit(retry_after=0))
    started = time.perf_counter()
    runtime.converse(**CONVERSE)
    observed = time.perf_counter() - started
    span = telemetry.call()
    a = dict(span.attributes or {})
    assert a[sc.FT_ATTEMPTS] == 2 and a[sc.FT_END_REASON] == sc.END_COMPLETED
    assert [r.status for r in sim.requests] == [429, 200]
    check_slow_start(a, span, observed)


def test_other_aws_clients_and_operations_record_nothing(telemetry: Telemetry, sim: Simulator) -> None:
    """An ``sts`` client (what a credential refresh calls) and a ``bedrock-runtime`` operation firsttoken
    does not measure (``apply_guardrail``), both answered 404 by the simulator: no span, no metric."""
    options = client_options(sim)
    with pytest.raises((ClientError, ResponseParserError)):  # the simulator's JSON 404 is no STS XML
        boto3.client("sts", **options).get_caller_identity()
    with pytest.raises(ClientError):
        _client(sim).apply_guardrail(
            guardrailIdentifier="g", guardrailVersion="1", source="INPUT", content=[{"text": {"text": "Hi"}}]
        )
    assert telemetry.spans() == []
    assert not any(p.count for points in telemetry.metrics().values() for p in points)
