"""Server timing as providers report it, taken from the latency model a call actually drew.

OpenAI sends ``openai-processing-ms`` (a header); OpenAI-compatible providers put the split in the
body: Groq as ``usage.*_time`` (whole responses) and ``x_groq.usage`` (the final chunk of a stream),
Cerebras as ``time_info`` (whole responses and the final chunk). Which style a request gets is the
simulator's ``provider_timing`` or the request's :data:`PROVIDER_HEADER`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

from ._latency import Schedule

__all__ = ["PROVIDER_HEADER", "PROVIDER_STYLES", "ProviderStyle", "ServerTiming", "parse_style"]

#: Request header choosing the provider whose timing fields a response carries: ``groq``, ``cerebras``
#: or ``openai`` (the ``openai-processing-ms`` header only).
PROVIDER_HEADER = "x-firsttoken-sim-provider"

ProviderStyle = Literal["openai", "groq", "cerebras"]
PROVIDER_STYLES: tuple[ProviderStyle, ...] = ("openai", "groq", "cerebras")


def parse_style(value: object) -> ProviderStyle:
    """A provider timing style from a header value or an argument (case-insensitive)."""
    style = value.strip().lower() if isinstance(value, str) else value
    if style not in PROVIDER_STYLES:
        raise ValueError(f"unknown provider timing {value!r}; expected one of {', '.join(PROVIDER_STYLES)}")
    return style


def _seconds(value: float) -> float:
    return round(max(value, 0.0), 6)


@dataclass(frozen=True)
class ServerTiming:
    """The phases of one call as its schedule drew them, in seconds from ``t0`` (request read).

    ``queue`` is ``t0`` to the end of the queue (when stream headers go out), ``prompt`` the prefill
    of uncached input tokens, ``completion`` the decode of every token generated so far (hidden
    reasoning included), so ``queue + prompt + completion`` is ``t0`` to the last token.
    """

    queue: float
    prompt: float
    completion: float

    @classmethod
    def of(cls, schedule: Schedule) -> ServerTiming:
        return cls(
            queue=_seconds(schedule.headers_at - schedule.t0),
            prompt=_seconds(schedule.prefill_done_at - schedule.headers_at),
            completion=_seconds(schedule.now_due - schedule.prefill_done_at),
        )

    def groq(self) -> dict[str, float]:
        """Groq's fields; its ``total_time`` is prompt + completion (the queue is not included)."""
        return {
            "queue_time": self.queue,
            "prompt_time": self.prompt,
            "completion_time": self.completion,
            "total_time": _seconds(self.prompt + self.completion),
        }

    def cerebras(self) -> dict[str, Any]:
        """Cerebras's ``time_info``: ``total_time`` is queue + prompt + completion, ``created`` epoch seconds."""
        return {
            "queue_time": self.queue,
            "prompt_time": self.prompt,
            "completion_time": self.completion,
            "total_time": _seconds(self.queue + self.prompt + self.completion),
            "created": time.time(),
        }
