"""The response headers worth keeping, and what each means: request ids, rate limits, retry-after,
server-reported timing (OpenAI's ``openai-processing-ms``, TGI's), and the headers that name the
server software or a gateway's upstream (kept raw for :mod:`firsttoken.providers.endpoints`).

One table (:data:`HEADERS`), read in one pass over the raw header pairs by every HTTP client adapter
(:mod:`firsttoken.transport`, :mod:`firsttoken.transport_aiohttp`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import semconv as sc
from .timeline import Timeline

HINT = "hint"
"""Marks a header kept as is in ``Timeline.hints`` (name -> value)."""
MAX_HEADER_VALUE = 256
"""Characters kept of a server-chosen header value (a request id, a reset time, a hint); the rest is cut."""
MAX_SECONDS = 86_400.0
"""A server-reported duration above a day is not believed (the header is skipped)."""
MAX_COUNT = 2**53
"""A remaining-quota count above this is not believed (the header is skipped)."""


def _text(value: str) -> str:
    return value[:MAX_HEADER_VALUE]


def _duration(seconds: float) -> float:
    """Refuses inf, nan, negative and more than a day (``ValueError``)."""
    if not 0.0 <= seconds <= MAX_SECONDS:  # also False for nan
        raise ValueError(seconds)
    return seconds


def _seconds(value: str) -> float:
    return _duration(float(value))


def _millis(value: str) -> float:
    return _duration(float(value) / 1000.0)


def _count(value: str) -> int:
    number = float(value)
    if not 0.0 <= number <= MAX_COUNT:
        raise ValueError(value)
    return int(number)


# Response headers worth keeping: name -> (attribute, parser). One pass over the raw headers, since
# every lookup in an httpx Headers object scans them all. A value a parser refuses is skipped alone.
HEADERS: dict[bytes, tuple[str, Callable[[str], Any]]] = {
    b"x-request-id": ("request_id", _text),
    b"request-id": ("request_id", _text),
    b"openai-processing-ms": (sc.FT_SERVER_PROCESSING_TIME, _millis),
    b"x-ratelimit-remaining-requests": (sc.FT_RATELIMIT_REMAINING_REQUESTS, _count),
    b"anthropic-ratelimit-requests-remaining": (sc.FT_RATELIMIT_REMAINING_REQUESTS, _count),
    b"x-ratelimit-remaining-tokens": (sc.FT_RATELIMIT_REMAINING_TOKENS, _count),
    b"anthropic-ratelimit-tokens-remaining": (sc.FT_RATELIMIT_REMAINING_TOKENS, _count),
    b"x-ratelimit-reset-requests": (sc.FT_RATELIMIT_RESET_REQUESTS, _text),
    b"anthropic-ratelimit-requests-reset": (sc.FT_RATELIMIT_RESET_REQUESTS, _text),
    b"x-ratelimit-reset-tokens": (sc.FT_RATELIMIT_RESET_TOKENS, _text),
    b"anthropic-ratelimit-tokens-reset": (sc.FT_RATELIMIT_RESET_TOKENS, _text),
    b"retry-after": (sc.FT_RETRY_AFTER, _seconds),
    # TGI (text-generation-inference), on whole responses: milliseconds.
    b"x-queue-time": (sc.FT_SERVER_QUEUE_TIME, _millis),
    b"x-inference-time": (sc.FT_SERVER_INFERENCE_TIME, _millis),
    b"x-time-per-token": (sc.FT_SERVER_TIME_PER_OUTPUT_TOKEN, _millis),
    b"x-total-time": (sc.FT_SERVER_TOTAL_TIME, _millis),
    # Headers that name the server software or a gateway's upstream: kept raw, for providers.endpoints.
    b"server": (HINT, _text),
    b"x-compute-type": (HINT, _text),
    b"x-litellm-model-api-base": (HINT, _text),
    b"x-litellm-model-id": (HINT, _text),
    b"x-portkey-provider": (HINT, _text),
}
# Server-reported phases among those headers: attribute -> (phase of the server-timing metric, source).
PHASES: dict[str, tuple[str, str | None]] = {
    sc.FT_SERVER_PROCESSING_TIME: ("processing", None),
    sc.FT_SERVER_QUEUE_TIME: ("queue", "tgi"),
    sc.FT_SERVER_INFERENCE_TIME: ("inference", "tgi"),
}


def read_headers(tl: Timeline, headers: Any) -> None:
    """Facts that OpenAI- and Anthropic-style servers put in response headers."""
    raw = getattr(headers, "raw", None)
    read_header_pairs(tl, raw if raw is not None else [(k.encode(), v.encode()) for k, v in headers.items()])


def read_header_pairs(tl: Timeline, pairs: Any) -> None:
    """:func:`read_headers` of raw ``(name, value)`` byte pairs, as every client keeps them."""
    for name, value in pairs:
        known = HEADERS.get(name.lower())
        if known is None:
            continue
        key, parse = known
        try:
            parsed = parse(value.decode("latin-1"))
        except (ValueError, OverflowError):
            continue
        if key == "request_id":
            tl.request_id = parsed
        elif key is HINT:
            if tl.hints is None:
                tl.hints = {}
            tl.hints[name.lower().decode("latin-1")] = parsed
        else:
            tl.extra[key] = parsed
            phase = PHASES.get(key)
            if phase is not None:
                tl.server_timing[phase[0]] = parsed
                if phase[1] is not None:
                    tl.extra[sc.FT_SERVER_TIMING_SOURCE] = phase[1]
