"""``firsttoken bench``: measure endpoints the way the app will see them, compare them, price racing.

Requests go through the official ``openai`` / ``anthropic`` / ``google-genai`` SDKs with firsttoken
instrumenting them, and every number is read back from the spans firsttoken recorded: a bench run
and production telemetry are the same numbers. See docs/bench.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..charts import ReportError
from .bench_html import write_html
from .bench_out import (
    compare,
    race_summary,
    render_compare,
    render_race,
    render_summary,
    summarize,
    versions,
    write_csv,
    write_json,
)
from .bench_run import (
    FIRST_TOKEN,
    KEY_ENV,
    BenchError,
    Clients,
    Collector,
    Plan,
    Prompt,
    Runner,
    Sample,
    Target,
)
from .report import terminal_width, wrap
from .usage import OneLineParser

APIS = ("openai", "anthropic", "gemini")
BUSY_WARNING = 0.5
"""Above this share of a core busy, a Python client's own CPU visibly delays what it measures."""
BUSY_MIN_WALL_S = 1.0
"""Shorter runs are mostly start-up (imports, the first connection): their CPU share says nothing."""
SDK_REQUIREMENT = {"openai": "openai>=3.0,<4", "anthropic": "anthropic>=2.0,<3", "gemini": "google-genai>=1.20"}
"""What to install for each API: the same requirement as firsttoken's extra of that name."""
SDK_MODULE = {"openai": "openai", "anthropic": "anthropic", "gemini": "google.genai"}
_WORDS = [
    "able",
    "bird",
    "calm",
    "dark",
    "each",
    "farm",
    "gold",
    "hill",
    "iron",
    "jump",
    "kind",
    "lake",
    "mild",
    "note",
    "open",
    "path",
    "quiz",
    "rain",
    "salt",
    "tide",
    "used",
    "vast",
    "wave",
    "yard",
    "zone",
    "arch",
    "bell",
    "cove",
    "dune",
    "echo",
    "fern",
    "glen",
    "hive",
    "isle",
    "jade",
    "knot",
    "lime",
    "mist",
    "nest",
    "opal",
]


class UsageError(Exception):
    """Bad flags or input files: reported with exit status 2."""


class Stop:
    """How a run was stopped from outside: the signal's name (SIGINT for Ctrl-C, SIGTERM), or None."""

    def __init__(self) -> None:
        self.signal: str | None = None
        self.cancelled = 0
        """Requests in flight when it came, cancelled and not kept."""

    def said(self) -> str:
        """``interrupted by SIGINT``, and what that cancelled."""
        cancelled = f", {self.cancelled} in flight cancelled (not kept)" if self.cancelled else ""
        return f"interrupted by {self.signal}{cancelled}"

    @property
    def status(self) -> int:
        """The shell's convention for a process ended by a signal: 128 + its number."""
        return 128 + int(getattr(signal, self.signal or "SIGINT"))


def _int_at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(
                f"must be positive, got {text}" if minimum else f"must be 0 or more, got {text}"
            )
        return value

    return parse


_positive_int = _int_at_least(1)
_non_negative_int = _int_at_least(0)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="firsttoken bench",
        description="Benchmark OpenAI-compatible and Anthropic endpoints through the real SDKs, with every number "
        "read from what firsttoken recorded. Keys come from OPENAI_API_KEY / ANTHROPIC_API_KEY.",
    )
    t = p.add_argument_group("targets")
    t.add_argument("--api", choices=APIS, default="openai", help="API kind of --model targets (default: openai)")
    t.add_argument("--base-url", help="base URL of --model targets (default: the SDK's, or OPENAI_BASE_URL ...)")
    t.add_argument("--model", action="append", default=[], help="a model to measure (repeat for several)")
    t.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="NAME=API:MODEL@BASE_URL",
        help="a named target, e.g. fast=openai:gpt-4o-mini@http://127.0.0.1:8000/v1 (repeat for several)",
    )
    w = p.add_argument_group("workload")
    w.add_argument("--prompts", metavar="FILE", help="JSONL (a message list or {'messages': [...]} per line) or text")
    w.add_argument("--input-tokens", type=_positive_int, default=200, help="synthetic prompt length (default: 200)")
    w.add_argument(
        "--prefix",
        choices=("none", "shared", "unique"),
        default="none",
        help="a long system prompt before each prompt: the same for every request (cacheable), or made unique "
        "per request (never cached): compare the two to see prompt caching (default: none)",
    )
    w.add_argument("--prefix-tokens", type=_positive_int, default=1536, help="length of --prefix (default: 1536)")
    w.add_argument("--max-tokens", type=_positive_int, default=128, help="max_tokens per request (default: 128)")
    w.add_argument("--stream", action=argparse.BooleanOptionalAction, default=True, help="stream (default: on)")
    load = p.add_argument_group("load")
    load.add_argument("--requests", type=_positive_int, help="measured requests per target (default: 50)")
    load.add_argument("--duration", type=_positive_float, help="run for this many seconds instead of --requests")
    load.add_argument("--concurrency", type=_positive_int, help="closed loop: requests in flight (default: 4)")
    load.add_argument("--rate", type=_positive_float, help="open loop: requests started per second (Poisson)")
    load.add_argument(
        "--warmup", type=_non_negative_int, default=2, help="unmeasured requests first, per target (default: 2)"
    )
    load.add_argument("--timeout", type=_positive_float, default=60.0, help="SDK timeout per request, s (default: 60)")
    load.add_argument("--max-retries", type=_non_negative_int, default=2, help="SDK retries (default: 2)")
    load.add_argument("--seed", type=int, default=0, help="seed of prompts, arrivals and bootstrap")
    modes = p.add_argument_group("compare and race")
    modes.add_argument("--compare", metavar="A,B[,...]", help="interleave these targets; ratios against the first")
    modes.add_argument("--race", metavar="A,B[,C]", help="race these targets on every request; singles interleaved")
    modes.add_argument(
        "--race-until",
        choices=("first_token", "finish"),
        default=FIRST_TOKEN,
        help="the winner: the first to stream a token, or the first to finish (default: first_token)",
    )
    out = p.add_argument_group("output")
    out.add_argument("--out", metavar="PREFIX", help="write PREFIX.json, PREFIX.csv and PREFIX.html")
    out.add_argument("--json", metavar="PATH", help="every request's timeline as JSON")
    out.add_argument("--csv", metavar="PATH", help="one row per request")
    out.add_argument("--html", metavar="PATH", help="a self-contained HTML report")
    out.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a progress bar on stderr (default: when stderr is a terminal)",
    )
    return p


# -- input ------------------------------------------------------------------------------------


def parse_target(spec: str) -> Target:
    name, sep, rest = spec.partition("=")
    if not sep or not name:
        raise UsageError(f"--target {spec!r}: expected NAME=API:MODEL@BASE_URL")
    api, sep, rest = rest.partition(":")
    if not sep or api not in APIS:
        raise UsageError(f"--target {spec!r}: the API must be one of {', '.join(APIS)}")
    model, _, base = rest.partition("@")
    if not model:
        raise UsageError(f"--target {spec!r}: no model")
    if base and not base.startswith(("http://", "https://")):
        raise UsageError(f"--target {spec!r}: the base URL must start with http:// or https://")
    return Target(name=name, api=api, model=model, base_url=base or None)


def targets_from(args: argparse.Namespace) -> dict[str, Target]:
    if args.base_url and not args.base_url.startswith(("http://", "https://")):
        raise UsageError(f"--base-url {args.base_url!r} must start with http:// or https://")
    targets: dict[str, Target] = {}
    for model in args.model:
        if model in targets:
            raise UsageError(f"--model {model!r} given twice")
        targets[model] = Target(name=model, api=args.api, model=model, base_url=args.base_url)
    for spec in args.target:
        t = parse_target(spec)
        if t.name in targets:
            raise UsageError(f"target name {t.name!r} used twice")
        targets[t.name] = t
    if not targets:
        raise UsageError(
            "nothing to measure: give --model MODEL (with --base-url/--api) or --target NAME=API:MODEL@URL"
        )
    return targets


def _names(flag: str, text: str, targets: dict[str, Target], minimum: int) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    for n in names:
        if n not in targets:
            raise UsageError(f"{flag}: unknown target {n!r} (targets: {', '.join(targets)})")
    if len(names) < minimum or len(set(names)) != len(names):
        raise UsageError(f"{flag} needs at least {minimum} different targets, got {text!r}")
    return names


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n))


def load_prompts(path: str) -> list[list[dict[str, Any]]]:
    try:
        with open(path, encoding="utf-8") as f:
            lines = [line.rstrip("\n") for line in f]
    except OSError as exc:
        raise UsageError(f"--prompts {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"--prompts {path}: not UTF-8 text") from None
    prompts: list[list[dict[str, Any]]] = []
    jsonl = path.endswith((".jsonl", ".json")) or any(line.lstrip().startswith(("[", "{")) for line in lines[:1])
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if not jsonl:
            prompts.append([{"role": "user", "content": line}])
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--prompts {path} line {number}: not JSON ({exc.msg}: column {exc.colno})") from None
        messages = item.get("messages") if isinstance(item, dict) else item
        if (
            not isinstance(messages, list)
            or not messages
            or not all(isinstance(m, dict) and isinstance(m.get("role"), str) and "content" in m for m in messages)
        ):
            raise UsageError(
                f"--prompts {path} line {number}: expected a list of messages "
                "([{'role': ..., 'content': ...}, ...]) or {'messages': [...]}"
            )
        prompts.append(messages)
    if not prompts:
        raise UsageError(f"--prompts {path}: no prompts in the file")
    return prompts


def build_prompts(args: argparse.Namespace, count: int) -> list[Prompt]:
    """The prompts, used in turn; synthetic ones differ from each other (no accidental cache hits).

    With ``--prefix unique`` the runner puts the request's number in front of the prefix.
    """
    rng = random.Random(args.seed)
    if args.prompts:
        bases = load_prompts(args.prompts)
    else:
        bases = [[{"role": "user", "content": _words(rng, args.input_tokens)}] for _ in range(min(count, 500))]
    prefix = _words(random.Random(args.seed + 1), args.prefix_tokens) if args.prefix != "none" else None
    prompts = []
    for base in bases:
        messages = [dict(m) for m in base]
        system = None
        if messages[0]["role"] == "system":
            system = str(messages.pop(0)["content"])
        if prefix is not None:
            system = prefix if system is None else f"{prefix}\n{system}"
        prompts.append(Prompt(messages=messages, system=system, cache_system=prefix is not None))
    return prompts


# -- telemetry --------------------------------------------------------------------------------


def _otlp_configured() -> bool:
    return any(os.environ.get(v) for v in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def instrument(collector: Collector) -> tuple[Any, Any, bool]:
    """Instrument the SDKs; spans reach ``collector`` (and OTLP, when configured)."""
    from opentelemetry import metrics, trace
    from opentelemetry.metrics import NoOpMeterProvider
    from opentelemetry.sdk.trace import TracerProvider

    import firsttoken

    if _otlp_configured():
        os.environ.setdefault("OTEL_SERVICE_NAME", "firsttoken-bench")
        ok = firsttoken.instrument(phase_spans="always")  # exports over OTLP from the OTEL_* variables, batched
        provider = trace.get_tracer_provider()
        if not isinstance(provider, TracerProvider):
            raise BenchError("OTLP is configured but a tracer provider bench cannot read back is set globally")
        provider.add_span_processor(collector)
        return provider, metrics.get_meter_provider(), ok
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(collector)
    ok = firsttoken.instrument(
        tracer_provider=tracer_provider, meter_provider=NoOpMeterProvider(), phase_spans="always"
    )
    return tracer_provider, None, ok


# -- main -------------------------------------------------------------------------------------


class Progress:
    """A tqdm bar on stderr (when installed and wanted)."""

    def __init__(self, total: int | None, enabled: bool, duration: float | None) -> None:
        self.bar: Any = None
        self.errors = 0
        if not enabled:
            return
        try:
            from tqdm import tqdm  # type: ignore[import-untyped,import-not-found,unused-ignore]
        except ImportError:
            return
        self.bar = tqdm(total=total, unit="req", desc="bench", file=sys.stderr, dynamic_ncols=True, mininterval=0.25)
        if duration is not None:
            self.bar.set_postfix_str(f"for {duration:g} s")

    def __call__(self, sample: Sample) -> None:
        if not sample.ok:
            self.errors += 1
        if self.bar is not None:
            self.bar.update(1)
            if not sample.ok:
                self.bar.set_postfix(errors=self.errors)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return _main(args)
    except UsageError as exc:
        print(f"firsttoken bench: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # outside the run, whose own Ctrl-C handling keeps what it measured
        print("firsttoken bench: interrupted", file=sys.stderr)
        return 130


def _check_flags(args: argparse.Namespace) -> None:
    if args.requests is not None and args.duration is not None:
        raise UsageError("--requests and --duration exclude each other: give one")
    if args.concurrency is not None and args.rate is not None:
        raise UsageError("--concurrency (closed loop) and --rate (open loop) exclude each other: give one")
    if args.compare and args.race:
        raise UsageError("--compare and --race exclude each other: give one")


def output_paths(args: argparse.Namespace) -> dict[str, tuple[str, str]]:
    """The files to write, by kind (json, csv, html): (the flag that named it, its path)."""
    paths = {}
    for kind in ("json", "csv", "html"):
        explicit = getattr(args, kind)
        if explicit:
            paths[kind] = (f"--{kind}", explicit)
        elif args.out:
            paths[kind] = ("--out", f"{args.out}.{kind}")
    return paths


def check_outputs(paths: dict[str, tuple[str, str]]) -> None:
    """Whether every output file can be written, before anything is measured (without creating any)."""
    seen: dict[str, str] = {}
    for flag, path in paths.values():
        full = os.path.abspath(path)
        if full in seen:
            raise UsageError(f"{seen[full]} and {flag} both write {path}")
        seen[full] = flag
        parent = os.path.dirname(full)
        problem = None
        if os.path.isdir(full):
            problem = "it is a directory"
        elif not os.path.exists(parent):
            problem = f"no directory {parent}"
        elif not os.path.isdir(parent):
            problem = f"{parent} is not a directory"
        elif not os.access(full if os.path.exists(full) else parent, os.W_OK):
            problem = "permission denied"
        if problem is not None:
            raise UsageError(f"{flag}: cannot write {path}: {problem}")
    if "html" in paths:
        try:
            import plotly.offline  # type: ignore[import-untyped,import-not-found,unused-ignore]  # noqa: F401
        except ImportError:
            raise UsageError(
                f"{paths['html'][0]}: the HTML report needs plotly: pip install 'plotly>=5.20' (firsttoken's cli "
                "extra), or write only --json / --csv"
            ) from None


def _main(args: argparse.Namespace) -> int:
    _check_flags(args)
    paths = output_paths(args)
    check_outputs(paths)
    targets = targets_from(args)
    race: tuple[str, list[str], str] | None = None
    if args.compare:
        lanes = _names("--compare", args.compare, targets, 2)
    elif args.race:
        names = _names("--race", args.race, targets, 2)
        label = "race(" + ",".join(names) + ")"
        race = (label, names, args.race_until)
        lanes = [label, *names]
    else:
        lanes = list(targets)
    used = {targets[n].api for n in (race[1] if race else []) + [n for n in lanes if n in targets]}
    keys = {}
    for api in sorted(used):
        key = next((os.environ[v] for v in KEY_ENV[api] if os.environ.get(v)), None)
        if not key:
            raise UsageError(f"{' or '.join(KEY_ENV[api])} is not set: the {api} targets need an API key")
        keys[api] = key
    for api in used:
        try:
            __import__(SDK_MODULE[api])
        except ImportError:
            raise UsageError(f"the {api} SDK is not installed: pip install '{SDK_REQUIREMENT[api]}'") from None
    requests = args.requests if args.duration is None else None
    if requests is None and args.duration is None:
        requests = 50
    concurrency = args.concurrency if args.rate is None else None
    if concurrency is None and args.rate is None:
        concurrency = 4
    total = None if requests is None else (requests + args.warmup) * len(lanes)
    prompts = build_prompts(args, total or 500)
    plan = Plan(
        lanes,
        requests=requests,
        warmup=args.warmup,
        interleave=bool(args.compare or args.race),
        prompts=len(prompts),
    )

    collector = Collector()
    try:
        tracer_provider, meter_provider, ok = instrument(collector)
    except BenchError as exc:
        print(f"firsttoken bench: error: {exc}", file=sys.stderr)
        return 1
    if not ok:
        print("firsttoken bench: firsttoken could not instrument the SDKs (see the warning above)", file=sys.stderr)
        return 1
    started_wall = time.time()
    clock = (time.process_time(), time.perf_counter())
    show = sys.stderr.isatty() if args.progress is None else args.progress
    progress = Progress(plan.total, show, args.duration)
    # The runner is kept as soon as it exists, so that a run stopped midway still has its samples.
    box: list[Runner] = []
    stop = Stop()
    fatal: str | None = None
    try:
        fatal = asyncio.run(_run(args, targets, keys, prompts, collector, plan, race, progress, concurrency, box, stop))
    except KeyboardInterrupt:  # Ctrl-C outside the run's own handler (while starting or closing)
        stop.signal = stop.signal or "SIGINT"
    finally:
        progress.close()
        import firsttoken

        firsttoken.uninstrument()
        tracer_provider.shutdown()  # flushes the OTLP batch, if any
        shutdown = getattr(meter_provider, "shutdown", None)
        if shutdown is not None:
            shutdown()  # a last export of the metrics
    samples = list(box[0].samples) if box else []
    if stop.signal is not None:
        stop.cancelled = box[0].cancelled if box else 0
        fatal = f"{stop.said()}; finished: {_counted(samples)}"
    cpu_s, wall_s = time.process_time() - clock[0], time.perf_counter() - clock[1]
    client = {"cpu_s": cpu_s, "wall_s": wall_s, "busy_share": cpu_s / wall_s if wall_s > 0 else None}
    return _report(args, targets, lanes, race, samples, fatal, started_wall, concurrency, client, stop, paths)


async def _run(
    args: argparse.Namespace,
    targets: dict[str, Target],
    keys: dict[str, str],
    prompts: list[Prompt],
    collector: Collector,
    plan: Plan,
    race: tuple[str, list[str], str] | None,
    progress: Progress,
    concurrency: int | None,
    box: list[Runner],
    stop: Stop,
) -> str | None:
    """Run the plan; the fatal error that stopped it, if any. SIGINT (Ctrl-C) and SIGTERM stop it
    too: no new request starts, those in flight are cancelled, and what finished is kept."""
    clients = Clients(list(targets.values()), keys, timeout=args.timeout, max_retries=args.max_retries)
    runner = Runner(
        targets=targets,
        clients=clients,
        prompts=prompts,
        collector=collector,
        stream=args.stream,
        max_tokens=args.max_tokens,
        race=race,
        progress=progress,
        unique_prefix=args.prefix == "unique",
    )
    box.append(runner)
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    assert main is not None

    def on_signal(name: str) -> None:
        if stop.signal is None:
            stop.signal = name
            main.cancel()

    handled = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, on_signal, sig.name)
            handled.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):  # Windows, or not the main thread
            pass
    deadline = None
    jobs = plan.jobs()
    try:
        if args.duration is not None:
            # The warm-up is not part of the measured duration.
            warm = [next(jobs) for _ in range(plan.warmup * len(plan.lanes))]
            await runner.closed_loop(iter(warm), concurrency or len(plan.lanes), None)
            deadline = time.perf_counter() + args.duration
        if concurrency is not None:
            await runner.closed_loop(jobs, concurrency, deadline)
        else:
            await runner.open_loop(jobs, args.rate, deadline, args.seed)
    except asyncio.CancelledError:
        if stop.signal is None:
            raise
        uncancel = getattr(main, "uncancel", None)  # Python 3.11+: the stop is handled here
        if uncancel is not None:
            uncancel()
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)
        await clients.close()
    return str(runner.fatal) if runner.fatal is not None else None


def _counted(samples: list[Sample]) -> str:
    """The one count of a run's finished requests, as the report and an interrupted run's error give it."""
    warm = sum(1 for s in samples if s.warmup)
    return f"{len(samples) - warm} measured requests ({warm} warm-up)"


def _report(
    args: argparse.Namespace,
    targets: dict[str, Target],
    lanes: list[str],
    race: tuple[str, list[str], str] | None,
    samples: list[Sample],
    fatal: str | None,
    started_wall: float,
    concurrency: int | None,
    client: dict[str, Any],
    stop: Stop,
    outputs: dict[str, tuple[str, str]],
) -> int:
    by_target: dict[str, list[Sample]] = {lane: [] for lane in lanes}
    for s in sorted(samples, key=lambda s: s.seq):
        by_target.setdefault(s.target, []).append(s)
    summaries = {name: summarize(name, ss) for name, ss in by_target.items()}
    load = f"concurrency {concurrency}" if concurrency is not None else f"open loop at {args.rate:g} req/s"
    width = terminal_width()
    blocks = [
        *wrap(
            f"firsttoken bench: {_counted(samples)}, {load}, "
            f"{'streamed' if args.stream else 'not streamed'}, max_tokens {args.max_tokens}",
            width,
        ),
        "",
    ]
    for name, summary in summaries.items():
        desc = (
            targets[name].describe() if name in targets else "raced: the first of " + ", ".join(race[1] if race else [])
        )
        blocks += [render_summary(summary, desc, width), ""]
    comparison: list[dict[str, Any]] = []
    if args.compare:
        comparison = compare(lanes, by_target, args.seed)
        blocks += [render_compare(comparison), ""]
    race_info = None
    if race is not None:
        race_info = race_summary(race[0], race[1], by_target.get(race[0], []))
        blocks += [render_race(race_info, summaries), ""]
    busy = client["busy_share"]
    if busy is not None:
        blocks += wrap(
            f"This process used {client['cpu_s']:.1f} s of CPU in {client['wall_s']:.1f} s ({busy:.0%} of a core).",
            width,
        )
        # Only about latencies there are, over a run long enough for start-up not to be most of it.
        timed = any(s.ok for s in summaries.values())
        if busy > BUSY_WARNING and timed and client["wall_s"] >= BUSY_MIN_WALL_S:
            blocks += wrap(
                "Warning: the client was busy most of the time, so the latencies above include waiting for its own "
                "CPU (the SDK's per-chunk work, mostly); lower --concurrency or --rate, or run several processes.",
                width,
            )
    print("\n".join(blocks).rstrip())
    document = {
        "tool": "firsttoken bench",
        "started": started_wall,
        "argv": sys.argv[1:],
        "settings": {k: v for k, v in vars(args).items()},
        "targets": {n: {"api": t.api, "model": t.model, "base_url": t.base_url} for n, t in targets.items()},
        "error": fatal,
        "summaries": {n: s.as_json() for n, s in summaries.items()},
        "compare": comparison,
        "race": race_info,
        "client": client,
        "versions": versions(),
        "requests": [s.as_json() for s in sorted(samples, key=lambda s: s.seq)],
    }
    paths = {kind: path for kind, (_, path) in outputs.items()}
    written = []
    try:
        if "json" in paths:
            write_json(paths["json"], document)
            written.append(paths["json"])
        if "csv" in paths:
            write_csv(paths["csv"], sorted(samples, key=lambda s: s.seq))
            written.append(paths["csv"])
        if "html" in paths:
            write_html(paths["html"], document)
            written.append(paths["html"])
    except OSError as exc:
        print(f"firsttoken bench: error: cannot write {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 1
    except ReportError as exc:
        print(f"firsttoken bench: error: {exc}", file=sys.stderr)
        return 1
    if written:
        print("wrote " + ", ".join(written))
    if stop.signal is not None:
        where = (
            "what finished is in " + ", ".join(written)
            if written
            else "no output file was asked for (--out PREFIX, --json, --csv or --html keep what finished)"
        )
        print(f"firsttoken bench: {stop.said()}; {where}", file=sys.stderr)  # the count is the report's first line
        return stop.status
    if fatal is not None:
        print(f"firsttoken bench: error: {fatal}", file=sys.stderr)
        if written:
            print("firsttoken bench: what was measured before the error is in the files above", file=sys.stderr)
        return 1
    return 0
