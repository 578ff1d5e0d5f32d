"""CPU cost firsttoken adds per call and per streamed chunk, for the openai and anthropic SDKs.

Method. The simulator runs in a separate process, so this process's CPU time
(``time.process_time()``: every thread, the SDK, firsttoken and the OpenTelemetry SDK's span and
metric work) is the client's alone. The same streamed workload runs uninstrumented and under each
configuration below, interleaved, for several rounds; the median per-call difference is the cost.
Two stream lengths separate the fixed cost per call from the cost per chunk:
``cost(n chunks) = per_call + n * per_chunk``.

Configurations:

* ``default``: every trace sampled (the worst case), spans through a ``BatchSpanProcessor`` to an
  exporter that drops them, metrics into an in-memory reader;
* ``no phase spans``: the same with ``phase_spans=False``;
* ``10% sampled``: ``ParentBased(TraceIdRatioBased(0.1))``, a common production set-up;
* ``firsttoken only``: no-op OpenTelemetry providers, so what remains is firsttoken's own code;
* ``firsttoken only, no wire hooks``: the same with ``wire_phases=False``; the difference to the
  line above is what the httpx/httpcore wire hooks cost.

A micro measurement times the per-chunk hot path alone: the stream observer around a generator of
real ``ChatCompletionChunk`` objects, against the bare generator.

    python benchmarks/overhead.py            # full run, a few minutes
    python benchmarks/overhead.py --quick    # fewer calls and rounds, a smoke check
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

TARGET_PER_CALL_US = 60.0
TARGET_PER_CHUNK_US = 3.0
TARGET_WIRE_US = 15.0
SHORT, LONG = 8, 256


def _serve(conn: Any) -> None:
    from firsttoken.sim import LatencyModel, Simulator

    fast = LatencyModel(queue_ms=0, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=1_000_000, jitter=0)
    with Simulator(latency=fast, seed=0) as sim:
        conn.send((sim.openai_base_url, sim.anthropic_base_url))
        conn.recv()  # until the parent is done


class _DropExporter:
    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def _openai_workload(client: Any, calls: int, tokens: int) -> float:
    messages = [{"role": "user", "content": "Benchmark me."}]
    start = time.process_time()
    for _ in range(calls):
        for _chunk in client.chat.completions.create(
            model="bench", messages=messages, max_tokens=tokens, stream=True, stream_options={"include_usage": True}
        ):
            pass
    return (time.process_time() - start) / calls


def _anthropic_workload(client: Any, calls: int, tokens: int) -> float:
    messages = [{"role": "user", "content": "Benchmark me."}]
    start = time.process_time()
    for _ in range(calls):
        for _event in client.messages.create(model="bench", messages=messages, max_tokens=tokens, stream=True):
            pass
    return (time.process_time() - start) / calls


def _configs() -> dict[str, Callable[[], dict[str, Any]]]:
    from opentelemetry.metrics import NoOpMeterProvider
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
    from opentelemetry.trace import NoOpTracerProvider

    def sdk(sampler: Any = None) -> dict[str, Any]:
        tracer_provider = TracerProvider(sampler=sampler) if sampler is not None else TracerProvider()
        tracer_provider.add_span_processor(BatchSpanProcessor(_DropExporter()))  # type: ignore[arg-type]
        return {
            "tracer_provider": tracer_provider,
            "meter_provider": MeterProvider(metric_readers=[InMemoryMetricReader()]),
        }

    def noop() -> dict[str, Any]:
        return {"tracer_provider": NoOpTracerProvider(), "meter_provider": NoOpMeterProvider()}

    return {
        "default": sdk,
        "no phase spans": lambda: {**sdk(), "phase_spans": False},
        "10% sampled": lambda: sdk(ParentBased(TraceIdRatioBased(0.1))),
        "firsttoken only": noop,
        "firsttoken only, no wire hooks": lambda: {**noop(), "wire_phases": False},
    }


def end_to_end(calls: int, rounds: int) -> dict[str, dict[str, dict[str, float]]]:
    """{sdk: {config: {per_call_us, per_chunk_us, baseline_us}}}"""
    import anthropic
    import openai

    import firsttoken

    parent, child = mp.Pipe()
    server = mp.get_context("spawn").Process(target=_serve, args=(child,), daemon=True)
    server.start()
    openai_url, anthropic_url = parent.recv()
    workloads = {
        "openai": (_openai_workload, openai.OpenAI(base_url=openai_url, api_key="sk-bench", max_retries=0)),
        "anthropic": (
            _anthropic_workload,
            anthropic.Anthropic(base_url=anthropic_url, api_key="sk-bench", max_retries=0),
        ),
    }
    configs = _configs()
    samples: dict[tuple[str, str, int], list[float]] = {}
    try:
        for run, client in workloads.values():
            run(client, 20, SHORT)  # warm up connections, pydantic, imports
        for _ in range(rounds):
            for config in (None, *configs):
                if config is not None:
                    firsttoken.instrument(**configs[config]())
                for name, (run, client) in workloads.items():
                    for n in (SHORT, LONG):
                        samples.setdefault((name, config or "", n), []).append(run(client, calls, n))
                if config is not None:
                    firsttoken.uninstrument()
    finally:
        parent.send("stop")
        server.join(10)
    # Items per stream: openai = role chunk + tokens + finish + usage; anthropic = message_start,
    # content_block_start, tokens, content_block_stop, message_delta, message_stop (pings skipped).
    extra = {"openai": 3, "anthropic": 5}
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name in workloads:
        base = {n: statistics.median(samples[(name, "", n)]) for n in (SHORT, LONG)}
        out[name] = {}
        for config in configs:
            added = {n: statistics.median(samples[(name, config, n)]) - base[n] for n in (SHORT, LONG)}
            per_chunk = (added[LONG] - added[SHORT]) / (LONG - SHORT)
            out[name][config] = {
                "baseline_us": base[SHORT] * 1e6,
                "per_call_us": (added[SHORT] - per_chunk * (SHORT + extra[name])) * 1e6,
                "per_chunk_us": per_chunk * 1e6,
            }
    return out


def httpcore_trace_cost(calls: int, rounds: int) -> float:
    """CPU (µs per request) that httpcore itself spends when a request carries a trace callback.

    A plain httpx2 POST with and without a callback that does nothing: the difference is the
    price of the trace extension that firsttoken's wire phases are read from, before any of
    firsttoken's own code runs.
    """
    import httpx2

    def noop(event: str, info: dict[str, Any]) -> None:
        pass

    parent, child = mp.Pipe()
    server = mp.get_context("spawn").Process(target=_serve, args=(child,), daemon=True)
    server.start()
    openai_url, _ = parent.recv()
    diffs = []
    try:
        with httpx2.Client() as client:
            url = f"{openai_url}/chat/completions"
            body = {"model": "bench", "messages": [{"role": "user", "content": "x"}], "max_tokens": SHORT}
            for _ in range(20):
                client.post(url, json=body)
            for _ in range(rounds):
                start = time.process_time()
                for _ in range(calls):
                    client.post(url, json=body)
                plain = time.process_time() - start
                start = time.process_time()
                for _ in range(calls):
                    client.post(url, json=body, extensions={"trace": noop})
                diffs.append((time.process_time() - start - plain) / calls)
    finally:
        parent.send("stop")
        server.join(10)
    return statistics.median(diffs) * 1e6


def micro_wire_hooks(requests: int = 20_000) -> float:
    """firsttoken's wire hooks alone (µs per request): the trace callback for every event httpcore
    emits for a request on a new HTTP/1.1 connection, the DNS hook, the callback's installation and
    the TLS-free facts, with no network in the loop."""
    import httpx2

    from firsttoken import semconv as sc
    from firsttoken import transport
    from firsttoken.timeline import Timeline

    events = [
        f"{prefix}.{step}.{edge}"
        for prefix, step in (
            ("connection", "connect_tcp"),
            ("http11", "send_request_headers"),
            ("http11", "send_request_body"),
            ("http11", "receive_response_headers"),
            ("http11", "receive_response_body"),
            ("http11", "response_closed"),
        )
        for edge in ("started", "complete")
    ]
    lookup = transport.__dict__["_getaddrinfo"]

    def resolve(*args: Any, **kwargs: Any) -> Any:
        return None

    def one() -> None:
        tl = Timeline(
            provider="openai", operation=sc.OP_CHAT, request_model="m", server_address=None, server_port=None,
            stream=True, on_finish=lambda _t: None,
        )  # fmt: skip
        request = httpx2.Request("POST", "http://127.0.0.1:1/v1/chat/completions", content=b"{}")
        transport._before_send(tl, request, False)
        trace = request.extensions["trace"]
        for event in events[:2]:
            trace(event, {})
        lookup(resolve, None, ("127.0.0.1", 1), {})
        for event in events[2:]:
            trace(event, {})

    transport._wire = True
    one()
    start = time.perf_counter()
    for _ in range(requests):
        one()
    with_hooks = time.perf_counter() - start
    transport._wire = False
    start = time.perf_counter()
    for _ in range(requests):
        tl = Timeline(
            provider="openai", operation=sc.OP_CHAT, request_model="m", server_address=None, server_port=None,
            stream=True, on_finish=lambda _t: None,
        )  # fmt: skip
        transport._before_send(
            tl, httpx2.Request("POST", "http://127.0.0.1:1/v1/chat/completions", content=b"{}"), False
        )
    without = time.perf_counter() - start
    transport._wire = True
    return (with_hooks - without) / requests * 1e6


def micro_per_chunk(chunks: int = 200_000) -> float:
    """The observer's own cost per chunk (µs), with no network and no SDK parsing in the loop."""
    from openai.types.chat import ChatCompletionChunk

    from firsttoken import semconv as sc
    from firsttoken.providers.openai import observe_chat_chunk
    from firsttoken.streams import observe_sync
    from firsttoken.timeline import Timeline

    items = [
        ChatCompletionChunk.model_validate(
            {
                "id": "c",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": "m",
                "choices": [{"index": 0, "delta": {"content": f"t{i}"}, "finish_reason": None}],
            }
        )
        for i in range(1000)
    ] * (chunks // 1000)

    def bare() -> Any:
        yield from items

    start = time.perf_counter()
    for _ in bare():
        pass
    base = time.perf_counter() - start
    tl = Timeline(
        provider="openai", operation=sc.OP_CHAT, request_model="m", server_address=None, server_port=None,
        stream=True, on_finish=lambda _t: None,
    )  # fmt: skip
    start = time.perf_counter()
    for _ in observe_sync(bare(), tl, observe_chat_chunk):
        pass
    return (time.perf_counter() - start - base) / len(items) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls and rounds")
    parser.add_argument("--calls", type=int, default=100, help="streamed calls per workload (default: 100)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default: 5)")
    args = parser.parse_args()
    if args.calls < 1 or args.rounds < 1:
        parser.error("--calls and --rounds must be at least 1")
    calls, rounds = (30, 2) if args.quick else (args.calls, args.rounds)
    results = end_to_end(calls, rounds)
    print(f"CPU added by firsttoken (median of {rounds} interleaved rounds of {calls} streamed calls)\n")
    print(f"{'sdk':10} {'configuration':32} {'per call µs':>12} {'per chunk µs':>13}")
    for name, configs in results.items():
        for config, r in configs.items():
            print(f"{name:10} {config:32} {r['per_call_us']:12.1f} {r['per_chunk_us']:13.2f}")
        own = configs["firsttoken only"]["per_call_us"]
        wire = own - configs["firsttoken only, no wire hooks"]["per_call_us"]
        print(f"{name:10} {'wire hooks alone':32} {wire:12.1f}")
        print(f"{name:10} {'(uninstrumented call)':32} {configs['default']['baseline_us']:12.1f}\n")
    print(f"observer hot path alone: {micro_per_chunk(50_000 if args.quick else 200_000):.2f} µs per chunk")
    print(f"firsttoken's wire hooks alone (no network): {micro_wire_hooks():.2f} µs per request")
    print(
        f"httpcore's own cost of a trace callback that does nothing: "
        f"{httpcore_trace_cost(calls * 3, rounds):.1f} µs per request"
    )
    print(
        f"targets: per chunk < {TARGET_PER_CHUNK_US} µs, per call < {TARGET_PER_CALL_US} µs, "
        f"wire hooks < {TARGET_WIRE_US} µs per call"
    )


if __name__ == "__main__":
    main()
