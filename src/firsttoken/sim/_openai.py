"""The OpenAI API: chat completions, responses, legacy completions and embeddings."""

from __future__ import annotations

import base64
import hashlib
import math
import struct
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ._output import Answer, ApiError, ForcedTool, answer, int_field, is_reasoning_model, schema_instance
from ._reply import Call, dumps
from ._text import Prompt, chunk, tokenize

__all__ = ["ROUTES", "error_body", "error_event"]

JSON = [("content-type", "application/json")]
SSE = [("content-type", "text/event-stream; charset=utf-8"), ("cache-control", "no-cache")]


def error_body(status: int, message: str, *, kind: str | None = None, code: str | None = None) -> bytes:
    """OpenAI's error shape (see the recorded 404 in ``test_chat_completion_404.yaml``)."""
    if kind is None:
        kind = {404: "invalid_request_error", 429: "requests"}.get(status, "server_error" if status >= 500 else "")
    return dumps({"error": {"message": message, "type": kind or "invalid_request_error", "param": None, "code": code}})


def error_event(path: str) -> Callable[[], bytes]:
    """The mid-stream error a live server sends on this path (see ``Fault.error_event``)."""
    message = "The server had an error while processing your request. Sorry about that!"
    if path.endswith("/responses"):
        return lambda: (
            b"event: error\ndata: "
            + dumps({"type": "error", "code": "server_error", "message": message, "param": None, "sequence_number": 0})
            + b"\n\n"
        )
    return lambda: (
        b"data: "
        + dumps({"error": {"message": message, "type": "server_error", "param": None, "code": None}})
        + b"\n\n"
    )


def _headers(call: Call, base: list[tuple[str, str]], until: float | None = None) -> list[tuple[str, str]]:
    """Response headers; ``openai-processing-ms`` is ``t0`` to ``until``, when these headers are due.

    So for a stream it is the queue (headers go out before generation), for a whole response the
    queue, prefill and decode. Groq and Cerebras report their timing in the body instead.
    """
    if call.provider != "openai":
        return [*base, *call.headers]
    return [*base, *call.headers, ("openai-processing-ms", str(call.elapsed_ms(until)))]


def _groq_usage(usage: dict[str, Any]) -> dict[str, Any]:
    """The token counts of Groq's ``x_groq.usage`` (the groq SDK's ``CompletionUsage``): the three
    counts, ``prompt_tokens_details.cached_tokens`` (Groq's prompt cache) and, for a reasoning model,
    ``completion_tokens_details.reasoning_tokens``; none of OpenAI's audio or prediction counts."""
    out = {k: usage[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")}
    out["prompt_tokens_details"] = {"cached_tokens": usage["prompt_tokens_details"]["cached_tokens"]}
    reasoning = usage["completion_tokens_details"]["reasoning_tokens"]
    if reasoning:
        out["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return out


class _ProviderTiming:
    """Groq's or Cerebras's timing fields for one chat or completions call (nothing for OpenAI)."""

    def __init__(self, call: Call) -> None:
        self._call = call
        self._groq_id = call.new_id("req_", 26).lower() if call.provider == "groq" else ""
        self._first = True

    def whole(self, result: dict[str, Any], usage: dict[str, Any]) -> None:
        """On a whole response: Groq's ``usage.*_time`` and ``x_groq.id``, or Cerebras's ``time_info``."""
        if self._call.provider == "groq":
            usage.update(self._call.timing().groq())
            result["x_groq"] = {"id": self._groq_id}
        elif self._call.provider == "cerebras":
            result["time_info"] = self._call.timing().cerebras()

    def chunk(self, obj: dict[str, Any], usage: dict[str, Any], *, final: bool) -> None:
        """On a streamed chunk: ``x_groq.id`` first, ``x_groq.usage`` or ``time_info`` on the final one."""
        provider = self._call.provider
        if provider == "groq" and (self._first or final):
            obj["x_groq"] = {"id": self._groq_id}
            if final:
                obj["x_groq"]["usage"] = {**_groq_usage(usage), **self._call.timing().groq()}
        elif provider == "cerebras" and final:
            obj["time_info"] = self._call.timing().cerebras()
        self._first = False


def _usage_cache(call: Call, prompt: Prompt) -> int:
    """Look the prompt up in the automatic cache; return how many tokens must be prefilled."""
    tokens = prompt.tokens
    hit = call.cache.automatic(call.model or "", tokens)
    call.usage.input_tokens = len(tokens)
    call.usage.cached_tokens = hit.read
    return len(tokens) - hit.read


def _require(body: dict[str, Any], name: str, kind: type) -> Any:
    value = body.get(name)
    if not isinstance(value, kind):
        raise ApiError(400, f"Missing or invalid required parameter: '{name}'.", param=name)
    return value


def _forced_tool(body: dict[str, Any]) -> ForcedTool | None:
    """A tool call happens when the request forces one: ``tool_choice`` "required" or a named function."""
    tools = [t for t in body.get("tools") or [] if isinstance(t, dict) and t.get("type", "function") == "function"]
    choice = body.get("tool_choice")
    if not tools or choice in (None, "auto", "none"):
        return None
    name = None
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name") or choice.get("name")
    for tool in tools:
        spec = tool.get("function", tool)  # chat nests the definition; responses does not
        if name is None or spec.get("name") == name:
            return ForcedTool(str(spec.get("name")), spec.get("parameters") or {})
    raise ApiError(400, f"Invalid 'tool_choice': no function named {name!r} in 'tools'.", param="tool_choice")


def _json_content(fmt: Any) -> Any:
    """The JSON an answer must be for ``response_format`` / ``text.format``; None for free text."""
    if not isinstance(fmt, dict):
        return None
    if fmt.get("type") == "json_schema":
        schema = fmt.get("json_schema", fmt)  # chat nests it; responses does not
        return schema_instance(schema.get("schema", {}))
    if fmt.get("type") == "json_object":
        return {"answer": "example"}
    return None


def _plan(call: Call, limit: int | None, content: Any) -> Answer:
    reasoning = call.latency.reasoning_tokens if is_reasoning_model(call.model) else 0
    return answer(call, limit=limit, reasoning=reasoning, content=content)


def _chat_prompt(body: dict[str, Any]) -> Prompt:
    prompt = Prompt()
    for tool in body.get("tools") or []:
        prompt.add_json(tool)
    for message in _require(body, "messages", list):
        if not isinstance(message, dict):
            raise ApiError(400, "Invalid 'messages': each message must be an object.", param="messages")
        prompt.add_marker(str(message.get("role", "user")))
        prompt.add_value({k: v for k, v in message.items() if k != "role"})
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        prompt.add_json(fmt)
    return prompt


def _chat_usage(call: Call, answers: list[Answer]) -> dict[str, Any]:
    u = call.usage
    u.reasoning_tokens = sum(a.reasoning for a in answers)
    u.output_tokens = sum(len(a.tokens) for a in answers) + u.reasoning_tokens
    return {
        "prompt_tokens": u.input_tokens,
        "completion_tokens": u.output_tokens,
        "total_tokens": u.input_tokens + u.output_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": u.reasoning_tokens,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


async def chat_completions(call: Call) -> None:
    body = call.body
    prompt = _chat_prompt(body)
    n = int_field(body, "n") or 1
    limit = int_field(body, "max_completion_tokens", "max_tokens")
    tool = _forced_tool(body)
    content = schema_instance(tool.schema) if tool else _json_content(body.get("response_format"))
    answers = [_plan(call, limit, content) for _ in range(n)]
    sched = call.schedule(_usage_cache(call, prompt))
    usage = _chat_usage(call, answers)
    finish = [("length" if a.truncated else "tool_calls" if tool else "stop") for a in answers]
    call_ids = [call.new_id("call_") for _ in answers]
    cid, created, model = call.new_id("chatcmpl-", 29), int(time.time()), call.model
    timing = _ProviderTiming(call)

    if not call.stream:
        sched.skip(max(a.reasoning + len(a.tokens) for a in answers))
        choices = []
        for i, a in enumerate(answers):
            message: dict[str, Any] = {"role": "assistant", "content": a.text, "refusal": None, "annotations": []}
            if tool:
                message["content"] = None
                message["tool_calls"] = [
                    {"id": call_ids[i], "type": "function", "function": {"name": tool.name, "arguments": a.text}}
                ]
            choices.append({"index": i, "message": message, "logprobs": None, "finish_reason": finish[i]})
        result = {
            "id": cid,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": choices,
            "usage": usage,
            "service_tier": "default",
            "system_fingerprint": "fp_firsttoken",
        }
        timing.whole(result, usage)
        await call.respond(200, _headers(call, JSON, sched.now_due), dumps(result), at=sched.now_due)
        return

    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    # Mistral's API always sends the usage, on the chunk that carries the finish reason.
    usage_on_finish = is_mistral_model(model) and not include_usage

    def chunk_of(
        choices: list[dict[str, Any]], usage_value: Any = None, *, final: bool = False, with_usage: bool = False
    ) -> bytes:
        obj: dict[str, Any] = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "service_tier": "default",
            "system_fingerprint": "fp_firsttoken",
            "choices": choices,
        }
        if include_usage or with_usage:
            obj["usage"] = usage_value
        timing.chunk(obj, usage, final=final)
        return b"data: " + dumps(obj) + b"\n\n"

    def choice(i: int, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {"index": i, "delta": delta, "logprobs": None, "finish_reason": finish_reason}

    await call.start_stream(_headers(call, SSE, sched.headers_at), at=sched.headers_at)
    for i in range(n):
        role: dict[str, Any] = {"role": "assistant", "content": None if tool else "", "refusal": None}
        await call.event(chunk_of([choice(i, role)]))
    sched.skip(max(a.reasoning for a in answers))
    pieces = [list(chunk(a.tokens, call.latency.chunk_tokens)) for a in answers]
    for step in range(max(len(p) for p in pieces)):
        at = sched.skip(max(len(p[step]) for p in pieces if step < len(p)))
        for i, p in enumerate(pieces):
            if step >= len(p):
                continue
            text = "".join(p[step])
            if tool:
                call_delta: dict[str, Any] = {"index": 0, "function": {"arguments": text}}
                if step == 0:
                    call_delta.update(id=call_ids[i], type="function")
                    call_delta["function"]["name"] = tool.name
                delta: dict[str, Any] = {"tool_calls": [call_delta]}
            else:
                delta = {"content": text}
            await call.event(chunk_of([choice(i, delta)]), at=at)
    for i in range(n):
        # At the last token's time: with every token spent on hidden reasoning, this is the first
        # event after the reasoning, and it must not be sent before the reasoning is done.
        last = i == n - 1
        end = chunk_of(
            [choice(i, {}, finish[i])],
            usage if usage_on_finish and last else None,
            final=last and not include_usage,
            with_usage=usage_on_finish and last,
        )
        await call.event(end, at=sched.now_due)
    if include_usage:
        await call.event(chunk_of([], usage, final=True))
    await call.event(b"data: [DONE]\n\n")
    await call.end_stream()


def is_mistral_model(model: str | None) -> bool:
    """Mistral's models, as its API names them: their streams carry usage without ``stream_options``."""
    return (model or "").startswith(("mistral-", "magistral-", "codestral-", "ministral-", "devstral-", "pixtral-"))


# -- /v1/completions (legacy) ----------------------------------------------------------------------


def _completion_prompt(body: dict[str, Any]) -> Prompt:
    prompt = Prompt()
    raw = body.get("prompt", "")
    items = raw if isinstance(raw, list) else [raw]
    for item in items:
        if isinstance(item, str):
            prompt.add_text(item)
        elif isinstance(item, int):
            prompt.add_marker(str(item))
        elif isinstance(item, list):
            prompt.add_value([str(t) for t in item])
        else:
            raise ApiError(400, "Invalid 'prompt': expected a string, tokens or a list of them.", param="prompt")
    return prompt


async def completions(call: Call) -> None:
    body = call.body
    prompt = _completion_prompt(body)
    n = int_field(body, "n") or 1
    answers = [_plan(call, int_field(body, "max_tokens"), None) for _ in range(n)]
    sched = call.schedule(_usage_cache(call, prompt))
    usage = _chat_usage(call, answers)
    finish = ["length" if a.truncated else "stop" for a in answers]
    cid, created, model = call.new_id("cmpl-", 29), int(time.time()), call.model
    timing = _ProviderTiming(call)

    if not call.stream:
        sched.skip(max(len(a.tokens) for a in answers))
        result = {
            "id": cid,
            "object": "text_completion",
            "created": created,
            "model": model,
            "system_fingerprint": "fp_firsttoken",
            "choices": [
                {"text": a.text, "index": i, "logprobs": None, "finish_reason": finish[i]}
                for i, a in enumerate(answers)
            ],
            "usage": usage,
        }
        timing.whole(result, usage)
        await call.respond(200, _headers(call, JSON, sched.now_due), dumps(result), at=sched.now_due)
        return

    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

    def chunk_of(choices: list[dict[str, Any]], usage_value: Any = None, *, final: bool = False) -> bytes:
        obj: dict[str, Any] = {"id": cid, "object": "text_completion", "created": created, "model": model}
        obj["system_fingerprint"] = "fp_firsttoken"
        obj["choices"] = choices
        if include_usage:
            obj["usage"] = usage_value
        timing.chunk(obj, usage, final=final)
        return b"data: " + dumps(obj) + b"\n\n"

    await call.start_stream(_headers(call, SSE, sched.headers_at), at=sched.headers_at)
    pieces = [list(chunk(a.tokens, call.latency.chunk_tokens)) for a in answers]
    for step in range(max(len(p) for p in pieces)):
        at = sched.skip(max(len(p[step]) for p in pieces if step < len(p)))
        for i, p in enumerate(pieces):
            if step < len(p):
                text = "".join(p[step])
                item = {"text": text, "index": i, "logprobs": None, "finish_reason": None}
                await call.event(chunk_of([item]), at=at)
    for i in range(n):
        last = {"text": "", "index": i, "logprobs": None, "finish_reason": finish[i]}
        await call.event(chunk_of([last], final=i == n - 1 and not include_usage))
    if include_usage:
        await call.event(chunk_of([], usage, final=True))
    await call.event(b"data: [DONE]\n\n")
    await call.end_stream()


# -- /v1/embeddings ---------------------------------------------------------------------------------

_DIMENSIONS = {"text-embedding-3-large": 3072}


def _vector(text: str, dimensions: int) -> list[float]:
    """A deterministic unit vector per input, so equal inputs embed equally."""
    out: list[float] = []
    counter = 0
    while len(out) < dimensions:
        digest = hashlib.blake2b(f"{counter}:{text}".encode(), digest_size=64).digest()
        out.extend((b - 127.5) / 127.5 for b in digest)
        counter += 1
    del out[dimensions:]
    norm = math.sqrt(sum(x * x for x in out)) or 1.0
    return [round(x / norm, 7) for x in out]


async def embeddings(call: Call) -> None:
    body = call.body
    raw = body.get("input")
    if isinstance(raw, str) or (isinstance(raw, list) and raw and all(isinstance(t, int) for t in raw)):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise ApiError(400, "'input' must be a non-empty string or array.", param="input")
    dimensions = int_field(body, "dimensions") or _DIMENSIONS.get(call.model or "", 1536)
    fmt = body.get("encoding_format") or "float"
    if fmt not in ("float", "base64"):
        raise ApiError(400, f"Invalid 'encoding_format': {fmt!r}.", param="encoding_format")
    data, total = [], 0
    for i, item in enumerate(raw):
        text = item if isinstance(item, str) else " ".join(str(t) for t in item)
        total += len(tokenize(text)) if isinstance(item, str) else len(item)
        vector = _vector(text, dimensions)
        embedding: Any = vector
        if fmt == "base64":
            embedding = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        data.append({"object": "embedding", "index": i, "embedding": embedding})
    call.usage.input_tokens = total
    sched = call.schedule(total)
    result = {
        "object": "list",
        "data": data,
        "model": call.model,
        "usage": {"prompt_tokens": total, "total_tokens": total},
    }
    await call.respond(200, _headers(call, JSON, sched.prefill_done_at), dumps(result), at=sched.prefill_done_at)


# -- /v1/responses ----------------------------------------------------------------------------------


def _responses_prompt(body: dict[str, Any]) -> Prompt:
    prompt = Prompt()
    for tool in body.get("tools") or []:
        prompt.add_json(tool)
    if isinstance(body.get("instructions"), str):
        prompt.add_marker("developer")
        prompt.add_text(body["instructions"])
    raw = body.get("input")
    if isinstance(raw, str):
        prompt.add_marker("user")
        prompt.add_text(raw)
    elif isinstance(raw, list):
        for item in raw:
            if isinstance(item, dict):
                prompt.add_marker(str(item.get("role") or item.get("type") or "user"))
            prompt.add_value(item)
    else:
        raise ApiError(400, "Missing required parameter: 'input'.", param="input")
    fmt = (body.get("text") or {}).get("format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        prompt.add_json(fmt)
    return prompt


async def responses(call: Call) -> None:
    body = call.body
    prompt = _responses_prompt(body)
    tool = _forced_tool(body)
    content = schema_instance(tool.schema) if tool else _json_content((body.get("text") or {}).get("format"))
    a = _plan(call, int_field(body, "max_output_tokens"), content)
    sched = call.schedule(_usage_cache(call, prompt))
    u = call.usage
    u.reasoning_tokens = a.reasoning
    u.output_tokens = len(a.tokens) + a.reasoning
    usage = {
        "input_tokens": u.input_tokens,
        "input_tokens_details": {"cached_tokens": u.cached_tokens},
        "output_tokens": u.output_tokens,
        "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
        "total_tokens": u.input_tokens + u.output_tokens,
    }
    rid, created = call.new_id("resp_", 40), int(time.time())
    reasoning_item = {"id": call.new_id("rs_", 40), "type": "reasoning", "summary": []} if a.reasoning else None
    item_id = call.new_id("fc_" if tool else "msg_", 40)
    call_id = call.new_id("call_")
    index = 1 if reasoning_item else 0
    status = "incomplete" if a.truncated else "completed"

    def item(done: bool) -> dict[str, Any]:
        state = "completed" if done else "in_progress"
        if tool:
            arguments = a.text if done else ""
            return {
                "id": item_id,
                "type": "function_call",
                "status": state,
                "arguments": arguments,
                "call_id": call_id,
                "name": tool.name,
            }
        parts = [part(a.text)] if done else []
        return {"id": item_id, "type": "message", "status": state, "role": "assistant", "content": parts}

    def part(text: str) -> dict[str, Any]:
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}

    def response(done: bool) -> dict[str, Any]:
        output = ([reasoning_item] if reasoning_item else []) + [item(True)] if done else []
        return {
            "id": rid,
            "object": "response",
            "created_at": created,
            "status": status if done else "in_progress",
            "background": False,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if done and a.truncated else None,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "model": call.model,
            "output": output,
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": body.get("previous_response_id"),
            "reasoning": {"effort": None, "summary": None},
            "service_tier": "default",
            "store": body.get("store", True),
            "temperature": body.get("temperature", 1.0),
            "text": body.get("text") or {"format": {"type": "text"}},
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools") or [],
            "top_p": body.get("top_p", 1.0),
            "truncation": body.get("truncation", "disabled"),
            "usage": usage if done else None,
            "user": None,
            "metadata": body.get("metadata") or {},
        }

    if not call.stream:
        sched.skip(a.reasoning + len(a.tokens))
        await call.respond(200, _headers(call, JSON, sched.now_due), dumps(response(True)), at=sched.now_due)
        return

    seq = 0

    async def emit(kind: str, at: float | None = None, **fields: Any) -> None:
        nonlocal seq
        data = dumps({"type": kind, "sequence_number": seq, **fields})
        seq += 1
        await call.event(b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n", at=at)

    await call.start_stream(_headers(call, SSE, sched.headers_at), at=sched.headers_at)
    await emit("response.created", response=response(False))
    await emit("response.in_progress", response=response(False))
    if reasoning_item:
        await emit("response.output_item.added", output_index=0, item={**reasoning_item})
        await emit("response.output_item.done", at=sched.skip(a.reasoning), output_index=0, item=reasoning_item)
    await emit("response.output_item.added", output_index=index, item=item(False))
    where: dict[str, Any] = {"item_id": item_id, "output_index": index}
    if not tool:
        await emit("response.content_part.added", **where, content_index=0, part=part(""))
    for piece in chunk(a.tokens, call.latency.chunk_tokens):
        at = sched.skip(len(piece))
        if tool:
            await emit("response.function_call_arguments.delta", at=at, **where, delta="".join(piece))
        else:
            await emit("response.output_text.delta", at=at, **where, content_index=0, delta="".join(piece), logprobs=[])
    if tool:
        await emit("response.function_call_arguments.done", **where, name=tool.name, arguments=a.text)
    else:
        await emit("response.output_text.done", **where, content_index=0, text=a.text, logprobs=[])
        await emit("response.content_part.done", **where, content_index=0, part=part(a.text))
    await emit("response.output_item.done", output_index=index, item=item(True))
    await emit("response.incomplete" if a.truncated else "response.completed", response=response(True))
    await call.end_stream()


async def models(call: Call) -> None:
    names = ["gpt-4o", "gpt-4o-mini", "o3-mini", "text-embedding-3-small"]
    data = [{"id": m, "object": "model", "created": 0, "owned_by": "firsttoken-sim"} for m in names]
    await call.respond(200, _headers(call, JSON), dumps({"object": "list", "data": data}))


ROUTES: dict[tuple[str, str], Callable[[Call], Awaitable[None]]] = {
    ("POST", "/v1/chat/completions"): chat_completions,
    ("POST", "/v1/completions"): completions,
    ("POST", "/v1/embeddings"): embeddings,
    ("POST", "/v1/responses"): responses,
    ("GET", "/v1/models"): models,
}
