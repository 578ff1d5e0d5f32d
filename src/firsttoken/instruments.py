"""firsttoken's metric instruments, declared as a table: one row per metric (as OpenTelemetry's
util-genai keeps its ``instruments.py``). :class:`~firsttoken.recorder.Recorder` and the
:class:`~firsttoken.actions.AppRecorder` it makes each make one instrument per row they own;
``docs/metrics.md`` is tested against the table (``tests/test_metrics_table.py``).

Histograms are OpenTelemetry histograms with advisory bucket boundaries; counters are summed in the
process and reported by an observable counter (:class:`firsttoken._sums.SummedCounter`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from opentelemetry.metrics import Meter

from . import semconv as sc
from ._sums import SummedCounter

HISTOGRAM = "histogram"
COUNTER = "counter"

CALL = "call"
"""A metric of LLM calls, made and recorded by :class:`firsttoken.recorder.Recorder`."""
APP = "app"
"""A metric of the app's actions and phases, made and recorded by :class:`firsttoken.actions.AppRecorder`."""


class Instrument(NamedTuple):
    """One metric: the recorder's attribute (``_`` + ``attr``), kind, name, unit, the histogram's
    buckets, description, the setting that turns it on when it is opt-in, and which recorder
    records it (:data:`CALL` or :data:`APP`)."""

    attr: str
    kind: str
    name: str
    unit: str
    buckets: tuple[float, ...] | None
    description: str
    opt_in: str | None = None
    recorder: str = CALL


S = sc.UNIT_SECONDS
T = sc.UNIT_TOKENS
DURATION_BUCKETS, TTFT_BUCKETS, TPOT_BUCKETS, TOKEN_BUCKETS = (
    sc.DURATION_BUCKETS,
    sc.TTFT_BUCKETS,
    sc.TPOT_BUCKETS,
    sc.TOKEN_BUCKETS,
)


# One row per metric: attribute, kind, name, unit, buckets (histograms), description, opt-in setting,
# and the recorder that records it when not a call's.
# fmt: off
INSTRUMENTS: tuple[Instrument, ...] = (
    Instrument("duration", HISTOGRAM, sc.M_OPERATION_DURATION, S, DURATION_BUCKETS,
               "GenAI operation duration: SDK call to last byte or end of stream."),
    Instrument("ttfc", HISTOGRAM, sc.M_TIME_TO_FIRST_CHUNK, S, DURATION_BUCKETS,
               "Time from the SDK call to the first streamed chunk."),
    Instrument("ttft", HISTOGRAM, sc.M_TIME_TO_FIRST_TOKEN, S, TTFT_BUCKETS,
               "Time from the SDK call to the first streamed chunk carrying generated output."),
    Instrument("tpot", HISTOGRAM, sc.M_TIME_PER_OUTPUT_TOKEN, S, TPOT_BUCKETS,
               "Decode time per output token after the first."),
    Instrument("token_usage", HISTOGRAM, sc.M_TOKEN_USAGE, T, TOKEN_BUCKETS,
               "Input and output tokens per call."),
    Instrument("chunk_gap", HISTOGRAM, sc.M_TIME_PER_OUTPUT_CHUNK, S, DURATION_BUCKETS,
               "Time between consecutive streamed chunks (opt-in).", "chunk_metrics"),
    Instrument("input_tokens", COUNTER, sc.M_INPUT_TOKENS, T, None,
               "Input tokens, cached ones included."),
    Instrument("cache_read", COUNTER, sc.M_CACHE_READ_INPUT_TOKENS, T, None,
               "Input tokens read from cache."),
    Instrument("cache_creation", COUNTER, sc.M_CACHE_CREATION_INPUT_TOKENS, T, None,
               "Input tokens written to the provider's prompt cache."),
    Instrument("output_tokens", COUNTER, sc.M_OUTPUT_TOKENS, T, None,
               "Output tokens, reasoning included."),
    Instrument("reasoning_tokens", COUNTER, sc.M_REASONING_OUTPUT_TOKENS, T, None,
               "Reasoning output tokens."),
    Instrument("phase", COUNTER, sc.M_PHASE_TIME, S, None,
               "Seconds spent in each phase of the calls (dns, tcp_connect, server_wait, decode, ...)."),
    Instrument("connections", COUNTER, sc.M_CONNECTIONS, "{connection}", None,
               "Requests by connection outcome: new or reused."),
    Instrument("request_bytes", COUNTER, sc.M_REQUEST_BYTES, "By", None,
               "Request body bytes as sent (after any compression the client applied)."),
    Instrument("response_bytes", COUNTER, sc.M_RESPONSE_BYTES, "By", None,
               "Response body bytes as received (before decompression)."),
    Instrument("retries", COUNTER, sc.M_RETRIES, "{retry}", None,
               "Requests the SDK sent again (rate limits, errors)."),
    Instrument("server_time", COUNTER, sc.M_SERVER_TIMING_TIME, S, None,
               "Provider-reported server seconds by phase (queue, prompt, completion, processing)."),
    Instrument("server_reports", COUNTER, sc.M_SERVER_TIMING_REPORTS, "{report}", None,
               "Calls whose provider reported server time, by phase."),
    Instrument("finish_reasons", COUNTER, sc.M_FINISH_REASONS, "{call}", None,
               "Calls by finish reason (length: stopped by max_tokens)."),
    Instrument("sdk_clients", COUNTER, sc.M_SDK_CLIENTS, "{client}", None,
               "SDK client instances seen making their first call."),
    Instrument("prefix_input", COUNTER, sc.M_PREFIX_INPUT_TOKENS, T, None,
               "Input tokens by prompt-prefix hash."),
    Instrument("prefix_cache_read", COUNTER, sc.M_PREFIX_CACHE_READ_INPUT_TOKENS, T, None,
               "Cached input tokens by prompt-prefix hash."),
    Instrument("conversation_input", HISTOGRAM, sc.M_CONVERSATION_INPUT_TOKENS, T, TOKEN_BUCKETS,
               "Input tokens per call by conversation turn: context growth."),
    Instrument("conversation_ttft", HISTOGRAM, sc.M_CONVERSATION_TTFT, S, TTFT_BUCKETS,
               "Time to first token by conversation turn: what context growth costs."),
    Instrument("action_duration", HISTOGRAM, sc.M_ACTION_DURATION, S, DURATION_BUCKETS,
               "Application end-to-end: user action to result rendered.", recorder=APP),
    Instrument("action_llm_busy", HISTOGRAM, sc.M_ACTION_LLM_BUSY_TIME, S, DURATION_BUCKETS,
               "Per action, the time at least one LLM call was in flight.", recorder=APP),
    Instrument("phase_duration", HISTOGRAM, sc.M_APP_PHASE_DURATION, S, DURATION_BUCKETS,
               "Duration of an application-side phase of an action.", recorder=APP),
)
# fmt: on


def make(meter: Meter, row: Instrument) -> Any:
    """The instrument of one row (a histogram, or a counter summed in the process)."""
    if row.kind == HISTOGRAM:
        return meter.create_histogram(
            row.name, unit=row.unit, description=row.description, explicit_bucket_boundaries_advisory=row.buckets
        )
    return SummedCounter(meter, row.name, unit=row.unit, description=row.description)


def make_all(meter: Meter, settings: Any, recorder: str) -> dict[str, Any]:
    """The instruments of ``recorder``'s rows by attribute, None for an opt-in one its setting leaves off."""
    return {
        row.attr: make(meter, row) if row.opt_in is None or getattr(settings, row.opt_in) else None
        for row in INSTRUMENTS
        if row.recorder == recorder
    }
