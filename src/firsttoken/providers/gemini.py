"""Gemini's native API (``google-genai``, or any client of ``models/*:generateContent``), read on the
wire by the plain-httpx path (:mod:`firsttoken.providers.direct`): no SDK patch is needed, since
everything the SDK knows of a call (model, streaming, usage, finish reason) is in the request path
and the response body.

Usage, as the GenAI conventions count it (input includes cached tokens; output includes thinking):
``promptTokenCount`` is the input, ``cachedContentTokenCount`` the cache reads,
``candidatesTokenCount`` + ``thoughtsTokenCount`` the output, ``thoughtsTokenCount`` the reasoning.
Thoughts are not streamed unless the request asks for them (``includeThoughts``), so they are hidden
output for the time per output token unless thought parts arrived.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..timeline import Timeline

GENERATE = ":generateContent"
STREAM = ":streamGenerateContent"
VERTEX_PATH = "/publishers/google/models/"


def match(path: str) -> tuple[str | None, bool] | None:
    """(model, streamed) of a ``models/{model}:generateContent`` path, else None."""
    if path.endswith(GENERATE):
        streamed = False
        head = path[: -len(GENERATE)]
    elif path.endswith(STREAM):
        streamed = True
        head = path[: -len(STREAM)]
    else:
        return None
    _, sep, model = head.rpartition("models/")
    return (model or None) if sep and "/" not in model else None, streamed


def provider_default(path: str) -> str:
    """Vertex AI's publisher paths are Vertex AI wherever they are served; the rest is the Gemini API."""
    return "gcp.vertex_ai" if VERTEX_PATH in path else "gcp.gemini"


def read_usage(tl: Timeline, usage: Any, *, thoughts_streamed: bool = False) -> None:
    if not isinstance(usage, Mapping):
        return
    prompt = usage.get("promptTokenCount")
    if isinstance(prompt, int):
        tl.input_tokens = prompt
    candidates = usage.get("candidatesTokenCount")
    thoughts = usage.get("thoughtsTokenCount")
    thoughts = thoughts if isinstance(thoughts, int) else 0
    if isinstance(candidates, int):
        tl.output_tokens = candidates + thoughts
    if thoughts:
        tl.reasoning_tokens = thoughts
        tl.hidden_output_tokens = 0 if thoughts_streamed else thoughts
    cached = usage.get("cachedContentTokenCount")
    if isinstance(cached, int):
        tl.cache_read_tokens = cached


def read_response(tl: Timeline, data: Mapping[str, Any], now: int | None = None, *, thoughts: bool = False) -> int:
    """One ``GenerateContentResponse``: a whole body, or one streamed chunk when ``now`` is given (its
    output marks a token). ``thoughts``: whether earlier chunks carried thought parts.

    Returns a bit set: 1 when a candidate finished, 2 when thought parts have been seen.
    """
    finished = False
    produced = False
    for candidate in data.get("candidates") or ():
        if not isinstance(candidate, Mapping):
            continue
        for part in (candidate.get("content") or {}).get("parts") or ():
            if isinstance(part, Mapping) and (part.get("text") or part.get("functionCall")):
                produced = True
                thoughts = thoughts or part.get("thought") is True
        reason = candidate.get("finishReason")
        if isinstance(reason, str) and reason:
            tl.finish_reasons[candidate.get("index", 0) or 0] = reason.lower()
            finished = True
    if produced and now is not None:
        tl.output_token(now)
    read_usage(tl, data.get("usageMetadata"), thoughts_streamed=thoughts)
    rid = data.get("responseId")
    if isinstance(rid, str) and rid:
        tl.response_id = rid
    version = data.get("modelVersion")
    if isinstance(version, str) and version:
        tl.response_model = version
    return (FINISHED if finished else 0) | (THOUGHTS if thoughts else 0)


FINISHED = 1
THOUGHTS = 2
