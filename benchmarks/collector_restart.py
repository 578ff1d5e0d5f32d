"""What an app loses when the real Collector is killed and restarted under it.

The Collector that scripts/stack/build.sh built runs collector-config/otelcol.yaml on loopback (its
exporters point at ports nothing listens on: only what reaches the Collector is in question here). An
app with ``firsttoken.instrument()`` alone makes CALLS streamed calls against the simulator; after a
third of them the Collector is killed with SIGKILL and started again DOWN seconds later. The app then
prints what its own exporter delivered, and what it dropped, by firsttoken's tally, and the calls per
second before, during and after the outage.

    python benchmarks/collector_restart.py [--calls 2000] [--down 5] [--src PATH]

``--src`` runs the app on another checkout's ``src`` (the code before a change) for a side-by-side.
"""

from __future__ import annotations

import argparse
import glob
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

APP = """
import json, os, sys, time
import openai
import firsttoken
firsttoken.instrument()
from firsttoken import _otlp
from firsttoken.sim import LatencyModel, Simulator

calls = int(sys.argv[1])
stamps = []
with Simulator(latency=LatencyModel(queue_ms=2, decode_tokens_per_s=1000, jitter=0, output_tokens=8)) as sim:
    client = openai.OpenAI(base_url=sim.openai_base_url, api_key="sk-bench", max_retries=0)
    for i in range(calls):
        if i == calls // 3:
            print("KILL", flush=True)
        for _ in client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}],
                                                 stream=True, stream_options={"include_usage": True}):
            pass
        stamps.append(time.monotonic())
        time.sleep(0.005)
# The tally firsttoken's exporter counts into (found the same way in checkouts before own_export()).
from opentelemetry import trace
provider = trace.get_tracer_provider()
exporter = provider._active_span_processor._span_processors[0].span_exporter
cells = [c.cell_contents for c in type(exporter).export.__closure__]
tally = next(c for c in cells if isinstance(c, _otlp.ExportTally))
provider.shutdown()
print("RESULT", json.dumps({"exported": tally.exported, "failed": tally.failed, "stamps": stamps}), flush=True)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _otelcol() -> str:
    found = sorted(glob.glob(os.path.expanduser("~/.cache/firsttoken/stack/otelcol-*/bin/otelcol")))
    if not found:
        sys.exit("no Collector built: run scripts/stack/build.sh first")
    return found[-1]


def _start(binary: str, env: dict[str, str], health: int, log: Path) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [binary, f"--config={ROOT / 'collector-config' / 'otelcol.yaml'}"],
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{health}/", timeout=1):
                return process
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                sys.exit(f"the Collector did not start: see {log}")
            time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--down", type=float, default=5.0, help="seconds the Collector stays down")
    parser.add_argument("--src", default=str(ROOT / "src"), help="the firsttoken source the app runs on")
    args = parser.parse_args()

    binary = _otelcol()
    http, grpc, health, telemetry = (_free_port() for _ in range(4))
    col_env = os.environ | {
        "FIRSTTOKEN_OTELCOL_GRPC_ENDPOINT": f"127.0.0.1:{grpc}",
        "FIRSTTOKEN_OTELCOL_HTTP_ENDPOINT": f"127.0.0.1:{http}",
        "FIRSTTOKEN_OTELCOL_HEALTH_ENDPOINT": f"127.0.0.1:{health}",
        "FIRSTTOKEN_OTELCOL_TELEMETRY_HOST": "127.0.0.1",
        "FIRSTTOKEN_OTELCOL_TELEMETRY_PORT": str(telemetry),
        "FIRSTTOKEN_TEMPO_OTLP_ENDPOINT": f"127.0.0.1:{_free_port()}",
        "FIRSTTOKEN_PROMETHEUS_OTLP_URL": f"http://127.0.0.1:{_free_port()}/api/v1/otlp/v1/metrics",
    }
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "otelcol.log"
        collector = _start(binary, col_env, health, log)
        script = Path(tmp) / "app.py"
        script.write_text(textwrap.dedent(APP))
        app_env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FIRSTTOKEN_"))}
        app_env |= {
            "PYTHONPATH": args.src,
            "OTEL_SERVICE_NAME": "collector-restart",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{http}",
        }
        app = subprocess.Popen(
            [sys.executable, str(script), str(args.calls)], env=app_env, stdout=subprocess.PIPE, text=True
        )
        assert app.stdout is not None
        result = ""
        killed_at = restarted_at = 0.0
        for line in app.stdout:
            if line.startswith("KILL"):
                collector.send_signal(signal.SIGKILL)
                collector.wait()
                killed_at = time.monotonic()
                time.sleep(args.down)
                collector = _start(binary, col_env, health, log)
                restarted_at = time.monotonic()
            elif line.startswith("RESULT"):
                result = line.split(" ", 1)[1]
        app.wait()
        collector.send_signal(signal.SIGTERM)
        collector.wait(30)
    import json

    data = json.loads(result)
    stamps = data["stamps"]

    def rate(lo: float, hi: float) -> float:
        n = sum(1 for t in stamps if lo <= t < hi)
        return n / (hi - lo) if hi > lo else 0.0

    print(f"source: {args.src}")
    print(f"{args.calls} streamed calls; Collector SIGKILLed, started again {args.down:g} s later")
    print(f"spans delivered {data['exported']['spans']}, dropped {data['failed']['spans']} (by the app's tally)")
    print(
        f"calls/s before {rate(stamps[0], killed_at):.0f}, while down {rate(killed_at, restarted_at):.0f}, "
        f"after {rate(restarted_at, stamps[-1]):.0f}"
    )


if __name__ == "__main__":
    main()
