"""OTLP/HTTP trace requests, protobuf or JSON, decoded with the OpenTelemetry protobuf package into
plain span records (ids as hex, attributes as Python values)."""

from __future__ import annotations

import base64
import json
import zlib
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format
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


def _parse(message: Any, body: bytes, content_type: str | None) -> Any:
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    if kind == PROTOBUF:
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


def parse_traces(body: bytes, content_type: str | None) -> list[SpanRecord]:
    request = _parse(ExportTraceServiceRequest(), body, content_type)
    out: list[SpanRecord] = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        service = str(resource.get("service.name") or "unknown_service")
        instance = str(resource.get("service.instance.id") or "")
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                if len(span.trace_id) != 16 or len(span.span_id) != 8:
                    raise BadRequest(f"span {span.name!r} has no valid trace id or span id")
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
    return out


def parse_metrics(body: bytes, content_type: str | None) -> int:
    """Validate a metrics request (not stored: the page computes from the spans); its data point count."""
    request = _parse(ExportMetricsServiceRequest(), body, content_type)
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
