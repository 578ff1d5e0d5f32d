"""The Responses API's stream events read once, the same on both paths (issue 32, item 1).

The openai SDK hands the app every Responses event, its ``error`` event too (a ``ResponseErrorEvent``,
not raised); the wire path reads the same events as JSON. One reader (``openai.read_response_event``)
serves both, so a stream that completes, stops at ``max_output_tokens`` (``response.incomplete``),
fails (``response.failed``) or carries an ``error`` event is recorded the same whichever path carried
it: the real openai SDK and plain httpx over real sockets against the simulator, and, for
``response.failed`` (which the simulator does not send), the SDK's own event models beside their JSON.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import ResponseErrorEvent, ResponseFailedEvent, ResponseInProgressEvent

from firsttoken import semconv as sc
from firsttoken.providers import openai as oa
from firsttoken.providers._hooks import EVENT_ERROR, EVENT_MORE, StreamState
from firsttoken.sim import FAULT_HEADER, Fault, Simulator
from firsttoken.timeline import Timeline

from .conftest import Telemetry

MODEL = "gpt-4o-mini"
INPUT = "Say hello to the reader"
SAME = (
    sc.FT_END_REASON,
    sc.ERROR_TYPE,
    sc.GEN_AI_RESPONSE_FINISH_REASONS,
    sc.FT_CHUNK_COUNT,
    sc.GEN_AI_USAGE_INPUT_TOKENS,
    sc.GEN_AI_USAGE_OUTPUT_TOKENS,
)
"""What a call must say alike on both paths."""


def _sdk(sim: Simulator, fault: str | None, body: dict[str, Any]) -> tuple[list[str], BaseException | None]:
    if fault is not None:
        sim.inject(Fault.parse(fault))
    client = openai.OpenAI(api_key="test-key", base_url=sim.openai_base_url, max_retries=0)
    kinds: list[str] = []
    try:
        with client.responses.create(stream=True, **body) as stream:
            kinds.extend(event.type for event in stream)
    except openai.APIError as exc:
        return kinds, exc
    finally:
        client.close()
    return kinds, None


def _wire(sim: Simulator, fault: str | None, body: dict[str, Any]) -> list[str]:
    headers = {FAULT_HEADER: fault} if fault else {}
    kinds = []
    url = sim.url + "/v1/responses"
    with (
        httpx.Client(timeout=10) as http,
        http.stream("POST", url, json={**body, "stream": True}, headers=headers) as r,
    ):
        for line in r.iter_lines():
            if line.startswith("data:"):
                kinds.append(json.loads(line[5:])["type"])
    return kinds


def _call(t: Telemetry) -> tuple[dict[str, Any], str]:
    span = t.calls()[-1]
    return dict(span.attributes or {}), span.status.status_code.name


@pytest.mark.parametrize(
    ("fault", "extra", "last", "end", "reason"),
    [
        (None, {}, "response.completed", sc.END_COMPLETED, "stop"),
        (None, {"max_output_tokens": 5}, "response.incomplete", sc.END_COMPLETED, "length"),
        ("error_event;after_chunks=3", {}, "error", sc.END_ERROR, None),
    ],
    ids=["completed", "incomplete", "error-event"],
)
def test_a_responses_stream_is_recorded_alike_on_both_paths(
    telemetry: Telemetry, sim: Simulator, fault: str | None, extra: dict[str, Any], last: str, end: str, reason: str
) -> None:
    body = {"model": MODEL, "input": INPUT, **extra}
    kinds, raised = _sdk(sim, fault, body)
    assert raised is None, "the openai SDK hands the app Responses events, its error event too"
    sdk, sdk_status = _call(telemetry)
    assert _wire(sim, fault, body)[-1] == kinds[-1] == last
    wire, wire_status = _call(telemetry)
    assert len(telemetry.calls()) == 2
    assert sdk[sc.FT_END_REASON] == end
    assert {k: sdk.get(k) for k in SAME} == {k: wire.get(k) for k in SAME}
    assert sdk_status == wire_status == ("ERROR" if end == sc.END_ERROR else "UNSET")
    if end == sc.END_ERROR:
        assert sdk[sc.ERROR_TYPE] == "APIError"  # docs/semantics.md: an error event in a 200 stream
        assert sdk[sc.FT_CHUNK_COUNT] == 3, "the error event is no chunk"
    else:
        assert sc.ERROR_TYPE not in sdk
        assert list(sdk[sc.GEN_AI_RESPONSE_FINISH_REASONS]) == [reason]
        assert sdk[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == sim.wait_for_requests(2)[-1].output_tokens > 0  # SDK, wire


async def test_the_async_sdk_ends_the_call_at_the_error_event(telemetry: Telemetry, sim: Simulator) -> None:
    sim.inject(Fault.parse("error_event;after_chunks=2"))
    client = openai.AsyncOpenAI(api_key="test-key", base_url=sim.openai_base_url, max_retries=0)
    try:
        stream = await client.responses.create(model=MODEL, input=INPUT, stream=True)
        async for event in stream:
            if event.type == "error":
                # Ended when the event was read, while the app still holds the stream.
                a, status = _call(telemetry)
                assert (a[sc.FT_END_REASON], status, a[sc.ERROR_TYPE]) == (sc.END_ERROR, "ERROR", "APIError")
        await stream.close()
    finally:
        await client.close()
    assert len(telemetry.calls()) == 1


# -- response.failed: the SDK's models and their JSON, through the one reader --------------------------

CREATED = 1_764_000_000
FAILED = {
    "type": "response.failed",
    "sequence_number": 4,
    "response": {
        "id": "resp_failed_1",
        "object": "response",
        "created_at": CREATED,
        "status": "failed",
        "error": {"code": "server_error", "message": "The model failed to generate a response."},
        "incomplete_details": None,
        "instructions": None,
        "model": "gpt-4o-mini-2024-07-18",
        "output": [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 11,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": 0,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 11,
        },
    },
}
IN_PROGRESS = {**FAILED, "type": "response.in_progress", "sequence_number": 1}
IN_PROGRESS["response"] = {**FAILED["response"], "status": "in_progress", "error": None, "usage": None}  # type: ignore[dict-item]
ERROR = {"type": "error", "code": "server_error", "message": "Sorry about that!", "param": None, "sequence_number": 2}


def _timeline(ended: list[Timeline]) -> Timeline:
    tl = Timeline(
        provider="openai",
        operation=sc.OP_CHAT,
        request_model=MODEL,
        server_address=None,
        server_port=None,
        stream=True,
        on_finish=ended.append,
    )
    tl.api_type = "responses"
    return tl


def _facts(tl: Timeline) -> tuple[Any, ...]:
    return (
        tl.response_id,
        tl.response_model,
        dict(tl.finish_reasons),
        tl.input_tokens,
        tl.output_tokens,
        tl.terminal_seen,
        tl.ended,
    )


@pytest.mark.parametrize(
    ("events", "models"),
    [
        ([IN_PROGRESS, FAILED], [ResponseInProgressEvent, ResponseFailedEvent]),
        ([IN_PROGRESS, ERROR], [ResponseInProgressEvent, ResponseErrorEvent]),
    ],
    ids=["response.failed", "error"],
)
def test_the_sdk_events_and_their_json_read_alike(events: list[dict[str, Any]], models: list[Any]) -> None:
    ended: list[Timeline] = []
    wire, sdk = _timeline(ended), _timeline(ended)
    seen = [oa.FORMAT.read_event(wire, event, 1, StreamState()) for event in events]
    for event, model in zip(events, models, strict=True):
        oa.observe_response_event(sdk, model.model_validate(event), 1)
    # Both fail the call: the wire path's reader (SseReader) ends it on EVENT_ERROR; the SDK path ends it
    # itself. A failed response is also the stream's terminal event: the finish reason says how it ended.
    assert seen == [EVENT_MORE, EVENT_ERROR]
    assert ended == [sdk] and sdk.end_reason == sc.END_ERROR
    if events[-1] is FAILED:
        failed = ("resp_failed_1", "gpt-4o-mini-2024-07-18", {0: "error"}, 11, 0, True)
        assert _facts(sdk)[:6] == _facts(wire)[:6] == failed
    else:
        assert _facts(sdk)[:2] == _facts(wire)[:2] == ("resp_failed_1", "gpt-4o-mini-2024-07-18")
