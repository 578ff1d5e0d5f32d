"""Gemini's native API (``models/{model}:generateContent`` and ``:streamGenerateContent?alt=sse``),
as Google AI (``/v1beta/models/...``) and Vertex AI (``/v1/projects/{p}/locations/{l}/publishers/
google/models/...``) serve it: camelCase JSON, ``usageMetadata`` with cached and thought tokens.

Thinking models (2.5 and later) think before they answer, out of ``maxOutputTokens``, unless
``thinkingConfig.thinkingBudget`` is 0; the thoughts are not sent, only counted.
"""

from __future__ import annotations

import re
from typing import Any

from ._output import Answer, ApiError, answer, int_field, schema_instance
from ._reply import Call, dumps
from ._text import Prompt, chunk

__all__ = ["generate", "match"]

JSON = [("content-type", "application/json; charset=UTF-8")]
SSE = [("content-type", "text/event-stream"), ("cache-control", "no-cache")]

_PATH = re.compile(
    r"^/(?:v1|v1beta|v1alpha)/(?:projects/[^/]+/locations/[^/]+/publishers/google/)?models/([^/:]+)"
    r":(generateContent|streamGenerateContent)$"
)


def match(path: str) -> tuple[str, bool] | None:
    """(model, streamed) of a generateContent path, else None."""
    found = _PATH.match(path)
    if found is None:
        return None
    return found.group(1), found.group(2) == "streamGenerateContent"


def is_thinking_model(model: str) -> bool:
    return model.startswith(("gemini-2.5", "gemini-3"))


def _prompt(body: dict[str, Any]) -> Prompt:
    prompt = Prompt()
    for tool in body.get("tools") or []:
        prompt.add_json(tool)
    system = body.get("systemInstruction") or body.get("system_instruction")
    if isinstance(system, dict):
        prompt.add_marker("system")
        for part in system.get("parts") or []:
            prompt.add_value(part)
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise ApiError(400, "* GenerateContentRequest.contents: contents is not specified")
    for content in contents:
        if not isinstance(content, dict):
            raise ApiError(400, "* GenerateContentRequest.contents: each content must be an object")
        prompt.add_marker(str(content.get("role", "user")))
        for part in content.get("parts") or []:
            prompt.add_value(part)
    return prompt


def _thinking(call: Call, config: dict[str, Any]) -> int:
    if not is_thinking_model(call.model or ""):
        return 0
    budget = (config.get("thinkingConfig") or {}).get("thinkingBudget")
    if isinstance(budget, int) and not isinstance(budget, bool) and budget >= 0:
        return min(budget, call.latency.reasoning_tokens)
    return call.latency.reasoning_tokens  # absent or -1: dynamic thinking


def _content(config: dict[str, Any]) -> Any:
    if config.get("responseMimeType") == "application/json" and isinstance(config.get("responseSchema"), dict):
        return schema_instance(config["responseSchema"])
    if isinstance(config.get("responseJsonSchema"), dict):
        return schema_instance(config["responseJsonSchema"])
    return None


async def generate(call: Call) -> None:
    """``generateContent`` (whole) and ``streamGenerateContent`` (SSE with ``alt=sse``)."""
    body = call.body
    config = body.get("generationConfig") or {}
    if not isinstance(config, dict):
        raise ApiError(400, "Invalid value at 'generation_config'")
    prompt = _prompt(body)
    limit = int_field(config, "maxOutputTokens")
    a: Answer = answer(call, limit=limit, reasoning=_thinking(call, config), content=_content(config))
    hit = call.cache.automatic(call.model or "", prompt.tokens)
    u = call.usage
    u.input_tokens = len(prompt.tokens)
    u.cached_tokens = hit.read
    u.reasoning_tokens = a.reasoning
    u.output_tokens = len(a.tokens) + a.reasoning
    sched = call.schedule(len(prompt.tokens) - hit.read)
    finish = "MAX_TOKENS" if a.truncated else "STOP"
    response_id = call.new_id("", 22)

    def usage(visible: int | None) -> dict[str, Any]:
        out: dict[str, Any] = {"promptTokenCount": u.input_tokens, "totalTokenCount": u.input_tokens}
        if visible is not None:
            out["candidatesTokenCount"] = visible
            out["totalTokenCount"] += visible + u.reasoning_tokens
        if u.cached_tokens:
            out["cachedContentTokenCount"] = u.cached_tokens
        if u.reasoning_tokens:
            out["thoughtsTokenCount"] = u.reasoning_tokens
        out["promptTokensDetails"] = [{"modality": "TEXT", "tokenCount": u.input_tokens}]
        return out

    def response(text: str, visible: int | None, done: bool) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"parts": [{"text": text}], "role": "model"}, "index": 0}
        if done:
            candidate["finishReason"] = finish
        return {
            "candidates": [candidate],
            "usageMetadata": usage(visible),
            "modelVersion": call.model,
            "responseId": response_id,
        }

    if not call.stream:
        sched.skip(u.output_tokens)
        await call.respond(200, [*JSON, *call.headers], dumps(response(a.text, len(a.tokens), True)), at=sched.now_due)
        return
    await call.start_stream([*SSE, *call.headers], at=sched.headers_at)
    sched.skip(a.reasoning)
    pieces = list(chunk(a.tokens, call.latency.chunk_tokens)) or [[]]
    sent = 0
    for i, piece in enumerate(pieces):
        at = sched.skip(len(piece))
        sent += len(piece)
        last = i == len(pieces) - 1
        event = response("".join(piece), sent if last else None, last)
        await call.event(b"data: " + dumps(event) + b"\r\n\r\n", at=at)
    await call.end_stream()
