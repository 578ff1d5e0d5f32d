"""What ``instrument()`` done first costs the import of a large package tree, and LiteLLM's first call.

Issue 29 found LiteLLM's first call in a process 200-340 ms slower with firsttoken installed. The
suspects were firsttoken's post-import finder at the front of ``sys.meta_path`` (asked about every
module the app imports afterwards) and the patching of openai/httpx when LiteLLM imports them. Each
run is a fresh interpreter, the two variants interleaved, medians over ``--runs``:

* ``import PACKAGE`` (default ``litellm``), wall and CPU, without and with ``instrument()`` first
  (providers passed, so no exporter set-up is timed), with the garbage collector as it is and
  disabled (``gc.disable()`` before the import: the finder's and the patching's own cost, without
  a full collection landing inside or not);
* with ``--first-call``: LiteLLM's first streamed ``completion()`` against the simulator, to its
  first content chunk, and the full (generation 2) collections that ran inside it.

    .venv-frameworks/bin/python benchmarks/import_tree.py --runs 9 --first-call   # ~3 minutes

(``scripts/frameworks.sh`` makes ``.venv-frameworks``, which has LiteLLM.)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import gc, json, os, sys, time
package, instrument, gc_off, first_call = sys.argv[1], sys.argv[2] == "1", sys.argv[3] == "1", sys.argv[4] == "1"
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # no network fetch of LiteLLM's price list
full = []
started = [0.0]
def watch(phase, info):
    if info["generation"] == 2:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            full.append((time.perf_counter() - started[0]) * 1000)
gc.callbacks.append(watch)
if instrument:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    import firsttoken
    firsttoken.instrument(tracer_provider=TracerProvider(), meter_provider=MeterProvider())
if gc_off:
    gc.disable()
before = len(sys.modules)
full.clear()
wall, cpu = time.perf_counter(), time.process_time()
__import__(package)
out = {
    "import_ms": (time.perf_counter() - wall) * 1000,
    "import_cpu_ms": (time.process_time() - cpu) * 1000,
    "modules": len(sys.modules) - before,
    "import_full_gc_ms": sum(full),
}
if first_call:
    import litellm
    from firsttoken.sim import LatencyModel, Simulator
    with Simulator(latency=LatencyModel.fixed(queue_ms=1, output_tokens=8), seed=1) as sim:
        full.clear()
        t = time.perf_counter()
        for chunk in litellm.completion(
            model="openai/gpt-4o-mini", api_base=sim.openai_base_url, api_key="x", stream=True,
            messages=[{"role": "user", "content": "hi"}],
        ):
            if chunk.choices and chunk.choices[0].delta.content and "first_ms" not in out:
                out["first_ms"] = (time.perf_counter() - t) * 1000
                out["first_full_gc_ms"] = sum(full)
                out["first_full_gcs"] = len(full)
print(json.dumps(out))
"""


def run(package: str, instrument: bool, gc_off: bool, first_call: bool) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_SDK_DISABLED"] = "false"
    out = subprocess.run(
        [sys.executable, "-c", CHILD, package, str(int(instrument)), str(int(gc_off)), str(int(first_call))],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--package", default="litellm")
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--first-call", action="store_true", help="also LiteLLM's first completion()")
    args = parser.parse_args()
    variants = [(inst, gc_off) for gc_off in (False, True) for inst in (False, True)]
    results: dict[tuple[bool, bool], list[dict[str, float]]] = {v: [] for v in variants}
    for _ in range(args.runs):
        for inst, gc_off in variants:  # interleaved: the machine's load falls on both alike
            results[(inst, gc_off)].append(run(args.package, inst, gc_off, args.first_call and not gc_off))

    def med(rows: list[dict[str, float]], key: str) -> float:
        return statistics.median(r.get(key, 0.0) for r in rows)

    print(f"import {args.package}: median of {args.runs} fresh interpreters each, {sys.version.split()[0]}")
    for gc_off in (False, True):
        bare, ft = results[(False, gc_off)], results[(True, gc_off)]
        label = "gc disabled" if gc_off else "gc as is  "
        print(
            f"  {label}  without: {med(bare, 'import_ms'):7.1f} ms wall {med(bare, 'import_cpu_ms'):7.1f} ms cpu"
            f" | instrument() first: {med(ft, 'import_ms'):7.1f} ms wall {med(ft, 'import_cpu_ms'):7.1f} ms cpu"
            f" | ratio wall {med(ft, 'import_ms') / med(bare, 'import_ms'):.3f}"
            f" cpu {med(ft, 'import_cpu_ms') / med(bare, 'import_cpu_ms'):.3f}"
            f" | {med(bare, 'modules'):.0f} modules"
        )
    if args.first_call:
        bare, ft = results[(False, False)], results[(True, False)]
        for name, rows in (("without firsttoken", bare), ("with firsttoken", ft)):
            firsts = sorted(round(r["first_ms"]) for r in rows)
            gcs = [round(r["first_full_gc_ms"]) for r in rows if r["first_full_gcs"]]
            print(
                f"  LiteLLM first call, {name:18}: median {med(rows, 'first_ms'):6.0f} ms to the first chunk"
                f" (all: {firsts}); a full collection inside it in {len(gcs)} of {len(rows)} runs {gcs}"
            )


if __name__ == "__main__":
    main()
