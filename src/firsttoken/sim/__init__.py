"""firsttoken's built-in latency simulator: an OpenAI- and Anthropic-compatible HTTP server.

Point the real SDKs at it and get answers with exactly the latency you configured::

    from firsttoken.sim import Fault, LatencyModel, Simulator

    with Simulator(latency=LatencyModel(queue_ms=50, decode_tokens_per_s=50), seed=0) as sim:
        client = openai.OpenAI(base_url=sim.openai_base_url, api_key="anything")
        anthropic_client = anthropic.Anthropic(base_url=sim.anthropic_base_url, api_key="anything")
        sim.inject(Fault.rate_limit(retry_after=0.05))   # the next request gets a 429
        ...
        sim.requests   # what it served: path, model, tokens, cache hits, status, fault

The server is asyncio + h11 (HTTP/1.1, keep-alive, chunked SSE) on its own event loop in a
background thread, bound to 127.0.0.1 on an ephemeral port unless told otherwise; so ``with
Simulator()`` works in sync and async tests alike. ``close()`` cuts every connection and joins the
thread. ``sim.requests`` (:class:`Served`) also says which HTTP version and which client connection
(``connection``, a number unique in the process) carried each request, so tests can see reuse.

TLS and HTTP/2
--------------
``Simulator(ssl_context=...)`` serves TLS with ALPN ``h2`` and ``http/1.1``: a client with HTTP/2
enabled (``httpx.Client(http2=True)``, ``openai.DefaultHttpxClient(http2=True, verify=...)``) gets
HTTP/2 (via the optional ``h2`` package: ``firsttoken[http2]``), any other client HTTP/1.1.
``http2=False`` offers only ``http/1.1``; without TLS it is HTTP/1.1 only (no h2c). Over HTTP/2 the
same endpoints, latency model and faults apply per stream, many streams run concurrently on one
connection (``MAX_CONCURRENT_STREAMS`` 1000), response bodies respect the client's stream and
connection flow-control windows (a stream whose window is shut waits; the others go on), and
request bodies are acknowledged as they arrive. For test certificates::

    from firsttoken.sim.tls import test_certificates   # needs trustme (a dev dependency)

    server_ctx, client_ctx = test_certificates()
    with Simulator(ssl_context=server_ctx) as sim:
        http = openai.DefaultHttpxClient(http2=True, verify=client_ctx)

Latency model
-------------
Per call, measured from the moment the server has read the whole request (``t0``), with
``LatencyModel`` (the default, or ``models={"name": ...}`` per exact model name):

- **headers** at ``t0 + queue_ms`` for streams (real providers send stream headers before generating).
  The first SSE event (the role-only chat chunk, ``response.created``, ``message_start``) follows at once.
- **prefill** of ``prefill_ms_per_1k_tokens`` per 1000 *uncached* input tokens: cache hits cost nothing.
- **token k** (1-based, hidden reasoning tokens first) at
  ``t0 + queue + prefill + k / decode_tokens_per_s``. So the first visible token arrives one decode step
  after prefill; an SSE chunk of ``chunk_tokens`` tokens goes out when its last token is due. Closing
  events (finish reason, usage, ``[DONE]``, ``message_stop``) follow the last token at once.
- **non-streaming** responses (headers and body) arrive whole when the last token is due.
- **embeddings** arrive whole when the prefill of their input is done.
- ``jitter`` multiplies each component (queue, prefill, each token interval) by a lognormal factor
  (median 1, shape ``jitter``), times ``tail_multiplier`` with probability ``tail_probability``.
  ``jitter=0`` (or ``LatencyModel.fixed(...)``) is exact: tests rely on it.
- Deadlines are absolute (event-loop time), so per-token pacing does not drift.
- The answer has ``output_tokens`` tokens, cut to the request's ``max_tokens`` /
  ``max_completion_tokens`` / ``max_output_tokens`` (finish reason ``length`` / ``max_tokens`` /
  ``incomplete``). Reasoning models (``o`` + digit, e.g. ``o3-mini``) first spend ``reasoning_tokens``
  hidden tokens (reported as reasoning tokens); Anthropic ``thinking`` streams them as thinking deltas.

Tokens are counted by a deterministic approximation (runs of up to 4 letters, 3 digits, punctuation;
~4 characters per token) over message text, system prompt, tool definitions and schemas; media count
85 tokens each. Answers are made-up words; JSON when the request asks for a schema
(``response_format``, ``text.format``, ``output_config.format``) or forces a tool, so ``.parse()``
helpers work.

Prompt caching (``CacheConfig(min_tokens=1024, block_tokens=128, ttl_s=300, enabled=True)``)
-------------------------------------------------------------------------------------------
Prefix hashes per model, each kept ``ttl_s`` after its last use. OpenAI: automatic, at
``min_tokens + k * block_tokens`` boundaries; reported as ``prompt_tokens_details.cached_tokens``
(chat, completions) and ``input_tokens_details.cached_tokens`` (responses). Anthropic: only prefixes
ending at a ``cache_control`` breakpoint (tools, system and message blocks, or top-level
``cache_control``) of at least ``min_tokens``; the first time they are ``cache_creation_input_tokens``,
later ``cache_read_input_tokens``, and ``input_tokens`` is the uncached rest. Any change earlier in
the prompt (a new system prompt) misses.

Endpoints
---------
OpenAI (base ``sim.openai_base_url``): ``POST /v1/chat/completions`` (streaming with
``stream_options.include_usage``, ``n`` > 1, forced tool calls with streamed arguments,
``response_format``), ``POST /v1/responses`` (the real streaming event sequence), ``POST
/v1/completions``, ``POST /v1/embeddings`` (float or base64, ``dimensions``), ``GET /v1/models``.
Anthropic (base ``sim.anthropic_base_url``): ``POST /v1/messages`` (streaming with ``ping``, thinking,
forced ``tool_use``; ``?beta=true`` accepted) and ``POST /v1/messages/count_tokens``. Headers as the
real services send them (``x-request-id``, ``openai-processing-ms``, ``x-ratelimit-*``;
``request-id``, ``anthropic-ratelimit-*``). Errors use each provider's JSON error shape; a request is
treated as Anthropic's if its path is ``/v1/messages...`` or it carries ``anthropic-version``.

Server timing
-------------
Providers report their own side of the wait; the simulator reports exactly what its latency model
applied to that request (jitter included; the deadlines it slept until), so a test can check the
split against what the client observed. With ``queue``, ``prefill`` and ``decode`` (every generated
token, hidden reasoning included) as in the latency model, in seconds:

- **OpenAI** (default): header ``openai-processing-ms`` = ``t0`` to when the headers are due: for a
  stream the queue only (its headers go out before generation), for a whole response queue +
  prefill + decode (for embeddings queue + prefill). On every OpenAI path.
- **Groq** (``x-firsttoken-sim-provider: groq`` or ``Simulator(provider_timing="groq")``): no
  ``openai-processing-ms``. Whole responses: ``usage.queue_time``, ``usage.prompt_time`` (prefill),
  ``usage.completion_time`` (decode), ``usage.total_time`` (prompt + completion, as Groq counts it),
  plus ``x_groq: {"id": "req_..."}``. Streams: ``x_groq: {"id"}`` on the first chunk and
  ``x_groq: {"id", "usage": {queue_time, prompt_time, completion_time, total_time, prompt_tokens,
  completion_tokens, total_tokens, prompt_tokens_details: {cached_tokens}}}`` (and
  ``completion_tokens_details: {reasoning_tokens}`` for a reasoning model: the groq SDK's
  ``CompletionUsage``) on the final chunk (the last before ``[DONE]``: the usage chunk with
  ``include_usage``, else the last finish-reason chunk).
- **Cerebras** (``cerebras``): no ``openai-processing-ms``; ``time_info: {queue_time, prompt_time,
  completion_time, total_time, created}`` at the top level of a whole response and of the final
  stream chunk; ``total_time`` is queue + prompt + completion, ``created`` epoch seconds.

Groq and Cerebras fields appear on ``/v1/chat/completions`` and ``/v1/completions``; a request's
header overrides the simulator's ``provider_timing`` (``openai`` selects the default), an unknown
value is a 400.

Faults
------
``sim.inject(fault, times=1, path=None, model=None)`` queues a fault for the next matching request(s),
or send the request header ``x-firsttoken-sim-fault: NAME;key=value;...``:

- ``Fault.rate_limit(retry_after=1.0)`` / ``rate_limit;retry_after=0.05``: 429 at once, with
  ``retry-after`` and ``retry-after-ms``.
- ``Fault.server_error(status=500)`` / ``server_error;status=503``: a 5xx at once.
- ``Fault.overloaded()`` / ``overloaded``: Anthropic 529 ``overloaded_error`` (503 for OpenAI paths).
- ``Fault.drop_after(chunks=N)`` / ``drop_after;chunks=3``: close the TCP connection after N SSE events
  (a non-streaming response: no response at all). Over HTTP/2 it resets that stream instead
  (``RST_STREAM`` ``INTERNAL_ERROR``), as a front end does; the connection's other streams go on.
- ``Fault.stall(after_chunks=N, seconds=S)`` / ``stall;after_chunks=2;seconds=1``: stop sending for S
  seconds after N events; ``seconds=None`` (``seconds=none``) until the client gives up (closes the
  connection or, over HTTP/2, resets the stream).
- ``Fault.error_event(after_chunks=N)`` / ``error_event;after_chunks=2``: after N events, Anthropic's
  ``event: error`` (``overloaded_error``), OpenAI's ``data: {"error": ...}`` (an ``error`` event on
  ``/v1/responses``), then the stream ends.

Replay
------
``Simulator(replay=[file_or_dir, ...])`` loads VCR.py cassettes (YAML; needs PyYAML). A request is
matched by method and path, then by its parsed JSON body (an unused match first), else the first
unused interaction on that path; paths without recordings are simulated as usual. Recorded status,
headers (minus hop-by-hop, ``content-length`` and ``content-encoding``) and body (gzip undone) are sent
back; SSE bodies event by event, paced by the latency model (queue before the headers, then one decode
step per event); other bodies after the queue delay.

Realtime
--------
``RealtimeSimulator(RealtimeTiming(...))`` speaks OpenAI's Realtime protocol on a websocket (needs the
``websockets`` package: ``openai[realtime]``), for ``client.realtime.connect()``; see ``_realtime``.
``GeminiLiveSimulator(GeminiLiveTiming(...), ssl_context=...)`` speaks Gemini Live's
``BidiGenerateContent`` protocol on a TLS websocket, for google-genai's ``client.aio.live.connect()``;
see ``_gemini_live``.

CLI: ``python -m firsttoken.sim.cli --port 8000 --queue-ms 200 --decode-tps 40 --provider-timing groq``
(see ``cli.main``).
"""

from ._cache import CacheConfig
from ._faults import FAULT_HEADER, Fault
from ._gemini_live import GeminiLiveSimulator, GeminiLiveTiming
from ._latency import LatencyModel
from ._realtime import RealtimeSimulator, RealtimeTiming
from ._reply import Served
from ._server import Simulator
from ._timing import PROVIDER_HEADER, ProviderStyle

__all__ = [
    "FAULT_HEADER",
    "PROVIDER_HEADER",
    "CacheConfig",
    "Fault",
    "GeminiLiveSimulator",
    "GeminiLiveTiming",
    "LatencyModel",
    "ProviderStyle",
    "RealtimeSimulator",
    "RealtimeTiming",
    "Served",
    "Simulator",
]
