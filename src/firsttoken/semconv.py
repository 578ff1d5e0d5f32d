"""Every span name, attribute key, metric name, unit and bucket list firsttoken emits.

This is the only module that spells them. The GenAI names follow the OpenTelemetry semantic
conventions as last published (v1.41, see docs/semantics.md); what the conventions lack lives
under ``firsttoken.*``. A client-side measurement is never recorded under a ``gen_ai.server.*`` name.

Prometheus names (what the Collector's Prometheus exporters and Prometheus' own OTLP receiver
produce with the default ``UnderscoreEscapingWithSuffixes`` translation) are given next to each
metric in docs/metrics.md; dashboards and alert rules use only those.
"""

from __future__ import annotations

from typing import Final

# --------------------------------------------------------------------------------------------
# Instrumentation scope
# --------------------------------------------------------------------------------------------
SCOPE_NAME: Final = "firsttoken"
SCHEMA_URL: Final = "https://opentelemetry.io/schemas/1.41.0"

# --------------------------------------------------------------------------------------------
# GenAI operation names (gen_ai.operation.name values)
# --------------------------------------------------------------------------------------------
OP_CHAT: Final = "chat"
OP_GENERATE_CONTENT: Final = "generate_content"
"""Gemini's native generateContent (the GenAI conventions' name for it)."""
OP_TEXT_COMPLETION: Final = "text_completion"
OP_EMBEDDINGS: Final = "embeddings"
OP_REALTIME: Final = "realtime"
"""One response of an OpenAI Realtime session (the conventions have no name for it yet): its own
value, so voice turns are told apart from chat calls on the same dashboards."""

# --------------------------------------------------------------------------------------------
# Standard attributes (GenAI v1.41, server, error, HTTP)
# --------------------------------------------------------------------------------------------
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
GEN_AI_REQUEST_STREAM: Final = "gen_ai.request.stream"
GEN_AI_REQUEST_MAX_TOKENS: Final = "gen_ai.request.max_tokens"
GEN_AI_REQUEST_TEMPERATURE: Final = "gen_ai.request.temperature"
GEN_AI_REQUEST_TOP_P: Final = "gen_ai.request.top_p"
GEN_AI_REQUEST_TOP_K: Final = "gen_ai.request.top_k"
GEN_AI_REQUEST_FREQUENCY_PENALTY: Final = "gen_ai.request.frequency_penalty"
GEN_AI_REQUEST_PRESENCE_PENALTY: Final = "gen_ai.request.presence_penalty"
GEN_AI_REQUEST_STOP_SEQUENCES: Final = "gen_ai.request.stop_sequences"
GEN_AI_REQUEST_SEED: Final = "gen_ai.request.seed"
GEN_AI_REQUEST_CHOICE_COUNT: Final = "gen_ai.request.choice.count"
GEN_AI_REQUEST_ENCODING_FORMATS: Final = "gen_ai.request.encoding_formats"
GEN_AI_OUTPUT_TYPE: Final = "gen_ai.output.type"
GEN_AI_CONVERSATION_ID: Final = "gen_ai.conversation.id"
GEN_AI_RESPONSE_ID: Final = "gen_ai.response.id"
GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
GEN_AI_RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: Final = "gen_ai.response.time_to_first_chunk"
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: Final = "gen_ai.usage.cache_creation.input_tokens"
GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: Final = "gen_ai.usage.reasoning.output_tokens"
GEN_AI_EMBEDDINGS_DIMENSION_COUNT: Final = "gen_ai.embeddings.dimension.count"
GEN_AI_TOKEN_TYPE: Final = "gen_ai.token.type"
GEN_AI_INPUT_MESSAGES: Final = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
GEN_AI_SYSTEM_INSTRUCTIONS: Final = "gen_ai.system_instructions"

TOKEN_TYPE_INPUT: Final = "input"
TOKEN_TYPE_OUTPUT: Final = "output"

OPENAI_API_TYPE: Final = "openai.api.type"
OPENAI_REQUEST_SERVICE_TIER: Final = "openai.request.service_tier"
OPENAI_RESPONSE_SERVICE_TIER: Final = "openai.response.service_tier"
OPENAI_RESPONSE_SYSTEM_FINGERPRINT: Final = "openai.response.system_fingerprint"

SERVER_ADDRESS: Final = "server.address"
SERVER_PORT: Final = "server.port"
ERROR_TYPE: Final = "error.type"
ERROR_TYPE_OTHER: Final = "_OTHER"
HTTP_RESPONSE_STATUS_CODE: Final = "http.response.status_code"
HTTP_REQUEST_RESEND_COUNT: Final = "http.request.resend_count"
NETWORK_PROTOCOL_VERSION: Final = "network.protocol.version"
TLS_PROTOCOL_NAME: Final = "tls.protocol.name"
TLS_PROTOCOL_VERSION: Final = "tls.protocol.version"
TLS_NEXT_PROTOCOL: Final = "tls.next_protocol"
TLS_RESUMED: Final = "tls.resumed"
FT_CONNECTION_REUSED: Final = "firsttoken.connection.reused"
"""Whether the call's (last) request went over a pooled connection rather than a new one."""
FT_CONNECTION_OUTCOME: Final = "firsttoken.connection.outcome"
"""new or reused: a metric dimension of the connections counter."""
FT_SERVER_QUEUE_TIME: Final = "firsttoken.server.queue_time"
FT_SERVER_PROMPT_TIME: Final = "firsttoken.server.prompt_time"
FT_SERVER_COMPLETION_TIME: Final = "firsttoken.server.completion_time"
FT_SERVER_TOTAL_TIME: Final = "firsttoken.server.total_time"
"""Provider-reported server timing in seconds (Groq ``x_groq``/``usage``, Cerebras ``time_info``)."""
FT_SERVER_INFERENCE_TIME: Final = "firsttoken.server.inference_time"
"""Server-reported prefill + generation time (TGI ``x-inference-time``), in seconds."""
FT_SERVER_FIRST_TOKEN_TIME: Final = "firsttoken.server.time_to_first_token"
"""Server-reported time to first token (vLLM ``metrics.time_to_first_token_ms``), in seconds."""
FT_SERVER_TIME_PER_OUTPUT_TOKEN: Final = "firsttoken.server.time_per_output_token"
"""Server-reported seconds per generated token (llama.cpp ``timings``, TGI ``x-time-per-token``, vLLM)."""
FT_SERVER_PROMPT_TOKENS: Final = "firsttoken.server.prompt_tokens"
"""Prompt tokens the server evaluated for this call (llama.cpp ``timings.prompt_n``): not cached ones."""
FT_SERVER_CACHED_TOKENS: Final = "firsttoken.server.cached_tokens"
"""Prompt tokens the server took from its cache (llama.cpp ``timings.cache_n``)."""
FT_SERVER_COMPLETION_TOKENS: Final = "firsttoken.server.completion_tokens"
"""Tokens the server says it generated (llama.cpp ``timings.predicted_n``)."""
FT_PROVIDER_SOURCE: Final = "firsttoken.provider.source"
"""How gen_ai.provider.name was decided: config, host, response (evidence in it) or sdk (the SDK's name)."""
FT_UPSTREAM_PROVIDER: Final = "firsttoken.upstream.provider"
"""Behind a gateway, the provider that answered, where the gateway says so."""
FT_SERVER_TIMING_PHASE: Final = "firsttoken.server_timing.phase"
"""queue, prompt, completion, processing, first_token or inference: a dimension of the server-timing histogram."""
FT_SERVER_TIMING_SOURCE: Final = "firsttoken.server_timing.source"
"""Where the server timing came from: openai-processing-ms, groq, cerebras, llama.cpp, tgi, vllm."""
EVENT_ATTEMPT: Final = "firsttoken.attempt"
"""A span event per HTTP attempt of the SDK's retry loop, at the moment its response arrived."""
FT_ATTEMPT: Final = "firsttoken.attempt.number"
FT_REQUEST_BODY_SIZE: Final = "http.request.body.size"
FT_RESPONSE_BODY_SIZE: Final = "http.response.body.size"

# --------------------------------------------------------------------------------------------
# firsttoken attributes (what the conventions lack)
# --------------------------------------------------------------------------------------------
FT_TIME_TO_FIRST_TOKEN: Final = "firsttoken.time_to_first_token"
"""Seconds from the SDK call to the first chunk carrying generated output."""
FT_TIME_PER_OUTPUT_TOKEN: Final = "firsttoken.time_per_output_token"
"""Seconds per output token after the first: (last token - first token) / (output tokens - 1)."""
FT_OUTPUT_TOKENS_PER_SECOND: Final = "firsttoken.output_tokens_per_second"
"""Decode speed, the inverse of time per output token."""
FT_DECODE_TOKEN_SOURCE: Final = "firsttoken.decode.token_source"
"""Where the token count behind time per output token came from: ``usage`` or ``chunks``."""
FT_TIME_TO_RESPONSE_HEADERS: Final = "firsttoken.time_to_response_headers"
FT_CHUNK_COUNT: Final = "firsttoken.stream.chunk_count"
FT_END_REASON: Final = "firsttoken.end_reason"
"""How the call ended: completed, closed (by the app, early), error, cancelled, abandoned."""
FT_REQUEST_ID: Final = "firsttoken.response.request_id"
FT_SERVER_PROCESSING_TIME: Final = "firsttoken.server.processing_time"
"""Provider-reported processing time in seconds (OpenAI ``openai-processing-ms``)."""
FT_RATELIMIT_REMAINING_REQUESTS: Final = "firsttoken.ratelimit.remaining_requests"
FT_RATELIMIT_REMAINING_TOKENS: Final = "firsttoken.ratelimit.remaining_tokens"
FT_RATELIMIT_RESET_REQUESTS: Final = "firsttoken.ratelimit.reset_requests"
FT_RATELIMIT_RESET_TOKENS: Final = "firsttoken.ratelimit.reset_tokens"
FT_RETRY_AFTER: Final = "firsttoken.retry_after"
FT_ATTEMPTS: Final = "firsttoken.attempts"
FT_PHASE: Final = "firsttoken.phase"
FT_PHASE_DURATION_PREFIX: Final = "firsttoken.phase_duration."
FT_WATERFALL_CAPPED: Final = "firsttoken.waterfall.capped"
"""True on a call in the tail that got no phase spans because ``tail_share`` was used up."""
"""Call span attributes ``firsttoken.phase_duration.<phase>``: seconds the call spent in each phase,
on every call (the phase child spans exist only for the tail, see ``phase_spans``)."""
FT_COUNTED_INPUT_TOKENS: Final = "firsttoken.count_tokens.input_tokens"
"""What a token-counting call (Anthropic ``messages.count_tokens``) answered; not usage."""

# Application end-to-end (firsttoken.action / firsttoken.phase)
FT_TRAFFIC_CLASS: Final = "firsttoken.traffic_class"
"""interactive, async, batch or the app's own short label; a metric dimension of every call."""
FT_ACTION_NAME: Final = "firsttoken.action.name"
FT_ACTION_LLM_CALLS: Final = "firsttoken.action.llm_calls"
FT_ACTION_LLM_TIME: Final = "firsttoken.action.llm_time"
"""Summed duration of the action's LLM calls, in seconds (parallel calls add up)."""
FT_ACTION_LLM_BUSY_TIME: Final = "firsttoken.action.llm_busy_time"
"""Seconds of the action during which at least one LLM call was in flight."""
FT_ACTION_LLM_SHARE: Final = "firsttoken.action.llm_share"
"""llm_busy_time / action duration: the LLM calls' share of the action's critical path."""
FT_ACTION_LLM_PARALLELISM: Final = "firsttoken.action.llm_parallelism"
"""llm_time / llm_busy_time: 1 when calls ran one after another."""
FT_APP_PHASE: Final = "firsttoken.app.phase"

# Latency levers
FT_PREFIX_HASH: Final = "firsttoken.prompt.prefix_hash"
"""A short, non-reversible hash of the stable prompt prefix (system/developer instructions, tools)."""
FT_CONVERSATION_TURN: Final = "firsttoken.conversation.turn"
"""The call's position (1, 2, ...) among the calls this process made in its conversation."""
FT_CONVERSATION_TURNS: Final = "firsttoken.conversation.turns"
"""The turn as a low-cardinality bucket for metrics: 1, 2-3, 4-7, 8-15, 16-31, 32+."""
FT_FINISH_REASON: Final = "gen_ai.response.finish_reason"
"""One finish reason, as a metric dimension (the span has the list)."""
FT_SDK_CLIENT_NEW: Final = "firsttoken.sdk_client.new"
"""True on the first call an SDK client instance makes (a new client has a new connection pool)."""
# Realtime sessions: OpenAI Realtime and Gemini Live (providers/openai_realtime.py, providers/gemini_live.py,
# docs/semantics.md "Realtime sessions")
SPAN_REALTIME_SESSION: Final = "realtime_session"
"""The session span's name (then the model): the websocket's life, parent of its response spans."""
FT_REALTIME_CONNECT_TIME: Final = "firsttoken.realtime.connect_time"
"""Seconds from ``connect()`` entered to the websocket open (DNS, TCP, TLS, upgrade)."""
FT_REALTIME_RECONNECTED: Final = "firsttoken.realtime.reconnected"
"""True on a session the SDK opened again after its websocket dropped (``on_reconnecting``)."""
FT_REALTIME_RESPONSES: Final = "firsttoken.realtime.responses"
FT_REALTIME_ERRORS: Final = "firsttoken.realtime.errors"
"""``error`` events the server sent in the session."""
FT_REALTIME_HANDOFF: Final = "firsttoken.realtime.handoff"
"""What started the response's clock: ``response.create`` (sent by the app), ``speech_stopped`` or
``committed`` (server VAD ended the user's turn); on Gemini Live ``client_content``, ``activity_end`` or
``tool_response`` (sent by the app), ``voice_activity_end`` (the server's VAD), or ``server_content``
(none seen: the turn's first message)."""
FT_REALTIME_TIME_TO_FIRST_AUDIO: Final = "firsttoken.realtime.time_to_first_audio"
FT_REALTIME_TIME_TO_FIRST_TEXT: Final = "firsttoken.realtime.time_to_first_text"
"""Hand-off -> first text delta (``output_text`` or the audio's transcript)."""
FT_REALTIME_TIME_TO_FIRST_TOOL_CALL: Final = "firsttoken.realtime.time_to_first_tool_call"
"""Hand-off -> first ``response.function_call_arguments.delta``."""
FT_REALTIME_TOOL_CALLS: Final = "firsttoken.realtime.tool_calls"
"""Function calls in the response's output (``response.done``)."""
FT_REALTIME_TOOL_WAIT: Final = "firsttoken.realtime.tool_wait"
"""On the response that follows one that called tools: seconds from that one's ``response.done`` to
this one's ``response.create`` (the app running its tools)."""
FT_REALTIME_TIME_TO_LAST_DELTA: Final = "firsttoken.realtime.time_to_last_delta"
FT_REALTIME_TIME_TO_GENERATION_COMPLETE: Final = "firsttoken.realtime.time_to_generation_complete"
"""Gemini Live: hand-off -> ``generationComplete`` (the model is done; its audio may still be playing out)."""
FT_REALTIME_AUDIO_DURATION: Final = "firsttoken.realtime.output_audio.duration"
"""Seconds of audio the response carried (from the bytes and the session's output format)."""
FT_REALTIME_STATUS: Final = "firsttoken.realtime.status"
"""``response.done``'s status: completed, cancelled, failed, incomplete."""
FT_REALTIME_STATUS_REASON: Final = "firsttoken.realtime.status_reason"
"""Why: turn_detected (barge-in), client_cancelled, max_output_tokens, content_filter."""
GEN_AI_USAGE_AUDIO_INPUT_TOKENS: Final = "gen_ai.usage.audio.input_tokens"
GEN_AI_USAGE_AUDIO_OUTPUT_TOKENS: Final = "gen_ai.usage.audio.output_tokens"
GEN_AI_USAGE_TEXT_OUTPUT_TOKENS: Final = "gen_ai.usage.text.output_tokens"
EVENT_REALTIME_ERROR: Final = "firsttoken.realtime.error"
EVENT_REALTIME_GO_AWAY: Final = "firsttoken.realtime.go_away"
"""Gemini Live's ``goAway``: the server will end the session soon (not an error)."""
FT_REALTIME_GO_AWAY_TIME_LEFT: Final = "firsttoken.realtime.go_away.time_left"
"""Seconds the ``goAway`` said were left (on its event)."""
FT_REALTIME_CLOSE_CODE: Final = "firsttoken.realtime.close_code"
"""Gemini Live: the websocket close code the session ended with, when the server closed it (1006: no
close frame)."""
END_DROPPED: Final = "dropped"
"""A Realtime session whose websocket closed without a clean close (an error)."""
PREFIX_OTHER: Final = "_OTHER"
METRIC_VALUE_OTHER: Final = "_OTHER"
"""A metric attribute's value once that attribute has taken ``metric_value_limit`` distinct values
(model names, server address, upstream provider, traffic class, action and phase names): the
series stay bounded while the span keeps the real value. The name follows the conventions'
``_OTHER`` for values outside a known set (``http.request.method``, ``error.type``)."""

END_COMPLETED: Final = "completed"
END_CLOSED: Final = "closed"
END_ERROR: Final = "error"
END_CANCELLED: Final = "cancelled"
END_ABANDONED: Final = "abandoned"

TOKEN_SOURCE_USAGE: Final = "usage"
TOKEN_SOURCE_CHUNKS: Final = "chunks"

# --------------------------------------------------------------------------------------------
# Child phase spans of a call: (name of the mark that ends the phase, phase name)
# --------------------------------------------------------------------------------------------
PHASE_SPAN_PREFIX: Final = "firsttoken "
PHASE_PREPARE: Final = "prepare"
"""Call start -> the request is handed to the HTTP client: the SDK building it."""
PHASE_POOL_WAIT: Final = "pool_wait"
"""Waiting for a pooled connection (or a connection slot), before connecting or sending."""
PHASE_DNS: Final = "dns"
PHASE_TCP_CONNECT: Final = "tcp_connect"
PHASE_TLS_HANDSHAKE: Final = "tls_handshake"
PHASE_CONNECT: Final = "connect"
"""Connection set-up steps between the others (TLS start, the HTTP/2 preface)."""
PHASE_UPLOAD: Final = "upload"
"""Request headers and body handed to the kernel."""
PHASE_SERVER_WAIT: Final = "server_wait"
"""Request sent -> response headers: network round trip, server queue, prefill for non-streamed calls."""
PHASE_DOWNLOAD: Final = "download"
"""Response headers -> last byte, for a body read at once (non-streamed)."""
PHASE_RETRY_WAIT: Final = "retry_wait"
"""A failed attempt's response -> the next attempt: reading the error and the SDK's backoff."""
PHASE_WAIT_FIRST_TOKEN: Final = "wait_first_token"
"""Response headers -> first output token (queue and prefill the server did after headers)."""
PHASE_DECODE: Final = "decode"
"""First output token -> last output token."""
PHASE_WAIT_NO_OUTPUT: Final = "wait_no_output"
"""Response headers -> the last chunk of a stream that carried no output token: waiting for output
that never came (for a reasoning model whose whole output budget went on reasoning, the hidden reasoning)."""
PHASE_FINISH: Final = "finish"
"""Last output token (or last chunk) -> end of the call (trailing usage chunk, parsing, stream close)."""
CONNECTION_SETUP_PHASES: Final = frozenset({PHASE_DNS, PHASE_TCP_CONNECT, PHASE_TLS_HANDSHAKE, PHASE_CONNECT})
"""The phases of opening a connection."""

# --------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------
UNIT_SECONDS: Final = "s"
UNIT_TOKENS: Final = "{token}"

M_OPERATION_DURATION: Final = "gen_ai.client.operation.duration"
M_TIME_TO_FIRST_CHUNK: Final = "gen_ai.client.operation.time_to_first_chunk"
M_TIME_PER_OUTPUT_CHUNK: Final = "gen_ai.client.operation.time_per_output_chunk"
M_TOKEN_USAGE: Final = "gen_ai.client.token.usage"
M_TIME_TO_FIRST_TOKEN: Final = "firsttoken.client.time_to_first_token"
M_TIME_PER_OUTPUT_TOKEN: Final = "firsttoken.client.time_per_output_token"
M_INPUT_TOKENS: Final = "firsttoken.client.input_tokens"
"""Counter of input tokens (cached included), so cache hit ratio = cache_read / input."""
M_CACHE_READ_INPUT_TOKENS: Final = "firsttoken.client.cache_read.input_tokens"
M_CACHE_CREATION_INPUT_TOKENS: Final = "firsttoken.client.cache_creation.input_tokens"
M_OUTPUT_TOKENS: Final = "firsttoken.client.output_tokens"
M_REASONING_OUTPUT_TOKENS: Final = "firsttoken.client.reasoning.output_tokens"

M_PHASE_TIME: Final = "firsttoken.client.phase.time"
"""Counter of seconds spent in each phase (attribute firsttoken.phase), summed over calls: mean time per
phase and share of time. Each call's own phase durations are attributes of its span."""
M_CONNECTIONS: Final = "firsttoken.client.connections"
"""Counter of requests by firsttoken.connection.outcome (new, reused): reuse ratio in one division."""
M_REQUEST_BYTES: Final = "firsttoken.client.request.bytes"
M_RESPONSE_BYTES: Final = "firsttoken.client.response.bytes"
"""Counters of body bytes on the wire, summed over calls (each call's sizes are span attributes)."""
M_RETRIES: Final = "firsttoken.client.retries"

M_SERVER_TIMING_TIME: Final = "firsttoken.client.server_timing.time"
M_SERVER_TIMING_REPORTS: Final = "firsttoken.client.server_timing.reports"
"""Counters of provider-reported server seconds by phase (queue, prompt, completion, processing) and of the
calls that reported each: mean = time / reports. Never client-measured."""

M_FINISH_REASONS: Final = "firsttoken.client.finish_reasons"
"""Counter of calls by finish reason: calls stopped by max_tokens are {length, max_tokens}."""
M_PREFIX_INPUT_TOKENS: Final = "firsttoken.client.prompt_prefix.input_tokens"
M_PREFIX_CACHE_READ_INPUT_TOKENS: Final = "firsttoken.client.prompt_prefix.cache_read.input_tokens"
"""Input and cached tokens by model and prompt-prefix hash: a new hash with a falling hit ratio is a
prefix change that broke the cache."""
M_CONVERSATION_INPUT_TOKENS: Final = "firsttoken.client.conversation.input_tokens"
M_CONVERSATION_TTFT: Final = "firsttoken.client.conversation.time_to_first_token"
"""Input tokens and TTFT by conversation turn bucket: context growth and what it costs."""
M_SDK_CLIENTS: Final = "firsttoken.client.sdk_clients"
"""Counter of SDK connection pools seen making their first call (a client and its ``with_options()``
copies share one); next to the call count it shows per-call clients."""

M_ACTION_DURATION: Final = "firsttoken.app.action.duration"
"""Application end-to-end: user action to result rendered, by action name and traffic class."""
M_ACTION_LLM_BUSY_TIME: Final = "firsttoken.app.action.llm_busy_time"
"""Per action, the seconds an LLM call was in flight (divide by the duration for the LLM share)."""
M_APP_PHASE_DURATION: Final = "firsttoken.app.phase.duration"

# Advisory bucket boundaries.
DURATION_BUCKETS: Final = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip
"""The conventions' advice for gen_ai.client.operation.duration and the chunk metrics."""
TTFT_BUCKETS: Final = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75,
    1.0, 1.5, 2.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
)  # fmt: skip
"""The conventions' server TTFT buckets, finer between 0.1 and 2.5 s where client TTFT lives,
and extended to 40 s for long queues and reasoning models."""
TPOT_BUCKETS: Final = (
    0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1,
    0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
)  # fmt: skip
"""The conventions' server TPOT buckets with a finer low end: fast models decode in 2-20 ms."""
TOKEN_BUCKETS: Final = (
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
)  # fmt: skip
"""The conventions' advice for gen_ai.client.token.usage."""
