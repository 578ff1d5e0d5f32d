"""CPU cost firsttoken adds per call and per streamed chunk, for the openai and anthropic SDKs.

Method. The simulator runs in a separate process, so this process's CPU time
(``time.process_time()``: every thread, the SDK, firsttoken and the OpenTelemetry SDK's span and
metric work) is the client's alone. The same streamed workload runs uninstrumented and under each
configuration below, interleaved, for several rounds; the median per-call difference is the cost.
Two stream lengths separate the fixed cost per call from the cost per chunk:
``cost(n chunks) = per_call + n * per_chunk``.

Configurations:

* ``default``: every trace sampled (the worst case), spans through a ``BatchSpanProcessor`` to an
  exporter that drops them, metrics into an in-memory reader; phase spans for the tail only;
* ``phase spans always``: the same with ``phase_spans="always"`` (every call's waterfall);
* ``no phase spans``: the same with ``phase_spans="never"``;
* ``10% sampled``: ``ParentBased(TraceIdRatioBased(0.1))``, a common production set-up;
* ``firsttoken only``: no-op OpenTelemetry providers, so what remains is firsttoken's own code;
* ``firsttoken only, no wire hooks``: the same with ``wire_phases=False``; the difference to the
  line above is what the httpx/httpcore wire hooks cost.

A micro measurement times the per-chunk hot path alone: the stream observer around a generator of
real ``ChatCompletionChunk`` objects, against the bare generator.

    python benchmarks/overhead.py            # full run, a few minutes
    python benchmarks/overhead.py --quick    # fewer calls and rounds, a smoke check
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

# The goals (issue 15, docs/overhead.md). What a user pays, call path plus export, is compared with
# the peer instrumentations side by side by the shared peer benchmark, not here; this script holds
# firsttoken's own code to its goals, in instructions (callgrind, --instructions), which timing on a
# shared 2-core machine cannot resolve.
GOAL_OWN_PER_CALL_INSTR = 350_000
"""firsttoken's own code per call ("firsttoken only": no-op OpenTelemetry providers), ≈ 60 µs here."""
GOAL_PER_CHUNK_INSTR = 5_000
"""Per streamed chunk, any configuration."""
GOALS = (
    f"goals: firsttoken's own code (firsttoken only) ≤ {GOAL_OWN_PER_CALL_INSTR:,} instructions per call, "
    f"≤ {GOAL_PER_CHUNK_INSTR:,} per chunk (--instructions counts them); the default configuration, call path "
    "plus export, no more than the cheapest peer instrumentation (docs/overhead.md, the shared peer benchmark)"
)
SHORT, LONG = 8, 256


def _whole_responses() -> None:
    """Make the simulator (in this process) send each HTTP/1.1 response in one write, headers and
    body together, at its end. The client then reads it in one go, every time: how a stream's bytes
    happen to be split across reads (the server's and the client's timing) no longer changes how
    much work the SDK, httpcore and firsttoken's wire hooks do per call. For instruction counts only."""
    from firsttoken.sim import _http

    cls = _http.H11Connection
    write = cls._write

    def held(self: Any, data: bytes | None) -> None:
        if data:
            self.__dict__.setdefault("_held", bytearray()).extend(data)
        if self._conn.our_state is _http.h11.DONE or self._conn.our_state is _http.h11.MUST_CLOSE:
            write(self, bytes(self.__dict__.pop("_held", b"")))

    cls._write = held  # type: ignore[method-assign]


def _serve(conn: Any, whole: bool = False) -> None:
    from firsttoken.sim import LatencyModel, Simulator

    if whole:
        _whole_responses()

    fast = LatencyModel(
        queue_ms=0, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=1_000_000, jitter=0, output_tokens=LONG
    )
    with Simulator(latency=fast, seed=0) as sim:
        conn.send((sim.openai_base_url, sim.anthropic_base_url))
        conn.recv()  # until the parent is done


@contextlib.contextmanager
def _simulator(whole: bool = False) -> Iterator[tuple[str, str]]:
    """(openai base URL, anthropic base URL) of a simulator in its own process, for the block;
    ``whole``: each response in one write (see :func:`_whole_responses`)."""
    parent, child = mp.Pipe()
    server = mp.get_context("spawn").Process(target=_serve, args=(child, whole), daemon=True)
    server.start()  # a fresh interpreter: not under valgrind when this process is
    try:
        yield parent.recv()
    finally:
        parent.send("stop")
        server.join(10)


Workload = Callable[[Any, int, int], float]
MESSAGES = [{"role": "user", "content": "Benchmark me."}]


def _openai_chat(client: Any, calls: int, tokens: int) -> float:
    start = time.process_time()
    for _ in range(calls):
        for _chunk in client.chat.completions.create(
            model="bench", messages=MESSAGES, max_tokens=tokens, stream=True, stream_options={"include_usage": True}
        ):
            pass
    return (time.process_time() - start) / calls


def _openai_responses(client: Any, calls: int, tokens: int) -> float:
    start = time.process_time()
    for _ in range(calls):
        stream = client.responses.create(model="bench", input="Benchmark me.", max_output_tokens=tokens, stream=True)
        for _event in stream:
            pass
    return (time.process_time() - start) / calls


def _anthropic_create(client: Any, calls: int, tokens: int) -> float:
    start = time.process_time()
    for _ in range(calls):
        for _event in client.messages.create(model="bench", messages=MESSAGES, max_tokens=tokens, stream=True):
            pass
    return (time.process_time() - start) / calls


async def _openai_chat_async(client: Any, calls: int, tokens: int) -> None:
    for _ in range(calls):
        stream = await client.chat.completions.create(
            model="bench", messages=MESSAGES, max_tokens=tokens, stream=True, stream_options={"include_usage": True}
        )
        async for _chunk in stream:
            pass


async def _anthropic_create_async(client: Any, calls: int, tokens: int) -> None:
    for _ in range(calls):
        stream = await client.messages.create(model="bench", messages=MESSAGES, max_tokens=tokens, stream=True)
        async for _event in stream:
            pass


def _in_loop(calls_async: Callable[[Any, int, int], Any]) -> Workload:
    """A workload of async calls, run in an event loop that the client carries along: (loop, client)."""

    def run(target: Any, calls: int, tokens: int) -> float:
        loop, client = target
        start = time.process_time()
        loop.run_until_complete(calls_async(client, calls, tokens))
        return (time.process_time() - start) / calls

    return run


def _workloads(urls: tuple[str, str]) -> dict[str, tuple[Workload, Any]]:
    """{workload: (run, client)} against the simulator at ``urls``: streamed calls of each API."""
    import asyncio

    import anthropic
    import openai

    openai_url, anthropic_url = urls
    loop = asyncio.new_event_loop()
    options = {"api_key": "sk-bench", "max_retries": 0}
    return {
        "openai": (_openai_chat, openai.OpenAI(base_url=openai_url, **options)),
        "openai async": (_in_loop(_openai_chat_async), (loop, openai.AsyncOpenAI(base_url=openai_url, **options))),
        "openai responses": (_openai_responses, openai.OpenAI(base_url=openai_url, **options)),
        "anthropic": (_anthropic_create, anthropic.Anthropic(base_url=anthropic_url, **options)),
        "anthropic async": (
            _in_loop(_anthropic_create_async),
            (loop, anthropic.AsyncAnthropic(base_url=anthropic_url, **options)),
        ),
    }


# Items per stream besides the tokens: chat = role chunk + finish + usage; responses = created,
# in_progress, output_item.added, content_part.added, output_text.done, content_part.done,
# output_item.done, completed; anthropic = message_start, content_block_start, content_block_stop,
# message_delta, message_stop (no pings).
EXTRA_ITEMS = {"openai": 3, "openai async": 3, "openai responses": 8, "anthropic": 5, "anthropic async": 5}


def _split(name: str, added: dict[int, float]) -> tuple[float, float]:
    """(per call, per chunk) from what a SHORT and a LONG stream added: cost(n) = per_call + n * per_chunk."""
    per_chunk = (added[LONG] - added[SHORT]) / (LONG - SHORT)
    return added[SHORT] - per_chunk * (SHORT + EXTRA_ITEMS[name]), per_chunk


class _DropExporter:
    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def _configs() -> dict[str, Callable[[], dict[str, Any]]]:
    from opentelemetry.metrics import NoOpMeterProvider
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
    from opentelemetry.trace import NoOpTracerProvider

    def sdk(sampler: Any = None) -> dict[str, Any]:
        tracer_provider = TracerProvider(sampler=sampler) if sampler is not None else TracerProvider()
        tracer_provider.add_span_processor(BatchSpanProcessor(_DropExporter()))  # type: ignore[arg-type]
        return {
            "tracer_provider": tracer_provider,
            "meter_provider": MeterProvider(metric_readers=[InMemoryMetricReader()]),
        }

    def noop() -> dict[str, Any]:
        return {"tracer_provider": NoOpTracerProvider(), "meter_provider": NoOpMeterProvider()}

    return {
        "default": sdk,
        "phase spans always": lambda: {**sdk(), "phase_spans": "always"},
        "no phase spans": lambda: {**sdk(), "phase_spans": "never"},
        "10% sampled": lambda: sdk(ParentBased(TraceIdRatioBased(0.1))),
        "firsttoken only": noop,
        "firsttoken only, no wire hooks": lambda: {**noop(), "wire_phases": False},
    }


def end_to_end(calls: int, rounds: int) -> dict[str, dict[str, dict[str, float]]]:
    """{sdk: {config: {per_call_us, per_chunk_us, baseline_us}}}"""
    import firsttoken

    configs = _configs()
    samples: dict[tuple[str, str, int], list[float]] = {}
    with _simulator() as urls:
        workloads = _workloads(urls)
        for run, client in workloads.values():
            run(client, 20, SHORT)  # warm up connections, pydantic, imports
        for _ in range(rounds):
            for config in (None, *configs):
                if config is not None:
                    firsttoken.instrument(**configs[config]())
                for name, (run, client) in workloads.items():
                    for n in (SHORT, LONG):
                        samples.setdefault((name, config or "", n), []).append(run(client, calls, n))
                if config is not None:
                    firsttoken.uninstrument()
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name in workloads:
        base = {n: statistics.median(samples[(name, "", n)]) for n in (SHORT, LONG)}
        out[name] = {}
        for config in configs:
            added = {n: statistics.median(samples[(name, config, n)]) - base[n] for n in (SHORT, LONG)}
            per_call, per_chunk = _split(name, added)
            out[name][config] = {
                "baseline_us": base[SHORT] * 1e6,
                "per_call_us": per_call * 1e6,
                "per_chunk_us": per_chunk * 1e6,
            }
    return out


# -- instruction counts: a deterministic measure ------------------------------------------------

# Segments run by the child under callgrind, in this order; each becomes one callgrind dump.
COUNTED_CONFIGS = (
    "",
    "default",
    "phase spans always",
    "no phase spans",
    "10% sampled",
    "firsttoken only",
    "firsttoken only, no wire hooks",
)
COUNTED_CALLS = {SHORT: 20, LONG: 4}


def _counted_child(
    counted: Sequence[str], names: Sequence[str], stretches: dict[int, int], rounds: int = 1, each: bool = False
) -> None:
    """Runs under callgrind: the workloads ``names`` in each configuration, a stretch of ``calls``
    streamed calls of ``n`` tokens for each ``n: calls`` in ``stretches``, each inside
    ``sys.call_tracing`` so that callgrind collects exactly that stretch (``--toggle-collect``) and
    dumps it when it ends (``--dump-after``); ``each``: every call of the stretch inside its own
    ``sys.call_tracing``, a count of its own. Everything else (start-up, imports, warm-up, the
    instrument() and uninstrument() calls) is not counted."""
    import gc
    import sys

    import firsttoken

    configs = _configs()
    with _simulator(whole=True) as urls:
        workloads = {name: w for name, w in _workloads(urls).items() if name in names}
        for run, client in workloads.values():
            run(client, 5, SHORT)
        for number in range(rounds):  # the configurations in turn, round after round
            for config in ("", *counted):
                if config:
                    firsttoken.instrument(**configs[config]())
                for name, (run, client) in workloads.items():
                    for n, calls in stretches.items():
                        run(client, 2, n)  # warm this configuration's code paths
                        # Every stretch starts from the same garbage-collector state: all that exists
                        # is collected and then frozen, so collections during the stretch see only
                        # what the stretch itself allocated (still counted: allocating is a cost).
                        gc.collect()
                        gc.freeze()
                        if each:
                            for _ in range(calls):
                                sys.call_tracing(run, (client, 1, n))
                                print(f"segment\t{name}\t{config}\t{n}\t1\t{number}", flush=True)
                        else:
                            sys.call_tracing(run, (client, calls, n))
                            print(f"segment\t{name}\t{config}\t{n}\t{calls}\t{number}", flush=True)
                        gc.unfreeze()
                if config:
                    firsttoken.uninstrument()


def _user_seconds_per_call(run: Workload, client: Any, calls: int) -> float:
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_utime
    run(client, calls, SHORT)
    return (resource.getrusage(resource.RUSAGE_SELF).ru_utime - before) / calls


def _calibrate(calls: int = 300) -> dict[str, float]:
    """User-mode CPU seconds of one uninstrumented streamed call, natively: with the instruction
    count of the same call, the time one instruction of this workload takes on this machine."""
    out: dict[str, list[float]] = {}
    with _simulator() as urls:
        workloads = _workloads(urls)
        for run, client in workloads.values():
            run(client, 20, SHORT)
        for _ in range(5):
            for name, (run, client) in workloads.items():
                out.setdefault(name, []).append(_user_seconds_per_call(run, client, calls // 5))
    return {name: statistics.median(values) for name, values in out.items()}


def _count(
    counted: Sequence[str], names: Sequence[str], stretches: dict[int, int]
) -> dict[tuple[str, str, int], float]:
    """{(workload, configuration, tokens): instructions per call}, counted by a child under callgrind
    (the uninstrumented runs under the configuration "")."""
    return {key: rounds[0] for key, rounds in count_rounds(counted, names, stretches, 1).items()}


def count_rounds(
    counted: Sequence[str], names: Sequence[str], stretches: dict[int, int], rounds: int, each: bool = False
) -> dict[tuple[str, str, int], list[float]]:
    """{(workload, configuration, tokens): instructions per call in each round}: one child under
    callgrind runs every configuration in turn, ``rounds`` times over; ``each``: every call counted
    on its own (then one figure per call, round after round)."""
    import os
    import shutil
    import subprocess
    import sys
    import tempfile

    if shutil.which("valgrind") is None:
        raise SystemExit("counting instructions needs valgrind (Debian: apt-get install valgrind)")
    plan = "|".join(
        [
            ";".join(counted),
            ";".join(names),
            ",".join(f"{n}:{c}" for n, c in stretches.items()),
            str(rounds),
            str(int(each)),
        ]
    )
    with tempfile.TemporaryDirectory() as tmp:
        out_file = os.path.join(tmp, "callgrind.out")
        proc = subprocess.run(
            [
                "valgrind", "--tool=callgrind", "--collect-atstart=no", "--toggle-collect=sys_call_tracing",
                "--dump-after=sys_call_tracing", f"--callgrind-out-file={out_file}",
                sys.executable, os.path.abspath(__file__), "--counted-child", plan,
            ],
            capture_output=True, text=True, check=False, env={**os.environ, "PYTHONHASHSEED": "0"},
        )  # fmt: skip
        segments = [line.split("\t")[1:] for line in proc.stdout.splitlines() if line.startswith("segment\t")]
        if proc.returncode != 0 or not segments:
            raise SystemExit(f"the callgrind run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        counts: dict[tuple[str, str, int], list[float]] = {}
        for number, (name, config, n, calls, _round) in enumerate(segments, start=1):
            with open(f"{out_file}.{number}") as dump:
                total = next(int(line.split()[1]) for line in dump if line.startswith(("summary:", "totals:")))
            counts.setdefault((name, config, int(n)), []).append(total / int(calls))
    return counts


def count_bytecodes(config: str, names: Sequence[str], calls: int, warm: int = 5) -> dict[str, list[int]]:
    """{workload: Python bytecode instructions that firsttoken's own code ran, per call}: each of
    ``calls`` streamed calls of SHORT tokens under ``config``, after ``warm`` uncounted ones, counted on
    its own with the interpreter's opcode trace (``frame.f_trace_opcodes``) in the frames of
    firsttoken's package (its simulator, in another process here, aside). Unlike callgrind's count it
    does not move with where CPython's dict and type caches put their entries (a build whose per-call
    code is the same counts the same), and the simulator's whole-response writes make the reads alike;
    it sees none of the C work firsttoken's Python calls into (the callgrind count does). The counting
    thread only: with no-op providers no other thread runs firsttoken's code per call."""
    import gc
    import os
    import sys

    import firsttoken

    root = os.path.dirname(os.path.abspath(firsttoken.__file__)) + os.sep
    skip = os.path.join(root, "sim") + os.sep
    ran = [0]

    def opcodes(frame: Any, event: str, arg: Any) -> Any:
        if event == "opcode":
            ran[0] += 1
        return opcodes

    def calls_into(frame: Any, event: str, arg: Any) -> Any:
        where = frame.f_code.co_filename
        if where.startswith(root) and not where.startswith(skip):
            frame.f_trace_lines = False
            frame.f_trace_opcodes = True
            return opcodes
        return None

    out: dict[str, list[int]] = {}
    with _simulator(whole=True) as urls:
        workloads = {name: w for name, w in _workloads(urls).items() if name in names}
        firsttoken.instrument(**_configs()[config]())
        try:
            for name, (run, client) in workloads.items():
                run(client, warm, SHORT)
                gc.collect()
                for _ in range(calls):
                    ran[0] = 0
                    sys.settrace(calls_into)
                    try:
                        run(client, 1, SHORT)
                    finally:
                        sys.settrace(None)
                    out.setdefault(name, []).append(ran[0])
        finally:
            firsttoken.uninstrument()
    return out


def instructions(counted: Sequence[str] = COUNTED_CONFIGS[1:]) -> dict[str, dict[str, dict[str, float]]]:
    """{sdk: {config: {per_call_instr, per_chunk_instr, per_call_us, per_chunk_us, baseline_instr}}}

    Instruction counts under ``valgrind --tool=callgrind`` are repeatable (the same workload counts
    the same within about 0.5 %, whatever else the machine is doing), so differences of a few
    microseconds show, where CPU time on a 2-core machine drifts by ±50-100 µs per call. They are
    turned into microseconds with the time one instruction of the uninstrumented workload takes
    natively (user-mode CPU time / instructions).
    """
    counts = _count(counted, list(EXTRA_ITEMS), COUNTED_CALLS)
    seconds = _calibrate()
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name in seconds:
        base = {n: counts[(name, "", n)] for n in COUNTED_CALLS}
        us_per_instr = seconds[name] / base[SHORT] * 1e6
        out[name] = {}
        for config in counted:
            per_call, per_chunk = _split(name, {n: counts[(name, config, n)] - base[n] for n in COUNTED_CALLS})
            out[name][config] = {
                "baseline_instr": base[SHORT],
                "baseline_us": seconds[name] * 1e6,
                "per_call_instr": per_call,
                "per_chunk_instr": per_chunk,
                "per_call_us": per_call * us_per_instr,
                "per_chunk_us": per_chunk * us_per_instr,
            }
    return out


def httpcore_trace_cost(calls: int, rounds: int) -> float:
    """CPU (µs per request) that httpcore itself spends when a request carries a trace callback.

    A plain httpx2 POST with and without a callback that does nothing: the difference is the
    price of the trace extension that firsttoken's wire phases are read from, before any of
    firsttoken's own code runs.
    """
    import httpx2

    def noop(event: str, info: dict[str, Any]) -> None:
        pass

    diffs = []
    with _simulator() as (openai_url, _), httpx2.Client() as client:
        url = f"{openai_url}/chat/completions"
        body = {"model": "bench", "messages": [{"role": "user", "content": "x"}], "max_tokens": SHORT}
        for _ in range(20):
            client.post(url, json=body)
        for _ in range(rounds):
            start = time.process_time()
            for _ in range(calls):
                client.post(url, json=body)
            plain = time.process_time() - start
            start = time.process_time()
            for _ in range(calls):
                client.post(url, json=body, extensions={"trace": noop})
            diffs.append((time.process_time() - start - plain) / calls)
    return statistics.median(diffs) * 1e6


def micro_wire_hooks(requests: int = 20_000) -> float:
    """firsttoken's wire hooks alone (µs per request): the trace callback for every event httpcore
    emits for a request on a new HTTP/1.1 connection, the DNS hook, the callback's installation and
    the TLS-free facts, with no network in the loop."""
    import httpx2

    from firsttoken import semconv as sc
    from firsttoken import transport
    from firsttoken.timeline import Timeline

    events = [
        f"{prefix}.{step}.{edge}"
        for prefix, step in (
            ("connection", "connect_tcp"),
            ("http11", "send_request_headers"),
            ("http11", "send_request_body"),
            ("http11", "receive_response_headers"),
            ("http11", "receive_response_body"),
            ("http11", "response_closed"),
        )
        for edge in ("started", "complete")
    ]
    lookup = transport.__dict__["_getaddrinfo"]

    def resolve(*args: Any, **kwargs: Any) -> Any:
        return None

    def one() -> None:
        tl = Timeline(
            provider="openai", operation=sc.OP_CHAT, request_model="m", server_address=None, server_port=None,
            stream=True, on_finish=lambda _t: None,
        )  # fmt: skip
        request = httpx2.Request("POST", "http://127.0.0.1:1/v1/chat/completions", content=b"{}")
        transport._before_send(tl, request, False)
        trace = request.extensions["trace"]
        for event in events[:2]:
            trace(event, {})
        lookup(resolve, None, ("127.0.0.1", 1), {})
        for event in events[2:]:
            trace(event, {})

    transport._wire = True
    one()
    start = time.perf_counter()
    for _ in range(requests):
        one()
    with_hooks = time.perf_counter() - start
    transport._wire = False
    start = time.perf_counter()
    for _ in range(requests):
        tl = Timeline(
            provider="openai", operation=sc.OP_CHAT, request_model="m", server_address=None, server_port=None,
            stream=True, on_finish=lambda _t: None,
        )  # fmt: skip
        transport._before_send(
            tl, httpx2.Request("POST", "http://127.0.0.1:1/v1/chat/completions", content=b"{}"), False
        )
    without = time.perf_counter() - start
    transport._wire = True
    return (with_hooks - without) / requests * 1e6


def micro_per_chunk(chunks: int = 200_000) -> float:
    """The observer's own cost per chunk (µs), with no network and no SDK parsing in the loop."""
    from openai.types.chat import ChatCompletionChunk

    from firsttoken import semconv as sc
    from firsttoken.providers.openai import observe_chat_chunk
    from firsttoken.streams import observe_sync
    from firsttoken.timeline import Timeline

    items = [
        ChatCompletionChunk.model_validate(
            {
                "id": "c",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": "m",
                "choices": [{"index": 0, "delta": {"content": f"t{i}"}, "finish_reason": None}],
            }
        )
        for i in range(1000)
    ] * (chunks // 1000)

    def bare() -> Any:
        yield from items

    start = time.perf_counter()
    for _ in bare():
        pass
    base = time.perf_counter() - start
    tl = Timeline(
        provider="openai", operation=sc.OP_CHAT, request_model="m", server_address=None, server_port=None,
        stream=True, on_finish=lambda _t: None,
    )  # fmt: skip
    start = time.perf_counter()
    for _ in observe_sync(bare(), tl, observe_chat_chunk):
        pass
    return (time.perf_counter() - start - base) / len(items) * 1e6


def micro_prefix_hash(calls: int = 2_000) -> tuple[float, float]:
    """(µs on first sight, µs on a repeat) to label a realistic prompt prefix: a 4 KB system prompt
    and a dozen tool definitions (about 14 KB of JSON), as an agent sends on every call."""
    from firsttoken.providers import _levers

    tool: dict[str, Any] = {
        "type": "function",
        "function": {
            "name": "tool",
            "description": "Does a thing with the input and returns a result. " * 5,
            "parameters": {
                "type": "object",
                "properties": {f"p{j}": {"type": "string", "description": "param " * 5} for j in range(6)},
                "required": ["p0"],
            },
        },
    }
    tools = [{**tool, "function": {**tool["function"], "name": f"tool_{i}"}} for i in range(12)]
    system = "You are a helpful assistant. " * 150
    _levers.reset()
    start = time.perf_counter()
    for n in range(calls):
        _levers.prefix_hash(([system + str(n)], tools))  # new every time
    first = (time.perf_counter() - start) / calls
    _levers.prefix_hash(([system], tools))
    _levers.prefix_hash(([system], tools))
    start = time.perf_counter()
    for _ in range(calls):
        _levers.prefix_hash(([system], [dict(t) for t in tools]))  # equal, built anew, as SDKs do
    repeat = (time.perf_counter() - start) / calls
    _levers.reset()
    return first * 1e6, repeat * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls and rounds")
    parser.add_argument("--calls", type=int, default=100, help="streamed calls per workload (default: 100)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default: 5)")
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count instructions under valgrind's callgrind instead of timing (deterministic, ~3 minutes)",
    )
    parser.add_argument(
        "--configs",
        default=";".join(COUNTED_CONFIGS[1:]),
        help="with --instructions: the configurations to count, separated by ';' (default: all)",
    )
    parser.add_argument("--counted-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.counted_child is not None:
        configs, names, stretches, rounds, each = args.counted_child.split("|")
        _counted_child(
            configs.split(";"),
            names.split(";"),
            {int(n): int(c) for n, c in (p.split(":") for p in stretches.split(","))},
            int(rounds),
            each == "1",
        )
        return
    if args.instructions:
        wanted = [c.strip() for c in args.configs.split(";") if c.strip()]
        unknown = sorted(set(wanted) - set(COUNTED_CONFIGS[1:]))
        if unknown or not wanted:
            parser.error(f"--configs: unknown {unknown}; choose from {'; '.join(COUNTED_CONFIGS[1:])}")
        counted = instructions(wanted)
        print("Instructions added by firsttoken per call and per chunk (callgrind), and what they take here\n")
        print(f"{'sdk':10} {'configuration':32} {'per call':>12} {'µs':>7} {'per chunk':>10} {'µs':>6}")
        for name, configs in counted.items():
            for config, r in configs.items():
                print(
                    f"{name:10} {config:32} {r['per_call_instr']:12,.0f} {r['per_call_us']:7.1f} "
                    f"{r['per_chunk_instr']:10,.0f} {r['per_chunk_us']:6.2f}"
                )
            base = next(iter(configs.values()))
            print(f"{name:10} {'(uninstrumented call)':32} {base['baseline_instr']:12,.0f} {base['baseline_us']:7.1f}")
            own = configs.get("firsttoken only")
            if own is not None:
                call_ok = own["per_call_instr"] <= GOAL_OWN_PER_CALL_INSTR
                chunk_ok = max(r["per_chunk_instr"] for r in configs.values()) <= GOAL_PER_CHUNK_INSTR
                print(
                    f"{name:10} own code per call {'meets' if call_ok else 'misses'} its goal, "
                    f"per chunk {'meets' if chunk_ok else 'misses'} its goal"
                )
            print()
        print(GOALS)
        return
    if args.calls < 1 or args.rounds < 1:
        parser.error("--calls and --rounds must be at least 1")
    calls, rounds = (30, 2) if args.quick else (args.calls, args.rounds)
    results = end_to_end(calls, rounds)
    print(f"CPU added by firsttoken (median of {rounds} interleaved rounds of {calls} streamed calls)\n")
    print(f"{'sdk':10} {'configuration':32} {'per call µs':>12} {'per chunk µs':>13}")
    for name, configs in results.items():
        for config, r in configs.items():
            print(f"{name:10} {config:32} {r['per_call_us']:12.1f} {r['per_chunk_us']:13.2f}")
        own = configs["firsttoken only"]["per_call_us"]
        wire = own - configs["firsttoken only, no wire hooks"]["per_call_us"]
        print(f"{name:10} {'wire hooks alone':32} {wire:12.1f}")
        print(f"{name:10} {'(uninstrumented call)':32} {configs['default']['baseline_us']:12.1f}\n")
    print(f"observer hot path alone: {micro_per_chunk(50_000 if args.quick else 200_000):.2f} µs per chunk")
    print(f"firsttoken's wire hooks alone (no network): {micro_wire_hooks():.2f} µs per request")
    first, repeat = micro_prefix_hash()
    print(f"prompt-prefix label, 14 KB prefix: {first:.0f} µs the first time, {repeat:.1f} µs on a repeat")
    print(
        f"httpcore's own cost of a trace callback that does nothing: "
        f"{httpcore_trace_cost(calls * 3, rounds):.1f} µs per request"
    )
    print(GOALS)


if __name__ == "__main__":
    main()
