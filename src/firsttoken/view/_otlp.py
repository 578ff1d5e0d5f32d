"""OTLP/HTTP trace requests, protobuf or JSON, decoded with the OpenTelemetry protobuf package into
plain span records (ids as hex, attributes as Python values)."""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

PROTOBUF = "application/x-protobuf"
JSON = "application/json"


class BadRequest(Exception):
    """The body is not a valid OTLP request: the reason goes back to the sender with a 400."""


class TooLarge(Exception):
    """The body, or what it inflates to, is over the viewer's limit: a 413."""


class Unsupported(Exception):
    """A content type or encoding the receiver does not speak: a 415."""


@dataclass
class SpanRecord:
    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    start_ns: int
    end_ns: int
    error: bool
    attributes: dict[str, Any]
    service: str
    instance: str
    status_message: str = ""


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    if kind == "bytes_value":
        return base64.b64encode(v.bytes_value).decode()
    return getattr(v, kind)


def _attributes(kvs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


def _hex_to_base64(obj: Any) -> None:
    """OTLP's JSON encoding writes trace and span ids as hex, where protobuf's JSON mapping wants base64:
    rewritten in place (a copy of the decoded tree would double what the request costs)."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key in ("traceId", "spanId", "parentSpanId") and isinstance(value, str) and value:
                try:
                    obj[key] = base64.b64encode(bytes.fromhex(value)).decode()
                except ValueError:
                    raise BadRequest(f"{key} {value!r} is not hex (OTLP/JSON writes ids as hex)") from None
            else:
                _hex_to_base64(value)
    elif isinstance(obj, list):
        for item in obj:
            _hex_to_base64(item)


_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
_PIECE = 1 << 14
"""Compressed bytes fed to the inflater at a time: when a gzip member ends, what follows it in the piece
(``unused_data``, a copy) is at most this long, so a body of many members costs time linear in its size."""


def decode_body(body: bytes, encoding: str | None, limit: int) -> bytes:
    """The body inflated, stopping as soon as it passes ``limit`` bytes (a small gzip body can inflate
    a thousandfold: nothing past the limit is ever held). gzip may have several members, and NUL
    padding after the last."""
    encoding = (encoding or "identity").strip().lower()
    if encoding == "identity":
        if len(body) > limit:
            raise TooLarge(f"the body is {len(body)} bytes, over the viewer's limit of {limit} bytes")
        return body
    if encoding not in _WBITS:
        raise Unsupported(f"content-encoding {encoding!r} is not supported (gzip, deflate or none)")
    out = bytearray()
    view = memoryview(body)
    at, end = 0, len(body)
    try:
        while True:
            inflater = zlib.decompressobj(_WBITS[encoding])
            while not inflater.eof:
                if at >= end:
                    raise BadRequest(f"the body is not valid {encoding}: it ends early")
                piece = view[at : at + _PIECE]
                # At most one byte past the limit: short of that, the inflater took the whole piece.
                out += inflater.decompress(piece, limit + 1 - len(out))
                if len(out) > limit:
                    raise TooLarge(f"the body inflates past the viewer's limit of {limit} bytes")
                at += len(piece) - len(inflater.unused_data)
            if encoding != "gzip" or at == end:
                return bytes(out)
            if body[at] == 0:  # no member starts with a NUL: padding, which must run to the end
                if body.count(b"\0", at) == end - at:
                    return bytes(out)
                raise BadRequest("the body is not valid gzip: data after the NUL padding")
    except zlib.error as exc:
        raise BadRequest(f"the body is not valid {encoding}: {exc}") from None


MESSAGE_BYTES = 16
"""A protobuf request may make at most one message per this many bytes of the limit it is decoded under:
the protobuf parser (upb) holds ~50-65 bytes for each message, even an empty one (two bytes on the wire),
so this bounds what decoding holds to about four times the limit. Real spans make one message per ~20
bytes (an attribute is two: the key-value and its value)."""
MAX_DEPTH = 100
"""Messages nested deeper than this are refused, as the protobuf parser refuses them."""
BATCH = 1000
"""Spans turned into records at a time, so that what a request holds in records stays small."""


@cache
def _message_fields(descriptor: Descriptor) -> dict[int, Descriptor | None]:
    """The message's fields by number: the message type of each that is a message, None for the others."""
    return {f.number: f.message_type if f.type == FieldDescriptor.TYPE_MESSAGE else None for f in descriptor.fields}


def _varint(body: bytes, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        byte = body[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
        if shift > 63:
            raise BadRequest("not an OTLP protobuf message: a varint longer than 10 bytes")


def count_messages(body: bytes, descriptor: Descriptor, most: int) -> int:
    """How many messages decoding ``body`` as ``descriptor`` makes, read from the wire format without
    decoding it, each field the message type does not have counted as one more (the parser keeps it, at
    about the cost of a message); ``TooLarge`` as soon as that passes ``most``, so a body of millions of
    empty messages costs time up to ``most``, not its size."""
    count = 0
    fields, at, end = _message_fields(descriptor), 0, len(body)
    outer: list[tuple[dict[int, Descriptor | None], int, int]] = []
    try:
        while True:
            if at >= end:
                if at > end:
                    raise BadRequest("not an OTLP protobuf message: a field runs past its message")
                if not outer:
                    return count
                fields, at, end = outer.pop()
                continue
            tag = body[at]
            at += 1
            if tag >= 0x80:
                tag, at = _varint(body, at - 1)
            wire, number = tag & 7, tag >> 3
            if not number:
                raise BadRequest("not an OTLP protobuf message: a field numbered 0")
            known, sub = number in fields, fields.get(number)
            if not known or (sub is not None and wire == 2):
                count += 1
                if count > most:
                    raise TooLarge(
                        f"the body makes over {most} protobuf messages and unknown fields, past what the viewer"
                        f" decodes under its limit (one per {MESSAGE_BYTES} bytes of it)"
                    )
            if wire == 2:
                length = body[at]
                at += 1
                if length >= 0x80:
                    length, at = _varint(body, at - 1)
                stop = at + length
                if sub is None or not length or stop > end:
                    at = stop
                    continue
                if len(outer) >= MAX_DEPTH:
                    raise BadRequest(f"not an OTLP protobuf message: nested more than {MAX_DEPTH} deep")
                outer.append((fields, stop, end))
                fields, end = _message_fields(sub), stop
            elif wire == 0:
                while body[at] >= 0x80:
                    at += 1
                at += 1
            elif wire == 1:
                at += 8
            elif wire == 5:
                at += 4
            else:
                raise BadRequest(f"not an OTLP protobuf message: wire type {wire}")
    except IndexError:
        raise BadRequest("not an OTLP protobuf message: it ends inside a field") from None


def _parse(message: Any, body: bytes, content_type: str | None, max_messages: int | None = None) -> Any:
    """``message`` parsed from ``body``; for protobuf, counted first when the body is long enough to make
    more than ``max_messages`` messages (each takes at least two bytes)."""
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    if kind == PROTOBUF:
        if max_messages is not None and len(body) > 2 * max_messages:
            count_messages(body, message.DESCRIPTOR, max_messages)
        try:
            message.ParseFromString(body)
        except DecodeError as exc:
            raise BadRequest(f"not an OTLP protobuf message: {exc}") from None
        return message
    if kind == JSON:
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise BadRequest(f"not JSON: {exc}") from None
        except RecursionError:
            raise BadRequest("not an OTLP/JSON request: nested too deeply") from None
        if not isinstance(data, dict):
            raise BadRequest("an OTLP/JSON request is an object")
        try:
            _hex_to_base64(data)
            json_format.ParseDict(data, message, ignore_unknown_fields=True)
        except json_format.ParseError as exc:
            raise BadRequest(f"not an OTLP/JSON request: {exc}") from None
        except RecursionError:
            raise BadRequest("not an OTLP/JSON request: nested too deeply") from None
        return message
    raise Unsupported(f"content-type {content_type!r}: send {PROTOBUF} or {JSON}")


def iter_traces(body: bytes, content_type: str | None, max_messages: int | None = None) -> Iterator[list[SpanRecord]]:
    """The request's spans as records, ``BATCH`` at a time; every span's ids are checked before the first
    batch, so a request with a bad span yields nothing. ``max_messages``: see ``count_messages``."""
    request = _parse(ExportTraceServiceRequest(), body, content_type, max_messages)
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                if len(span.trace_id) != 16 or len(span.span_id) != 8:
                    raise BadRequest(f"span {span.name!r} has no valid trace id or span id")
    out: list[SpanRecord] = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        service = str(resource.get("service.name") or "unknown_service")
        instance = str(resource.get("service.instance.id") or "")
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                out.append(
                    SpanRecord(
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_id=span.parent_span_id.hex() or None,
                        name=span.name,
                        start_ns=int(span.start_time_unix_nano),
                        end_ns=int(span.end_time_unix_nano),
                        error=span.status.code == 2,  # STATUS_CODE_ERROR
                        attributes=_attributes(span.attributes),
                        service=service,
                        instance=instance,
                        status_message=span.status.message,
                    )
                )
                if len(out) == BATCH:
                    yield out
                    out = []
    if out:
        yield out


def parse_traces(body: bytes, content_type: str | None) -> list[SpanRecord]:
    return [record for batch in iter_traces(body, content_type) for record in batch]


def parse_metrics(body: bytes, content_type: str | None, max_messages: int | None = None) -> int:
    """Validate a metrics request (not stored: the page computes from the spans); its data point count."""
    request = _parse(ExportMetricsServiceRequest(), body, content_type, max_messages)
    return sum(len(m.ListFields()) for rm in request.resource_metrics for sm in rm.scope_metrics for m in sm.metrics)


def response_body(content_type: str | None, rejected: int = 0, message: str = "") -> tuple[str, bytes]:
    """An Export*ServiceResponse in the request's encoding: full success, or a partial success with the
    ``rejected`` span count and why (OTLP's way to tell the sender, who logs it, not to retry)."""
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    if kind == JSON:
        partial = {"partialSuccess": {"rejectedSpans": str(rejected), "errorMessage": message}}
        return JSON, json.dumps(partial if rejected else {}).encode()
    response = ExportTraceServiceResponse()
    if rejected:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = message
    return PROTOBUF, response.SerializeToString()
