"""How long the shipped rule groups take to evaluate in a real Prometheus, at the demo's size and at
100 models x 4 traffic classes.

    python benchmarks/slo_rules.py [--models 6 100] [--minutes 4] [--prometheus PATH]

A real Prometheus (the stack's build when present, else Debian's) scrapes synthetic firsttoken
histograms every 15 s (time to first token and end-to-end with every bucket bound of
firsttoken.semconv, failed calls apart) for N models x 4 classes (interactive, async, batch, none),
counts growing each scrape, and evaluates every file of prometheus/rules/ every 15 s, as shipped.
After the run, each group's evaluation time is read from /api/v1/rules, sampled every 15 s over
the last half of the run; the median and the maximum are printed.

What a short run does not show: the 1 d, 3 d and 28 d windows read one recorded point per hour or
day (subqueries of 24, 72 and 28 points), whatever the history, so their cost is bounded by the
series count, not by days of samples; in a run of minutes those points are mostly absent.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

from firsttoken import __version__
from firsttoken import semconv as sc

ROOT = Path(__file__).resolve().parents[1]
BUILT = Path.home() / ".cache" / "firsttoken" / "stack" / "prometheus-v3.14.0" / "bin" / "prometheus"
CLASSES = ("interactive", "async", "batch", None)
SCOPE = f'otel_scope_name="{sc.SCOPE_NAME}",otel_scope_version="{__version__}"'


def le(bound: float) -> str:
    return repr(float(bound)).removesuffix(".0")


class Series:
    """Cumulative counts of every model and class, grown by one scrape's worth of calls each time."""

    def __init__(self, models: int, seed: int = 1) -> None:
        self.rng = random.Random(seed)
        self.keys = [(f"model-{i:03d}", c) for i in range(models) for c in CLASSES]
        self.ttft = {k: [0] * (len(sc.TTFT_BUCKETS) + 1) for k in self.keys}
        self.ok = {k: [0] * (len(sc.DURATION_BUCKETS) + 1) for k in self.keys}
        self.failed = dict.fromkeys(self.keys, 0)
        self.lock = threading.Lock()

    def grow(self) -> None:
        with self.lock:
            for key in self.keys:
                for _ in range(self.rng.randint(5, 15)):
                    if self.rng.random() < 0.01:
                        self.failed[key] += 1
                        continue
                    first = 0.5 * self.rng.lognormvariate(0, 0.4)
                    self.ttft[key][next((i for i, b in enumerate(sc.TTFT_BUCKETS) if first <= b), -1)] += 1
                    total = first + 3 * self.rng.lognormvariate(0, 0.5)
                    self.ok[key][next((i for i, b in enumerate(sc.DURATION_BUCKETS) if total <= b), -1)] += 1

    def render(self) -> str:
        out = []
        with self.lock:
            for (model, traffic_class), counts in self.ttft.items():
                # firsttoken's scope, as prometheus.yml's promote_scope_metadata makes it labels: the rules select it.
                labels = f'{SCOPE},gen_ai_provider_name="openai",gen_ai_request_model="{model}"'
                if traffic_class:
                    labels += f',firsttoken_traffic_class="{traffic_class}"'
                for name, buckets, bounds in (
                    ("firsttoken_client_time_to_first_token_seconds", counts, sc.TTFT_BUCKETS),
                    ("gen_ai_client_operation_duration_seconds", self.ok[(model, traffic_class)], sc.DURATION_BUCKETS),
                ):
                    running = 0
                    for bound, count in zip([*bounds, None], buckets, strict=True):
                        running += count
                        bucket = "+Inf" if bound is None else le(bound)
                        out.append(f'{name}_bucket{{{labels},le="{bucket}"}} {running}')
                    out.append(f"{name}_count{{{labels}}} {running}")
                failed = self.failed[(model, traffic_class)]
                errors = f'{labels},error_type="APIConnectionError"'
                out.append(f"gen_ai_client_operation_duration_seconds_count{{{errors}}} {failed}")
        return "\n".join(out) + "\n"


def serve(series: Series) -> tuple[ThreadingHTTPServer, str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            series.grow()
            body = series.render().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"127.0.0.1:{server.server_address[1]}"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure(binary: str, models: int, minutes: float) -> dict[str, tuple[float, float, int]]:
    """{group: (median s, max s, rules)} over the last half of a run of ``minutes``."""
    series = Series(models)
    server, target = serve(series)
    with tempfile.TemporaryDirectory(prefix="firsttoken-bench-") as tmp:
        config = {
            "global": {"scrape_interval": "15s", "evaluation_interval": "15s"},
            "rule_files": [str(p) for p in sorted((ROOT / "prometheus" / "rules").glob("*.yml"))],
            "scrape_configs": [{"job_name": "firsttoken", "static_configs": [{"targets": [target]}]}],
        }
        (Path(tmp) / "prometheus.yml").write_text(yaml.safe_dump(config))
        port = free_port()
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={tmp}/prometheus.yml",
                f"--storage.tsdb.path={tmp}/data",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        samples: dict[str, list[float]] = {}
        rules: dict[str, int] = {}
        try:
            start = time.monotonic()
            while time.monotonic() - start < minutes * 60:
                time.sleep(15)
                if time.monotonic() - start < minutes * 30:
                    continue
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/rules", timeout=10) as resp:
                    groups = json.loads(resp.read())["data"]["groups"]
                for group in groups:
                    samples.setdefault(group["name"], []).append(float(group["evaluationTime"]))
                    rules[group["name"]] = len(group["rules"])
            # Timed on data, not on selectors that match nothing (the rules select firsttoken's scope).
            query = urllib.parse.urlencode({"query": "count(llm:slo_calls:rate5m)"})
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query?{query}", timeout=10) as resp:
                if not json.loads(resp.read())["data"]["result"]:
                    raise RuntimeError("the rules recorded nothing from the synthetic series")
        finally:
            process.terminate()
            process.wait(timeout=30)
            server.shutdown()
    return {name: (statistics.median(values), max(values), rules[name]) for name, values in samples.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, nargs="+", default=[6, 100])
    parser.add_argument("--minutes", type=float, default=4)
    parser.add_argument("--prometheus", default=str(BUILT) if BUILT.exists() else shutil.which("prometheus"))
    args = parser.parse_args(argv)
    if not args.prometheus:
        parser.error("no Prometheus: build the stack (scripts/stack/build.sh) or apt-get install prometheus")
    version = subprocess.run([args.prometheus, "--version"], capture_output=True, text=True, check=False)
    print(f"# {version.stdout.splitlines()[0] if version.stdout else args.prometheus}")
    for models in args.models:
        result = measure(args.prometheus, models, args.minutes)
        print(f"## {models} models x {len(CLASSES)} classes ({models * len(CLASSES)} series sets)")
        for name, (median, worst, count) in sorted(result.items()):
            print(f"{name:28s} {count:3d} rules  median {median * 1000:8.2f} ms  max {worst * 1000:8.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
