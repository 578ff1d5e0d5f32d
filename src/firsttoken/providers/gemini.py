"""Gemini's native API (``google-genai``, or any client of ``models/*:generateContent``), read on the
wire by the plain-httpx path (:mod:`firsttoken.providers.direct`): no SDK patch is needed, since
everything the SDK knows of a call (model, streaming, usage, finish reason) is in the request path
and the response body.

Usage, as the GenAI conventions count it (input includes cached tokens; output includes thinking):
``promptTokenCount`` + ``toolUsePromptTokenCount`` is the input (the second is the prompt of a
built-in tool's results, part of Gemini's ``totalTokenCount`` and billed as input),
``cachedContentTokenCount`` the cache reads, ``candidatesTokenCount`` + ``thoughtsTokenCount`` the
output, ``thoughtsTokenCount`` the reasoning. A response that stopped while thinking
(``MAX_TOKENS`` with ``thoughtsTokenCount`` and no ``candidatesTokenCount``) has its thoughts as its
output, in the span and the metrics alike.
Thoughts are not streamed unless the request asks for them (``includeThoughts``), so they are hidden
output for the time per output token unless thought parts arrived.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import semconv as sc
from ..timeline import Timeline
from ._common import append_output, to_json
from ._hooks import EVENT_END, EVENT_ERROR, EVENT_MORE, CallDescription, StreamState, WireFormat

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
        tool_prompt = usage.get("toolUsePromptTokenCount")
        tl.input_tokens = prompt + (tool_prompt if isinstance(tool_prompt, int) else 0)
    candidates = usage.get("candidatesTokenCount")
    thoughts = usage.get("thoughtsTokenCount")
    thoughts = thoughts if isinstance(thoughts, int) else 0
    if isinstance(candidates, int) or thoughts:  # no candidates: it stopped while thinking
        tl.output_tokens = (candidates if isinstance(candidates, int) else 0) + thoughts
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
                if tl.capture is not None and now is not None and isinstance(part.get("text"), str):
                    append_output(tl, part["text"])
        reason = candidate.get("finishReason")
        if isinstance(reason, str) and reason:
            tl.finish_reasons[candidate.get("index", 0) or 0] = reason.lower()
            finished = True
    if produced and now is not None:
        tl.output_token(now)
    if tl.capture is not None and now is None and data.get("candidates"):  # a whole answer, captured
        tl.capture[sc.GEN_AI_OUTPUT_MESSAGES] = to_json([c.get("content") for c in data["candidates"]])
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


def match_path(path: str) -> tuple[str, str | None] | None:
    """(operation, None) of a POST to ``models/{model}:generateContent`` or its streamed twin."""
    return (sc.OP_GENERATE_CONTENT, None) if path.endswith((GENERATE, STREAM)) else None


def _request_attributes(body: Mapping[str, Any]) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    config = body.get("generationConfig")
    if isinstance(config, Mapping):
        limit = config.get("maxOutputTokens")
        if isinstance(limit, int):
            attrs[sc.GEN_AI_REQUEST_MAX_TOKENS] = limit
        temperature = config.get("temperature")
        if isinstance(temperature, (int, float)) and not isinstance(temperature, bool):
            attrs[sc.GEN_AI_REQUEST_TEMPERATURE] = float(temperature)
    return attrs


def _input_content(body: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    if body.get("systemInstruction") is not None:
        out[sc.GEN_AI_SYSTEM_INSTRUCTIONS] = to_json(body["systemInstruction"])
    if body.get("contents") is not None:
        out[sc.GEN_AI_INPUT_MESSAGES] = to_json(body["contents"])
    return out


class GeminiFormat(WireFormat):
    """Gemini's native ``models/*:generateContent`` (Google AI and Vertex AI paths)."""

    family = "gemini"

    def match(self, path: str) -> tuple[str, str | None] | None:
        return match_path(path)

    def default_provider(self, path: str) -> str:
        return provider_default(path)

    def describe(
        self, path: str, body: Mapping[str, Any], stream: bool, operation: str, api_type: str | None
    ) -> CallDescription:
        found = match(path)  # the model and the streaming are in the path
        model, streamed = found if found is not None else (None, False)
        system, tools = body.get("systemInstruction"), body.get("tools")
        return CallDescription(
            operation=operation,
            model=model,
            stream=streamed,
            request=_request_attributes(body),
            content=lambda: _input_content(body),
            prefix=() if system is None and tools is None else (system, tools),
        )

    def read_result(self, tl: Timeline, data: Mapping[str, Any]) -> None:
        read_response(tl, data)

    def read_event(self, tl: Timeline, event: Mapping[str, Any], now: int, stream: StreamState) -> int:
        if event.get("error") is not None:
            return EVENT_ERROR
        seen = read_response(tl, event, now, thoughts=bool(stream.flags & THOUGHTS))
        stream.flags = seen
        return EVENT_END if seen & FINISHED else EVENT_MORE


FORMAT = GeminiFormat()
