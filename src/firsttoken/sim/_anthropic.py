"""The Anthropic Messages API: create (streamed or not) and count_tokens, with prompt caching."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ._output import Answer, ApiError, ForcedTool, answer, int_field, schema_instance
from ._reply import Call, dumps
from ._text import Prompt, chunk, generate_text

__all__ = ["ROUTES", "SSE", "answer_messages", "error_body", "error_event", "sse_event"]

JSON = [("content-type", "application/json")]
SSE = [("content-type", "text/event-stream; charset=utf-8"), ("cache-control", "no-cache")]

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def error_body(status: int, message: str, *, kind: str | None = None) -> bytes:
    kind = kind or _ERROR_TYPES.get(status, "api_error")
    return dumps({"type": "error", "error": {"type": kind, "message": message}})


def error_event() -> bytes:
    """What Anthropic sends when it runs out of capacity mid-stream."""
    return sse_event("error", error_body(529, "Overloaded"))


def _prompt(body: dict[str, Any]) -> Prompt:
    prompt = Prompt()
    for tool in body.get("tools") or []:
        prompt.add_json(tool)
        if isinstance(tool, dict) and isinstance(tool.get("cache_control"), dict):
            prompt.segments[-1].breakpoint = True
    system = body.get("system")
    if system is not None:
        prompt.add_marker("system")
        for block in [system] if isinstance(system, str) else system:
            prompt.add_text(block) if isinstance(block, str) else prompt.add_value(block)
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise ApiError(400, "messages: Field required")
    for message in messages:
        if not isinstance(message, dict):
            raise ApiError(400, "messages: each message must be an object")
        prompt.add_marker(str(message.get("role", "user")))
        content = message.get("content")
        for block in [content] if isinstance(content, str) else content or []:
            prompt.add_text(block) if isinstance(block, str) else prompt.add_value(block)
    if isinstance(body.get("cache_control"), dict) and prompt.segments:
        prompt.segments[-1].breakpoint = True  # automatic caching: everything up to the last block
    return prompt


def _forced_tool(body: dict[str, Any]) -> ForcedTool | None:
    """Anthropic calls a tool when ``tool_choice`` is ``any`` or names one."""
    tools = [t for t in body.get("tools") or [] if isinstance(t, dict) and "input_schema" in t]
    choice = body.get("tool_choice") or {}
    if not tools or choice.get("type") not in ("any", "tool"):
        return None
    for tool in tools:
        if choice.get("type") == "any" or tool.get("name") == choice.get("name"):
            return ForcedTool(str(tool["name"]), tool.get("input_schema") or {})
    raise ApiError(400, f"tool_choice: no tool named {choice.get('name')!r}")


def _json_content(body: dict[str, Any]) -> Any:
    fmt = (body.get("output_config") or {}).get("format") or body.get("output_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        return schema_instance(fmt.get("schema", {}))
    return None


def _thinking_budget(body: dict[str, Any]) -> int:
    thinking = body.get("thinking")
    if not isinstance(thinking, dict) or thinking.get("type") not in ("enabled", "adaptive"):
        return 0
    budget = thinking.get("budget_tokens")
    return budget if isinstance(budget, int) and not isinstance(budget, bool) and budget > 0 else 1 << 30


def _cache(call: Call, prompt: Prompt) -> int:
    """Cache lookup at the breakpoints; fill usage (Anthropic's input_tokens excludes cache tokens)."""
    tokens = prompt.tokens
    hit = call.cache.breakpoints(call.model or "", tokens, prompt.breakpoints())
    u = call.usage
    u.input_tokens = len(tokens)
    u.cached_tokens = hit.read
    u.cache_creation_tokens = hit.written
    return len(tokens) - hit.read


async def count_tokens(call: Call) -> None:
    if not isinstance(call.body.get("model"), str):
        raise ApiError(400, "model: Field required")
    tokens = len(_prompt(call.body))
    call.usage.input_tokens = tokens
    await call.respond(200, [*JSON, *call.headers], dumps({"input_tokens": tokens}))


def sse_event(kind: str, data: bytes) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"


async def messages(call: Call) -> None:
    if not isinstance(call.body.get("model"), str):
        raise ApiError(400, "model: Field required")
    await answer_messages(call, sse_event, SSE)


async def answer_messages(
    call: Call, frame: Callable[[str, bytes], bytes], stream_headers: list[tuple[str, str]]
) -> None:
    """A Messages API answer for ``call.model``; a stream's events framed by ``frame(type, json)``
    (SSE on Anthropic's API and Vertex AI, AWS event-stream messages on Bedrock)."""
    body = call.body
    limit = int_field(body, "max_tokens")
    if limit is None:
        raise ApiError(400, "max_tokens: Field required")
    prompt = _prompt(body)
    thinking = min(_thinking_budget(body), call.latency.reasoning_tokens, limit)
    thought_tokens = generate_text(call.rng, thinking)
    thought = "".join(thought_tokens)
    tool = _forced_tool(body)
    content = schema_instance(tool.schema) if tool else _json_content(body)
    a: Answer = answer(call, limit=limit - thinking, content=content)
    sched = call.schedule(_cache(call, prompt))
    u = call.usage
    u.reasoning_tokens = thinking
    u.output_tokens = thinking + len(a.tokens)
    stop_reason = "max_tokens" if a.truncated or (thinking == limit) else "tool_use" if tool else "end_turn"
    mid, tool_id = call.new_id("msg_01"), call.new_id("toolu_01")
    signature = call.new_id("sig", 64)

    def usage(output_tokens: int) -> dict[str, Any]:
        return {
            "input_tokens": u.input_tokens - u.cached_tokens - u.cache_creation_tokens,
            "cache_creation_input_tokens": u.cache_creation_tokens,
            "cache_read_input_tokens": u.cached_tokens,
            "cache_creation": {"ephemeral_5m_input_tokens": u.cache_creation_tokens, "ephemeral_1h_input_tokens": 0},
            "output_tokens": output_tokens,
            "service_tier": "standard",
        }

    def message(blocks: list[dict[str, Any]], done: bool) -> dict[str, Any]:
        return {
            "id": mid,
            "type": "message",
            "role": "assistant",
            "model": call.model,
            "content": blocks,
            "stop_reason": stop_reason if done else None,
            "stop_sequence": None,
            "usage": usage(u.output_tokens if done else 1),
        }

    blocks: list[dict[str, Any]] = []
    if thinking:
        blocks.append({"type": "thinking", "thinking": thought, "signature": signature})
    if tool:
        blocks.append({"type": "tool_use", "id": tool_id, "name": tool.name, "input": content})
    else:
        blocks.append({"type": "text", "text": a.text})

    if not call.stream:
        sched.skip(u.output_tokens)
        await call.respond(200, [*JSON, *call.headers], dumps(message(blocks, True)), at=sched.now_due)
        return

    async def emit(kind: str, at: float | None = None, **fields: Any) -> None:
        await call.event(frame(kind, dumps({"type": kind, **fields})), at=at)

    async def block(index: int, start: dict[str, Any], deltas: list[dict[str, Any]], sizes: list[int]) -> None:
        await emit("content_block_start", index=index, content_block=start)
        if index == 0:
            await emit("ping")
        for delta, size in zip(deltas, sizes, strict=True):
            await emit("content_block_delta", at=sched.skip(size), index=index, delta=delta)
        await emit("content_block_stop", index=index)

    size = call.latency.chunk_tokens
    await call.start_stream([*stream_headers, *call.headers], at=sched.headers_at)
    await emit("message_start", message=message([], False))
    index = 0
    if thinking:
        pieces = list(chunk(thought_tokens, size))
        deltas = [{"type": "thinking_delta", "thinking": "".join(p)} for p in pieces]
        deltas.append({"type": "signature_delta", "signature": signature})
        await block(0, {"type": "thinking", "thinking": "", "signature": ""}, deltas, [len(p) for p in pieces] + [0])
        index = 1
    pieces = list(chunk(a.tokens, size))
    if tool:
        start = {"type": "tool_use", "id": tool_id, "name": tool.name, "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": "".join(p)} for p in pieces]
    else:
        start = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": "".join(p)} for p in pieces]
    await block(index, start, deltas, [len(p) for p in pieces])
    delta_usage = usage(u.output_tokens)
    del delta_usage["cache_creation"], delta_usage["service_tier"]
    await emit("message_delta", delta={"stop_reason": stop_reason, "stop_sequence": None}, usage=delta_usage)
    await emit("message_stop")
    await call.end_stream()


ROUTES: dict[tuple[str, str], Callable[[Call], Awaitable[None]]] = {
    ("POST", "/v1/messages"): messages,
    ("POST", "/v1/messages/count_tokens"): count_tokens,
}
