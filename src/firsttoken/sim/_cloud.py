"""Claude on the clouds' paths: Amazon Bedrock's ``InvokeModel`` (whole, and streamed in AWS
event-stream frames) and Google Vertex AI's ``rawPredict`` / ``streamRawPredict`` (SSE).

Both take the Messages API's body with the model in the path instead (and an ``anthropic_version``
field), and answer what the Messages API answers; only Bedrock's stream framing differs.
"""

from __future__ import annotations

import base64
import binascii
import re
import struct
from collections.abc import Awaitable, Callable
from typing import NamedTuple
from urllib.parse import unquote

from . import _anthropic
from ._reply import Call, dumps

__all__ = ["Cloud", "bedrock_error_event", "event_frame", "match"]

EVENTSTREAM = [
    ("content-type", "application/vnd.amazon.eventstream"),
    ("x-amzn-bedrock-content-type", "application/json"),
]

_BEDROCK = re.compile(r"/model/(?P<model>[^/]+)/(?P<op>invoke|invoke-with-response-stream)")
_VERTEX = re.compile(
    r"(?:/v1)?/projects/[^/]+/locations/[^/]+/publishers/anthropic/models/(?P<model>[^/:]+):(?P<op>rawPredict|streamRawPredict)"
)


class Cloud(NamedTuple):
    """A request on a cloud path: the model it names, whether it streams, and what answers it."""

    model: str
    stream: bool
    route: Callable[[Call], Awaitable[None]]


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


def match(path: str) -> Cloud | None:
    """The cloud request a path names, else None."""
    found = _BEDROCK.fullmatch(path)
    if found is not None:
        return Cloud(unquote(found["model"]), found["op"] == "invoke-with-response-stream", _bedrock)
    found = _VERTEX.fullmatch(path)
    if found is not None:
        return Cloud(unquote(found["model"]), found["op"] == "streamRawPredict", _vertex)
    return None
