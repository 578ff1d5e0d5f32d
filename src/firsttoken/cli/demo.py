"""``firsttoken demo``: a varied workload through the real SDK against the built-in simulator.

It needs nothing but this package and the ``openai`` SDK: the simulator serves on loopback, the
spans land in memory, and the report is printed from what firsttoken recorded (not from the
demo's own clocks). With ``OTEL_EXPORTER_OTLP_ENDPOINT`` set, spans and metrics also go there.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .. import semconv as sc
from .report import collect, render

# Latency profiles of the demo's models: a fast small model, a slower large one, a reasoning one.
MODEL_PROFILES: dict[str, dict[str, float]] = {
    "gpt-4o-mini": {"queue_ms": 40, "prefill_ms_per_1k_tokens": 120, "decode_tokens_per_s": 140},
    "gpt-4o": {"queue_ms": 90, "prefill_ms_per_1k_tokens": 300, "decode_tokens_per_s": 70},
    "o3-mini": {"queue_ms": 70, "prefill_ms_per_1k_tokens": 200, "decode_tokens_per_s": 110},
}
# A long, stable system prompt: calls that share it hit the simulator's prompt cache.
SYSTEM_PROMPT = "You are the support assistant of a bicycle shop. Answer briefly and precisely. " + " ".join(
    f"Policy {i}: repairs are booked online, parts are ordered within {i % 5 + 1} days." for i in range(90)
)
QUESTIONS = (
    "How long does a brake repair take?",
    "Can I return a helmet I bought last week?",
    "Do you service electric bikes?",
    "What does a full tune-up include?",
    "Is there a warranty on wheels?",
)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="firsttoken demo",
        description="Drive a varied workload through the real openai SDK against the built-in "
        "simulator and print what firsttoken measured.",
    )
    p.add_argument("--calls", type=int, default=48, help="LLM calls to make (default: 48)")
    p.add_argument("--concurrency", type=int, default=4, help="calls in flight at once (default: 4)")
    p.add_argument("--seed", type=int, default=7, help="seed of the workload and the simulator (default: 7)")
    p.add_argument(
        "--continuous",
        action="store_true",
        help="keep the workload running (a load generator for the docker compose stack); "
        "prints the report every --interval seconds until interrupted",
    )
    p.add_argument("--interval", type=float, default=30.0, help="seconds between reports with --continuous")
    return p


def _positive(parser: argparse.ArgumentParser, name: str, value: float) -> None:
    if value <= 0:
        parser.error(f"{name} must be positive, got {value}")


class _Workload:
    """Picks what each call does; deterministic for a seed."""

    def __init__(self, client: Any, seed: int) -> None:
        self.client = client
        self.rng = random.Random(seed)
        self.lock = threading.Lock()

    def next_call(self) -> Callable[[], None]:
        with self.lock:
            model = self.rng.choice(tuple(MODEL_PROFILES))
            question = self.rng.choice(QUESTIONS)
            max_tokens = self.rng.randint(24, 72)
            kind = self.rng.choices(("chat_stream", "chat", "responses_stream"), weights=(6, 2, 2))[0]
            cached_prefix = self.rng.random() < 0.7
        messages = [{"role": "user", "content": question}]
        if cached_prefix:
            messages.insert(0, {"role": "system", "content": SYSTEM_PROMPT})
        client = self.client

        def chat_stream() -> None:
            stream = client.chat.completions.create(
                model=model,
                messages=messages,
                max_tokens=max_tokens,
                stream=True,
                stream_options={"include_usage": True},
            )
            for _ in stream:
                pass

        def chat() -> None:
            client.chat.completions.create(model=model, messages=messages, max_tokens=max_tokens)

        def responses_stream() -> None:
            stream = client.responses.create(
                model=model,
                instructions=SYSTEM_PROMPT if cached_prefix else None,
                input=question,
                max_output_tokens=max_tokens,
                stream=True,
            )
            for _ in stream:
                pass

        return {"chat_stream": chat_stream, "chat": chat, "responses_stream": responses_stream}[kind]


def _run_one(workload: _Workload) -> None:
    try:
        workload.next_call()()
    except Exception as exc:  # the report counts errors from the spans; keep the workload going
        print(f"call failed: {exc!r}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    _positive(parser, "--calls", args.calls)
    _positive(parser, "--concurrency", args.concurrency)
    _positive(parser, "--interval", args.interval)
    try:
        import openai
    except ImportError:
        print(
            "firsttoken demo drives the official openai SDK, which is not installed: pip install 'firsttoken[openai]'",
            file=sys.stderr,
        )
        return 2

    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import firsttoken

    from ..sim import LatencyModel, Simulator

    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "firsttoken-demo")})
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    readers: list[MetricReader] = [InMemoryMetricReader()]
    if endpoint:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        readers.append(PeriodicExportingMetricReader(OTLPMetricExporter(), export_interval_millis=5000))
    meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    if not firsttoken.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider):
        print("firsttoken could not instrument the openai SDK (see the warning above)", file=sys.stderr)
        return 1

    models = {name: LatencyModel(**profile, jitter=0.25) for name, profile in MODEL_PROFILES.items()}
    started = time.perf_counter()
    try:
        with Simulator(models=models, seed=args.seed) as sim:
            client = openai.OpenAI(base_url=sim.openai_base_url, api_key="sk-demo-not-a-real-key", max_retries=2)
            workload = _Workload(client, args.seed)
            with ThreadPoolExecutor(max_workers=args.concurrency) as pool:
                if args.continuous:
                    _continuous(pool, workload, spans, args, started, endpoint)
                else:
                    list(pool.map(lambda _: _run_one(workload), range(args.calls)))
            client.close()
    except KeyboardInterrupt:
        pass
    finally:
        firsttoken.uninstrument()
    print(_report(spans, started, endpoint, openai.__version__))
    tracer_provider.shutdown()
    meter_provider.shutdown()
    return 0


def _continuous(pool: Any, workload: _Workload, spans: Any, args: Any, started: float, endpoint: str | None) -> None:
    import openai

    next_report = time.perf_counter() + args.interval
    while True:
        futures = [pool.submit(_run_one, workload) for _ in range(args.concurrency)]
        for f in futures:
            f.result()
        if time.perf_counter() >= next_report:
            print(_report(spans, started, endpoint, openai.__version__), flush=True)
            spans.clear()
            next_report = time.perf_counter() + args.interval


def _report(spans: Any, started: float, endpoint: str | None, sdk_version: str) -> str:
    finished = spans.get_finished_spans()
    stats = collect(finished)
    calls = sum(s.calls for s in stats.values())
    elapsed = time.perf_counter() - started
    title = (
        f"firsttoken demo: {calls} LLM calls through the openai SDK {sdk_version} "
        f"against the built-in simulator, in {elapsed:.1f} s"
    )
    notes = [
        "",
        "TTFT: SDK call to the first chunk carrying output (streamed calls). TPOT: decode time per output",
        "token after the first. End-to-end: SDK call to the last byte. Cache hit: cached / input tokens.",
        f"Metrics: {sc.M_TIME_TO_FIRST_TOKEN}, {sc.M_TIME_PER_OUTPUT_TOKEN}, {sc.M_OPERATION_DURATION}, ...",
        f"Exported over OTLP to {endpoint}"
        if endpoint
        else "Set OTEL_EXPORTER_OTLP_ENDPOINT to export to a Collector.",
    ]
    return render(stats, title=title) + "\n" + "\n".join(notes)
