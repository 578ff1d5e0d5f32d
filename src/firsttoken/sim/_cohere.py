"""Cohere's v2 Chat API (``POST /v2/chat``): a whole answer, or a stream of typed events
(``message-start``, ``content-start``, ``content-delta``..., ``content-end``, ``message-end`` with the
finish reason and usage) sent as server-sent events with the type in the data and the event line.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ._output import Answer, ApiError, answer, int_field
from ._reply import Call, dumps
from ._text import Prompt, chunk

__all__ = ["ROUTES"]

JSON = [("content-type", "application/json")]
SSE = [("content-type", "text/event-stream"), ("cache-control", "no-cache")]


def _prompt(body: dict[str, Any]) -> Prompt:
    prompt = Prompt()
    for tool in body.get("tools") or []:
        prompt.add_json(tool)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "invalid request: messages must not be empty")
    for message in messages:
        if not isinstance(message, dict):
            raise ApiError(400, "invalid request: each message must be an object")
        prompt.add_marker(str(message.get("role", "user")))
        prompt.add_value({k: v for k, v in message.items() if k != "role"})
    return prompt


async def chat(call: Call) -> None:
    body = call.body
    if not isinstance(body.get("model"), str):
        raise ApiError(400, "invalid request: model is required")
    prompt = _prompt(body)
    a: Answer = answer(call, limit=int_field(body, "max_tokens"))
    hit = call.cache.automatic(call.model or "", prompt.tokens)
    u = call.usage
    u.input_tokens = len(prompt.tokens)
    u.cached_tokens = hit.read
    u.output_tokens = len(a.tokens)
    sched = call.schedule(len(prompt.tokens) - hit.read)
    finish = "MAX_TOKENS" if a.truncated else "COMPLETE"
    cid = call.new_id("", 32)
    usage = {
        "billed_units": {"input_tokens": u.input_tokens - u.cached_tokens, "output_tokens": u.output_tokens},
        "tokens": {"input_tokens": u.input_tokens, "output_tokens": u.output_tokens},
        "cached_tokens": u.cached_tokens,
    }
    if not call.stream:
        sched.skip(u.output_tokens)
        result = {
            "id": cid,
            "finish_reason": finish,
            "message": {"role": "assistant", "content": [{"type": "text", "text": a.text}]},
            "usage": usage,
        }
        await call.respond(200, [*JSON, *call.headers], dumps(result), at=sched.now_due)
        return

    async def emit(kind: str, at: float | None = None, **fields: Any) -> None:
        data = dumps({"type": kind, **fields})
        await call.event(b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n", at=at)

    await call.start_stream([*SSE, *call.headers], at=sched.headers_at)
    start = {"role": "assistant", "content": [], "tool_plan": "", "tool_calls": [], "citations": []}
    await emit("message-start", id=cid, delta={"message": start})
    await emit("content-start", index=0, delta={"message": {"content": {"type": "text", "text": ""}}})
    for piece in chunk(a.tokens, call.latency.chunk_tokens):
        text = "".join(piece)
        await emit("content-delta", at=sched.skip(len(piece)), index=0, delta={"message": {"content": {"text": text}}})
    await emit("content-end", index=0)
    await emit("message-end", at=sched.now_due, delta={"finish_reason": finish, "usage": usage})
    await call.end_stream()


ROUTES: dict[tuple[str, str], Callable[[Call], Awaitable[None]]] = {("POST", "/v2/chat"): chat}
