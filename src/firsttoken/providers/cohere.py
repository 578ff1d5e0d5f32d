"""Cohere's v2 Chat API (``cohere.ClientV2``, or any client of ``POST /v2/chat``), read on the wire by
the plain-httpx path (:mod:`firsttoken.providers.direct`): the SDK sends its requests with httpx and
the body and events hold everything it knows of a call, so it is not patched.

Usage: ``usage.tokens`` (the tokens the model saw and wrote) when sent, else ``usage.billed_units``;
``usage.cached_tokens`` are cache reads. Generated output, for the first token: ``content-delta``,
``tool-plan-delta`` and ``tool-call-delta`` events.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import semconv as sc
from ..timeline import Timeline
from ._common import append_output, to_json
from ._hooks import EVENT_END, EVENT_ERROR, EVENT_MORE, CallDescription, StreamState, WireFormat
from ._levers import chat_prefix

CHAT_PATH = "/v2/chat"
_OUTPUT_EVENTS = frozenset({"content-delta", "tool-plan-delta", "tool-call-delta"})


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def read_usage(tl: Timeline, usage: Any) -> None:
    if not isinstance(usage, Mapping):
        return
    counts = usage.get("tokens") or usage.get("billed_units")
    if isinstance(counts, Mapping):
        prompt, output = _int(counts.get("input_tokens")), _int(counts.get("output_tokens"))
        if prompt is not None:
            tl.input_tokens = prompt
        if output is not None:
            tl.output_tokens = output
    cached = _int(usage.get("cached_tokens"))
    if cached is not None:
        tl.cache_read_tokens = cached


def _finish(tl: Timeline, reason: Any) -> None:
    if isinstance(reason, str) and reason:
        tl.finish_reasons[0] = reason.lower()


def read_result(tl: Timeline, data: Mapping[str, Any]) -> None:
    """A whole ``/v2/chat`` response."""
    rid = data.get("id")
    if isinstance(rid, str) and rid:
        tl.response_id = rid
    _finish(tl, data.get("finish_reason"))
    read_usage(tl, data.get("usage"))
    if tl.capture is not None and data.get("message") is not None:
        tl.capture[sc.GEN_AI_OUTPUT_MESSAGES] = to_json([data["message"]])


def read_event(tl: Timeline, event: Mapping[str, Any], now: int) -> bool:
    """One streamed event; returns whether it ended the message (``message-end``)."""
    kind = event.get("type")
    if kind in _OUTPUT_EVENTS:
        tl.output_token(now)
        if tl.capture is not None and kind == "content-delta":
            text = (((event.get("delta") or {}).get("message") or {}).get("content") or {}).get("text")
            if isinstance(text, str):
                append_output(tl, text)
        return False
    if kind == "message-start":
        rid = event.get("id")
        if isinstance(rid, str) and rid:
            tl.response_id = rid
        return False
    if kind == "message-end":
        delta = event.get("delta") or {}
        if isinstance(delta, Mapping):
            _finish(tl, delta.get("finish_reason"))
            read_usage(tl, delta.get("usage"))
        return True
    return False


class CohereFormat(WireFormat):
    """Cohere's v2 Chat API (``POST /v2/chat``)."""

    family = "cohere"

    def match(self, path: str) -> tuple[str, str | None] | None:
        return (sc.OP_CHAT, None) if path.endswith(CHAT_PATH) else None

    def describe(
        self, path: str, body: Mapping[str, Any], stream: bool, operation: str, api_type: str | None
    ) -> CallDescription:
        model = body.get("model")
        return CallDescription(
            operation=operation,
            model=model if isinstance(model, str) else None,
            stream=stream,
            content=lambda: {sc.GEN_AI_INPUT_MESSAGES: to_json(body.get("messages"))},
            prefix=chat_prefix(body.get("messages"), body.get("tools")),
        )

    def read_result(self, tl: Timeline, data: Mapping[str, Any]) -> None:
        read_result(tl, data)

    def read_event(self, tl: Timeline, event: Mapping[str, Any], now: int, stream: StreamState) -> int:
        if event.get("type") == "error":
            return EVENT_ERROR
        return EVENT_END if read_event(tl, event, now) else EVENT_MORE


FORMAT = CohereFormat()
