"""What a simulated model answers, and how long the answer is, before any provider formatting."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ._reply import Call
from ._text import generate_text, instance_of_schema, json_tokens

__all__ = ["Answer", "ApiError", "ForcedTool", "answer", "int_field", "is_reasoning_model"]

_REASONING_MODEL = re.compile(r"^o\d")


class ApiError(Exception):
    """A request the real API would reject; the provider module renders it in its own error shape."""

    def __init__(self, status: int, message: str, *, kind: str = "invalid_request_error", param: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.param = param


def is_reasoning_model(model: str | None) -> bool:
    """OpenAI's o-series (``o1``, ``o3-mini``, ``o4-mini``...) think in hidden tokens before answering."""
    return bool(model and _REASONING_MODEL.match(model))


def int_field(body: dict[str, Any], *names: str) -> int | None:
    """The first of ``names`` set in the body, validated like the real APIs do."""
    for name in names:
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ApiError(400, f"Invalid '{name}': expected an integer >= 1, got {value!r}.", param=name)
        return value
    return None


@dataclass(frozen=True)
class ForcedTool:
    name: str
    schema: dict[str, Any]


@dataclass
class Answer:
    """One choice's output: visible ``tokens`` after ``reasoning`` hidden ones; ``truncated`` by the limit."""

    tokens: list[str]
    reasoning: int
    truncated: bool

    @property
    def text(self) -> str:
        return "".join(self.tokens)


def answer(call: Call, *, limit: int | None, reasoning: int = 0, content: Any = None) -> Answer:
    """Plan an answer of the model's usual length (or ``content`` as JSON), cut at ``limit`` tokens.

    Hidden reasoning comes out of the same budget, as it does for OpenAI's ``max_completion_tokens``.
    """
    reasoning = reasoning if limit is None else min(reasoning, limit)
    tokens = json_tokens(content) if content is not None else generate_text(call.rng, call.latency.output_tokens)
    room = None if limit is None else limit - reasoning
    truncated = room is not None and len(tokens) > room
    if room is not None and truncated:
        tokens = tokens[:room]
    return Answer(tokens, reasoning, truncated)


def schema_instance(schema: Any) -> Any:
    value = instance_of_schema(schema)
    return {} if value is None else value
