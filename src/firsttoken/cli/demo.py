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
import importlib.util
import os
import random
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .. import semconv as sc
from ..config import FirstTokenWarning
from .bench_html import write_spans_report
from .report import collect, percentile, render, where_the_time_went

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
CTRL_C_FLUSH_S = 1.0
"""After Ctrl-C in --continuous, the most the last flush to the collector may take."""
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
        "--html",
        metavar="PATH",
        default=os.path.join(tempfile.gettempdir(), "firsttoken-demo.html"),
        help="write the workload's HTML report there, as firsttoken bench does ('' for none; default: %(default)s)",
    )
    p.add_argument(
        "--continuous",
        action="store_true",
        help="keep the workload running (the load generator of the docker compose stack); "
        "prints the report every --interval seconds until interrupted",
    )
    p.add_argument(
        "--interval", type=float, default=30.0, help="seconds between reports with --continuous (default: 30)"
    )
    p.add_argument(
        "--server",
        metavar="URL",
        help="run the workload against this OpenAI-compatible server (e.g. http://127.0.0.1:8080 for llama.cpp's "
        "llama-server) instead of the simulator: no injected faults, no levers; key from OPENAI_API_KEY",
    )
    p.add_argument("--model", default="default", help="the model to ask for with --server (default: %(default)s)")
    p.add_argument(
        "--server-anthropic",
        action="store_true",
        help="with --server, also call its Anthropic Messages API (llama-server has one); key from ANTHROPIC_API_KEY",
    )
    return p


class _RealServer:
    """Stands where the simulator does, for ``--server``: its base URLs, and no faults to inject."""

    def __init__(self, url: str, anthropic: bool) -> None:
        base = url.rstrip("/")
        root = base[: -len("/v1")] if base.endswith("/v1") else base
        self.url = root
        self.openai_base_url = f"{root}/v1"
        self.anthropic_base_url = root if anthropic else None

    def inject(self, *args: Any, **kwargs: Any) -> None:
        """Faults are the simulator's; a real server has its own."""

    def __enter__(self) -> _RealServer:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class _Clients:
    """One client per SDK, reused by every call: the way apps should do it."""

    def __init__(self, sim: Any) -> None:
        import openai

        real = isinstance(sim, _RealServer)
        openai_key = os.environ.get("OPENAI_API_KEY", OPENAI_KEY) if real else OPENAI_KEY
        self.openai = openai.OpenAI(base_url=sim.openai_base_url, api_key=openai_key, max_retries=2)
        self.anthropic: Any = None
        where = f"against {sim.url}" if real else "against the built-in simulator"
        #: What the report's title says the calls went through, and to what.
        self.through = f"through the openai SDK {openai.__version__}, {where}"
        if sim.anthropic_base_url is None:
            return
        anthropic_key = os.environ.get("ANTHROPIC_API_KEY", ANTHROPIC_KEY) if real else ANTHROPIC_KEY
        try:
            import anthropic

            self.anthropic = anthropic.Anthropic(base_url=sim.anthropic_base_url, api_key=anthropic_key, max_retries=2)
        except ImportError:
            return
        self.through = (
            f"through the openai SDK {openai.__version__} and the anthropic SDK {anthropic.__version__}, {where}"
        )

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

    def __init__(self, clients: _Clients, sim: Any, seed: int, model: str | None = None) -> None:
        self.clients = clients
        self.sim = sim
        self.model = model
        """With ``--server``: the one model every call asks for."""
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.count = 0

    def _pick_call(self) -> Callable[[], None]:
        providers = ["openai"] * 3 + (["anthropic"] * 2 if self.clients.anthropic is not None else [])
        provider = self.rng.choice(providers)
        models = OPENAI_MODELS if provider == "openai" else ANTHROPIC_MODELS
        model = self.model or self.rng.choice(tuple(models))
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


def _run(action: Callable[[], None], quiet: threading.Event | None = None) -> None:
    try:
        action()
    except Exception as exc:  # an injected fault the SDK's retries did not absorb: counted from the spans
        if quiet is None or not quiet.is_set():
            print(f"  (a call failed as injected: {type(exc).__name__})", file=sys.stderr)


class _Telemetry:
    """Spans in memory for the report and, with ``OTEL_EXPORTER_OTLP_ENDPOINT`` set, OTLP export
    through firsttoken's own set-up (short timeouts, a bounded flush, one line if it is down)."""

    def __init__(self) -> None:
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        from .. import _otlp

        telemetry = self

        class Count(SpanProcessor):
            def on_end(self, span: ReadableSpan) -> None:
                telemetry.ended += 1

        self.ended = 0
        self.spans = InMemorySpanExporter()
        self.endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or None
        otlp = ["otlp"] if self.endpoint else []
        self.export = _otlp.providers(
            resource_attributes={"service.name": os.environ.get("OTEL_SERVICE_NAME", "firsttoken-demo")},
            traces=otlp,
            metrics_=otlp,
            span_processors=[SimpleSpanProcessor(self.spans), Count()],
            metric_readers=[InMemoryMetricReader()],
        )
        self.tracer_provider = self.export.tracer_provider
        self.meter_provider = self.export.meter_provider

    def close(self, timeout_s: float | None = None, *, shutdown: bool = True) -> str:
        """Flush (bounded) and say truthfully what reached the collector."""
        done = self.export.close(timeout_s, shutdown=shutdown)
        if not self.endpoint:
            return "Set OTEL_EXPORTER_OTLP_ENDPOINT to also export over OTLP."
        exported, failed = self.export.tally.exported, self.export.tally.failed
        spans, exports = exported["spans"], exported["metrics"]
        metric_exports = exports + failed["metrics"]
        if spans == self.ended and exports == metric_exports and done:
            return f"Exported over OTLP to {self.endpoint}: all {spans} spans and {exports} metric exports."
        metrics_part = f"{exports} of {metric_exports} metric exports" if metric_exports else "no metric export"
        why = "it did not answer" if spans == 0 and exports == 0 else "it did not take them all in time"
        return (
            f"NOT all exported over OTLP to {self.endpoint}: {spans} of {self.ended} spans and {metrics_part} "
            f"reached the collector; the rest were dropped ({why})."
        )


class _Progress:
    """One status line on stderr while the demo works: rewritten in place on a terminal, else a
    line at each step so that logs show where the time goes."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self._last = ""

    def show(self, text: str, *, step: bool = False) -> None:
        if self.tty:
            sys.stderr.write("\r\x1b[2K" + text)
            sys.stderr.flush()
        elif step and text != self._last:
            print(text, file=sys.stderr, flush=True)
        self._last = text

    def done(self) -> None:
        if self.tty and self._last:
            sys.stderr.write("\r\x1b[2K")
            sys.stderr.flush()
        self._last = ""


def _notes(caught: list[warnings.WarningMessage]) -> list[str]:
    """firsttoken's warnings, as the report's own lines (not a source line in the middle of it)."""
    seen: list[str] = []
    for w in caught:
        text = str(w.message)
        if issubclass(w.category, FirstTokenWarning) and text not in seen:
            seen.append(text)
    return [f"note: {text}" for text in seen]


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    for name in ("actions", "concurrency", "interval"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name} must be positive, got {getattr(args, name)}")
    if importlib.util.find_spec("openai") is None:
        print(
            "firsttoken demo drives the official openai SDK, which is not installed: "
            "pip install 'openai>=3.0,<4' (firsttoken's openai extra)",
            file=sys.stderr,
        )
        return 2

    import firsttoken

    from ..sim import LatencyModel, Simulator

    telemetry = _Telemetry()
    if not firsttoken.instrument(tracer_provider=telemetry.tracer_provider, meter_provider=telemetry.meter_provider):
        print("firsttoken could not instrument the SDKs (see the warning above)", file=sys.stderr)
        return 1

    profiles = {**OPENAI_MODELS, **ANTHROPIC_MODELS}
    models = {name: LatencyModel(**profile, jitter=0.25) for name, profile in profiles.items()}
    started = time.perf_counter()
    progress = _Progress()
    spans = telemetry.spans
    html_line = None
    clients: _Clients | None = None
    try:
        server = _RealServer(args.server, args.server_anthropic) if args.server else None
        with server or Simulator(models=models, seed=args.seed) as sim:
            clients = _Clients(sim)
            workload = _Workload(clients, sim, args.seed, args.model if server else None)
            if args.continuous:
                _continuous(workload, spans, args, started, progress)
                # Ctrl-C: flush briefly, then leave at once. Calls still in flight are dropped with
                # their daemon threads; closing the simulator under them and tearing the interpreter
                # down would only add seconds to a Ctrl-C (nothing else is left to clean up).
                print(telemetry.close(timeout_s=CTRL_C_FLUSH_S, shutdown=False), flush=True)
                sys.stderr.flush()
                os._exit(0)
            done = [0]
            lock = threading.Lock()

            def run_one(_: int) -> None:
                _run(workload.next_action())
                with lock:
                    done[0] += 1
                    progress.show(f"workload: {done[0]}/{args.actions} user actions", step=done[0] == 1)

            progress.show(f"workload: 0/{args.actions} user actions", step=True)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", FirstTokenWarning)
                with ThreadPoolExecutor(max_workers=args.concurrency) as pool:
                    list(pool.map(run_one, range(args.actions)))
            progress.done()
            print(_report(spans.get_finished_spans(), started, clients.through, notes=_notes(caught)), flush=True)
            if args.html:  # before the levers, which clear the spans
                html_line = write_spans_report(spans.get_finished_spans(), args.html, title="firsttoken demo")
            if not args.no_levers and server is not None:
                print("\n(the levers are measured against the simulator: run without --server)", flush=True)
            elif not args.no_levers:
                print("\nmeasuring the latency levers (before / after)...", flush=True)
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always", FirstTokenWarning)
                    table = _levers(sim, clients, spans, progress)
                progress.done()
                print("\n".join([table, *_notes(caught)]), flush=True)
            clients.close()
    except KeyboardInterrupt:
        progress.done()
        print(_report(spans.get_finished_spans(), started, clients.through if clients else ""), flush=True)
    finally:
        firsttoken.uninstrument()
    if html_line:
        print(html_line, flush=True)
    print(telemetry.close(), flush=True)
    return 0


def _continuous(workload: _Workload, spans: Any, args: Any, started: float, progress: _Progress) -> None:
    """Workers run actions until Ctrl-C; every --interval seconds, a report of that window.

    The workers are daemon threads: on Ctrl-C the report and the bounded flush happen at once, and
    calls still in flight are abandoned with the process instead of holding it up."""
    stop = threading.Event()

    def worker() -> None:
        while not stop.is_set():
            _run(workload.next_action(), quiet=stop)

    for n in range(args.concurrency):
        threading.Thread(target=worker, name=f"demo-worker-{n}", daemon=True).start()
    window_start = time.perf_counter()
    try:
        while True:
            deadline = window_start + args.interval
            while (left := deadline - time.perf_counter()) > 0:
                progress.show(f"running: next report in {left:.0f} s (Ctrl-C to stop)")
                time.sleep(min(left, 0.5))
            progress.done()
            now = time.perf_counter()
            print(
                _report(spans.get_finished_spans(), window_start, workload.clients.through, since_start=now - started),
                flush=True,
            )
            spans.clear()
            window_start = now
    except KeyboardInterrupt:
        stop.set()
        progress.done()
        now = time.perf_counter()
        print(
            _report(spans.get_finished_spans(), window_start, workload.clients.through, since_start=now - started),
            flush=True,
        )
    finally:
        stop.set()


def _report(
    finished: Iterable[Any],
    window_start: float,
    through: str,
    *,
    since_start: float | None = None,
    notes: list[str] | None = None,
) -> str:
    finished = list(finished)
    stats = collect(finished)
    calls = sum(s.calls for s in stats.values())
    actions = [s for s in finished if s.attributes and sc.FT_ACTION_LLM_CALLS in s.attributes]
    elapsed = time.perf_counter() - window_start
    what = f"{len(actions)} user actions, {calls} LLM calls {through}"
    if since_start is None:
        title = f"firsttoken demo: {what}, in {elapsed:.1f} s"
    else:
        title = f"firsttoken demo, the last {elapsed:.0f} s: {what} (running for {since_start:.0f} s)"
    app = [(s.end_time - s.start_time) / 1e9 for s in actions if s.end_time and s.start_time]
    lines = [render(stats, title=title), ""]
    if app:
        p50, p95, p99 = (percentile(app, q) or 0.0 for q in (50, 95, 99))
        lines.append(
            f"Application end-to-end (user action -> rendered), {len(app)} actions: "
            f"p50 {p50 * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms"
        )
    breakdown = where_the_time_went(finished)
    if breakdown:
        lines += ["", *breakdown]
    lines += [
        "",
        "TTFT: SDK call to the first chunk carrying output (streamed calls). TPOT: decode time per output",
        "token after the first. End-to-end: SDK call to the last byte. Cache hit: cached / input tokens.",
    ]
    lines += notes or []
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


def _setup_ms(calls: list[Any]) -> float:
    """Mean connection set-up per call (pool wait, DNS, TCP, TLS), from the calls' phase durations."""
    setup = (sc.PHASE_POOL_WAIT, sc.PHASE_DNS, sc.PHASE_TCP_CONNECT, sc.PHASE_TLS_HANDSHAKE, sc.PHASE_CONNECT)
    keys = [sc.FT_PHASE_DURATION_PREFIX + phase for phase in setup]
    total = sum(float(c.attributes.get(key, 0.0)) for c in calls for key in keys) * 1000
    return total / len(calls) if calls else 0.0


def _measure(spans: Any, body: Callable[[], None]) -> list[Any]:
    spans.clear()
    body()
    return _calls(spans)


def _levers(sim: Any, clients: _Clients, spans: Any, progress: _Progress) -> str:
    import openai

    import firsttoken

    rows: list[tuple[str, str, str, str]] = []
    msgs: Any = [{"role": "user", "content": "Is there a warranty on wheels?"}]
    model = "gpt-4o-mini"
    oai: Any = clients.openai

    # 1. A new client (and connection pool) per call vs one client reused.
    progress.show("lever 1/4: reuse the SDK client", step=True)

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
        setup = _setup_ms(calls)
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
    progress.show("lever 2/4: keep the prompt prefix stable", step=True)

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
    progress.show("lever 3/4: parallelize independent calls", step=True)

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
    progress.show("lever 4/4: bound the output (max_tokens)", step=True)

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
