"""``firsttoken demo``: a varied workload through the real SDKs against the built-in simulator.

It needs nothing but this package and the ``openai`` SDK (``anthropic`` too, for its half): the
simulator serves on loopback, spans land in memory, and the report is printed from what firsttoken
recorded, not from the demo's own clocks. With ``OTEL_EXPORTER_OTLP_ENDPOINT`` set, spans and
metrics also go there (that is how the docker compose stack fills its dashboards).

Two parts:

1. the workload: user actions (``firsttoken.action``) of three traffic classes, each making one
   or more calls, streamed or not, to three OpenAI-style and two Anthropic-style models with
   their own latency profiles, sharing a long cacheable system prompt; a few calls hit injected
   rate limits and server errors; reported per model at p50/p95/p99;
2. the levers: each latency lever as a before/after pair on the simulator, with the measured
   difference (skipped with ``--continuous`` and ``--no-levers``).
"""

from __future__ import annotations

import argparse
import contextvars
import os
import random
import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .. import semconv as sc
from .report import collect, percentile, render

# Latency profiles: fast and slow OpenAI-style models, a reasoning one, two Anthropic-style ones.
OPENAI_MODELS: dict[str, dict[str, Any]] = {
    "gpt-4o-mini": {"queue_ms": 40, "prefill_ms_per_1k_tokens": 120, "decode_tokens_per_s": 140},
    "gpt-4o": {"queue_ms": 90, "prefill_ms_per_1k_tokens": 300, "decode_tokens_per_s": 70},
    "o3-mini": {"queue_ms": 70, "prefill_ms_per_1k_tokens": 200, "decode_tokens_per_s": 110},
}
ANTHROPIC_MODELS: dict[str, dict[str, Any]] = {
    "claude-haiku-4-5": {"queue_ms": 50, "prefill_ms_per_1k_tokens": 100, "decode_tokens_per_s": 150},
    "claude-sonnet-4-6": {"queue_ms": 110, "prefill_ms_per_1k_tokens": 250, "decode_tokens_per_s": 80},
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
TRAFFIC = (("interactive", 6), ("async", 3), ("batch", 1))
OPENAI_KEY = "sk-demo-not-a-real-key"
ANTHROPIC_KEY = "sk-ant-demo-not-a-real-key"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="firsttoken demo",
        description="Drive a varied workload through the real openai and anthropic SDKs against the built-in "
        "simulator and print what firsttoken measured, then measure each latency lever before and after.",
    )
    p.add_argument("--actions", type=int, default=40, help="user actions in the workload (default: 40)")
    p.add_argument("--concurrency", type=int, default=4, help="actions in flight at once (default: 4)")
    p.add_argument("--seed", type=int, default=7, help="seed of the workload and the simulator (default: 7)")
    p.add_argument("--no-levers", action="store_true", help="skip the before/after measurement of the levers")
    p.add_argument(
        "--continuous",
        action="store_true",
        help="keep the workload running (the load generator of the docker compose stack); "
        "prints the report every --interval seconds until interrupted",
    )
    p.add_argument("--interval", type=float, default=30.0, help="seconds between reports with --continuous")
    return p


class _Clients:
    """One client per SDK, reused by every call: the way apps should do it."""

    def __init__(self, sim: Any) -> None:
        import openai

        self.openai = openai.OpenAI(base_url=sim.openai_base_url, api_key=OPENAI_KEY, max_retries=2)
        self.anthropic: Any = None
        try:
            import anthropic

            self.anthropic = anthropic.Anthropic(base_url=sim.anthropic_base_url, api_key=ANTHROPIC_KEY, max_retries=2)
        except ImportError:
            pass

    def close(self) -> None:
        self.openai.close()
        if self.anthropic is not None:
            self.anthropic.close()


def _messages(question: str, cached: bool) -> list[dict[str, str]]:
    msgs = [{"role": "user", "content": question}]
    return [{"role": "system", "content": SYSTEM_PROMPT}, *msgs] if cached else msgs


def _openai_call(c: Any, model: str, question: str, kind: str, max_tokens: int, cached: bool) -> None:
    if kind == "responses":
        for _ in c.responses.create(
            model=model,
            instructions=SYSTEM_PROMPT if cached else None,
            input=question,
            max_output_tokens=max_tokens,
            stream=True,
        ):
            pass
    elif kind == "chat":
        c.chat.completions.create(model=model, messages=_messages(question, cached), max_tokens=max_tokens)
    else:
        for _ in c.chat.completions.create(
            model=model,
            messages=_messages(question, cached),
            max_tokens=max_tokens,
            stream=True,
            stream_options={"include_usage": True},
        ):
            pass


def _anthropic_call(c: Any, model: str, question: str, kind: str, max_tokens: int, cached: bool) -> None:
    system: Any = [{"type": "text", "text": SYSTEM_PROMPT, "cache_control": {"type": "ephemeral"}}] if cached else None
    kwargs: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": question}],
    }
    if system is not None:
        kwargs["system"] = system
    if kind == "chat":
        c.messages.create(**kwargs)
    elif kind == "responses":  # the stream helper, consumed through its aggregate only
        with c.messages.stream(**kwargs) as stream:
            stream.get_final_message()
    else:
        with c.messages.stream(**kwargs) as stream:
            for _ in stream.text_stream:
                pass


class _Workload:
    """Picks what each user action does; deterministic for a seed."""

    def __init__(self, clients: _Clients, sim: Any, seed: int) -> None:
        self.clients = clients
        self.sim = sim
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.count = 0

    def _pick_call(self) -> Callable[[], None]:
        providers = ["openai"] * 3 + (["anthropic"] * 2 if self.clients.anthropic is not None else [])
        provider = self.rng.choice(providers)
        models = OPENAI_MODELS if provider == "openai" else ANTHROPIC_MODELS
        model = self.rng.choice(tuple(models))
        question = self.rng.choice(QUESTIONS)
        kind = self.rng.choices(("stream", "chat", "responses"), weights=(6, 2, 2))[0]
        max_tokens = self.rng.randint(24, 72)
        cached = self.rng.random() < 0.7
        if provider == "openai":
            return lambda: _openai_call(self.clients.openai, model, question, kind, max_tokens, cached)
        return lambda: _anthropic_call(self.clients.anthropic, model, question, kind, max_tokens, cached)

    def next_action(self) -> Callable[[], None]:
        import firsttoken

        from ..sim import Fault

        with self.lock:
            self.count += 1
            traffic = self.rng.choices([t for t, _ in TRAFFIC], weights=[w for _, w in TRAFFIC])[0]
            calls = [self._pick_call() for _ in range(self.rng.choice((1, 1, 1, 2)))]
            conversation = f"conv-{self.rng.randint(1, 6)}"
            fault = self.rng.random()
        if fault < 0.04:  # the SDK retries and succeeds: visible as a retry, not an error
            self.sim.inject(Fault.rate_limit(retry_after=0.05))
        elif fault < 0.06:  # more failures than the SDK's two retries: the call fails
            self.sim.inject(Fault.server_error(status=503), times=3)

        def act() -> None:
            with firsttoken.action("answer_question", traffic_class=traffic, conversation_id=conversation):
                with firsttoken.phase("retrieve"):
                    time.sleep(0.005)
                for call in calls:
                    call()
                with firsttoken.phase("render"):
                    time.sleep(0.002)

        return act


def _run(action: Callable[[], None]) -> None:
    try:
        action()
    except Exception as exc:  # an injected fault the SDK's retries did not absorb: counted from the spans
        print(f"  (a call failed as injected: {type(exc).__name__})", file=sys.stderr)


def _setup_telemetry() -> tuple[Any, Any, Any, str | None]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

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
    return spans, tracer_provider, meter_provider, endpoint


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    for name in ("actions", "concurrency", "interval"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name} must be positive, got {getattr(args, name)}")
    try:
        import openai
    except ImportError:
        print(
            "firsttoken demo drives the official openai SDK, which is not installed: pip install 'firsttoken[openai]'",
            file=sys.stderr,
        )
        return 2

    import firsttoken

    from ..sim import LatencyModel, Simulator

    spans, tracer_provider, meter_provider, endpoint = _setup_telemetry()
    if not firsttoken.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider):
        print("firsttoken could not instrument the SDKs (see the warning above)", file=sys.stderr)
        return 1

    profiles = {**OPENAI_MODELS, **ANTHROPIC_MODELS}
    models = {name: LatencyModel(**profile, jitter=0.25) for name, profile in profiles.items()}
    started = time.perf_counter()
    out = []
    try:
        with Simulator(models=models, seed=args.seed) as sim:
            clients = _Clients(sim)
            workload = _Workload(clients, sim, args.seed)
            with ThreadPoolExecutor(max_workers=args.concurrency) as pool:
                if args.continuous:
                    _continuous(pool, workload, spans, args, started, endpoint)
                else:
                    list(pool.map(lambda _: _run(workload.next_action()), range(args.actions)))
            out.append(_report(spans.get_finished_spans(), started, endpoint, openai.__version__))
            if not args.no_levers and not args.continuous:
                print(out[-1], flush=True)
                out.clear()
                print("\nmeasuring the latency levers (before / after)...", flush=True)
                out.append(_levers(sim, clients, spans))
            clients.close()
    except KeyboardInterrupt:
        out.append(_report(spans.get_finished_spans(), started, endpoint, openai.__version__))
    finally:
        firsttoken.uninstrument()
    print("\n".join(out))
    tracer_provider.shutdown()
    meter_provider.shutdown()
    return 0


def _continuous(pool: Any, workload: _Workload, spans: Any, args: Any, started: float, endpoint: str | None) -> None:
    import openai

    next_report = time.perf_counter() + args.interval
    while True:
        futures = [pool.submit(_run, workload.next_action()) for _ in range(args.concurrency)]
        for f in futures:
            f.result()
        if time.perf_counter() >= next_report:
            print(_report(spans.get_finished_spans(), started, endpoint, openai.__version__), flush=True)
            spans.clear()
            next_report = time.perf_counter() + args.interval


def _report(finished: Iterable[Any], started: float, endpoint: str | None, sdk_version: str) -> str:
    finished = list(finished)
    stats = collect(finished)
    calls = sum(s.calls for s in stats.values())
    actions = [s for s in finished if s.attributes and sc.FT_ACTION_LLM_CALLS in s.attributes]
    elapsed = time.perf_counter() - started
    title = (
        f"firsttoken demo: {len(actions)} user actions, {calls} LLM calls through the openai SDK {sdk_version}"
        f" and the anthropic SDK, against the built-in simulator, in {elapsed:.1f} s"
    )
    app = [(s.end_time - s.start_time) / 1e9 for s in actions if s.end_time and s.start_time]
    lines = [render(stats, title=title), ""]
    if app:
        p50, p95, p99 = (percentile(app, q) or 0.0 for q in (50, 95, 99))
        lines.append(
            f"Application end-to-end (user action -> rendered), {len(app)} actions: "
            f"p50 {p50 * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms"
        )
    lines += [
        "TTFT: SDK call to the first chunk carrying output (streamed calls). TPOT: decode time per output",
        "token after the first. End-to-end: SDK call to the last byte. Cache hit: cached / input tokens.",
        f"Exported over OTLP to {endpoint}."
        if endpoint
        else "Set OTEL_EXPORTER_OTLP_ENDPOINT to also export over OTLP.",
    ]
    return "\n".join(lines)


# -- the levers -----------------------------------------------------------------------------------


def _calls(spans: Any) -> list[Any]:
    return [
        s
        for s in spans.get_finished_spans()
        if s.attributes and sc.GEN_AI_OPERATION_NAME in s.attributes and sc.FT_PHASE not in s.attributes
    ]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _setup_ms(spans: Any, calls: list[Any]) -> float:
    """Mean connection set-up per call (pool wait, DNS, TCP, TLS), from the phase spans."""
    ids = {c.context.span_id for c in calls}
    setup = (sc.PHASE_POOL_WAIT, sc.PHASE_DNS, sc.PHASE_TCP_CONNECT, sc.PHASE_TLS_HANDSHAKE, sc.PHASE_CONNECT)
    total = sum(
        (s.end_time - s.start_time) / 1e6
        for s in spans.get_finished_spans()
        if s.parent is not None and s.parent.span_id in ids and (s.attributes or {}).get(sc.FT_PHASE) in setup
    )
    return total / len(calls) if calls else 0.0


def _measure(spans: Any, body: Callable[[], None]) -> list[Any]:
    spans.clear()
    body()
    return _calls(spans)


def _levers(sim: Any, clients: _Clients, spans: Any) -> str:
    import openai

    import firsttoken

    rows: list[tuple[str, str, str, str]] = []
    msgs: Any = [{"role": "user", "content": "Is there a warranty on wheels?"}]
    model = "gpt-4o-mini"
    oai: Any = clients.openai

    # 1. A new client (and connection pool) per call vs one client reused.
    def per_call_clients() -> None:
        for _ in range(6):
            c = openai.OpenAI(base_url=sim.openai_base_url, api_key=OPENAI_KEY)
            c.chat.completions.create(model=model, messages=msgs, max_tokens=8)
            c.close()

    def one_client() -> None:
        for _ in range(6):
            oai.chat.completions.create(model=model, messages=msgs, max_tokens=8)

    def connections(body: Callable[[], None]) -> tuple[str, float]:
        calls = _measure(spans, body)
        new = sum(1 for c in calls if not c.attributes.get(sc.FT_CONNECTION_REUSED, True))
        setup = _setup_ms(spans, calls)
        return f"{new}/{len(calls)} new connections, set-up {setup:.2f} ms/call", setup

    # firsttoken warns about per-call clients here, as it would in your app.
    before, setup_before = connections(per_call_clients)
    oai.chat.completions.create(model=model, messages=msgs, max_tokens=8)  # open the pool's connection
    after, setup_after = connections(one_client)
    rows.append(
        (
            "reuse the SDK client",
            before,
            after,
            f"{setup_before - setup_after:+.2f} ms set-up per call on loopback (across a network: round trips)",
        )
    )

    # 2. A prompt prefix that changes every call (a timestamp up front) vs a stable prefix.
    def ttft_and_hits(calls: list[Any]) -> tuple[float, float]:
        ttft = _mean(
            [c.attributes[sc.FT_TIME_TO_FIRST_TOKEN] for c in calls if sc.FT_TIME_TO_FIRST_TOKEN in c.attributes]
        )
        inp = sum(c.attributes.get(sc.GEN_AI_USAGE_INPUT_TOKENS, 0) for c in calls)
        hit = sum(c.attributes.get(sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, 0) for c in calls)
        return ttft * 1000, (hit / inp if inp else 0.0)

    def prefixed(stable: bool) -> Callable[[], None]:
        def run() -> None:
            for i in range(5):
                stamp = f"Request {time.time_ns()} {i}."
                system = SYSTEM_PROMPT if stable else f"{stamp} {SYSTEM_PROMPT}"
                user = f"{stamp} Is there a warranty on wheels?" if stable else "Is there a warranty on wheels?"
                stream = oai.chat.completions.create(
                    model="gpt-4o",
                    messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
                    max_tokens=8,
                    stream=True,
                    stream_options={"include_usage": True},
                )
                for _ in stream:
                    pass

        return run

    (tb, hb), (ta, ha) = ttft_and_hits(_measure(spans, prefixed(False))), ttft_and_hits(_measure(spans, prefixed(True)))
    rows.append(
        (
            "keep the prompt prefix stable",
            f"TTFT {tb:.0f} ms, cache hits {hb:.0%}",
            f"TTFT {ta:.0f} ms, cache hits {ha:.0%}",
            f"{tb - ta:+.0f} ms TTFT saved per call",
        )
    )

    # 3. Independent calls one after another vs in parallel, inside one user action.
    def action_run(parallel: bool) -> Callable[[], None]:
        def call() -> None:
            for _ in oai.chat.completions.create(model=model, messages=msgs, max_tokens=24, stream=True):
                pass

        def run() -> None:
            with firsttoken.action("lever_parallelize", traffic_class="interactive"):
                if parallel:
                    with ThreadPoolExecutor(3) as pool:
                        futures = [pool.submit(contextvars.copy_context().run, call) for _ in range(3)]
                        for f in futures:
                            f.result()
                else:
                    for _ in range(3):
                        call()

        return run

    def action_span() -> Any:
        return next(s for s in spans.get_finished_spans() if s.name == "lever_parallelize")

    _measure(spans, action_run(False))
    seq = action_span()
    _measure(spans, action_run(True))
    par = action_span()
    seq_ms, par_ms = ((s.end_time - s.start_time) / 1e6 for s in (seq, par))
    rows.append(
        (
            "parallelize independent calls",
            f"action {seq_ms:.0f} ms, parallelism {seq.attributes[sc.FT_ACTION_LLM_PARALLELISM]:.1f}",
            f"action {par_ms:.0f} ms, parallelism {par.attributes[sc.FT_ACTION_LLM_PARALLELISM]:.1f}",
            f"{seq_ms - par_ms:+.0f} ms per action",
        )
    )

    # 4. Unbounded output vs a max_tokens budget.
    def bounded(limit: int | None) -> Callable[[], None]:
        def run() -> None:
            for _ in range(2):
                kwargs: dict[str, Any] = {"max_tokens": limit} if limit else {}
                for _ in oai.chat.completions.create(
                    model=model, messages=msgs, stream=True, stream_options={"include_usage": True}, **kwargs
                ):
                    pass

        return run

    unb, bnd = _measure(spans, bounded(None)), _measure(spans, bounded(40))

    def e2e_and_tokens(calls: list[Any]) -> tuple[float, float]:
        return (
            _mean([(c.end_time - c.start_time) / 1e6 for c in calls]),
            _mean([c.attributes.get(sc.GEN_AI_USAGE_OUTPUT_TOKENS, 0) for c in calls]),
        )

    (eu, ou), (eb, ob) = e2e_and_tokens(unb), e2e_and_tokens(bnd)
    rows.append(
        (
            "bound the output (max_tokens)",
            f"end-to-end {eu:.0f} ms, {ou:.0f} output tokens",
            f"end-to-end {eb:.0f} ms, {ob:.0f} output tokens",
            f"{eu - eb:+.0f} ms per call",
        )
    )

    header = ("lever", "before", "after", "measured difference")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    lines = ["The latency levers, measured by firsttoken on the simulator:", ""]
    for n, row in enumerate([header, *rows]):
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
