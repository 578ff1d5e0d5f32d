"""One reader per wire format: the wire path and the SDK path read the same events the same way.

The wire path once had its own copies of the OpenAI and Anthropic readers, and they drifted: every
Anthropic ``content_block_delta`` counted as output there (a ``signature_delta`` stamped the first
token before any text), and every Responses ``*.delta`` did. These feed one recorded-shape stream,
as SSE bytes, to the wire reader for each format, and check it against what the SDK path counts.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from firsttoken import semconv as sc
from firsttoken.providers import direct
from firsttoken.timeline import Timeline


def _timeline(operation: str = sc.OP_CHAT, api_type: str | None = None) -> Timeline:
    tl = Timeline(
        provider="x",
        operation=operation,
        request_model="m",
        server_address=None,
        server_port=None,
        stream=True,
        on_finish=lambda _tl: None,
    )
    tl.api_type = api_type
    return tl


def _sse(events: list[tuple[str | None, dict[str, Any]]]) -> bytes:
    out = b""
    for name, data in events:
        if name:
            out += f"event: {name}\n".encode()
        out += b"data: " + json.dumps(data).encode() + b"\n\n"
    return out


def _read(family: str, tl: Timeline, body: bytes) -> direct.SseReader:
    reader = direct.SseReader(tl, direct.FORMATS[[f.family for f in direct.FORMATS].index(family)])
    for i in range(0, len(body), 7):  # in small pieces, as a network would cut them
        reader.feed(body[i : i + 7])
    return reader


ANTHROPIC = [
    (
        "message_start",
        {"type": "message_start", "message": {"id": "msg_1", "model": "claude", "usage": {"input_tokens": 5}}},
    ),
    ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking"}}),
    (
        "content_block_delta",
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "abc"}},
    ),
    ("content_block_delta", {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hi"}}),
    ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}}),
    ("message_stop", {"type": "message_stop"}),
]


def test_anthropic_signature_deltas_are_not_output_on_the_wire() -> None:
    tl = _timeline()
    reader = _read("anthropic", tl, _sse(ANTHROPIC))
    assert reader.done
    assert tl.token_chunk_count == 1  # the text delta only, as anthropic's SDK observer counts
    assert tl.finish_reasons == {0: "end_turn"} and tl.output_tokens == 3 and tl.response_id == "msg_1"


RESPONSES = [
    (None, {"type": "response.created", "response": {"id": "resp_1", "model": "gpt"}}),
    (None, {"type": "response.web_search_call.delta", "delta": "x"}),  # not output: not in the SDK's set
    (None, {"type": "response.output_text.delta", "delta": "Hi"}),
    (
        None,
        {
            "type": "response.completed",
            "response": {
                "id": "resp_1",
                "status": "completed",
                "output": [],
                "usage": {"input_tokens": 4, "output_tokens": 2},
            },
        },
    ),
]


def test_responses_deltas_outside_the_sdks_set_are_not_output_on_the_wire() -> None:
    tl = _timeline(api_type="responses")
    reader = _read("openai", tl, _sse(RESPONSES))
    assert reader.done
    assert tl.token_chunk_count == 1
    assert tl.finish_reasons == {0: "stop"} and tl.output_tokens == 2


@pytest.mark.parametrize(
    ("family", "events"),
    [
        (
            "openai",
            [(None, {"choices": [{"index": 0, "delta": {"content": "Hi"}}]}), ("error", {"error": {"message": "x"}})],
        ),
        (
            "openai",
            [(None, {"choices": [{"index": 0, "delta": {"content": "Hi"}}]}), (None, {"error": {"message": "x"}})],
        ),
        (
            "anthropic",
            [ANTHROPIC[0], ANTHROPIC[3], ("error", {"type": "error", "error": {"type": "overloaded_error"}})],
        ),
    ],
    ids=["groq-event-error", "openai-error-object", "anthropic-event-error"],
)
def test_an_error_event_ends_the_call_with_an_error_and_is_not_a_chunk(family: str, events: list[Any]) -> None:
    ended: list[Timeline] = []
    tl = _timeline()
    tl.on_finish = ended.append
    _read(family, tl, _sse(events))
    assert ended == [tl] and tl.end_reason == sc.END_ERROR and tl.error_type == "APIError"
    assert tl.chunk_count == len(events) - 1 and tl.token_chunk_count == 1
