"""Claude on the clouds' paths: Amazon Bedrock's ``InvokeModel`` (whole, and streamed in AWS
event-stream frames) and Google Vertex AI's ``rawPredict`` / ``streamRawPredict`` (SSE); and
Bedrock's own Converse API (``converse``, ``converse-stream``), which boto3's ``bedrock-runtime``
client calls.

InvokeModel and rawPredict take the Messages API's body with the model in the path instead (and an
``anthropic_version`` field), and answer what the Messages API answers; only Bedrock's stream framing
differs. Converse has its own shapes: content blocks of ``text``, ``cachePoint`` blocks marking what
to cache, and a stream of ``messageStart``, ``contentBlockDelta``, ``contentBlockStop``,
``messageStop`` and a final ``metadata`` event with the usage. Amazon Nova (a model id
``amazon.nova-...``) takes Converse's shapes on the InvokeModel paths too: its stream's ``chunk`` events
each hold one Converse event's JSON, the last with Bedrock's ``amazon-bedrock-invocationMetrics``.
"""

from __future__ import annotations

import base64
import binascii
import re
import struct
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple
from urllib.parse import unquote

from . import _anthropic
from ._output import ApiError, answer
from ._reply import Call, dumps
from ._text import Prompt, chunk

__all__ = ["Cloud", "bedrock_error", "bedrock_error_event", "event_frame", "match"]

EVENTSTREAM = [
    ("content-type", "application/vnd.amazon.eventstream"),
    ("x-amzn-bedrock-content-type", "application/json"),
]

_BEDROCK = re.compile(r"/model/(?P<model>[^/]+)/(?P<op>invoke|invoke-with-response-stream|converse|converse-stream)")
_VERTEX = re.compile(
    r"(?:/v1)?/projects/[^/]+/locations/[^/]+/publishers/anthropic/models/(?P<model>[^/:]+):(?P<op>rawPredict|streamRawPredict)"
)


class Cloud(NamedTuple):
    """A request on a cloud path: the model it names, whether it streams, and what answers it."""

    model: str
    stream: bool
    route: Callable[[Call], Awaitable[None]]
    bedrock: bool
    """Bedrock's: its errors are Bedrock's (:func:`bedrock_error`), and it sends no rate-limit headers."""


_BEDROCK_ERRORS = {
    400: "ValidationException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    408: "ModelTimeoutException",
    424: "ModelErrorException",
    429: "ThrottlingException",
    503: "ServiceUnavailableException",
}


def bedrock_error(status: int, message: str) -> tuple[list[tuple[str, str]], bytes]:
    """An error as Bedrock Runtime answers it: its type in ``x-amzn-ErrorType`` (which botocore reads
    for the error code), and ``{"message": ...}``."""
    kind = _BEDROCK_ERRORS.get(status, "InternalServerException")
    headers = [
        ("content-type", "application/json"),
        ("x-amzn-errortype", f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/"),
    ]
    return headers, dumps({"message": message})


def _header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode(), value.encode()
    return struct.pack(">B", len(raw_name)) + raw_name + struct.pack(">BH", 7, len(raw_value)) + raw_value


def event_frame(headers: dict[str, str], payload: bytes) -> bytes:
    """One AWS event-stream message: prelude (total and headers lengths, their CRC32), string
    headers, the payload, and the CRC32 of everything before it."""
    head = b"".join(_header(k, v) for k, v in headers.items())
    prelude = struct.pack(">II", 16 + len(head) + len(payload), len(head))
    prelude += struct.pack(">I", binascii.crc32(prelude))
    body = prelude + head + payload
    return body + struct.pack(">I", binascii.crc32(body))


def _chunk(data: bytes) -> bytes:
    """A ``chunk`` event carrying one Anthropic event's JSON, base64 in its ``bytes`` member."""
    payload = dumps({"bytes": base64.b64encode(data).decode()})
    headers = {":event-type": "chunk", ":content-type": "application/json", ":message-type": "event"}
    return event_frame(headers, payload)


def _event(kind: str, member: dict[str, Any]) -> bytes:
    """A Converse stream event: the member's JSON itself is the payload."""
    headers = {":event-type": kind, ":content-type": "application/json", ":message-type": "event"}
    return event_frame(headers, dumps(member))


def bedrock_error_event() -> bytes:
    """What Bedrock sends when the model fails mid-stream: an exception message, not an event."""
    headers = {
        ":exception-type": "modelStreamErrorException",
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    return event_frame(headers, dumps({"message": "The model stream failed (simulated).", "originalStatusCode": 529}))


async def _bedrock(call: Call) -> None:
    await _anthropic.answer_messages(call, lambda kind, data: _chunk(data), EVENTSTREAM)


async def _vertex(call: Call) -> None:
    await _anthropic.answer_messages(call, _anthropic.sse_event, _anthropic.SSE)


def _converse_prompt(body: dict[str, Any]) -> Prompt:
    """The prompt, with a cache breakpoint at each ``cachePoint`` block (tools, system, messages)."""
    prompt = Prompt()

    def add(blocks: Any) -> None:
        for block in blocks if isinstance(blocks, list) else []:
            if isinstance(block, dict) and "cachePoint" in block:
                if prompt.segments:
                    prompt.segments[-1].breakpoint = True
            elif isinstance(block, dict) and isinstance(block.get("text"), str):
                prompt.add_text(block["text"])
            else:
                prompt.add_value(block)

    add((body.get("toolConfig") or {}).get("tools"))
    if body.get("system") is not None:
        prompt.add_marker("system")
        add(body["system"])
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "1 validation error detected: Value at 'messages' failed to satisfy constraint")
    for message in messages:
        if not isinstance(message, dict):
            raise ApiError(400, "messages: each message must be an object")
        prompt.add_marker(str(message.get("role", "user")))
        add(message.get("content"))
    return prompt


def _nova_chunk(kind: str, member: dict[str, Any]) -> bytes:
    """Nova's InvokeModel stream: a ``chunk`` event holding one Converse event's JSON."""
    return _chunk(dumps({kind: member}))


def _invocation_metrics(call: Call, first_byte_ms: int) -> dict[str, int]:
    """What Bedrock adds to an InvokeModel stream's last chunk."""
    return {
        "inputTokenCount": call.usage.input_tokens,
        "outputTokenCount": call.usage.output_tokens,
        "invocationLatency": call.elapsed_ms(),
        "firstByteLatency": first_byte_ms,
    }


async def _nova(call: Call) -> None:
    await _converse(call, invoke=True)


async def _converse(call: Call, invoke: bool = False) -> None:
    prompt = _converse_prompt(call.body)
    limit = (call.body.get("inferenceConfig") or {}).get("maxTokens")
    a = answer(call, limit=limit if isinstance(limit, int) and not isinstance(limit, bool) else None)
    tokens = prompt.tokens
    hit = call.cache.breakpoints(call.model or "", tokens, prompt.breakpoints())
    u = call.usage
    u.input_tokens, u.cached_tokens, u.cache_creation_tokens = len(tokens), hit.read, hit.written
    u.output_tokens = len(a.tokens)
    sched = call.schedule(len(tokens) - hit.read)
    stop_reason = "max_tokens" if a.truncated else "end_turn"
    uncached = u.input_tokens - u.cached_tokens - u.cache_creation_tokens
    usage = {
        "inputTokens": uncached,
        "outputTokens": u.output_tokens,
        "totalTokens": u.input_tokens + u.output_tokens,
        "cacheReadInputTokens": u.cached_tokens,
        "cacheWriteInputTokens": u.cache_creation_tokens,
    }
    if not call.stream:
        sched.skip(u.output_tokens)
        whole = {
            "output": {"message": {"role": "assistant", "content": [{"text": a.text}]}},
            "stopReason": stop_reason,
            "usage": usage,
            "metrics": {"latencyMs": call.elapsed_ms(sched.now_due)},
        }
        await call.respond(200, [*_anthropic.JSON, *call.headers], dumps(whole), at=sched.now_due)
        return
    frame = _nova_chunk if invoke else _event
    await call.start_stream([*EVENTSTREAM, *call.headers], at=sched.headers_at)
    await call.event(frame("messageStart", {"role": "assistant"}))
    first_byte_ms = call.elapsed_ms()
    for piece in chunk(a.tokens, call.latency.chunk_tokens):
        delta = {"contentBlockIndex": 0, "delta": {"text": "".join(piece)}}
        await call.event(frame("contentBlockDelta", delta), at=sched.skip(len(piece)))
    await call.event(frame("contentBlockStop", {"contentBlockIndex": 0}))
    await call.event(frame("messageStop", {"stopReason": stop_reason}))
    metadata = {"usage": usage, "metrics": {"latencyMs": call.elapsed_ms()}}
    if not invoke:
        await call.event(_event("metadata", metadata))
    else:
        last = {"metadata": metadata, "amazon-bedrock-invocationMetrics": _invocation_metrics(call, first_byte_ms)}
        await call.event(_chunk(dumps(last)))
    await call.end_stream()


def match(path: str) -> Cloud | None:
    """The cloud request a path names, else None."""
    found = _BEDROCK.fullmatch(path)
    if found is not None:
        op = found["op"]
        model = unquote(found["model"])
        route: Callable[[Call], Awaitable[None]]
        if op.startswith("converse"):
            route = _converse
        else:
            route = _nova if model.startswith(("amazon.nova", "us.amazon.nova")) else _bedrock
        return Cloud(model, op.endswith("-stream"), route, True)
    found = _VERTEX.fullmatch(path)
    if found is not None:
        return Cloud(unquote(found["model"]), found["op"] == "streamRawPredict", _vertex, False)
    return None
