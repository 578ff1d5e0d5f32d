"""The floor under firsttoken's cost in the shared peer benchmark (issue 41): what any instrumentation
pays, call path plus export, to emit what firsttoken emits per call through the stock OpenTelemetry
SDK, before it measures anything.

    python benchmarks/peer_floor.py                 # set up what is missing, record, count (~30 min)
    python benchmarks/peer_floor.py --reps 1 --variants none,floor,floor_metrics

Two variants are written into a copy of the shared peer benchmark (``.peers-bench/``, gitignored, as
``benchmarks/scale.py`` makes it) and counted with its ``instructions.py`` beside the peers:

* ``floor``: per SDK call (openai ``chat.completions.create``, anthropic ``messages.create`` and
  ``messages.stream``) one span, ended when the SDK call returns, with exactly the attributes
  firsttoken's call span carries for that workload: the same keys, value types and values, recorded
  from firsttoken's own spans against the benchmark's mock just before (``--record`` runs firsttoken
  in its venv there), set in one ``set_attributes`` as firsttoken does;
* ``floor_metrics``: the same plus firsttoken's histogram records of that call (duration and token
  usage twice; a stream also time to first chunk, time to first token, time per output token) with
  firsttoken's metric attributes and the call span's context (exemplars), on the harness's meter.

Neither reads a stream, times anything or hooks the wire: the difference between ``floor_metrics``
and firsttoken is firsttoken's own work; the difference between ``floor_metrics`` and a peer is what
firsttoken's signals cost over the peer's when they cost nothing to compute. Both run in the
benchmark's ``none`` venv (symlinked): no firsttoken installed.
"""

from __future__ import annotations

import argparse
import json
import os
import pprint
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PEERS = ROOT / ".peers-bench"  # the default copy (--dir)
VENVS = ("none", "firsttoken", "otel_genai", "openllmetry", "openai_v2")
WORKLOADS = ("openai_chat", "openai_stream_30", "anthropic_stream_30", "anthropic_helper_30")

# Run in firsttoken's venv of the peer benchmark, from its directory: firsttoken's call-span attributes
# per workload, one call each after two unrecorded ones, as JSON.
RECORD = """
import json, os, sys
sys.path.insert(0, os.getcwd())
os.environ.setdefault("ANTHROPIC_OPEN_TELEMETRY", "false")
import instructions
from harness import clients, setup_otel, start_mock, stop_mock
proc, port = start_mock()
try:
    tel = setup_otel("firsttoken", "memory", port)
    ctx = instructions.Ctx()
    ctx.oai, ctx.aoai, ctx.ant, ctx.aant = clients(port)
    out = {}
    for name in %r:
        run, tokens, _ = instructions.WORKLOADS[name]
        run(ctx, 2, tokens)
        tel.tp.force_flush()
        tel.span_memory.clear()
        run(ctx, 1, tokens)
        tel.tp.force_flush()
        (span,) = [s for s in tel.span_memory.get_finished_spans() if s.name.startswith("chat ")]
        out[name] = {k: list(v) if isinstance(v, tuple) else v for k, v in span.attributes.items()}
        tel.span_memory.clear()
    print(json.dumps(out))
finally:
    stop_mock(proc)
"""

# The variants' module, with SETS (the recorded attributes) and METRICS filled in.
VARIANT = '''"""Written by firsttoken's benchmarks/peer_floor.py (see there): {what}"""

PIP: list[str] = []
SETS = {sets}
METRICS = {metrics}
BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]


def instrument(tp, mp, lp) -> None:
    import anthropic.resources.messages as am
    import openai.resources.chat.completions as oc
    from opentelemetry import trace

    sets = {{name: {{k: tuple(v) if isinstance(v, list) else v for k, v in a.items()}} for name, a in SETS.items()}}
    tracer = tp.get_tracer("floor")
    meter = mp.get_meter("floor")
    seconds = dict(unit="s", explicit_bucket_boundaries_advisory=BUCKETS)
    duration = meter.create_histogram("gen_ai.client.operation.duration", **seconds)
    usage = meter.create_histogram("gen_ai.client.token.usage", unit="{{token}}")
    ttfc = meter.create_histogram("gen_ai.client.operation.time_to_first_chunk", **seconds)
    ttft = meter.create_histogram("firsttoken.client.time_to_first_token", **seconds)
    tpot = meter.create_histogram("firsttoken.client.time_per_output_token", **seconds)
    series = {{}}

    def metrics(name, span):
        a = sets[name]
        keys = ("gen_ai.operation.name", "gen_ai.provider.name", "gen_ai.request.model",
                "gen_ai.response.model", "server.address", "server.port")
        key = (name, a.get("gen_ai.request.model"))
        attrs = series.get(key)
        if attrs is None:  # built once per series and reused, as firsttoken does
            call = {{k: a[k] for k in keys if k in a}}
            call["gen_ai.request.stream"] = bool(a.get("gen_ai.request.stream", False))
            attrs = series[key] = (call, {{**call, "gen_ai.token.type": "input"}},
                                   {{**call, "gen_ai.token.type": "output"}})
        call, inp, out = attrs
        ctx = trace.set_span_in_context(span)
        duration.record(0.05, call, context=ctx)
        if call["gen_ai.request.stream"]:
            ttfc.record(0.010, call, context=ctx)
            ttft.record(0.011, call, context=ctx)
            tpot.record(0.0002, call, context=ctx)
        usage.record(a.get("gen_ai.usage.input_tokens", 0), inp, context=ctx)
        usage.record(a.get("gen_ai.usage.output_tokens", 0), out, context=ctx)

    def wrap(cls, method, pick):
        original = getattr(cls, method)

        def wrapper(self, *args, **kwargs):
            span = tracer.start_span("chat " + str(kwargs.get("model")))
            try:
                return original(self, *args, **kwargs)
            finally:
                name = pick(kwargs)
                if METRICS:
                    metrics(name, span)
                span.set_attributes(sets[name])
                span.end()

        setattr(cls, method, wrapper)

    wrap(oc.Completions, "create", lambda kw: "openai_stream_30" if kw.get("stream") else "openai_chat")
    wrap(am.Messages, "create", lambda kw: "anthropic_stream_30")
    wrap(am.Messages, "stream", lambda kw: "anthropic_helper_30")
'''


def ensure_peers(source: Path, peers: Path) -> None:
    """Copy the shared peer benchmark to ``peers`` (as scale.py does) and build the venvs needed."""
    if not (peers / "setup_venvs.sh").exists():
        if not (source / "setup_venvs.sh").exists():
            raise SystemExit(f"no peer benchmark at {source} (--peers-bench)")
        shutil.copytree(source, peers, ignore=shutil.ignore_patterns(".venvs", "out", "__pycache__"))
        for p in [peers, *peers.rglob("*")]:
            p.chmod(p.stat().st_mode | 0o200)
    missing = [v for v in VENVS if not (peers / ".venvs" / v).exists()]
    if missing:
        print(f"building the peer venvs {', '.join(missing)} (a few minutes)", file=sys.stderr)
        env = {**os.environ, "FIRSTTOKEN_SRC": str(ROOT)}
        subprocess.run(["nice", "./setup_venvs.sh", *missing], cwd=peers, check=True, env=env)


def record(peers: Path) -> dict[str, dict[str, object]]:
    """firsttoken's call-span attributes per workload, from firsttoken (this checkout's src) in its venv."""
    python = peers / ".venvs" / "firsttoken" / "bin" / "python"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [str(python), "-c", RECORD % (WORKLOADS,)], cwd=peers, env=env, check=True, capture_output=True, text=True
    )
    sets: dict[str, dict[str, object]] = json.loads(done.stdout.strip().splitlines()[-1])
    return sets


def write_variants(peers: Path, sets: dict[str, dict[str, object]]) -> None:
    for name, metrics, what in (
        ("floor", False, "firsttoken's call-span attributes on one span per SDK call, nothing else."),
        ("floor_metrics", True, "the same, plus firsttoken's histogram records per call."),
    ):
        text = VARIANT.format(what=what, sets=pprint.pformat(sets, sort_dicts=False), metrics=metrics)
        (peers / "variants" / f"{name}.py").write_text(text)
        link = peers / ".venvs" / name
        if not link.exists():
            link.symlink_to("none")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peers-bench", default=str(ROOT.parent / "shared" / "peers-bench"))
    ap.add_argument("--dir", default=str(PEERS), help="the copy to set up and run in (default .peers-bench)")
    ap.add_argument("--variants", default="none,otel_genai,openllmetry,openai_v2,floor,floor_metrics,firsttoken")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    peers = Path(args.dir).resolve()
    ensure_peers(Path(args.peers_bench), peers)
    sets = record(peers)
    for name, attrs in sets.items():
        print(f"{name}: firsttoken's call span has {len(attrs)} attributes", file=sys.stderr)
    write_variants(peers, sets)
    # firsttoken's variant measures this checkout's code, not the copy installed at set-up.
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    command = [sys.executable, "instructions.py", "--variants", args.variants, "--reps", str(args.reps), "--no-signals"]
    sys.exit(subprocess.run(command, cwd=peers, env=env).returncode)


if __name__ == "__main__":
    main()
