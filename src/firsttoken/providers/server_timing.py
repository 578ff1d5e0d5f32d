"""Server timing that providers report in their responses, kept apart from what the client measures.

* OpenAI: the ``openai-processing-ms`` header (read by :mod:`firsttoken.transport`).
* Groq: ``usage.queue_time|prompt_time|completion_time|total_time`` (seconds) on whole responses,
  and the same under ``x_groq.usage`` on the final chunk of a stream.
* Cerebras: ``time_info.queue_time|prompt_time|completion_time|total_time`` on whole responses and
  on the final chunk of a stream.
* llama.cpp's ``llama-server``: ``timings`` (milliseconds and token counts: ``prompt_n`` tokens
  evaluated in ``prompt_ms``, ``cache_n`` taken from its cache, ``predicted_n`` generated in
  ``predicted_ms``) on whole OpenAI-style responses and on the last chunk of a stream. Its
  Anthropic Messages endpoint returns none.
* vLLM: ``metrics`` (``queue_time_ms``, ``time_to_first_token_ms``, ``generation_time_ms``,
  ``mean_itl_ms``) where the server sends it: vLLM 0.25.0 and later, started with
  ``--enable-per-request-metrics`` (otherwise ``metrics`` is null), on whole responses and on the
  final usage chunk of a stream.
* TGI: the ``x-queue-time``/``x-inference-time``/``x-time-per-token`` headers of whole responses
  (read by :mod:`firsttoken.transport`).

The SDK models keep unknown fields (pydantic ``extra="allow"``), so these are read off the parsed
objects, or off plain dicts for raw responses.
"""

from __future__ import annotations

from typing import Any

from .. import semconv as sc
from ..headers import MAX_SECONDS
from ..timeline import Timeline
from ._common import get

_FIELDS = (
    ("queue_time", "queue", sc.FT_SERVER_QUEUE_TIME),
    ("prompt_time", "prompt", sc.FT_SERVER_PROMPT_TIME),
    ("completion_time", "completion", sc.FT_SERVER_COMPLETION_TIME),
    ("total_time", None, sc.FT_SERVER_TOTAL_TIME),
)


def _take(tl: Timeline, timing: Any, source: str) -> bool:
    found = False
    for field, phase, attr in _FIELDS:
        value = get(timing, field)
        # Finite, not negative, at most a day: anything else is not a duration the server measured.
        if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= MAX_SECONDS:
            tl.extra[attr] = float(value)
            if phase is not None:
                tl.server_timing[phase] = float(value)
            found = True
    if found:
        tl.extra[sc.FT_SERVER_TIMING_SOURCE] = source
    return found


def _number(obj: Any, name: str) -> float | None:
    value = get(obj, name)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return None


def _llama_cpp(tl: Timeline, timings: Any) -> None:
    prompt_ms, predicted_ms = _number(timings, "prompt_ms"), _number(timings, "predicted_ms")
    if prompt_ms is not None:
        tl.extra[sc.FT_SERVER_PROMPT_TIME] = tl.server_timing["prompt"] = prompt_ms / 1000.0
    if predicted_ms is not None:
        tl.extra[sc.FT_SERVER_COMPLETION_TIME] = tl.server_timing["completion"] = predicted_ms / 1000.0
    per_token = _number(timings, "predicted_per_token_ms")
    if per_token is not None:
        tl.extra[sc.FT_SERVER_TIME_PER_OUTPUT_TOKEN] = per_token / 1000.0
    for field, attr in (
        ("prompt_n", sc.FT_SERVER_PROMPT_TOKENS),
        ("cache_n", sc.FT_SERVER_CACHED_TOKENS),
        ("predicted_n", sc.FT_SERVER_COMPLETION_TOKENS),
    ):
        value = get(timings, field)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            tl.extra[attr] = value
    tl.extra[sc.FT_SERVER_TIMING_SOURCE] = "llama.cpp"


def _vllm(tl: Timeline, metrics: Any) -> None:
    found = False
    for field, phase, attr in (
        ("queue_time_ms", "queue", sc.FT_SERVER_QUEUE_TIME),
        ("time_to_first_token_ms", "first_token", sc.FT_SERVER_FIRST_TOKEN_TIME),
        ("generation_time_ms", "completion", sc.FT_SERVER_COMPLETION_TIME),
        ("mean_itl_ms", None, sc.FT_SERVER_TIME_PER_OUTPUT_TOKEN),
    ):
        ms = _number(metrics, field)
        if ms is not None:
            tl.extra[attr] = ms / 1000.0
            if phase is not None:
                tl.server_timing[phase] = ms / 1000.0
            found = True
    if found:
        tl.extra[sc.FT_SERVER_TIMING_SOURCE] = "vllm"


def _count(obj: Any, name: str) -> int | None:
    value = get(obj, name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _groq_tokens(tl: Timeline, usage: Any) -> None:
    """Groq's streams carry the token counts in ``x_groq.usage`` (with the timing) when the request did
    not ask for ``stream_options.include_usage``: the call's usage, unless a ``usage`` gave it. Its
    ``prompt_tokens_details.cached_tokens`` are cache reads, as in OpenAI's usage (the groq SDK types
    it as its ``CompletionUsage``), and ``completion_tokens_details.reasoning_tokens`` reasoning."""
    if usage is None or tl.output_tokens is not None:
        return
    prompt, completion = _count(usage, "prompt_tokens"), _count(usage, "completion_tokens")
    if prompt is not None:
        tl.input_tokens = prompt
    if completion is not None:
        tl.output_tokens = completion
    cached = _count(get(usage, "prompt_tokens_details"), "cached_tokens")
    if cached is not None:
        tl.cache_read_tokens = cached
    reasoning = _count(get(usage, "completion_tokens_details"), "reasoning_tokens")
    if reasoning is not None:
        tl.reasoning_tokens = reasoning


def read(tl: Timeline, obj: Any) -> None:
    """Provider timing from a whole response or a (final) streamed chunk, if it carries any."""
    timings = get(obj, "timings")
    if timings is not None:
        _llama_cpp(tl, timings)
        return
    metrics = get(obj, "metrics")
    if metrics is not None and get(metrics, "time_to_first_token_ms") is not None:
        _vllm(tl, metrics)
        return
    x_groq = get(obj, "x_groq")
    if x_groq is not None:
        groq_usage = get(x_groq, "usage")
        _groq_tokens(tl, groq_usage)
        if _take(tl, groq_usage, "groq"):
            return
    time_info = get(obj, "time_info")
    if time_info is not None and _take(tl, time_info, "cerebras"):
        return
    usage = get(obj, "usage")
    if usage is not None and get(usage, "queue_time") is not None:
        _take(tl, usage, "groq")
