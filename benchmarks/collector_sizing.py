"""Collector sizing (issue 39 item 3): calls/s per core of the router tier and the sampler tier of the
shipped scale-out configs, on the real Collector 0.159, with firsttoken-shaped traffic.

    python benchmarks/collector_sizing.py                       # record, every tier, every rate, 3 reps
    python benchmarks/collector_sizing.py --tiers sampler --rates 2000,4000 --reps 1 --window 10
    python benchmarks/collector_sizing.py _table benchmarks/collector-sizing-<commit>.json   # docs/scale.md's tables

The traffic: ``firsttoken demo`` (the real openai and anthropic SDKs through firsttoken against
``firsttoken.sim``, its mix of traffic classes, models and failed calls) runs once with its OTLP export
pointed at a sink here; each recorded call span (with its attributes and events, made the root of its
trace) and its child spans are one "call". The generator replays them at a fixed rate as OTLP/gRPC, one
request per ``--batch`` calls, every request pre-encoded once: a send only writes fresh trace and span
ids at known offsets (no protobuf work), so Python is not the bottleneck (its CPU is reported per point).

Tiers (each point a fresh Collector, ``taskset -c 0`` with ``GOMAXPROCS=1``; the generator and the
sinks on core 1):

* ``router``: collector-config/scale-out/router.yaml, its load-balancing exporter routing by trace id to
  two sinks (standing where the samplers are; static resolver as in tests/stack/test_stack_real.py);
* ``sampler``: collector-config/scale-out/sampler.yaml (tail_sampling with the shipped policies,
  decision_wait 120 s, 5 s after the root), its exporter to a sink; ``--shards`` 1 and the core count.

A point is sustained when the generator sent what the rate asked (within 3 %), the Collector refused,
failed and dropped nothing (its own counters from its telemetry endpoint) and, for the sampler, every
call was decided (sampled + not sampled = new traces = calls sent). Each point records the load
average, the Collector's CPU (from /proc) and RSS, and the generator's and the sinks' CPU. ``--app``
also runs a real instrumented call loop (openai SDK, firsttoken, the SDK's batch processor, OTLP/gRPC)
against a sampler alone, then refusing (its memory_limiter lowered, the generator pushing): its
latency, what raised, and what its exporter reported exported or failed. The JSON goes to
benchmarks/out/collector-sizing-<stamp>.json.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import platform
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "out"
CONFIGS = ROOT / "collector-config" / "scale-out"
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
COLLECTOR_CORE = 0
GENERATOR_CORE = 1 if (os.cpu_count() or 1) > 1 else 0
SUSTAINED_SHARE = 0.97
"""A point is sustained when the generator sent at least this share of the calls its rate asked for."""
IN_FLIGHT = 8
"""Export requests the generator keeps in flight at most (the Collector's backpressure shows as fewer sent)."""
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- recording -------------------------------------------------------------------------------------------


def record(actions: int) -> dict[str, Any]:
    """Run ``firsttoken demo`` once into an OTLP/HTTP sink; its calls (each call span, made a root, with
    its child spans) as serialized Span messages, the resource and scope, and the metric export's points."""
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    bodies: dict[str, list[bytes]] = {"traces": [], "metrics": []}

    class Sink(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            bodies["traces" if self.path.endswith("/traces") else "metrics"].append(body)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{server.server_port}"}
        args = ["--no-levers", "--actions", str(actions), "--concurrency", "8", "--html", ""]
        subprocess.run([sys.executable, "-m", "firsttoken", "demo", *args], env=env, check=True, capture_output=True)
    finally:
        server.shutdown()
    spans: list[Any] = []
    resource = scope = None
    for body in bodies["traces"]:
        for rs in ExportTraceServiceRequest.FromString(body).resource_spans:
            resource = rs.resource
            for ss in rs.scope_spans:
                scope = ss.scope
                spans.extend(ss.spans)
    children: dict[bytes, list[Any]] = {}
    for span in spans:
        children.setdefault(span.parent_span_id, []).append(span)
    calls: list[list[bytes]] = []
    for span in spans:
        if not any(a.key == "gen_ai.operation.name" for a in span.attributes):
            continue
        root = type(span)()
        root.CopyFrom(span)
        root.parent_span_id = b""
        calls.append([root.SerializeToString(), *(c.SerializeToString() for c in children.get(span.span_id, []))])
    points = []
    for body in bodies["metrics"]:
        request = ExportMetricsServiceRequest.FromString(body)
        points.append(
            sum(
                len(getattr(m, m.WhichOneof("data")).data_points)
                for rm in request.resource_metrics
                for sm in rm.scope_metrics
                for m in sm.metrics
            )
        )
    assert resource is not None and scope is not None and calls, "the demo exported no call span"
    return {
        "calls": calls,
        "resource": resource.SerializeToString(),
        "scope": scope.SerializeToString(),
        "metric_points_per_export": points,
        "actions": actions,
    }


def describe(recording: dict[str, Any]) -> dict[str, Any]:
    """What one recorded call weighs: spans, attributes, events, bytes."""
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    calls = recording["calls"]
    roots = [Span.FromString(c[0]) for c in calls]
    errors = sum(1 for r in roots if r.status.code == r.status.STATUS_CODE_ERROR)
    return {
        "calls": len(calls),
        "spans_per_call": sum(len(c) for c in calls) / len(calls),
        "attributes_per_call_span": statistics.mean(len(r.attributes) for r in roots),
        "events_per_call_span": statistics.mean(len(r.events) for r in roots),
        "bytes_per_call": statistics.mean(sum(len(s) for s in c) for c in calls),
        "error_calls": errors,
        "metric_points_per_export": recording["metric_points_per_export"],
        "metric_points_per_call": recording["metric_points_per_export"][-1] / len(calls)
        if recording["metric_points_per_export"]
        else None,
    }


# -- the generator: pre-encoded requests, fresh ids written at known offsets -------------------------------


def templates(recording: dict[str, Any], batch: int, count: int) -> list[tuple[bytes, list[int], list[int]]]:
    """``count`` ExportTraceServiceRequests of ``batch`` calls each (the recorded calls in turn), with the
    offsets of every trace id (16 bytes, one per call, shared by its spans) and span id (8 bytes)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope
    from opentelemetry.proto.resource.v1.resource_pb2 import Resource
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    calls = recording["calls"]
    out = []
    turn = 0
    for _ in range(count):
        request = ExportTraceServiceRequest()
        rs = request.resource_spans.add()
        rs.resource.CopyFrom(Resource.FromString(recording["resource"]))
        ss = rs.scope_spans.add()
        ss.scope.CopyFrom(InstrumentationScope.FromString(recording["scope"]))
        trace_marks: list[bytes] = []
        span_marks: list[bytes] = []
        for _ in range(batch):
            spans = [Span.FromString(s) for s in calls[turn % len(calls)]]
            turn += 1
            trace_id = os.urandom(16)
            trace_marks.append(trace_id)
            root_id = os.urandom(8)
            for i, span in enumerate(spans):
                span.trace_id = trace_id
                span.span_id = root_id if i == 0 else os.urandom(8)
                if i:
                    span.parent_span_id = root_id
                span_marks.append(span.span_id)
                ss.spans.add().CopyFrom(span)
        body = request.SerializeToString()
        # A span id also appears as its children's parent id: every occurrence is rewritten.
        trace_offsets = [o for mark in trace_marks for o in _occurrences(body, mark)]
        span_offsets = [o for mark in set(span_marks) for o in _occurrences(body, mark)]
        assert len(trace_offsets) == sum(len(calls[(i) % len(calls)]) for i in range(turn - batch, turn))
        out.append((body, trace_offsets, span_offsets))
    return out


def _occurrences(body: bytes, mark: bytes) -> list[int]:
    found, start = [], 0
    while (at := body.find(mark, start)) >= 0:
        found.append(at)
        start = at + 1
    return found


def fresh(template: tuple[bytes, list[int], list[int]]) -> bytes:
    """The template with a fresh random trace id per call and span id per span (a span's children keep
    pointing at it: occurrences of one id share one new value)."""
    body, trace_offsets, span_offsets = template
    out = bytearray(body)
    old: dict[bytes, bytes] = {}
    for offsets, size in ((trace_offsets, 16), (span_offsets, 8)):
        fresh_bytes = os.urandom(size * len(offsets))
        for i, at in enumerate(offsets):
            key = body[at : at + size]
            new = old.get(key)
            if new is None:
                new = old[key] = fresh_bytes[i * size : (i + 1) * size]
            out[at : at + size] = new
    return bytes(out)


def generate(target: str, template_file: str, rate: float, seconds: float, batch: int) -> dict[str, Any]:
    """Send ``rate`` calls/s for ``seconds`` (open loop, at most IN_FLIGHT requests outstanding)."""
    import pickle

    import grpc

    with open(template_file, "rb") as f:
        temps = pickle.load(f)
    channel = grpc.insecure_channel(target)
    grpc.channel_ready_future(channel).result(timeout=30)
    export = channel.unary_unary(EXPORT)
    interval = batch / rate
    pending: list[Any] = []
    sent = refused = errors = 0
    codes: dict[str, int] = {}
    cpu0 = time.process_time()
    start = time.monotonic()
    deadline = start + seconds
    i = 0

    def settle(future: Any) -> None:
        nonlocal sent, refused, errors
        try:
            future.result()
            sent += batch
        except grpc.RpcError as e:
            code = e.code().name
            codes[code] = codes.get(code, 0) + 1
            if code in ("RESOURCE_EXHAUSTED", "UNAVAILABLE"):
                refused += batch
            else:
                errors += batch

    while True:
        due = start + i * interval
        now = time.monotonic()
        if due >= deadline:
            break
        if due > now:
            time.sleep(due - now)
        while len(pending) >= IN_FLIGHT:
            settle(pending.pop(0))
        pending.append(export.future(fresh(temps[i % len(temps)]), timeout=10))
        i += 1
    elapsed = time.monotonic() - start
    for future in pending:
        settle(future)
    channel.close()
    return {
        "asked": rate * seconds,
        "attempted": i * batch,
        "sent": sent,
        "refused": refused,
        "errors": errors,
        "codes": codes,
        "seconds": elapsed,
        "generator_cpu_s": time.process_time() - cpu0,
    }


# -- the sinks: stand where the samplers (router tier) or the trace store (sampler tier) are ----------------


def sink(ports_file: str, count: int) -> None:
    """``count`` OTLP/gRPC trace sinks answering at once (the Collector's own counters say what it sent);
    their ports written to ``ports_file``, their request counts printed as JSON on SIGTERM."""
    from concurrent import futures

    import grpc

    requests = [0] * count
    servers = []
    ports = []
    for n in range(count):

        def export(body: bytes, context: Any, n: int = n) -> bytes:
            requests[n] += 1  # one thread per sink would be enough: a lost increment is a count, not data
            return b""  # an empty ExportTraceServiceResponse

        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        handler = grpc.method_handlers_generic_handler(
            "opentelemetry.proto.collector.trace.v1.TraceService",
            {"Export": grpc.unary_unary_rpc_method_handler(export)},
        )
        server.add_generic_rpc_handlers((handler,))
        ports.append(server.add_insecure_port("127.0.0.1:0"))
        server.start()
        servers.append(server)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    Path(ports_file).write_text(json.dumps(ports))
    done.wait()
    for server in servers:
        server.stop(0)
    print(json.dumps({"requests": requests, "cpu_s": time.process_time()}), flush=True)


# -- the Collector and its own counters -------------------------------------------------------------------

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")


def scrape(port: int) -> dict[str, float]:
    """The Collector's internal metrics, summed over every label but ``sampled``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if not m or line.startswith("#"):
            continue
        name, labels, value = m.group(1), m.group(2) or "", float(m.group(3))
        keep = re.findall(r'\b(sampled)="([^"]*)"', labels)
        key = name + "".join(f"{{{k}={v}}}" for k, v in keep)
        out[key] = out.get(key, 0.0) + value
    return out


def proc_stats(pid: int) -> tuple[float, int]:
    """CPU seconds (user + system) and RSS bytes of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK
    rss = int(fields[21]) * PAGE
    return cpu, rss


def counter(metrics: dict[str, float], prefix: str) -> float:
    """Sum of the series whose name starts with ``prefix`` (the Collector adds ``_total`` and labels)."""
    return sum(v for k, v in metrics.items() if k.startswith(prefix))


@contextmanager
def collector(
    tier: str, shards: int, tmp: Path, downstream: list[int], overrides: tuple[str, ...] = ()
) -> Iterator[tuple[subprocess.Popen[bytes], int, int]]:
    """A Collector of ``tier`` pinned to COLLECTOR_CORE with GOMAXPROCS=1: (process, gRPC port, telemetry
    port). ``overrides``: more ``--config=yaml:...`` merged over the shipped file."""
    otelcol = subprocess.run(
        [str(ROOT / "scripts" / "stack" / "build.sh"), "otelcol", "--path"], capture_output=True, text=True, check=True
    ).stdout.strip()
    grpc_port, telemetry, health = free_port(), free_port(), free_port()
    env = {
        **os.environ,
        "GOMAXPROCS": "1",
        "FIRSTTOKEN_OTELCOL_GRPC_ENDPOINT": f"127.0.0.1:{grpc_port}",
        "FIRSTTOKEN_OTELCOL_HTTP_ENDPOINT": f"127.0.0.1:{free_port()}",
        "FIRSTTOKEN_OTELCOL_HEALTH_ENDPOINT": f"127.0.0.1:{health}",
        "FIRSTTOKEN_OTELCOL_TELEMETRY_HOST": "127.0.0.1",
        "FIRSTTOKEN_OTELCOL_TELEMETRY_PORT": str(telemetry),
        "FIRSTTOKEN_PROMETHEUS_OTLP_URL": f"http://127.0.0.1:{free_port()}/api/v1/otlp/v1/metrics",
    }
    args = [otelcol, f"--config={CONFIGS / f'{tier}.yaml'}"]
    if tier == "router":
        listed = ", ".join(f'"127.0.0.1:{p}"' for p in downstream)
        args.append(
            f"--config=yaml:exporters::load_balancing::resolver: {{dns: null, static: {{hostnames: [{listed}]}}}}"
        )
    else:
        env["FIRSTTOKEN_TEMPO_OTLP_ENDPOINT"] = f"127.0.0.1:{downstream[0]}"
        args.append(f"--config=yaml:processors::tail_sampling::num_shards: {shards}")
    args += [f"--config=yaml:{o}" for o in overrides]
    log = (tmp / f"otelcol-{tier}.log").open("wb")
    process = subprocess.Popen(["taskset", "-c", str(COLLECTOR_CORE), *args], env=env, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{health}/", timeout=2):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError((tmp / f"otelcol-{tier}.log").read_text()[-3000:]) from None
                time.sleep(0.2)
        yield process, grpc_port, telemetry
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


@contextmanager
def sinks(count: int, tmp: Path) -> Iterator[tuple[list[int], dict[str, Any]]]:
    """``count`` span-counting sinks in one process on GENERATOR_CORE: (ports, result filled at exit)."""
    ports_file = tmp / f"sink-{time.monotonic_ns()}.json"
    process = subprocess.Popen(
        ["taskset", "-c", str(GENERATOR_CORE), sys.executable, __file__, "_sink", str(ports_file), str(count)],
        stdout=subprocess.PIPE,
    )
    result: dict[str, Any] = {}
    try:
        deadline = time.monotonic() + 30
        while not ports_file.exists() or not ports_file.read_text():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the sink did not start")
            time.sleep(0.05)
        yield json.loads(ports_file.read_text()), result
    finally:
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=30)
        result.update(json.loads(out) if out.strip() else {})


# -- one point ------------------------------------------------------------------------------------------


def point(
    tier: str,
    shards: int,
    rate: float,
    window: float,
    warmup: float,
    batch: int,
    template_file: Path,
    tmp: Path,
    overrides: tuple[str, ...] = (),
) -> dict[str, Any]:
    """One fresh Collector at one rate: the generator runs warmup + window seconds; the Collector's
    CPU is read at the window's start and end, its counters at the end and once the sampler decided."""
    load = os.getloadavg()
    with (
        sinks(2 if tier == "router" else 1, tmp) as (ports, sunk),
        collector(tier, shards, tmp, ports, overrides) as (process, port, telemetry),
    ):
        gen = subprocess.Popen(
            [
                "taskset", "-c", str(GENERATOR_CORE), sys.executable, __file__, "_generate",
                f"127.0.0.1:{port}", str(template_file), str(rate), str(warmup + window), str(batch),
            ],
            stdout=subprocess.PIPE,
        )  # fmt: skip
        time.sleep(warmup)
        (cpu0, _), t0 = proc_stats(process.pid), time.monotonic()
        time.sleep(window)
        m1, (cpu1, rss), t1 = scrape(telemetry), proc_stats(process.pid), time.monotonic()
        out, _ = gen.communicate(timeout=120)
        sent = json.loads(out)
        held = counter(m1, "otelcol_processor_tail_sampling_sampling_traces_on_memory")
        # Let the sampler decide what it holds (5 s after the root) and the exporters send it.
        settle_by = time.monotonic() + 20
        m2 = m1
        while time.monotonic() < settle_by:
            time.sleep(1.0)
            m2 = scrape(telemetry)
            if tier == "router" or counter(m2, "otelcol_processor_tail_sampling_sampling_traces_on_memory") == 0:
                break
        time.sleep(1.0)  # the exporters' last batch (flushed within 200 ms) counted
        m2 = scrape(telemetry)
    calls = sent["sent"]
    result: dict[str, Any] = {
        "tier": tier,
        "shards": shards if tier == "sampler" else None,
        "rate": rate,
        "load_before": load,
        "load_after": os.getloadavg(),
        "generator": sent,
        "generator_cpu_share": sent["generator_cpu_s"] / sent["seconds"],
        "achieved_rate": calls / sent["seconds"],
        "sent_share": calls / sent["seconds"] / rate,
        "collector_cpu_share": (cpu1 - cpu0) / (t1 - t0),
        "rss_bytes": rss,
        "received_spans": counter(m2, "otelcol_receiver_accepted_spans"),
        "refused_spans": counter(m2, "otelcol_receiver_refused_spans"),
        "receiver_failed_spans": counter(m2, "otelcol_receiver_failed_spans"),
        "failed_spans": counter(m2, "otelcol_exporter_send_failed_spans"),
        "enqueue_failed_spans": counter(m2, "otelcol_exporter_enqueue_failed_spans"),
        "exported_spans": counter(m2, "otelcol_exporter_sent_spans"),
        "sink_requests": sunk.get("requests"),
        "sink_cpu_s": sunk.get("cpu_s"),
        "traces_held_in_window": held,
    }
    if tier == "sampler":
        result |= {
            "dropped_too_early": counter(m2, "otelcol_processor_tail_sampling_sampling_trace_dropped_too_early"),
            "sampled_traces": counter(m2, "otelcol_processor_tail_sampling_global_count_traces_sampled{sampled=true}"),
            "not_sampled_traces": counter(
                m2, "otelcol_processor_tail_sampling_global_count_traces_sampled{sampled=false}"
            ),
            "traces_held_at_end": counter(m2, "otelcol_processor_tail_sampling_sampling_traces_on_memory"),
            "new_traces": counter(m2, "otelcol_processor_tail_sampling_new_trace_id_received"),
            "decision_timer_latency_ms_mean": (
                counter(m2, "otelcol_processor_tail_sampling_sampling_decision_timer_latency_sum")
                / max(1.0, counter(m2, "otelcol_processor_tail_sampling_sampling_decision_timer_latency_count"))
            ),
        }
    result["sustained"] = sustained(result)
    return result


def sustained(r: dict[str, Any]) -> bool:
    clean = (
        r["refused_spans"] == 0
        and r["receiver_failed_spans"] == 0
        and r["failed_spans"] == 0
        and r["enqueue_failed_spans"] == 0
    )
    if r["tier"] == "sampler":
        decided = r["sampled_traces"] + r["not_sampled_traces"] + r["dropped_too_early"]
        clean = clean and r["dropped_too_early"] == 0 and decided == r["new_traces"] == r["generator"]["sent"]
    return bool(clean and r["sent_share"] >= SUSTAINED_SHARE and r["generator"]["errors"] == 0)


def generator_alone(rate: float, seconds: float, batch: int, template_file: Path, tmp: Path) -> dict[str, Any]:
    """The generator against a sink that answers at once: the rate it reaches and its CPU, to show that
    the Collector, not Python, sets the ceilings measured."""
    with sinks(1, tmp) as (ports, sunk):
        gen = subprocess.run(
            [
                "taskset", "-c", str(GENERATOR_CORE), sys.executable, __file__, "_generate",
                f"127.0.0.1:{ports[0]}", str(template_file), str(rate), str(seconds), str(batch),
            ],
            capture_output=True, text=True, check=True, timeout=seconds + 120,
        )  # fmt: skip
    sent: dict[str, Any] = json.loads(gen.stdout)
    return sent | {
        "rate": rate,
        "achieved_rate": sent["sent"] / sent["seconds"],
        "generator_cpu_share": sent["generator_cpu_s"] / sent["seconds"],
        "load": os.getloadavg(),
        "sink": sunk,
    }


# -- the app past the Collector's rate ----------------------------------------------------------------------


APP_MEMORY_LIMIT = (
    "processors::memory_limiter: {check_interval: 1s, limit_percentage: 0, spike_limit_percentage: 0, "
    "limit_mib: 150, spike_limit_mib: 30}"
)
"""For the app-side check: a sampler whose memory_limiter refuses past 150 MiB (the shipped 80 % of this
machine's memory would take minutes of traffic to reach), so that the app meets a refusing Collector."""


def app_side(rate: float, seconds: float, batch: int, template_file: Path, tmp: Path) -> dict[str, Any]:
    """A real instrumented call loop (openai SDK through firsttoken against the simulator, spans over
    OTLP/gRPC to a sampler) alone, then while the generator pushes ``rate`` calls/s into the same sampler
    with a low memory limit: call latency, what raised, what the exporter reported, what the Collector
    refused."""
    with (
        sinks(1, tmp) as (ports, _),
        collector("sampler", 1, tmp, ports, (APP_MEMORY_LIMIT,)) as (_, port, telemetry),
    ):
        out: dict[str, Any] = {"rate": rate, "memory_limit": APP_MEMORY_LIMIT}
        for label, load in (("alone", False), ("refusing", True)):
            gen = None
            if load:
                gen = subprocess.Popen(
                    [
                        "taskset", "-c", str(GENERATOR_CORE), sys.executable, __file__, "_generate",
                        f"127.0.0.1:{port}", str(template_file), str(rate), str(seconds + 8), str(batch),
                    ],
                    stdout=subprocess.PIPE,
                )  # fmt: skip
                time.sleep(6)  # past the memory limit: the Collector refuses from here on
                out["refused_before_app"] = counter(scrape(telemetry), "otelcol_receiver_refused_spans")
            app_run = subprocess.run(
                [sys.executable, __file__, "_app", f"127.0.0.1:{port}", str(seconds)],
                capture_output=True,
                text=True,
                timeout=seconds + 120,
            )
            if app_run.returncode:
                raise RuntimeError(app_run.stderr[-3000:])
            out[label] = json.loads(app_run.stdout)
            if gen is not None:
                gen_out, _ = gen.communicate(timeout=120)
                out["generator"] = json.loads(gen_out)
        out["refused_spans"] = counter(scrape(telemetry), "otelcol_receiver_refused_spans")
    return out


def app(target: str, seconds: float) -> dict[str, Any]:
    """Streamed calls through the real openai SDK, instrumented by firsttoken, its spans through the
    SDK's BatchSpanProcessor to an OTLP/gRPC exporter: call latency, what raised, and the spans the
    exporter reported exported or failed (counted around it) against the spans ended."""
    import openai
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    import firsttoken
    from firsttoken.sim import LatencyModel, Simulator

    counts = {"ended": 0, "exported": 0, "failed": 0}

    class Counted(SpanExporter):
        def __init__(self) -> None:
            self.inner = OTLPSpanExporter(endpoint=f"http://{target}", insecure=True, timeout=5)

        def export(self, spans: Any) -> SpanExportResult:
            result = self.inner.export(spans)
            counts["exported" if result is SpanExportResult.SUCCESS else "failed"] += len(spans)
            return result

        def shutdown(self) -> None:
            self.inner.shutdown()

    class Ended(SpanProcessor):
        def on_end(self, span: ReadableSpan) -> None:
            counts["ended"] += 1

    provider = TracerProvider()
    provider.add_span_processor(Ended())
    provider.add_span_processor(BatchSpanProcessor(Counted()))
    with Simulator(latency=LatencyModel(queue_ms=20, decode_tokens_per_s=500), seed=0) as sim:
        firsttoken.instrument(tracer_provider=provider, meter_provider=MeterProvider())  # spans only
        client = openai.OpenAI(base_url=sim.openai_base_url, api_key="sk-bench", max_retries=0)
        latencies = []
        raised = 0
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            t = time.perf_counter()
            try:
                stream = client.chat.completions.create(
                    model="bench", messages=[{"role": "user", "content": "hi"}], stream=True
                )
                for _ in stream:
                    pass
            except Exception:
                raised += 1
            latencies.append(time.perf_counter() - t)
        t = time.perf_counter()
        provider.shutdown()
        shutdown_s = time.perf_counter() - t
        firsttoken.uninstrument()
    latencies.sort()
    return counts | {
        "calls": len(latencies),
        "raised": raised,
        "p50_ms": 1000 * latencies[len(latencies) // 2],
        "p99_ms": 1000 * latencies[int(len(latencies) * 0.99)],
        "max_ms": 1000 * latencies[-1],
        "shutdown_s": shutdown_s,
        "lost": counts["ended"] - counts["exported"],
    }


# -- main -----------------------------------------------------------------------------------------------


def hardware() -> dict[str, Any]:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return {"cpu": model, "cores": os.cpu_count(), "mem_bytes": os.sysconf("SC_PHYS_PAGES") * PAGE}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tiers", default="router,sampler")
    p.add_argument("--rates", default="1000,2000,4000,8000,16000", help="calls/s")
    p.add_argument("--shards", default=f"1,{os.cpu_count()}", help="sampler num_shards values")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--window", type=float, default=12.0, help="measured seconds per point")
    p.add_argument(
        "--warmup",
        type=float,
        default=7.0,
        help="seconds of traffic before the window; past the sampler's 5 s wait after a root, so that its "
        "decisions run through the whole window (default: 7)",
    )
    p.add_argument("--batch", type=int, default=50, help="calls per export request")
    p.add_argument("--actions", type=int, default=60, help="demo user actions recorded")
    p.add_argument("--app", type=float, default=0, help="also run the app-side check at this calls/s")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    import pickle

    OUT.mkdir(exist_ok=True)
    out = args.out or OUT / f"collector-sizing-{time.strftime('%Y%m%d-%H%M%S')}.json"
    with tempfile.TemporaryDirectory(prefix="firsttoken-sizing-") as tmpdir:
        tmp = Path(tmpdir)
        recording = record(args.actions)
        shape = describe(recording)
        print(json.dumps(shape), flush=True)
        template_file = tmp / "templates.pickle"
        with template_file.open("wb") as f:
            pickle.dump(templates(recording, args.batch, 16), f)
        results: dict[str, Any] = {"hardware": hardware(), "shape": shape, "args": vars(args) | {"out": str(out)}}
        points: list[dict[str, Any]] = []
        results["points"] = points
        rates = [float(r) for r in args.rates.split(",")]
        results["generator_alone"] = [
            generator_alone(max(rates), args.window, args.batch, template_file, tmp) for _ in range(args.reps)
        ]
        print(json.dumps(results["generator_alone"]), flush=True)
        for tier in filter(None, args.tiers.split(",")):
            for shards in [int(s) for s in args.shards.split(",")] if tier == "sampler" else [1]:
                for rate in rates:
                    reps = [
                        point(tier, shards, rate, args.window, args.warmup, args.batch, template_file, tmp)
                        for _ in range(args.reps)
                    ]
                    points.extend(reps)
                    for r in reps:
                        print(summary(r), flush=True)
                    out.write_text(json.dumps(results, indent=1))
                    if not any(r["sustained"] for r in reps):
                        break  # past this tier's ceiling: higher rates only refuse more
        if args.app:
            results["app_side"] = app_side(args.app, 15, args.batch, template_file, tmp)
            print(json.dumps(results["app_side"]), flush=True)
        out.write_text(json.dumps(results, indent=1))
    print(f"wrote {out}")
    return 0


def summary(r: dict[str, Any]) -> str:
    shards = f" shards={r['shards']}" if r["shards"] else ""
    return (
        f"{r['tier']}{shards} rate={r['rate']:.0f} sent={r['sent_share']:.1%} cpu={r['collector_cpu_share']:.0%} "
        f"rss={r['rss_bytes'] / 2**20:.0f}MiB refused={r['refused_spans']:.0f} failed={r['failed_spans']:.0f} "
        f"early={r.get('dropped_too_early', 0):.0f} held={r['traces_held_in_window']:.0f} "
        f"gen_cpu={r['generator_cpu_share']:.0%} load={r['load_before'][0]:.2f} sustained={r['sustained']}"
    )


def slope(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of ys over xs (None with fewer than two distinct xs)."""
    if len(set(xs)) < 2:
        return None
    mx, my = statistics.mean(xs), statistics.mean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def cpu_per_1k(r: dict[str, Any]) -> float:
    """The Collector's CPU-seconds per 1,000 calls it was actually sent (not asked for)."""
    return float(r["collector_cpu_share"]) / (r["achieved_rate"] / 1000)


def table(results: dict[str, Any]) -> str:
    """The Markdown tables of docs/scale.md from a results JSON: per tier and rate the median of the
    repetitions, then per tier the CPU cost per 1k calls/s, the core's capacity it implies and the RSS
    per trace held."""
    rows = [
        "| tier | calls/s asked | sustained (of reps) | sent/asked (median) | Collector CPU, share of its core "
        "| CPU-s per 1k calls | RSS MiB | traces held | load avg (1 min) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    groups: dict[tuple[str, Any], dict[float, list[dict[str, Any]]]] = {}
    for r in results["points"]:
        groups.setdefault((r["tier"], r["shards"]), {}).setdefault(r["rate"], []).append(r)
    costs = [
        "| tier | highest rate sustained (calls/s) | CPU-s per 1k calls there (median) "
        "| calls/s per full core (1000 / that) | RSS per trace held (slope over the rates sustained) |",
        "|---|---:|---:|---:|---:|",
    ]
    for (tier, shards), by_rate in groups.items():
        name = f"{tier} (num_shards {shards})" if shards else tier
        for rate, reps in sorted(by_rate.items()):
            med = statistics.median
            rows.append(
                f"| {name} | {rate:,.0f} | {sum(r['sustained'] for r in reps)}/{len(reps)} "
                f"| {med(r['sent_share'] for r in reps):.0%} | {med(r['collector_cpu_share'] for r in reps):.0%} "
                f"| {med(cpu_per_1k(r) for r in reps):.3f} | {med(r['rss_bytes'] for r in reps) / 2**20:.0f} "
                f"| {med(r['traces_held_in_window'] for r in reps):,.0f} "
                f"| {min(r['load_before'][0] for r in reps):.1f}-{max(r['load_before'][0] for r in reps):.1f} |"
            )
        top = max((rate for rate, reps in by_rate.items() if any(r["sustained"] for r in reps)), default=None)
        if top is None:
            continue
        cost = statistics.median(cpu_per_1k(r) for r in by_rate[top] if r["sustained"])
        med = statistics.median
        held = sorted(
            (med(r["traces_held_in_window"] for r in reps), med(r["rss_bytes"] for r in reps))
            for reps in by_rate.values()
            if all(r["sustained"] for r in reps)
        )
        per_trace = slope([h for h, _ in held], [m for _, m in held]) if held and held[-1][0] else None
        costs.append(
            f"| {name} | {top:,.0f} | {cost:.3f} | {1000 / cost:,.0f} | "
            + (f"{per_trace / 1024:.1f} KiB |" if per_trace else "- |")
        )
    return "\n".join(rows) + "\n\n" + "\n".join(costs) + "\n"


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_generate":
        target, template_file, rate, seconds, batch = sys.argv[2:7]
        print(json.dumps(generate(target, template_file, float(rate), float(seconds), int(batch))))
    elif len(sys.argv) > 1 and sys.argv[1] == "_sink":
        sink(sys.argv[2], int(sys.argv[3]))
    elif len(sys.argv) > 1 and sys.argv[1] == "_table":
        print(table(json.loads(Path(sys.argv[2]).read_text())))
    elif len(sys.argv) > 1 and sys.argv[1] == "_app":
        print(json.dumps(app(sys.argv[2], float(sys.argv[3]))))
    else:
        sys.exit(main())
