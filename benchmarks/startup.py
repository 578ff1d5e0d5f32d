"""Start-up cost: ``import firsttoken`` and ``instrument()``, each in fresh processes.

Every figure is the median over ``--runs`` fresh interpreters (what a process has imported is the
whole question, so nothing is measured twice in one process). Each stage is timed inside the child
with both clocks: wall (``perf_counter``, what a cold start waits) and CPU (``process_time``, which
a busy machine inflates less). Stages:

* ``import firsttoken``
* ``instrument()`` with providers the app made (no-op ones): firsttoken's own share
* ``instrument()`` with nothing passed: OTLP export set up from ``OTEL_*`` -- the OpenTelemetry SDK
  provider set-up (timed around firsttoken's ``_otlp.setup``) is reported apart; the OTLP exporters
  themselves are made on the app's thread when it first records, the next stage
* the first span the app ends after that: what its first recorded call pays to make the exporters
* ``instrument()`` with ``OTEL_METRICS_EXPORTER=none`` (no metrics SDK imported)
* ``instrument()`` after the app imported openai and anthropic: the patching of both SDKs included
* ``import openai`` / ``import anthropic``: what ``instrument()`` no longer imports for the app

Then ``-X importtime`` of ``import firsttoken`` and of the default ``instrument()``: each module's own
import time (median over the runs), grouped by top-level package, and the largest modules.

    .venv/bin/python benchmarks/startup.py            # 9 runs of each, ~1 minute
    .venv/bin/python benchmarks/startup.py --runs 15 --json startup.json
    .venv/bin/python benchmarks/startup.py --instructions   # valgrind: counts that load does not move

``--instructions`` counts each stage's instructions under valgrind's callgrind instead (a process
doing the stage minus one that stops just before it): a figure a busy machine does not inflate.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections import defaultdict
from typing import Any

# Each child prints one JSON line: stage -> [wall ms, cpu ms].
CHILD = r"""
import json, os, sys, time
marks = {}
def timed(name, fn):
    w, c = time.perf_counter(), time.process_time()
    result = fn()
    marks[name] = [(time.perf_counter() - w) * 1e3, (time.process_time() - c) * 1e3]
    return result
SCENARIO
print("STARTUP " + json.dumps(marks))
sys.stdout.flush()
os._exit(0)  # no exit-time export: the OTLP endpoint below has nobody listening
"""

SCENARIOS: dict[str, str] = {
    "import": """
timed("import firsttoken", lambda: __import__("firsttoken"))
""",
    "own": """
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.trace import NoOpTracerProvider
tp, mp = NoOpTracerProvider(), NoOpMeterProvider()
import firsttoken
timed("instrument(), app's providers", lambda: firsttoken.instrument(tracer_provider=tp, meter_provider=mp))
""",
    "default": """
import firsttoken
from firsttoken import _otlp
setup = _otlp.setup
def timed_setup(*args, **kwargs):
    return timed("  of which OTel SDK providers (_otlp.setup)", lambda: setup(*args, **kwargs))
_otlp.setup = timed_setup
timed("instrument(), OTLP from OTEL_*", firsttoken.instrument)
from opentelemetry import trace
timed("first span ended: OTLP exporters made", lambda: trace.get_tracer("startup").start_span("s").end())
""",
    "no-metrics": """
import os
os.environ["OTEL_METRICS_EXPORTER"] = "none"
import firsttoken
timed("instrument(), OTLP traces only (metrics none)", firsttoken.instrument)
""",
    "sdks": """
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.trace import NoOpTracerProvider
tp, mp = NoOpTracerProvider(), NoOpMeterProvider()
import openai, anthropic
import firsttoken
timed("instrument(), openai+anthropic imported", lambda: firsttoken.instrument(tracer_provider=tp, meter_provider=mp))
""",
    "openai": """
timed("import openai (app's own)", lambda: __import__("openai"))
""",
    "anthropic": """
timed("import anthropic (app's own)", lambda: __import__("anthropic"))
""",
}

BUDGET_MS = {
    "import firsttoken": 50.0,
    "instrument(), app's providers": 50.0,
    "instrument(), OTLP from OTEL_*": 50.0,
    "instrument(), OTLP traces only (metrics none)": 50.0,
}

ENV = {
    "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
    "OTEL_SERVICE_NAME": "startup-benchmark",
}


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FIRSTTOKEN_", "PYTHON"))}
    env.update(ENV)
    return env


def run_child(scenario: str) -> dict[str, list[float]]:
    code = CHILD.replace("SCENARIO", SCENARIOS[scenario])
    args = [sys.executable, "-c", code]
    result = subprocess.run(args, capture_output=True, text=True, env=_env(), timeout=300, check=False)
    lines = [line for line in result.stdout.splitlines() if line.startswith("STARTUP ")]
    if result.returncode != 0 or not lines:
        raise SystemExit(f"startup: the {scenario} child failed:\n{result.stdout}\n{result.stderr}")
    marks: dict[str, list[float]] = json.loads(lines[-1][len("STARTUP ") :])
    return marks


def parse_importtime(stderr: str, after: str | None = None) -> dict[str, float]:
    """Module -> own import time in ms from ``-X importtime`` output; only what follows ``after``'s line.

    A module's line comes after its children's, so what follows ``firsttoken``'s line is what was
    imported once ``import firsttoken`` was done.
    """
    own: dict[str, float] = {}
    started = after is None
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, _cumulative, name = (part.strip() for part in line[len("import time:") :].split("|"))
        if not started:
            started = name == after
            continue
        own[name] = own.get(name, 0.0) + float(self_us) / 1e3
    return own


def run_importtime(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, env=_env(), timeout=300
    )
    if result.returncode != 0:
        raise SystemExit(f"startup: -X importtime of {code!r} failed:\n{result.stderr[-2000:]}")
    return result.stderr


IMPORTTIME = (
    ("import firsttoken", "import firsttoken", None),
    (
        "instrument(), OTLP from OTEL_*, after import firsttoken",
        "import os, firsttoken; firsttoken.instrument(); os._exit(0)",
        "firsttoken",
    ),
)


def group(own: dict[str, float]) -> dict[str, float]:
    by_package: dict[str, float] = defaultdict(float)
    for module, ms in own.items():
        top = module.split(".")[0]
        if top in ("firsttoken", "opentelemetry", "wrapt", "google", "grpc", "requests", "urllib3", "packaging"):
            by_package[top] += ms
        elif top.startswith("_") or top in sys.stdlib_module_names:
            by_package["(standard library)"] += ms
        else:
            by_package[top] += ms
    return dict(by_package)


def median_table(samples: list[dict[str, float]]) -> dict[str, float]:
    keys = {k for s in samples for k in s}
    return {k: statistics.median(s.get(k, 0.0) for s in samples) for k in keys}


# (stage, code before it, the stage): instructions = count(before + stage) - count(before).
INSTRUCTION_STAGES = (
    ("import firsttoken", "pass", "import firsttoken"),
    (
        "instrument(), app's providers",
        "from opentelemetry.metrics import NoOpMeterProvider\n"
        "from opentelemetry.trace import NoOpTracerProvider\n"
        "tp, mp = NoOpTracerProvider(), NoOpMeterProvider()\n"
        "import firsttoken",
        "firsttoken.instrument(tracer_provider=tp, meter_provider=mp)",
    ),
    (
        "instrument(), OTLP from OTEL_*",
        "import os, firsttoken",
        "firsttoken.instrument()",
    ),
    (
        "instrument(), OTLP traces only (metrics none)",
        "import os, firsttoken\nos.environ['OTEL_METRICS_EXPORTER'] = 'none'",
        "firsttoken.instrument()",
    ),
    (
        "first span ended: OTLP exporters made",
        "import os, firsttoken\nfrom opentelemetry import trace\nfirsttoken.instrument()",
        "trace.get_tracer('startup').start_span('s').end()",
    ),
    ("import openai (app's own)", "pass", "import openai"),
    ("import anthropic (app's own)", "pass", "import anthropic"),
)


def count_instructions(code: str) -> int:
    import re
    import shutil

    if shutil.which("valgrind") is None:
        raise SystemExit("startup: --instructions needs valgrind (Debian: apt-get install valgrind)")
    callgrind = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    result = subprocess.run(
        [*callgrind, sys.executable, "-c", code + "\nimport os; os._exit(0)"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=600,
    )
    found = re.search(r"Collected : (\d+)", result.stderr)
    if result.returncode != 0 or found is None:
        raise SystemExit(f"startup: callgrind run failed:\n{result.stderr[-2000:]}")
    return int(found.group(1))


def instructions(runs: int) -> None:
    print(f"firsttoken start-up in instructions (callgrind, median of {runs}; Python {sys.version.split()[0]})")
    print()
    print(f"{'stage':<50} {'instructions':>14}")
    for stage, before, code in INSTRUCTION_STAGES:
        counts = [count_instructions(before + "\n" + code) - count_instructions(before) for _ in range(runs)]
        print(f"{stage:<50} {statistics.median(counts):>14,.0f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=9, help="fresh processes per figure (default: 9)")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    parser.add_argument("--top", type=int, default=12, help="largest modules listed per breakdown (default: 12)")
    parser.add_argument("--instructions", action="store_true", help="count instructions under callgrind instead")
    ns = parser.parse_args()
    if ns.runs < 1:
        parser.error("--runs must be at least 1")
    if ns.instructions:
        instructions(max(1, min(ns.runs, 3)))  # deterministic to within a fraction of a percent
        return 0

    samples: dict[str, list[list[float]]] = defaultdict(list)
    for _ in range(ns.runs):  # interleaved, so that a burst of load hits every stage alike
        for scenario in SCENARIOS:
            marks = run_child(scenario)
            for stage, figures in marks.items():
                samples[stage].append(figures)

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"firsttoken start-up: median of {ns.runs} fresh processes; Python {sys.version.split()[0]}, "
        f"{os.cpu_count()} CPUs, load average {load:.1f} at the end"
    )
    print()
    print(f"{'stage':<50} {'wall ms':>9} {'CPU ms':>9}  budget")
    figures: dict[str, Any] = {"runs": ns.runs, "python": sys.version.split()[0], "load": load, "stages": {}}
    for stage, values in samples.items():
        wall = statistics.median(v[0] for v in values)
        cpu = statistics.median(v[1] for v in values)
        figures["stages"][stage] = {"wall_ms": wall, "cpu_ms": cpu, "wall_all": [v[0] for v in values]}
        budget = BUDGET_MS.get(stage)
        verdict = "" if budget is None else f"<= {budget:.0f} ms: {'met' if wall <= budget else 'MISSED'} (wall)"
        print(f"{stage:<50} {wall:>9.1f} {cpu:>9.1f}  {verdict}")
    default_total = figures["stages"].get("instrument(), OTLP from OTEL_*")
    sdk_part = figures["stages"].get("  of which OTel SDK providers (_otlp.setup)")
    if default_total and sdk_part:
        own_wall = statistics.median(
            t - s
            for t, s in zip(
                default_total["wall_all"],
                [v[0] for v in samples["  of which OTel SDK providers (_otlp.setup)"]],
                strict=True,
            )
        )
        figures["stages"]["  of which firsttoken"] = {"wall_ms": own_wall}
        print(f"{'  of which firsttoken (the rest)':<50} {own_wall:>9.1f}")

    interpreter = set(parse_importtime(run_importtime("pass")))  # site, encodings, ...
    for title, code, after in IMPORTTIME:
        runs = []
        for _ in range(ns.runs):
            own = parse_importtime(run_importtime(code), after)
            runs.append({m: ms for m, ms in own.items() if m not in interpreter})
        per_module = median_table(runs)
        per_package = median_table([group(r) for r in runs])
        figures[f"importtime {title}"] = {"packages": per_package, "modules": per_module}
        print()
        print(f"-X importtime, {title}: own time per package (median ms)")
        for package, ms in sorted(per_package.items(), key=lambda kv: -kv[1]):
            if ms >= 0.5:
                print(f"  {package:<40} {ms:>8.1f}")
        print(f"  largest modules ({ns.top}):")
        for module, ms in sorted(per_module.items(), key=lambda kv: -kv[1])[: ns.top]:
            print(f"    {module:<50} {ms:>8.1f}")

    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(figures, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
