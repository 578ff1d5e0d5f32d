"""``firsttoken view``'s budgets: ingest rate and the page's answer time.

1. Ingest: OTLP/HTTP protobuf requests as firsttoken's exporter sends them (a batch of call spans, each
   with its phase spans), posted over loopback by one client thread to the viewer running in this
   process; calls per second over the whole run, and that every call was stored. Budget: >= 200 calls/s.
2. The page: ``/api/overview`` (what the page polls every 2 s) and ``/api/call`` with 100,000 calls
   stored, the worst window (all of them in it). Budget: <= 300 ms.

    python benchmarks/bench_view.py [--calls 100000] [--ingest-calls 3000]

Prints the load average beside the figures: the machine is shared.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from firsttoken import semconv as sc
from firsttoken import view

PHASES = ("prepare", "pool_wait", "upload", "server_wait", "wait_first_token", "decode", "finish")
MODELS = ("gpt-4o", "gpt-4o-mini", "o3-mini", "claude-sonnet-4-6", "claude-haiku-4-5")


def _kv(key: str, value: object) -> KeyValue:
    if isinstance(value, bool):
        v = AnyValue(bool_value=value)
    elif isinstance(value, int):
        v = AnyValue(int_value=value)
    elif isinstance(value, float):
        v = AnyValue(double_value=value)
    else:
        v = AnyValue(string_value=str(value))
    return KeyValue(key=key, value=v)


def batch(rng: random.Random, first: int, n: int, start_ns: int) -> bytes:
    """One export request: n calls, each a CLIENT call span and its seven phase spans."""
    request = ExportTraceServiceRequest()
    rs = request.resource_spans.add()
    rs.resource.attributes.append(_kv("service.name", "bench-app"))
    spans = rs.scope_spans.add().spans
    for i in range(first, first + n):
        trace_id = rng.getrandbits(128).to_bytes(16, "big")
        span_id = (i + 1).to_bytes(8, "big")
        begin = start_ns + i * 1_000_000
        e2e = rng.uniform(0.2, 2.0)
        ttft = e2e * rng.uniform(0.1, 0.5)
        call = spans.add(trace_id=trace_id, span_id=span_id, name="chat gpt-4o", kind=3)
        call.start_time_unix_nano = begin
        call.end_time_unix_nano = begin + int(e2e * 1e9)
        model = MODELS[i % len(MODELS)]
        for key, value in (
            (sc.GEN_AI_OPERATION_NAME, "chat"),
            (sc.GEN_AI_PROVIDER_NAME, "anthropic" if model.startswith("claude") else "openai"),
            (sc.GEN_AI_REQUEST_MODEL, model),
            (sc.FT_TRAFFIC_CLASS, "interactive"),
            (sc.FT_TIME_TO_FIRST_TOKEN, ttft),
            (sc.FT_TIME_PER_OUTPUT_TOKEN, 0.01),
            (sc.GEN_AI_USAGE_INPUT_TOKENS, 1200),
            (sc.GEN_AI_USAGE_OUTPUT_TOKENS, 150),
            (sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, 1024),
            (sc.FT_END_REASON, "completed"),
        ):
            call.attributes.append(_kv(key, value))
        at = begin
        for j, phase in enumerate(PHASES):
            d = int(e2e * 1e9 / len(PHASES))
            p = spans.add(
                trace_id=trace_id, span_id=(10**12 + i * 8 + j).to_bytes(8, "big"), name=f"firsttoken {phase}"
            )
            p.parent_span_id = span_id
            p.start_time_unix_nano, p.end_time_unix_nano = at, at + d
            p.attributes.append(_kv(sc.FT_PHASE, phase))
            at += d
    return request.SerializeToString()


def post(url: str, body: bytes) -> None:
    request = urllib.request.Request(
        url + "/v1/traces", data=body, method="POST", headers={"Content-Type": "application/x-protobuf"}
    )
    with urllib.request.urlopen(request, timeout=60) as r:
        assert r.status == 200


def serve(db: str) -> tuple[view.ViewServer, threading.Thread]:
    server = view.make_server(port=0, db=db, max_calls=10**7)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    return server, thread


def ingest(total: int, per_request: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server, _ = serve(str(Path(tmp) / "ingest.sqlite3"))
        rng = random.Random(1)
        now = time.time_ns()
        bodies = [batch(rng, i, min(per_request, total - i), now) for i in range(0, total, per_request)]
        cpu0, t0 = time.process_time(), time.perf_counter()
        for body in bodies:
            post(server.url, body)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        stored = server.store.count()
        server.shutdown()
        server.server_close()
        server.store.close()
    print(
        f"ingest: {total} calls ({total * (1 + len(PHASES))} spans) in {len(bodies)} requests of {per_request}: "
        f"{wall:.2f} s, {total / wall:.0f} calls/s ({total / cpu:.0f} per CPU-second of this process, client "
        f"included); stored {stored} of {total}" + ("" if stored == total else "  LOST CALLS")
    )


def page(calls: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server, _ = serve(str(Path(tmp) / "page.sqlite3"))
        rng = random.Random(2)
        now = time.time_ns() - calls * 1_000_000  # all of them inside the 15-minute window
        for first in range(0, calls, 2000):
            post(server.url, batch(rng, first, min(2000, calls - first), now))
        assert server.store.count() == calls
        for path in (
            "/api/overview?window=900&group=model&metric=e2e",
            "/api/overview?window=900&group=traffic_class&metric=ttft",
            f"/api/call?span_id={(calls // 2 + 1):016x}",
            "/",
        ):
            times = []
            for _ in range(7):
                t0 = time.perf_counter()
                with urllib.request.urlopen(server.url + path, timeout=60) as r:
                    r.read()
                times.append(time.perf_counter() - t0)
            median, most = statistics.median(times) * 1000, max(times) * 1000
            print(f"page: {path:60} {calls} calls stored: median {median:.0f} ms, max {most:.0f} ms (7 requests)")
        server.shutdown()
        server.server_close()
        server.store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=100_000, help="calls stored for the page's answer time")
    parser.add_argument("--ingest-calls", type=int, default=3000)
    parser.add_argument("--per-request", type=int, default=64, help="calls per export request (ingest)")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    ingest(args.ingest_calls, args.per_request)
    page(args.calls)


if __name__ == "__main__":
    main()
