"""Cost at production scale (issue 22): event-loop lag and garbage collection, the objects an
instrumentation keeps per call, metric cardinality and export cost, and the throughput ceiling, for
the app uninstrumented, with the OpenTelemetry SDK alone, with firsttoken (default, lean, and its own
code alone) and with the peer instrumentations of the shared peer benchmark.

    python benchmarks/scale.py                      # set up what is missing, run every part, plot
    python benchmarks/scale.py --parts lag --variants bare,firsttoken --reps 3
    python benchmarks/scale.py --plot benchmarks/out/scale-<stamp>.json

The peers come from the shared peer benchmark (``--peers-bench``, default ``../shared/peers-bench``):
its directory is copied to ``.peers-bench/`` (gitignored) and its ``setup_venvs.sh`` builds one venv
per variant there (``FIRSTTOKEN_SRC`` = this checkout); nothing of it is committed here. Each run is
a fresh process in its variant's venv (firsttoken's with ``PYTHONPATH=src``, so the checkout's code
is measured, not the copy installed at set-up), against the project's simulator in its own process,
exporting over OTLP/HTTP to a sink in that process.

Variants: ``bare`` (no OpenTelemetry at all), ``otel_sdk`` (the peer benchmark's ``none``: tracer,
meter and logger providers with OTLP exporters, nothing instrumented), ``firsttoken_own``
(firsttoken with no-op providers: its own code only), ``firsttoken``, ``firsttoken_lean``
(``phase_spans=False, wire_phases=False``), ``firsttoken_notail`` (the default with
``phase_spans="never"``: what the tail's waterfalls cost; not run unless named), ``otel_genai``,
``openllmetry``, ``openai_v2``: the peers that instrument the openai SDK (openlit needs
openai < 3; anthropic's own tracing does not instrument openai).

Parts (each a JSON record per run in ``benchmarks/out/scale-<stamp>.json``, tables on stdout):

* ``lag``: an asyncio app runs N streamed chat completions (AsyncOpenAI, 30 tokens at 50 tokens/s
  after 50 ms, ``include_usage``) at concurrency 10, 100 and 500 (closed loop) while a 1 ms ticker
  measures the loop's lag; ``gc.callbacks`` time every collection (generation, duration, objects
  collected). Metrics are exported every second, spans by the SDK's batch processor.
* ``objects``: per finished call, the cyclic garbage it leaves (``gc.collect()`` after K calls with
  the collector off, by type, ``gc.DEBUG_SAVEALL``) and what stays reachable (``gc.get_objects()``
  by type, tracemalloc bytes, after a flush); per in-flight call, the same with H streams open.
* ``cardinality``: 1, 10 and 100 models x 1 or 4 traffic classes x 2 providers (openai,
  anthropic), one streamed call each; then the metric export: data points, Prometheus series,
  OTLP bytes, memory held by the metric state (tracemalloc), and instructions per export counted
  under callgrind (``--toggle-collect``, steady state: the second export).
* ``throughput``: calls/s and chunks/s with the client pinned to one core (the simulator on the
  other, every token at once), over concurrency 1-256, and calls per CPU-second of the client.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PEERS = ROOT / ".peers-bench"
OUT = ROOT / "benchmarks" / "out"
TOKENS = 30
PACED = "paced"  # model name: 50 tokens/s after 50 ms (lag)
HELD = "held"  # model name: 1 token/s (in-flight objects)
FAST = "fast"  # any other model: every token at once
MESSAGES = [{"role": "user", "content": "Benchmark me."}]

# variant -> (venv of the peer benchmark, module of its variants/ or a local kind)
VARIANTS: dict[str, tuple[str, str]] = {
    "bare": ("none", "bare"),
    "otel_sdk": ("none", "none"),
    "firsttoken_own": ("firsttoken", "noop"),
    "firsttoken": ("firsttoken", "firsttoken"),
    "firsttoken_lean": ("firsttoken", "firsttoken_lean"),
    "firsttoken_notail": ("firsttoken", "notail"),
    "otel_genai": ("otel_genai", "otel_genai"),
    "openllmetry": ("openllmetry", "openllmetry"),
    "openai_v2": ("openai_v2", "openai_v2"),
}
METRIC_VARIANTS = ("otel_sdk", "firsttoken", "firsttoken_lean", "otel_genai", "openllmetry", "openai_v2")


# ---------------------------------------------------------------------------------------- server
def serve() -> None:
    """The simulator and an OTLP/HTTP sink, in this process, until stdin closes."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from firsttoken.sim import LatencyModel, Simulator

    fast = LatencyModel(
        queue_ms=0, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=1_000_000, jitter=0, output_tokens=TOKENS
    )
    paced = LatencyModel(
        queue_ms=50, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=50, jitter=0, output_tokens=TOKENS
    )
    held = LatencyModel(queue_ms=0, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=1, jitter=0, output_tokens=TOKENS)
    received: Counter[str] = Counter()

    class Sink(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            n = int(self.headers.get("content-length") or 0)
            self.rfile.read(n)
            received[self.path] += n
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")
            self.end_headers()

        def do_GET(self) -> None:
            body = json.dumps(received).encode()
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    sink = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    with Simulator(latency=fast, models={PACED: paced, HELD: held}, seed=0) as sim:
        print(
            json.dumps(
                {
                    "openai": sim.openai_base_url,
                    "anthropic": sim.anthropic_base_url,
                    "sink": f"http://127.0.0.1:{sink.server_address[1]}",
                }
            ),
            flush=True,
        )
        sys.stdin.read()
    sink.shutdown()


@contextlib.contextmanager
def server(cpu: int | None) -> Any:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=_pin(cpu),
    )
    assert proc.stdout is not None and proc.stdin is not None
    try:
        yield json.loads(proc.stdout.readline())
    finally:
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _pin(cpu: int | None) -> Any:
    if cpu is None or len(os.sched_getaffinity(0)) < 2:
        return None
    return lambda: os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[cpu]})


# ---------------------------------------------------------------------------------------- set-up
def ensure_peers(source: Path, variants: list[str]) -> None:
    """Copy the shared peer benchmark to .peers-bench and build the venvs the variants need."""
    if not (PEERS / "setup_venvs.sh").exists():
        if not (source / "setup_venvs.sh").exists():
            raise SystemExit(f"no peer benchmark at {source} (--peers-bench)")
        shutil.copytree(source, PEERS, ignore=shutil.ignore_patterns(".venvs", "out", "__pycache__"))
        for p in PEERS.rglob("*"):
            p.chmod(p.stat().st_mode | 0o200)
        PEERS.chmod(PEERS.stat().st_mode | 0o200)
    missing = sorted({VARIANTS[v][0] for v in variants} - {p.name for p in (PEERS / ".venvs").glob("*")})
    if missing:
        print(f"building the peer venvs {', '.join(missing)} (a few minutes)", file=sys.stderr)
        subprocess.run(
            ["nice", "./setup_venvs.sh", *missing],
            cwd=PEERS,
            check=True,
            env={**os.environ, "FIRSTTOKEN_SRC": str(ROOT)},
        )


def run_worker(
    variant: str,
    part: str,
    urls: dict[str, str],
    args: dict[str, Any],
    *,
    cpu: int | None = None,
    callgrind: bool = False,
) -> dict[str, Any]:
    venv, _ = VARIANTS[variant]
    py = PEERS / ".venvs" / venv / "bin" / "python"
    env = {**os.environ, "ANTHROPIC_OPEN_TELEMETRY": "false", "PYTHONHASHSEED": "0"}
    if venv == "firsttoken":
        env["PYTHONPATH"] = str(ROOT / "src")
    spec = json.dumps({"variant": variant, "part": part, "urls": urls, **args})
    cmd = [str(py), __file__, "--worker", spec]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        if callgrind:
            cmd = [
                "valgrind",
                "--tool=callgrind",
                "--collect-atstart=no",
                "--toggle-collect=sys_call_tracing",
                f"--callgrind-out-file={out}",
                *cmd,
            ]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, preexec_fn=_pin(cpu), timeout=3000)
        result: dict[str, Any]
        if proc.returncode != 0:  # reported and kept in the raw data; the other runs go on
            print(f"!! {variant} {part} {args} failed:\n{proc.stderr[-1500:]}", file=sys.stderr, flush=True)
            result = {"failed": proc.stderr[-1500:]}
        else:
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            if callgrind:
                result["instructions"] = _callgrind_total(out)
    result.update(variant=variant, part=part, load=os.getloadavg()[0])
    return result


def _callgrind_total(path: Path) -> int:
    for line in path.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError("no totals in the callgrind output")


# ---------------------------------------------------------------------------------------- worker
class Telemetry:
    """The variant's instrumentation, with OTLP export to the sink (the peer benchmark's set-up)."""

    def __init__(self, variant: str, sink: str, metric_interval_ms: int) -> None:
        self.tp: Any = None
        self.mp: Any = None
        self.lp: Any = None
        self.reader: Any = None
        self.exported: Counter[str] = Counter()
        _, module = VARIANTS[variant]
        if module == "bare":
            return
        if module == "noop":
            from opentelemetry.metrics import NoOpMeterProvider
            from opentelemetry.trace import NoOpTracerProvider

            import firsttoken

            assert firsttoken.instrument(tracer_provider=NoOpTracerProvider(), meter_provider=NoOpMeterProvider())
            return
        from opentelemetry import _logs, metrics, trace
        from opentelemetry.exporter.otlp.proto.common._internal.metrics_encoder import encode_metrics
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import HistogramDataPoint, MetricExporter, PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        exported = self.exported

        class Counting(MetricExporter):  # counts what one export carries, then exports it
            def __init__(self, inner: Any) -> None:
                super().__init__(
                    preferred_temporality=inner._preferred_temporality,
                    preferred_aggregation=inner._preferred_aggregation,
                )
                self.inner = inner

            def export(self, data: Any, timeout_millis: float = 10_000, **kw: Any) -> Any:
                if exported["count_points"]:
                    points = prom = 0
                    for rm in data.resource_metrics:
                        for sm in rm.scope_metrics:
                            for m in sm.metrics:
                                for p in m.data.data_points:
                                    points += 1
                                    prom += len(p.bucket_counts) + 2 if isinstance(p, HistogramDataPoint) else 1
                    exported["points"], exported["prometheus_series"] = points, prom
                    exported["bytes"] = len(encode_metrics(data).SerializeToString())
                return self.inner.export(data, timeout_millis=timeout_millis, **kw)

            def force_flush(self, timeout_millis: float = 10_000) -> bool:
                return True

            def shutdown(self, timeout_millis: float = 30_000, **kw: Any) -> None:
                self.inner.shutdown()

        resource = Resource.create({"service.name": f"scale-{variant}"})
        self.tp = TracerProvider(resource=resource)
        self.tp.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{sink}/v1/traces")))
        self.reader = PeriodicExportingMetricReader(
            Counting(OTLPMetricExporter(endpoint=f"{sink}/v1/metrics")), export_interval_millis=metric_interval_ms
        )
        self.mp = MeterProvider(resource=resource, metric_readers=[self.reader])
        self.lp = LoggerProvider(resource=resource)
        self.lp.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter(endpoint=f"{sink}/v1/logs")))
        trace.set_tracer_provider(self.tp)
        metrics.set_meter_provider(self.mp)
        _logs.set_logger_provider(self.lp)
        if module == "notail":  # the default but phase_spans="never": what the tail's waterfalls cost
            import firsttoken

            assert firsttoken.instrument(tracer_provider=self.tp, meter_provider=self.mp, phase_spans="never")
        elif module != "none":
            sys.path.insert(0, str(PEERS))
            from variants import load

            load(module).instrument(self.tp, self.mp, self.lp)

    def flush(self) -> None:
        if self.tp is not None:
            self.tp.force_flush()
            self.lp.force_flush()


def _clients(urls: dict[str, str]) -> tuple[Any, Any]:
    """AsyncOpenAI and AsyncAnthropic, no retries, keeping up to 1000 connections alive (the SDK's
    default keeps 100: at 500 streams the rest would reconnect on every call)."""
    import anthropic
    import openai

    try:
        import httpx2 as httpx
    except ImportError:
        import httpx  # type: ignore[no-redef]
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=1000)
    oai = openai.AsyncOpenAI(
        base_url=urls["openai"],
        api_key="sk-bench",
        max_retries=0,
        http_client=openai.DefaultAsyncHttpxClient(limits=limits),
        timeout=httpx.Timeout(600.0, connect=60.0),  # 500 connections opening on a busy machine
    )
    ant = anthropic.AsyncAnthropic(
        base_url=urls["anthropic"], api_key="sk-ant-bench", max_retries=0, timeout=httpx.Timeout(600.0, connect=60.0)
    )
    return oai, ant


async def _stream(client: Any, model: str, tokens: int = TOKENS) -> int:
    chunks = 0
    stream = await client.chat.completions.create(
        model=model, messages=MESSAGES, max_tokens=tokens, stream=True, stream_options={"include_usage": True}
    )
    async for _ in stream:
        chunks += 1
    return chunks


async def _closed_loop(client: Any, model: str, concurrency: int, calls: int, ramp: float = 0.0) -> int:
    """``calls`` streamed calls, ``concurrency`` at a time; ``ramp``: seconds between the workers'
    starts (a warm-up opens its connections a few at a time: the simulator's accept backlog is 100)."""
    import asyncio

    left = calls
    chunks = 0

    async def worker(i: int) -> None:
        nonlocal left, chunks
        if ramp:
            await asyncio.sleep(i * ramp)
        while left > 0:
            left -= 1
            chunks += await _stream(client, model)

    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    return chunks


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def worker_lag(spec: dict[str, Any]) -> dict[str, Any]:
    import asyncio
    import gc

    tel = Telemetry(spec["variant"], spec["urls"]["sink"], 1000)
    oai, _ = _clients(spec["urls"])
    conc, calls = spec["concurrency"], spec["calls"]
    pauses: list[tuple[int, float, int]] = []
    started = [0.0, 0]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            pauses.append((info["generation"], time.perf_counter() - started[0], info["collected"]))

    async def main() -> dict[str, Any]:
        await _closed_loop(oai, PACED, conc, conc, ramp=0.002)  # warm-up: connections, code paths
        tel.flush()
        gc.collect()
        lags: list[float] = []
        done = [False]

        async def ticker() -> None:
            while not done[0]:
                t = time.perf_counter()
                await asyncio.sleep(0.001)
                lags.append(time.perf_counter() - t - 0.001)

        tick = asyncio.ensure_future(ticker())
        gc.callbacks.append(on_gc)
        cpu, wall = time.process_time(), time.perf_counter()
        chunks = await _closed_loop(oai, PACED, conc, calls)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        gc.callbacks.remove(on_gc)
        done[0] = True
        await tick
        by_gen = Counter(g for g, _, _ in pauses)
        return {
            "concurrency": conc,
            "calls": calls,
            "chunks": chunks,
            "cpu_s": cpu,
            "wall_s": wall,
            "lag_p50_ms": _pct(lags, 0.5) * 1e3,
            "lag_p99_ms": _pct(lags, 0.99) * 1e3,
            "lag_max_ms": max(lags) * 1e3,
            "ticks": len(lags),
            "gc_collections": len(pauses),
            "gc_by_generation": [by_gen[0], by_gen[1], by_gen[2]],
            "gc_time_ms": sum(d for _, d, _ in pauses) * 1e3,
            "gc_max_pause_ms": max((d for _, d, _ in pauses), default=0.0) * 1e3,
            "gc_max_pause_gen2_ms": max((d for g, d, _ in pauses if g == 2), default=0.0) * 1e3,
            "gc_collected": sum(c for _, _, c in pauses),
            "heap_objects": len(gc.get_objects()),  # what a full collection traverses
            "gc_pauses": [(g, round(d * 1e3, 3), c) for g, d, c in pauses],
        }

    result = asyncio.run(main())
    tel.flush()
    return result


def worker_objects(spec: dict[str, Any]) -> dict[str, Any]:
    """Cyclic garbage per finished call, objects kept per finished and per in-flight call."""
    import asyncio
    import gc
    import tracemalloc

    tel = Telemetry(spec["variant"], spec["urls"]["sink"], 3_600_000)
    oai, _ = _clients(spec["urls"])
    k, held = spec["calls"], spec["held"]

    def census() -> Counter[str]:
        return Counter(type(o).__qualname__ for o in gc.get_objects())

    def settle() -> None:
        tel.flush()
        if tel.reader is not None:
            tel.reader.collect(timeout_millis=3_600_000)  # metric state as an export leaves it
        for _ in range(3):
            gc.collect()

    async def main() -> dict[str, Any]:
        await _closed_loop(oai, FAST, 10, 40)  # warm-up
        settle()
        # 0. collections the calls cause (counts, not time: the same on a busy machine)
        stats0 = [g["collections"] for g in gc.get_stats()]
        await _closed_loop(oai, FAST, 10, k)
        tel.flush()
        collections = [b - a for a, b in zip(stats0, (g["collections"] for g in gc.get_stats()), strict=True)]
        settle()
        # 1. cyclic garbage: the collector off, K calls, then one collection finds what refcounting could not free
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)
        await _closed_loop(oai, FAST, 10, k)
        tel.flush()
        cyclic = gc.collect()
        garbage = Counter(type(o).__qualname__ for o in gc.garbage)
        gc.garbage.clear()
        gc.set_debug(0)
        gc.enable()
        settle()
        # 2. kept per finished call
        tracemalloc.start()
        before, mem0 = census(), tracemalloc.get_traced_memory()[0]
        await _closed_loop(oai, FAST, 10, k)
        settle()
        after, mem1 = census(), tracemalloc.get_traced_memory()[0]
        finished = after - before
        # 3. kept per in-flight call: H streams opened, first chunk read
        streams = []
        for _ in range(held):
            s = await oai.chat.completions.create(
                model=HELD, messages=MESSAGES, max_tokens=TOKENS, stream=True, stream_options={"include_usage": True}
            )
            streams.append(s)
        iters = [s.__aiter__() for s in streams]
        for it in iters:
            await it.__anext__()
        gc.collect()
        during, mem2 = census(), tracemalloc.get_traced_memory()[0]
        in_flight = during - after
        for s in streams:  # a peer's proxy may make close() synchronous
            with contextlib.suppress(Exception):
                closing = s.close()
                if closing is not None:
                    await closing
        del streams, iters
        tracemalloc.stop()
        return {
            "calls": k,
            "held": held,
            "collections_per_1000_calls": [n * 1000 / k for n in collections],
            "cyclic_per_call": cyclic / k,
            "cyclic_by_type": {t: n / k for t, n in garbage.most_common(12)},
            "kept_per_call": sum(finished.values()) / k,
            "kept_by_type": {t: n / k for t, n in finished.most_common(8)},
            "kept_bytes_per_call": (mem1 - mem0) / k,
            "in_flight_per_call": sum(in_flight.values()) / held,
            "in_flight_by_type": {t: n / held for t, n in in_flight.most_common(60)},
            "in_flight_bytes_per_call": (mem2 - mem1) / held,
        }

    return asyncio.run(main())


def worker_cardinality(spec: dict[str, Any]) -> dict[str, Any]:
    import asyncio
    import gc
    import tracemalloc

    tel = Telemetry(spec["variant"], spec["urls"]["sink"], 3_600_000)
    oai, ant = _clients(spec["urls"])
    models, classes = spec["models"], spec["classes"]
    traffic: Any = contextlib.nullcontext
    if spec["variant"].startswith("firsttoken"):
        import firsttoken

        traffic = firsttoken.traffic_class

    async def one(provider: str, model: str) -> None:
        if provider == "openai":
            await _stream(oai, model)
        else:
            stream = await ant.messages.create(model=model, messages=MESSAGES, max_tokens=TOKENS, stream=True)
            async for _ in stream:
                pass

    async def main() -> None:
        await one("openai", "warm")
        await one("anthropic", "warm")
        tel.flush()
        tel.reader.collect(timeout_millis=3_600_000)
        gc.collect()
        if spec["memory"]:
            tracemalloc.start()
        mem0 = tracemalloc.get_traced_memory()[0] if spec["memory"] else 0
        for c in range(classes):
            with traffic(f"class-{c}") if classes > 1 else contextlib.nullcontext():
                for m in range(models):
                    for provider in ("openai", "anthropic"):
                        await one(provider, f"model-{m}")
        tel.flush()
        tel.reader.collect(timeout_millis=3_600_000)  # first collection creates the export's own state
        gc.collect()
        out["memory_bytes"] = (tracemalloc.get_traced_memory()[0] - mem0) if spec["memory"] else None
        if spec["memory"]:
            tracemalloc.stop()

    out: dict[str, Any] = {"models": models, "classes": classes, "providers": 2, "calls": 2 * models * classes}
    asyncio.run(main())
    tel.exported["count_points"] = 1
    hour = 3_600_000  # under callgrind a collection of 10,000 series takes minutes
    tel.reader.force_flush(hour)  # an export, counted
    tel.exported["count_points"] = 0
    sys.call_tracing(tel.reader.force_flush, (hour,))  # the steady-state export: what callgrind counts
    out.update(
        points=tel.exported["points"], prometheus_series=tel.exported["prometheus_series"], bytes=tel.exported["bytes"]
    )
    return out


def worker_throughput(spec: dict[str, Any]) -> dict[str, Any]:
    import asyncio

    tel = Telemetry(spec["variant"], spec["urls"]["sink"], 15_000)
    oai, _ = _clients(spec["urls"])
    conc, calls = spec["concurrency"], spec["calls"]

    async def main() -> dict[str, Any]:
        await _closed_loop(oai, FAST, conc, max(conc, 20), ramp=0.002)
        tel.flush()
        cpu, wall = time.process_time(), time.perf_counter()
        chunks = await _closed_loop(oai, FAST, conc, calls)
        tel.flush()  # the export of these calls' spans is part of the cost
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        return {
            "concurrency": conc,
            "calls": calls,
            "chunks": chunks,
            "cpu_s": cpu,
            "wall_s": wall,
            "calls_per_s": calls / wall,
            "chunks_per_s": chunks / wall,
            "calls_per_cpu_s": calls / cpu,
        }

    return asyncio.run(main())


WORKERS = {
    "lag": worker_lag,
    "objects": worker_objects,
    "cardinality": worker_cardinality,
    "throughput": worker_throughput,
}


# ---------------------------------------------------------------------------------------- driver
def _median(rows: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def tables(rows: list[dict[str, Any]]) -> str:
    failed = [r for r in rows if "failed" in r]
    rows = [r for r in rows if "failed" not in r]
    out: list[str] = (
        [
            f"{len(failed)} run(s) failed (raw data): "
            + ", ".join(f"{r['variant']} {r['part']} {r.get('concurrency', '')}" for r in failed),
            "",
        ]
        if failed
        else []
    )
    lag = [r for r in rows if r["part"] == "lag"]
    if lag:
        out += [
            "### Event-loop lag and GC (median over reps; per 1000 calls where said)",
            "",
            "| variant | concurrency | GC collections /1000 calls (gen0/1/2) | GC ms /1000 calls | longest pause ms "
            "(gen 2) | lag p50 / p99 / max ms | CPU ms per call | load |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for v in dict.fromkeys(r["variant"] for r in lag):
            for c in sorted({r["concurrency"] for r in lag}):
                rs = [r for r in lag if r["variant"] == v and r["concurrency"] == c]
                if not rs:
                    continue
                k = 1000 / rs[0]["calls"]
                gens = "/".join(f"{statistics.median(r['gc_by_generation'][g] for r in rs) * k:.0f}" for g in range(3))
                pause, pause2 = max(r["gc_max_pause_ms"] for r in rs), max(r["gc_max_pause_gen2_ms"] for r in rs)
                lags = "{:.2f} / {:.2f} / {:.1f}".format(*(_median(rs, f"lag_{q}_ms") for q in ("p50", "p99", "max")))
                out.append(
                    f"| {v} | {c} | {_median(rs, 'gc_collections') * k:.0f} ({gens}) "
                    f"| {_median(rs, 'gc_time_ms') * k:.1f} | {pause:.1f} ({pause2:.1f}) | {lags} "
                    f"| {statistics.median(r['cpu_s'] / r['calls'] for r in rs) * 1e3:.2f} "
                    f"| {statistics.median(r['load'] for r in rs):.1f} |"
                )
        out.append("")
    objs = [r for r in rows if r["part"] == "objects"]
    if objs:
        out += [
            "### Objects per call",
            "",
            "| variant | GC collections /1000 calls (gen0/1/2) | cyclic garbage per call | kept per finished call "
            "(objects, bytes) | per in-flight call (objects, bytes) | cyclic garbage by type |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for r in objs:
            top = ", ".join(f"{t} {n:.1f}" for t, n in list(r["cyclic_by_type"].items())[:6])
            gens = "/".join(f"{n:.0f}" for n in r["collections_per_1000_calls"])
            out.append(
                f"| {r['variant']} | {sum(r['collections_per_1000_calls']):.0f} ({gens}) "
                f"| {r['cyclic_per_call']:.1f} | {r['kept_per_call']:.2f}, "
                f"{r['kept_bytes_per_call']:.0f} | {r['in_flight_per_call']:.0f}, "
                f"{r['in_flight_bytes_per_call']:.0f} | {top} |"
            )
        out.append("")
    card = [r for r in rows if r["part"] == "cardinality"]
    if card:
        out += [
            "### Metric cardinality and export cost (one export, steady state)",
            "",
            "| variant | models x classes x providers | data points | Prometheus series | OTLP bytes | "
            "instructions per export | metric memory held |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        for r in card:
            instr = f"{r['instructions'] / 1e6:.2f}M" if r.get("instructions") else "—"
            mem = f"{r['memory_bytes'] / 1024:.0f} KiB" if r.get("memory_bytes") is not None else "—"
            out.append(
                f"| {r['variant']} | {r['models']} x {r['classes']} x {r['providers']} | {r['points']} | "
                f"{r['prometheus_series']} | {r['bytes']:,} | {instr} | {mem} |"
            )
        out.append("")
    thr = [r for r in rows if r["part"] == "throughput"]
    if thr:
        concs = sorted({r["concurrency"] for r in thr})
        out += [
            "### Throughput, client on one core (calls/s wall, median; calls per CPU-second in brackets)",
            "",
            "| variant | " + " | ".join(f"c={c}" for c in concs) + " | chunks/s at best |",
            "|---|" + "---:|" * (len(concs) + 1),
        ]
        for v in dict.fromkeys(r["variant"] for r in thr):
            cells = []
            best = 0.0
            for c in concs:
                rs = [r for r in thr if r["variant"] == v and r["concurrency"] == c]
                if rs:
                    cells.append(f"{_median(rs, 'calls_per_s'):.0f} ({_median(rs, 'calls_per_cpu_s'):.0f})")
                    best = max(best, _median(rs, "chunks_per_s"))
                else:
                    cells.append("—")
            out.append(f"| {v} | " + " | ".join(cells) + f" | {best:.0f} |")
    return "\n".join(out)


def drive(a: argparse.Namespace) -> Path:
    variants = a.variants.split(",")
    for v in variants:
        if v not in VARIANTS:
            raise SystemExit(f"unknown variant {v!r}: one of {', '.join(VARIANTS)}")
    parts = a.parts.split(",")
    ensure_peers(Path(a.peers_bench), variants)
    OUT.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    path = OUT / f"scale-{stamp}.json"
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    rows: list[dict[str, Any]] = []
    meta = {"commit": commit, "start": stamp, "python": sys.version.split()[0], "cpus": os.cpu_count()}

    def save(row: dict[str, Any]) -> None:
        rows.append(row)
        path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
        brief = {k: row[k] for k in ("variant", "part", "concurrency", "models", "classes") if k in row}
        print(f"done {brief} load {row['load']:.1f}", file=sys.stderr, flush=True)

    with server(0 if "throughput" in parts else None) as urls:
        if "lag" in parts:
            for rep in range(a.reps):
                for c in (int(x) for x in a.concurrency.split(",")):
                    order = variants if rep % 2 == 0 else variants[::-1]
                    for v in order:
                        save(
                            run_worker(v, "lag", urls, {"concurrency": c, "calls": max(a.calls, 6 * c)}) | {"rep": rep}
                        )
        if "objects" in parts:
            for v in variants:
                save(run_worker(v, "objects", urls, {"calls": 1000, "held": 100}))
        if "cardinality" in parts:
            for v in [v for v in variants if v in METRIC_VARIANTS]:
                for models, classes in (tuple(int(n) for n in g.split("x")) for g in a.grid.split(",")):
                    if classes > 1 and not v.startswith("firsttoken"):
                        continue
                    spec = {"models": models, "classes": classes}
                    row = run_worker(v, "cardinality", urls, spec | {"memory": True})
                    if not a.no_callgrind and shutil.which("valgrind") and "failed" not in row:
                        counted = run_worker(v, "cardinality", urls, spec | {"memory": False}, callgrind=True)
                        row["instructions"] = counted.get("instructions")
                    save(row)
        if "throughput" in parts:
            for rep in range(a.reps):
                for c in (int(x) for x in a.throughput_concurrency.split(",")):
                    for v in variants if rep % 2 == 0 else variants[::-1]:
                        save(
                            run_worker(v, "throughput", urls, {"concurrency": c, "calls": max(300, 2 * c)}, cpu=1)
                            | {"rep": rep}
                        )
    meta["end"] = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(tables(rows))
    print(f"\nraw: {path}", file=sys.stderr)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--parts", default="lag,objects,cardinality,throughput")
    ap.add_argument("--variants", default=",".join(v for v in VARIANTS if v != "firsttoken_notail"))
    ap.add_argument("--concurrency", default="10,100,500", help="lag part: concurrent streams")
    ap.add_argument("--calls", type=int, default=200, help="lag part: calls per run (at least 6 x concurrency)")
    ap.add_argument("--reps", type=int, default=2, help="lag and throughput runs per variant, order alternating")
    ap.add_argument("--peers-bench", default=str(ROOT.parent / "shared" / "peers-bench"))
    ap.add_argument("--throughput-concurrency", default="1,4,16,64,256", help="throughput part: concurrent streams")
    ap.add_argument("--grid", default="1x1,10x1,100x1,100x4", help="cardinality: models x traffic classes, ...")
    ap.add_argument("--no-callgrind", action="store_true", help="cardinality: skip counting export instructions")
    ap.add_argument("--plot", metavar="JSON[,JSON]", help="only draw the figures of finished runs into docs/img/")
    ap.add_argument("--tables", metavar="JSON[,JSON]", help="only print the tables of finished runs")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        return serve()
    if a.worker:
        spec = json.loads(a.worker)
        import warnings

        warnings.simplefilter("ignore")
        print(json.dumps(WORKERS[spec["part"]](spec)))
        return None
    if a.tables:
        print(tables([r for f in a.tables.split(",") for r in json.loads(Path(f).read_text())["rows"]]))
        return None
    if a.plot:
        if importlib.util.find_spec("matplotlib") is None:
            raise SystemExit("--plot needs matplotlib: pip install matplotlib")
        from scale_plot import plot

        return plot(*(Path(f) for f in a.plot.split(",")))
    path = drive(a)
    if importlib.util.find_spec("matplotlib") is None:
        print(f"figures: pip install matplotlib, then --plot {path}", file=sys.stderr)
        return None
    from scale_plot import plot

    plot(path)
    return None


if __name__ == "__main__":
    main()
