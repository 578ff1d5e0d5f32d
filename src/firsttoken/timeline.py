"""The Timeline: plain data about one LLM call, filled by the hooks and read by the Recorder.

Marks are ``time.perf_counter_ns()`` readings; ``start_wall_ns`` anchors them to the epoch so the
Recorder can give spans real start and end times. Facts are whatever the provider and the wire
told us. Nothing here knows about OpenTelemetry.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from operator import itemgetter
from typing import Any

from . import semconv as sc

_AT = itemgetter(0)

CallStart = tuple[int, int, bool | None]
"""When the app called the SDK's public method (perf_counter_ns, time_ns): the call's start; and
whether the app's context then asked instrumentation to stay quiet (OpenTelemetry's suppression
keys; None: not read, no tracer in use honours them). Suppression set later, inside the SDK call
(``logfire.instrument_openai()``'s), is another instrumentation's, not the app's."""


def is_cancellation(exc: BaseException) -> bool:
    """asyncio cancellation or Ctrl-C: a call or scope ending so is cancelled, not failed.

    asyncio is not imported for the check: if the app has not imported it, nothing raised its error.
    """
    if isinstance(exc, KeyboardInterrupt):
        return True
    asyncio = sys.modules.get("asyncio")
    return asyncio is not None and isinstance(exc, asyncio.CancelledError)


_FINISH_LOCK = threading.Lock()

STREAM_TEXT_KEY = "_stream_text"
"""Key in ``Timeline.capture`` under which streamed output text accumulates (content capture)."""


class Timeline:
    """Marks and facts for one call. Hooks write; :meth:`finish` hands it to the Recorder once."""

    __slots__ = (
        "action",
        "api_type",
        "attempt_log",
        "attempts",
        "cache_creation_tokens",
        "cache_read_tokens",
        "capture",
        "chunk_count",
        "chunk_gaps",
        "closed_ns",
        "connect_ns",
        "conversation_id",
        "conversation_turn",
        "cuts",
        "dns_seen",
        "embedding_dimensions",
        "end_ns",
        "end_reason",
        "ended",
        "endpoint",
        "error_message",
        "error_type",
        "extra",
        "finish_reasons",
        "first_chunk_ns",
        "first_token_ns",
        "headers_ns",
        "hidden_output_tokens",
        "hints",
        "input_tokens",
        "last_chunk_ns",
        "last_token_ns",
        "new_client",
        "new_connections",
        "on_close",
        "on_finish",
        "operation",
        "output_tokens",
        "prefix_hash",
        "provider",
        "reasoning_tokens",
        "request",
        "request_bytes",
        "request_id",
        "request_model",
        "response_bytes",
        "response_id",
        "response_model",
        "reused_connections",
        "server_address",
        "server_port",
        "server_timing",
        "span",
        "start_ns",
        "start_wall_ns",
        "status_code",
        "stream",
        "stream_gen",
        "terminal_seen",
        "token_chunk_count",
        "traffic_class",
    )

    def __init__(
        self,
        *,
        provider: str,
        operation: str,
        request_model: str | None,
        server_address: str | None,
        server_port: int | None,
        stream: bool,
        on_finish: Callable[[Timeline], None],
        start: CallStart | None = None,
    ) -> None:
        if start is None:
            self.start_ns, self.start_wall_ns = time.perf_counter_ns(), time.time_ns()
        else:
            self.start_ns, self.start_wall_ns, _ = start
        self.provider = provider
        self.operation = operation
        self.request_model = request_model
        self.server_address = server_address
        self.server_port = server_port
        self.stream = stream
        self.on_finish = on_finish
        self.api_type: str | None = None
        self.request: dict[str, Any] = {}
        """Request parameters worth recording (semconv attribute -> value)."""
        self.extra: dict[str, Any] = {}
        """Provider-specific attributes, already keyed by their semconv name."""
        self.capture: dict[str, str] | None = None
        """Content (attribute -> JSON text), only when the user opted in."""
        self.span: Any = None
        self.headers_ns: int | None = None
        self.first_chunk_ns: int | None = None
        self.first_token_ns: int | None = None
        self.last_token_ns: int | None = None
        self.last_chunk_ns: int | None = None
        self.closed_ns: int | None = None
        self.end_ns: int | None = None
        self.chunk_count = 0
        self.token_chunk_count = 0
        self.chunk_gaps: list[int] | None = None
        self.attempts = 0
        self.status_code: int | None = None
        self.request_id: str | None = None
        self.response_id: str | None = None
        self.response_model: str | None = None
        self.finish_reasons: dict[int, str] = {}
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.cache_read_tokens: int | None = None
        self.cache_creation_tokens: int | None = None
        self.reasoning_tokens: int | None = None
        self.hidden_output_tokens = 0
        """Output tokens generated but never streamed (OpenAI reasoning): not part of the decode."""
        self.embedding_dimensions: int | None = None
        self.conversation_id: str | None = None
        self.traffic_class: str | None = None
        self.prefix_hash: str | None = None
        self.conversation_turn: int | None = None
        self.new_client = False
        self.endpoint: Any = None
        """The ``providers.endpoints.Endpoint`` the call went to, when a provider hook resolved it."""
        self.hints: dict[str, str] | None = None
        """Response headers that name the server software or a gateway's upstream (transport)."""
        self.server_timing: dict[str, float] = {}
        """Provider-reported seconds by phase (queue, prompt, completion, processing)."""
        self.attempt_log: list[tuple[int, int | None]] = []
        """(response time, HTTP status) of every attempt the SDK sent."""
        self.cuts: list[tuple[int, str]] = []
        """(time, phase that ends then), appended in time order by the hooks of this call."""
        self.connect_ns: int | None = None
        self.dns_seen = False
        self.new_connections = 0
        self.reused_connections = 0
        self.request_bytes: int | None = None
        self.response_bytes: int | None = None
        self.action: Any = None
        """The ``firsttoken.action`` the call was made in (a ``context.ActionState``), if any."""
        self.error_type: str | None = None
        self.error_message: str | None = None
        """The failure in the API's own words (the span's status description), when an exception said it."""
        self.end_reason: str | None = None
        self.on_close: Callable[[Timeline, Any, int], None] | None = None
        """Set once the app holds the response: what to do when the transport sees it close."""
        self.stream_gen: Any = None
        """A weak reference to the generator observing the call's stream, once there is one."""
        self.terminal_seen = False
        """Whether the stream's terminal event has been read: closed or dropped after it, the call
        completed (docs/semantics.md, "End reasons")."""
        self.ended = False

    # -- marks -----------------------------------------------------------------------------

    def last_observed_ns(self) -> int:
        """The latest moment anything was seen of this call (the end of an abandoned call)."""
        latest = self.start_ns
        for mark in (self.headers_ns, self.last_chunk_ns, self.closed_ns):
            if mark is not None and mark > latest:
                latest = mark
        return latest

    def output_token(self, now_ns: int) -> None:
        """A streamed item carrying generated output arrived (every provider's observer calls this,
        or, on its per-chunk fast path, does the same three writes itself)."""
        if self.first_token_ns is None:
            self.first_token_ns = now_ns
        self.last_token_ns = now_ns
        self.token_chunk_count += 1

    def cut(self, at_ns: int, phase: str) -> None:
        """The phase ``phase`` ends at ``at_ns`` (and the next one starts there)."""
        self.cuts.append((at_ns, phase))

    def wall_ns(self, mark_ns: int) -> int:
        """Epoch nanoseconds of a perf-counter mark."""
        return self.start_wall_ns + (mark_ns - self.start_ns)

    # -- derived quantities ---------------------------------------------------------------

    @property
    def duration_s(self) -> float | None:
        return None if self.end_ns is None else (self.end_ns - self.start_ns) / 1e9

    @property
    def time_to_first_chunk_s(self) -> float | None:
        return None if self.first_chunk_ns is None else (self.first_chunk_ns - self.start_ns) / 1e9

    @property
    def time_to_first_token_s(self) -> float | None:
        return None if self.first_token_ns is None else (self.first_token_ns - self.start_ns) / 1e9

    def decode_tokens(self) -> tuple[int, str] | None:
        """Output tokens behind the decode rate and where the count came from."""
        if self.output_tokens is not None and self.output_tokens - self.hidden_output_tokens > 0:
            return self.output_tokens - self.hidden_output_tokens, sc.TOKEN_SOURCE_USAGE
        if self.token_chunk_count > 0:
            return self.token_chunk_count, sc.TOKEN_SOURCE_CHUNKS
        return None

    @property
    def time_per_output_token_s(self) -> float | None:
        """(last token - first token) / (output tokens - 1); None when it cannot be known."""
        if self.first_token_ns is None or self.last_token_ns is None:
            return None
        counted = self.decode_tokens()
        if counted is None or counted[0] < 2:
            return None
        return (self.last_token_ns - self.first_token_ns) / 1e9 / (counted[0] - 1)

    # -- the end ---------------------------------------------------------------------------

    def finish(
        self, reason: str, end_ns: int | None = None, error_type: str | None = None, error_message: str | None = None
    ) -> bool:
        """End the call once; later calls are no-ops. Returns whether this call ended it."""
        with _FINISH_LOCK:
            if self.ended:
                return False
            self.ended = True
        self.end_ns = time.perf_counter_ns() if end_ns is None else end_ns
        self.end_reason = reason
        if error_type is not None:
            self.error_type = error_type
            self.error_message = error_message
        self.on_finish(self)
        return True

    def phases(self) -> list[tuple[int, int, str]]:
        """The call cut into leaf phases (start, end, name) that tile it: no gap, no overlap."""
        end_ns = self.end_ns if self.end_ns is not None else self.last_observed_ns()
        cuts = list(self.cuts)
        if self.first_token_ns is not None:
            cuts.append((self.first_token_ns, sc.PHASE_WAIT_FIRST_TOKEN))
        if self.last_token_ns is not None and self.last_token_ns != self.first_token_ns:
            cuts.append((self.last_token_ns, sc.PHASE_DECODE))
        elif self.first_token_ns is None and self.stream and self.last_chunk_ns is not None:
            cuts.append((self.last_chunk_ns, sc.PHASE_WAIT_NO_OUTPUT))  # not "finish": hidden reasoning, say
        cuts.sort(key=_AT)  # by time only: cuts at the same moment keep the order they were made in
        cuts.append((end_ns, sc.PHASE_FINISH))
        out: list[tuple[int, int, str]] = []
        at = self.start_ns
        for cut, name in cuts:
            cut = min(max(cut, at), end_ns)
            if cut == at:
                continue
            if out and out[-1][2] == name:
                out[-1] = (out[-1][0], cut, name)
            else:
                out.append((at, cut, name))
            at = cut
        return out

    def __repr__(self) -> str:
        return (
            f"<Timeline {self.provider} {self.operation} {self.request_model!r} stream={self.stream} "
            f"ttft={self.time_to_first_token_s} duration={self.duration_s} end={self.end_reason}>"
        )


def turn_bucket(turn: int) -> str:
    """A conversation turn as a low-cardinality label: 1, 2-3, 4-7, 8-15, 16-31, 32+."""
    for upper, label in ((1, "1"), (3, "2-3"), (7, "4-7"), (15, "8-15"), (31, "16-31")):
        if turn <= upper:
            return label
    return "32+"
