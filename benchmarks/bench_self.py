"""Does ``firsttoken bench``'s own work shift what it measures?

A 1,000-request run at concurrency 32 against the simulator in its own process, compared with a
bare driver doing exactly the same requests on the same kind of event loop (the same SDK, the same
prompts, firsttoken instrumenting into an in-memory span exporter) but none of bench's accounting:
no action per request, no span collector, no per-request sample, no progress bar. Both read TTFT
from firsttoken's spans, so the difference of their TTFT p50 is what bench's own CPU adds. Runs
alternate (bench, driver, bench, driver, ...) so machine load drifts over both alike; a
concurrency-1 bench run gives the uncontended TTFT for reference.

    python benchmarks/bench_self.py [--requests 1000] [--concurrency 32] [--rounds 3]

Method and figures: docs/bench.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

SIM_ARGS = ("--queue-ms", "300", "--prefill-ms-per-1k", "100", "--decode-tps", "100", "--jitter", "0")
SIM_ARGS += ("--output-tokens", "8")
WORKLOAD = ("--model", "sim", "--input-tokens", "200", "--max-tokens", "8", "--warmup", "0", "--seed", "0")


def start_sim() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "firsttoken.cli", "sim", "--port", "0", *SIM_ARGS],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if "OPENAI_BASE_URL=" in line:
            return proc, line.split("OPENAI_BASE_URL=", 1)[1].strip()
    raise RuntimeError("the simulator did not start")


def child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_bench(base_url: str, requests: int, concurrency: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "run.json")
        cpu, wall = child_cpu(), time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "firsttoken.cli", "bench", "--base-url", base_url, *WORKLOAD,
             "--requests", str(requests), "--concurrency", str(concurrency), "--json", out, "--no-progress"],
            check=True, stdout=subprocess.DEVNULL, env={**os.environ, "OPENAI_API_KEY": "sk-bench-self"},
        )  # fmt: skip
        cpu, wall = child_cpu() - cpu, time.perf_counter() - wall
        with open(out) as f:
            doc = json.load(f)
    q = doc["summaries"]["sim"]["quantiles"]["ttft_s"]
    ok = doc["summaries"]["sim"]["ok"]
    return {"ttft_p50_ms": q["p50"] * 1000, "ok": ok, "cpu_ms_per_request": cpu * 1000 / requests, "wall_s": wall}


def run_driver(base_url: str, requests: int, concurrency: int) -> dict[str, float]:
    cpu, wall = child_cpu(), time.perf_counter()
    proc = subprocess.run(
        [sys.executable, __file__, "--driver", base_url,
         "--requests", str(requests), "--concurrency", str(concurrency)],
        check=True, capture_output=True, text=True, env={**os.environ, "OPENAI_API_KEY": "sk-bench-self"},
    )  # fmt: skip
    cpu, wall = child_cpu() - cpu, time.perf_counter() - wall
    out: dict[str, float] = json.loads(proc.stdout)
    out.update(cpu_ms_per_request=cpu * 1000 / requests, wall_s=wall)
    return out


def driver(base_url: str, requests: int, concurrency: int) -> None:
    """The bare driver: the same requests as bench, with nothing but firsttoken recording them."""
    import openai
    from opentelemetry.metrics import NoOpMeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import firsttoken
    from firsttoken import semconv as sc
    from firsttoken.charts import percentile
    from firsttoken.cli.bench import build_parser, build_prompts
    from firsttoken.cli.bench_run import Target, call_factory, consume

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    firsttoken.instrument(tracer_provider=provider, meter_provider=NoOpMeterProvider())
    args = build_parser().parse_args([*WORKLOAD, "--requests", str(requests)])
    prompts = build_prompts(args, requests)
    target = Target("sim", "openai", "sim", base_url)

    async def main() -> None:
        client = openai.AsyncOpenAI(base_url=base_url, api_key="sk-bench-self")
        todo = iter(range(requests))

        async def worker() -> None:
            for n in todo:
                call = call_factory(client, target, prompts[n % len(prompts)], stream=True, max_tokens=8)
                await consume(await call())

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        await client.close()

    asyncio.run(main())
    ttft: list[float] = []
    for s in spans.get_finished_spans():
        v = (s.attributes or {}).get(sc.FT_TIME_TO_FIRST_TOKEN)
        if isinstance(v, float) and (s.attributes or {}).get(sc.FT_END_REASON) == sc.END_COMPLETED:
            ttft.append(v)
    p50 = percentile(ttft, 50)
    json.dump({"ttft_p50_ms": (p50 or 0) * 1000, "ok": len(ttft)}, sys.stdout)


def accounting(base_url: str, requests: int, concurrency: int) -> dict[str, float]:
    """bench in this process, with a stopwatch around each piece of its own per-request work."""
    import contextlib
    import functools
    import io

    import firsttoken
    import firsttoken.cli.bench as bench_mod
    import firsttoken.cli.bench_run as run_mod

    blocks: list[int] = []
    by_piece: dict[str, int] = {}

    def timed(fn: Any) -> Any:
        # CPU time of this thread (the event loop's): a busy machine's preemptions do not count.
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.thread_time_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                spent = time.thread_time_ns() - start
                blocks.append(spent)
                by_piece[fn.__qualname__] = by_piece.get(fn.__qualname__, 0) + spent

        return wrapper

    # What bench adds to each request, next to the SDK call and firsttoken's own recording: the
    # action around it (span, context), the span processor, reading the spans back into a sample,
    # and the progress bar.
    run_mod.fill = timed(run_mod.fill)
    run_mod.Collector.on_end = timed(run_mod.Collector.on_end)  # type: ignore[method-assign]
    run_mod.Collector.take = timed(run_mod.Collector.take)  # type: ignore[method-assign]
    bench_mod.Progress.__call__ = timed(bench_mod.Progress.__call__)  # type: ignore[method-assign]
    firsttoken.action.__enter__ = timed(firsttoken.action.__enter__)  # type: ignore[method-assign]
    firsttoken.action.__exit__ = timed(firsttoken.action.__exit__)  # type: ignore[method-assign]
    os.environ["OPENAI_API_KEY"] = "sk-bench-self"
    wall = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        bench_mod.main(
            ["--base-url", base_url, *WORKLOAD, "--requests", str(requests), "--concurrency", str(concurrency),
             "--progress"]
        )  # fmt: skip
    wall = time.perf_counter() - wall
    total = sum(blocks)
    return {
        **{f"us_per_request {k}": v / requests / 1000 for k, v in by_piece.items()},
        "us_per_request": total / requests / 1000,
        "longest_block_us": max(blocks) / 1000,
        "p99_block_us": sorted(blocks)[int(len(blocks) * 0.99)] / 1000,
        "loop_share": total / 1e9 / wall,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--driver", metavar="BASE_URL", help=argparse.SUPPRESS)
    p.add_argument("--accounting", metavar="BASE_URL", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.driver:
        driver(args.driver, args.requests, args.concurrency)
        return
    if args.accounting:
        json.dump(accounting(args.accounting, args.requests, args.concurrency), sys.stdout)
        return
    sim, base_url = start_sim()
    try:
        proc = subprocess.run(
            [sys.executable, __file__, "--accounting", base_url,
             "--requests", str(args.requests), "--concurrency", str(args.concurrency)],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        acc = json.loads(proc.stdout)
        print(
            f"bench's own work per request: {acc['us_per_request']:.0f} us in all (action, span processor, "
            f"reading the spans back, progress bar); longest single piece {acc['longest_block_us']:.0f} us, "
            f"p99 piece {acc['p99_block_us']:.0f} us; {acc['loop_share']:.1%} of the run's wall time",
            flush=True,
        )
        pieces = {k.split(" ", 1)[1]: v for k, v in acc.items() if k.startswith("us_per_request ")}
        print("  by piece, us per request: " + ", ".join(f"{k} {v:.0f}" for k, v in pieces.items()), flush=True)
        reference = run_bench(base_url, 100, 1)
        ttft = reference["ttft_p50_ms"]
        print(f"bench, concurrency 1, 100 requests: TTFT p50 {ttft:.2f} ms (uncontended)", flush=True)
        rows: list[tuple[str, dict[str, Any]]] = []
        for n in range(args.rounds):
            for name, run in (("bench", run_bench), ("driver", run_driver)):
                r = run(base_url, args.requests, args.concurrency)
                rows.append((name, r))
                print(
                    f"round {n + 1} {name:<6}: {int(r['ok'])} ok, TTFT p50 {r['ttft_p50_ms']:.2f} ms, "
                    f"client CPU {r['cpu_ms_per_request']:.2f} ms/request, {r['wall_s']:.1f} s",
                    flush=True,
                )
        diffs = [b["ttft_p50_ms"] - d["ttft_p50_ms"] for (_, b), (_, d) in zip(rows[::2], rows[1::2], strict=True)]
        print(
            f"bench - driver TTFT p50, per round: {', '.join(f'{d:+.2f}' for d in diffs)} ms; "
            f"median {statistics.median(diffs):+.2f} ms"
        )
        cpu = {
            name: statistics.median(r["cpu_ms_per_request"] for n, r in rows if n == name)
            for name in ("bench", "driver")
        }
        print(f"client CPU per request (median): bench {cpu['bench']:.2f} ms, driver {cpu['driver']:.2f} ms")
    finally:
        sim.terminate()
        sim.wait()


if __name__ == "__main__":
    main()
