"""Server timing that providers report in their responses, kept apart from what the client measures.

* OpenAI: the ``openai-processing-ms`` header (read by :mod:`firsttoken.transport`).
* Groq: ``usage.queue_time|prompt_time|completion_time|total_time`` (seconds) on whole responses,
  and the same under ``x_groq.usage`` on the final chunk of a stream.
* Cerebras: ``time_info.queue_time|prompt_time|completion_time|total_time`` on whole responses and
  on the final chunk of a stream.

The SDK models keep unknown fields (pydantic ``extra="allow"``), so these are read off the parsed
objects, or off plain dicts for raw responses.
"""

from __future__ import annotations

from typing import Any

from .. import semconv as sc
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
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
            tl.extra[attr] = float(value)
            if phase is not None:
                tl.server_timing[phase] = float(value)
            found = True
    if found:
        tl.extra[sc.FT_SERVER_TIMING_SOURCE] = source
    return found


def read(tl: Timeline, obj: Any) -> None:
    """Provider timing from a whole response or a (final) streamed chunk, if it carries any."""
    x_groq = get(obj, "x_groq")
    if x_groq is not None and _take(tl, get(x_groq, "usage"), "groq"):
        return
    time_info = get(obj, "time_info")
    if time_info is not None and _take(tl, time_info, "cerebras"):
        return
    usage = get(obj, "usage")
    if usage is not None and get(usage, "queue_time") is not None:
        _take(tl, usage, "groq")
