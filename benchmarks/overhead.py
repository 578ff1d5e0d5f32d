"""CPU cost firsttoken adds per call and per streamed chunk.

Method. The simulator runs in a separate process, so this process's CPU time
(``time.process_time()``, all threads: the SDK, firsttoken, the OpenTelemetry SDK's span and metric
work) is the client's alone. The same workload runs with and without instrumentation, interleaved,
several rounds; the median per-call difference is firsttoken's cost. Two stream lengths separate the
fixed cost per call from the cost per chunk: ``cost(n chunks) = per_call + n * per_chunk``.

Spans go through a ``BatchSpanProcessor`` to an exporter that drops them, metrics into an
in-memory reader: the set-up of a production app, minus the network.

A second, micro measurement times the per-chunk hot path alone: the stream observer around a
generator of real ``ChatCompletionChunk`` objects, against the bare generator.

    python benchmarks/overhead.py            # full run, about a minute
    python benchmarks/overhead.py --quick    # fewer calls, for a smoke check
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time
from collections.abc import Sequence
from typing import Any

TARGET_PER_CALL_US = 60.0
TARGET_PER_CHUNK_US = 3.0


def _serve(conn: Any) -> None:
    from firsttoken.sim import LatencyModel, Simulator

    fast = LatencyModel(queue_ms=0, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=1_000_000, jitter=0)
    with Simulator(latency=fast, seed=0) as sim:
        conn.send(sim.openai_base_url)
        conn.recv()  # until the parent is done


class _DropExporter:
    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def _workload(client: Any, calls: int, tokens: int) -> float:
    """CPU seconds for `calls` streamed chat calls of `tokens` output tokens each."""
    messages = [{"role": "user", "content": "Benchmark me."}]
    start = time.process_time()
    for _ in range(calls):
        for _chunk in client.chat.completions.create(
            model="bench", messages=messages, max_tokens=tokens, stream=True, stream_options={"include_usage": True}
        ):
            pass
    return time.process_time() - start


def end_to_end(calls: int, rounds: int) -> dict[str, float]:
    import openai
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    import firsttoken

    parent, child = mp.Pipe()
    server = mp.get_context("spawn").Process(target=_serve, args=(child,), daemon=True)
    server.start()
    base_url = parent.recv()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(_DropExporter()))  # type: ignore[arg-type]
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    client = openai.OpenAI(base_url=base_url, api_key="sk-bench", max_retries=0)
    short, long_ = 8, 256
    results: dict[tuple[bool, int], list[float]] = {(i, n): [] for i in (False, True) for n in (short, long_)}
    try:
        _workload(client, 20, short)  # warm up connections, pydantic, imports
        for _ in range(rounds):
            for instrumented in (False, True):
                if instrumented:
                    firsttoken.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
                for n in (short, long_):
                    results[(instrumented, n)].append(_workload(client, calls, n) / calls)
                if instrumented:
                    firsttoken.uninstrument()
    finally:
        parent.send("stop")
        server.join(10)
        tracer_provider.shutdown()
    med = {k: statistics.median(v) for k, v in results.items()}
    added_short = med[(True, short)] - med[(False, short)]
    added_long = med[(True, long_)] - med[(False, long_)]
    # Chunks per call: a role chunk, one per token, a finish chunk and a usage chunk.
    chunks_short, chunks_long = short + 3, long_ + 3
    per_chunk = (added_long - added_short) / (chunks_long - chunks_short)
    per_call = added_short - per_chunk * chunks_short
    return {
        "baseline_call_us": med[(False, short)] * 1e6,
        "per_call_us": per_call * 1e6,
        "per_chunk_us": per_chunk * 1e6,
        "added_short_us": added_short * 1e6,
        "added_long_us": added_long * 1e6,
    }


def micro_per_chunk(chunks: int = 200_000) -> dict[str, float]:
    """The observer's own cost per chunk, with no network and no SDK parsing in the loop."""
    from openai.types.chat import ChatCompletionChunk

    from firsttoken import semconv as sc
    from firsttoken.providers.openai import observe_chat_chunk
    from firsttoken.streams import observe_sync
    from firsttoken.timeline import Timeline

    def make(i: int) -> ChatCompletionChunk:
        return ChatCompletionChunk.model_validate(
            {
                "id": "c",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": "m",
                "choices": [{"index": 0, "delta": {"content": f"t{i}"}, "finish_reason": None}],
            }
        )

    items = [make(i) for i in range(1000)] * (chunks // 1000)

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
    observed = time.perf_counter() - start
    return {"micro_per_chunk_us": (observed - base) / len(items) * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls and rounds")
    args = parser.parse_args()
    calls, rounds = (40, 3) if args.quick else (150, 5)
    e2e = end_to_end(calls, rounds)
    micro = micro_per_chunk(50_000 if args.quick else 200_000)
    print(f"uninstrumented streamed call (8 tokens): {e2e['baseline_call_us']:8.1f} us CPU")
    print(f"added per call:                          {e2e['per_call_us']:8.1f} us CPU (target < {TARGET_PER_CALL_US})")
    print(f"added per streamed chunk (end to end):   {e2e['per_chunk_us']:8.2f} us CPU (target < {TARGET_PER_CHUNK_US})")
    print(f"added per streamed chunk (observer):     {micro['micro_per_chunk_us']:8.2f} us")
    print(f"added for a call of 11 / 259 chunks:     {e2e['added_short_us']:.1f} / {e2e['added_long_us']:.1f} us")


if __name__ == "__main__":
    main()
