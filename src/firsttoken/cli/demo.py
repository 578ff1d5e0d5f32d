"""``firsttoken demo``: a varied workload through the real SDKs against the built-in simulator.

It needs nothing but this package and the ``openai`` SDK (``anthropic`` too, for its half): the
simulator serves on loopback, spans land in memory, and the report is printed from what firsttoken
recorded, not from the demo's own clocks. With ``OTEL_EXPORTER_OTLP_ENDPOINT`` set, spans and
metrics also go there (that is how the docker compose stack fills its dashboards).

Three parts:

1. the warm-up: one call of each API kind, before firsttoken instruments anything, so that no
   measured call pays an SDK's first-call cost (the openai SDK's first streamed ``responses`` call
   in a process takes about 0.4 s more than later ones, with or without firsttoken);
2. the workload: user actions (``firsttoken.action``) of three traffic classes and none, making
   one or two calls each, streamed or not, to four OpenAI-style and two Anthropic-style models
   with their own latency profiles, sharing a long cacheable system prompt. Conversations carry
   their history from turn to turn (context growth), one model reports the server's own prefill
   time as Groq does, a few calls are rate limited and retried, and one user action in
   :data:`FAIL_EVERY` has a call that stays failed after the SDK's retries. Reported per model:
   failed calls apart, p50/p95/p99 of the successful ones;
3. the levers: each latency lever as a before/after pair on the simulator, with the measured
   difference (skipped with ``--continuous`` and ``--no-levers``).
"""

from __future__ import annotations

import argparse
import collections
import contextvars
import gc
import importlib.util
import os
import random
import sys
import tempfile
import threading
import time
import urllib.parse
import warnings
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, NoReturn

from .. import semconv as sc
from ..charts import percentile
from ..config import FirstTokenWarning, redact
from .bench_html import write_spans_report
from .report import collect, render, table, terminal_width, where_the_time_went, wrap

# Latency profiles: fast and slow OpenAI-style models, a reasoning one, an open-weights one behind
# an OpenAI-compatible API that reports its server timing, and two Anthropic-style ones.
OPENAI_MODELS: dict[str, dict[str, Any]] = {
    "gpt-4o-mini": {"queue_ms": 40, "prefill_ms_per_1k_tokens": 120, "decode_tokens_per_s": 140},
    "gpt-4o": {"queue_ms": 90, "prefill_ms_per_1k_tokens": 300, "decode_tokens_per_s": 70},
    "o3-mini": {"queue_ms": 70, "prefill_ms_per_1k_tokens": 200, "decode_tokens_per_s": 110},
    "llama-3.3-70b": {"queue_ms": 30, "prefill_ms_per_1k_tokens": 60, "decode_tokens_per_s": 250},
}
ANTHROPIC_MODELS: dict[str, dict[str, Any]] = {
    "claude-haiku-4-5": {"queue_ms": 50, "prefill_ms_per_1k_tokens": 100, "decode_tokens_per_s": 150},
    "claude-sonnet-4-6": {"queue_ms": 110, "prefill_ms_per_1k_tokens": 250, "decode_tokens_per_s": 80},
}
SERVER_TIMING = {"llama-3.3-70b": "groq"}
"""Models whose simulated server reports its queue, prefill (``prompt``) and decode time in the
response body, Groq's way (chat completions only): firsttoken.client.server_timing.* and the
"server prefill vs the rest" panel."""
# A long, stable system prompt: calls that share it hit the simulator's prompt cache.
SYSTEM_PROMPT = "You are the support assistant of a bicycle shop. Answer briefly and precisely. " + " ".join(
    f"Policy {i}: repairs are booked online, parts are ordered within {i % 5 + 1} days." for i in range(90)
)
QUESTIONS = (
    "How long does a brake repair take?",
    "Can I return a helmet I bought last week?",
    "Do you service electric bikes?",
    "What does a full tune-up include?",
    "Is there a warranty on wheels?",
)
TICKETS = (
    "Summarize this ticket: the customer's rear derailleur skips gears after a repair.",
    "Summarize this ticket: an order of brake pads arrived without the retaining pins.",
    "Summarize this ticket: a customer asks whether a carbon frame can be repainted.",
)
TRAFFIC: tuple[tuple[str | None, int], ...] = (("interactive", 6), ("async", 3), ("batch", 1), (None, 1))
"""Traffic classes of the user actions and their weights; ``None``: actions outside any class
(their calls carry no firsttoken.traffic_class, and the default targets apply)."""
CONVERSATION_LENGTHS = (1, 3, 6, 12, 20, 36)
"""Turns a conversation runs for before it ends: its calls pass through every turn bucket
(1, 2-3, 4-7, 8-15, 16-31, 32+) of firsttoken.client.conversation.*."""
FAIL_EVERY = 100
FAIL_FIRST = 20
"""The FAIL_FIRST-th user action and every FAIL_EVERY-th after it have a call that the simulator
answers with 503 on every attempt: it stays failed after the SDK's two retries. Always an
interactive action, the largest class, the models taking turns, so that no model's error ratio
comes near the 5% of the LLMErrorRatioHigh alert (about 1.5% of each model's interactive calls)."""
RATE_LIMITED = 0.04
"""Share of user actions after which the simulator rate-limits the next request once (the SDK
retries it and succeeds: a retry, not an error)."""
OPENAI_KEY = "sk-demo-not-a-real-key"
ANTHROPIC_KEY = "sk-ant-demo-not-a-real-key"
CTRL_C_FLUSH_S = 1.0
"""After Ctrl-C in --continuous, the most the last flush to the collector may take."""
WARM_UP_TIMEOUT_S = 60.0
"""A warm-up call to a --server that takes longer than this is an error (the SDK connects within 5 s)."""
WARM_UP_NOTE = (
    "Warm-up: before measuring, each API kind ({kinds}) was called once, not instrumented: a "
    "process's first call of a kind pays the SDK's own first-call cost (the openai SDK's first "
    "streamed responses call takes about 0.4 s more than later ones), which is not the model's latency."
)


WORKLOAD_PROGRESS = "workload: {done}/{total} user actions"


class UsageError(Exception):
    """A flag that cannot work: one line, exit 2, before anything is measured."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"firsttoken demo: error: {message} (firsttoken demo --help lists the options)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="firsttoken demo",
        description="Drive a varied workload through the real openai and anthropic SDKs against the built-in "
        "simulator and print what firsttoken measured, then measure each latency lever before and after.",
    )
    p.add_argument("--actions", type=int, default=40, help="user actions in the workload (default: 40)")
    p.add_argument("--concurrency", type=int, default=4, help="actions in flight at once (default: 4)")
    p.add_argument("--seed", type=int, default=7, help="seed of the workload and the simulator (default: 7)")
    p.add_argument("--no-levers", action="store_true", help="skip the before/after measurement of the levers")
    p.add_argument(
        "--html",
        metavar="PATH",
        help="write the workload's HTML report there, as firsttoken bench does ('' for none; default: "
        f"{_default_html()})",
    )
    p.add_argument(
        "--continuous",
        action="store_true",
        help="keep the workload running (the load generator of the docker compose stack); "
        "prints the report every --interval seconds until interrupted",
    )
    p.add_argument(
        "--interval", type=float, default=30.0, help="seconds between reports with --continuous (default: 30)"
    )
    p.add_argument(
        "--server",
        metavar="URL",
        help="run the workload against this OpenAI-compatible server (e.g. http://127.0.0.1:8080 for llama.cpp's "
        "llama-server) instead of the simulator: no injected faults, no levers; key from OPENAI_API_KEY",
    )
    p.add_argument("--model", help="with --server: the model every call asks for (default: default)")
    p.add_argument(
        "--server-anthropic",
        action="store_true",
        help="with --server, also call its Anthropic Messages API (llama-server has one); key from ANTHROPIC_API_KEY",
    )
    return p


def _default_html() -> str:
    return os.path.join(tempfile.gettempdir(), "firsttoken-demo.html")


def check_server_url(url: str) -> str:
    """The --server URL, checked as ``firsttoken bench`` checks base URLs; :class:`UsageError` if unusable."""
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"--server {redact(url)!r} must start with http:// or https://")
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as exc:
        raise UsageError(f"--server {redact(url)!r} is not a URL: {exc}") from None
    if not parts.hostname:
        raise UsageError(f"--server {redact(url)!r} names no host")
    return url


def check_html_path(path: str) -> None:
    """Whether the report can be written there, tried now (not after the run): :class:`UsageError` if not."""
    if os.path.isdir(path):
        raise UsageError(f"--html {path!r} is a directory; give a file name")
    existed = os.path.exists(path)
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise UsageError(f"--html {path!r}: cannot write there: {exc.strerror}") from None
    if not existed:
        os.remove(path)


def _check(args: argparse.Namespace) -> str | None:
    """Every flag checked before anything runs; returns the HTML report's path (None: no report)."""
    for name in ("actions", "concurrency", "interval"):
        if getattr(args, name) <= 0:
            raise UsageError(f"--{name} must be positive, got {getattr(args, name)}")
    if args.server is None:
        given = [
            flag
            for flag, on in (("--model", args.model is not None), ("--server-anthropic", args.server_anthropic))
            if on
        ]
        if given:
            verb = "apply" if len(given) > 1 else "applies"
            raise UsageError(f"{' and '.join(given)} only {verb} with --server URL (the simulator serves its models)")
    else:
        check_server_url(args.server)
    html = _default_html() if args.html is None else args.html
    if not html:
        return None
    if importlib.util.find_spec("plotly") is None:
        if args.html is None:
            return None  # the default report needs the cli extra; said at the end
        raise UsageError("--html needs plotly: pip install 'plotly>=5.20' (firsttoken's cli extra)")
    check_html_path(html)
    return html


class _RealServer:
    """Stands where the simulator does, for ``--server``: its base URLs, and no faults to inject."""

    def __init__(self, url: str, anthropic: bool) -> None:
        base = url.rstrip("/")
        root = base[: -len("/v1")] if base.endswith("/v1") else base
        self.url = root
        self.openai_base_url = f"{root}/v1"
        self.anthropic_base_url = root if anthropic else None

    def inject(self, *args: Any, **kwargs: Any) -> None:
        """Faults are the simulator's; a real server has its own."""

    def __enter__(self) -> _RealServer:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def _anthropic_sdk() -> Any:
    try:
        import anthropic
    except ImportError:
        return None
    return anthropic


class _Clients:
    """One client per SDK, reused by every call: the way apps should do it."""

    def __init__(self, sim: Any, *, max_retries: int = 2, timeout: float | None = None) -> None:
        import openai

        real = isinstance(sim, _RealServer)
        openai_key = os.environ.get("OPENAI_API_KEY", OPENAI_KEY) if real else OPENAI_KEY
        options: dict[str, Any] = {"max_retries": max_retries}
        if timeout is not None:
            options["timeout"] = timeout
        self.openai = openai.OpenAI(base_url=sim.openai_base_url, api_key=openai_key, **options)
        self.anthropic: Any = None
        where = f"against {redact(sim.url)}" if real else "against the built-in simulator"
        #: What the report's title says the calls went through, and to what.
        self.through = f"through the openai SDK {openai.__version__}, {where}"
        anthropic = _anthropic_sdk()
        if sim.anthropic_base_url is None or anthropic is None:
            return
        anthropic_key = os.environ.get("ANTHROPIC_API_KEY", ANTHROPIC_KEY) if real else ANTHROPIC_KEY
        self.anthropic = anthropic.Anthropic(base_url=sim.anthropic_base_url, api_key=anthropic_key, **options)
        self.through = (
            f"through the openai SDK {openai.__version__} and the anthropic SDK {anthropic.__version__}, {where}"
        )

    def close(self) -> None:
        self.openai.close()
        if self.anthropic is not None:
            self.anthropic.close()


# -- one call -------------------------------------------------------------------------------------


@dataclass
class _Call:
    """One LLM call of an action: what to ask, of which model, through which API."""

    provider: str  # "openai" or "anthropic"
    model: str
    kind: str  # "stream", "chat" or "responses" (for anthropic: the stream helper's aggregate)
    question: str
    max_tokens: int
    system: bool  # with the long, cacheable system prompt
    history: list[tuple[str, str]] = field(default_factory=list)
    """The conversation's earlier turns (question, answer), sent before the question."""
    headers: dict[str, str] = field(default_factory=dict)
    """Simulator instructions: server-timing style, a fault on every attempt of this call."""

    def run(self, clients: _Clients) -> str:
        """Make the call; the answer's text."""
        if self.provider == "openai":
            return _openai_call(clients.openai, self)
        return _anthropic_call(clients.anthropic, self)


def _turns(call: _Call) -> list[dict[str, str]]:
    msgs = []
    for question, answer in call.history:
        msgs += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    return [*msgs, {"role": "user", "content": call.question}]


def _openai_call(c: Any, call: _Call) -> str:
    extra: dict[str, Any] = {"extra_headers": call.headers} if call.headers else {}
    if call.kind == "responses":
        text = []
        for event in c.responses.create(
            model=call.model,
            instructions=SYSTEM_PROMPT if call.system else None,
            # Each item typed: the Responses API allows leaving "type" out, llama-server does not.
            input=[{"type": "message", **turn} for turn in _turns(call)],
            max_output_tokens=call.max_tokens,
            stream=True,
            **extra,
        ):
            if event.type == "response.output_text.delta":
                text.append(event.delta)
        return "".join(text)
    messages = [{"role": "system", "content": SYSTEM_PROMPT}] if call.system else []
    messages += _turns(call)
    if call.kind == "chat":
        response = c.chat.completions.create(model=call.model, messages=messages, max_tokens=call.max_tokens, **extra)
        return response.choices[0].message.content or "" if response.choices else ""
    text = []
    for chunk in c.chat.completions.create(
        model=call.model,
        messages=messages,
        max_tokens=call.max_tokens,
        stream=True,
        stream_options={"include_usage": True},
        **extra,
    ):
        if chunk.choices and chunk.choices[0].delta.content:
            text.append(chunk.choices[0].delta.content)
    return "".join(text)


def _anthropic_call(c: Any, call: _Call) -> str:
    kwargs: dict[str, Any] = {"model": call.model, "max_tokens": call.max_tokens, "messages": _turns(call)}
    if call.system:
        kwargs["system"] = [{"type": "text", "text": SYSTEM_PROMPT, "cache_control": {"type": "ephemeral"}}]
    if call.headers:
        kwargs["extra_headers"] = call.headers
    if call.kind == "chat":
        message = c.messages.create(**kwargs)
    elif call.kind == "responses":  # the stream helper, consumed through its aggregate only
        with c.messages.stream(**kwargs) as stream:
            message = stream.get_final_message()
    else:
        with c.messages.stream(**kwargs) as stream:
            return "".join(stream.text_stream)
    return "".join(block.text for block in message.content if block.type == "text")


@dataclass
class _WarmUp:
    kinds: list[str]
    """The API kinds called."""
    failure: str | None = None
    """Why the server cannot be used (nothing would be measured)."""
    no_responses: str | None = None
    """With --server: why its openai Responses API is left out of the workload (it has none)."""


NOT_THERE = (404, 405, 501)
"""HTTP statuses of a server that does not have an API at all (not one that failed a request)."""


def _warm_up(sim: Any, model: str | None) -> _WarmUp:
    """One call of each API kind, each SDK, in parallel, before firsttoken instruments anything."""
    clients = _Clients(sim, max_retries=0, timeout=WARM_UP_TIMEOUT_S)
    calls = [
        ("chat completions", _Call("openai", model or "gpt-4o-mini", "chat", "Hi", 4, False)),
        ("streamed chat completions", _Call("openai", model or "gpt-4o-mini", "stream", "Hi", 4, False)),
        ("streamed responses", _Call("openai", model or "gpt-4o-mini", "responses", "Hi", 4, False)),
    ]
    if clients.anthropic is not None:
        calls += [
            ("messages", _Call("anthropic", model or "claude-haiku-4-5", "chat", "Hi", 4, False)),
            ("streamed messages", _Call("anthropic", model or "claude-haiku-4-5", "stream", "Hi", 4, False)),
        ]
    done = _WarmUp([kind for kind, _ in calls])
    try:
        with ThreadPoolExecutor(len(calls)) as pool:
            futures = [(kind, pool.submit(call.run, clients)) for kind, call in calls]
            for kind, future in futures:
                try:
                    future.result()
                except Exception as exc:
                    why = f"the warm-up call ({kind}) to {redact(sim.url)} failed: {_describe(exc)}"
                    real = isinstance(sim, _RealServer)
                    if real and kind == "streamed responses" and getattr(exc, "status_code", None) in NOT_THERE:
                        done.no_responses = why
                        done.kinds.remove(kind)
                    elif done.failure is None:
                        done.failure = why
    finally:
        clients.close()
    return done


def _describe(exc: BaseException) -> str:
    message = " ".join(str(exc).split()).rstrip(".")
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


# -- the workload ---------------------------------------------------------------------------------


@dataclass
class _Conversation:
    """A user's conversation with one model: each call is a turn, its answer part of the next prompt."""

    id: str
    length: int
    traffic: str
    provider: str
    model: str
    kind: str
    """One API kind for the whole conversation, as an app's chat feature uses one."""
    system: bool
    turns: int = 0
    history: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class _Action:
    """What one user action does, decided up front (deterministic for a seed)."""

    name: str
    traffic: str | None
    calls: list[_Call]
    conversation: _Conversation | None = None
    planned_failure: bool = False


class _Outcomes:
    """How the user actions ended: planned failures apart from the rest, each kind of error said once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done = 0
        self.planned = 0
        self.failed: dict[str, int] = {}
        self.first: dict[str, str] = {}

    def failure(self, exc: BaseException, quiet: bool) -> None:
        kind = type(exc).__name__
        with self.lock:
            self.failed[kind] = self.failed.get(kind, 0) + 1
            first = kind not in self.first
            if first:
                self.first[kind] = _describe(exc)
        if first and not quiet:
            print(f"  (a user action failed: {self.first[kind]})", file=sys.stderr, flush=True)

    @property
    def unexpected(self) -> int:
        return sum(self.failed.values())


class _Workload:
    """Picks what each user action does; deterministic for a seed."""

    def __init__(self, clients: _Clients, sim: Any, seed: int, model: str | None = None) -> None:
        self.clients = clients
        self.sim = sim
        self.model = model
        """With ``--server``: the one model every call asks for."""
        self.real = isinstance(sim, _RealServer)
        self.responses = True
        """Whether the server has the openai Responses API (a --server may not)."""
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.count = 0
        self.failures = 0
        self.conversations = 0
        self.planned: collections.Counter[tuple[str, str]] = collections.Counter()
        """Calls planned so far per (provider, model), including --server's one model."""
        self.idle: list[_Conversation] = []
        """Conversations between turns; an action takes one (or starts one) and gives it back."""
        self.outcomes = _Outcomes()

    def _pick_model(self) -> tuple[str, str]:
        providers = ["openai"] * 4 + (["anthropic"] * 2 if self.clients.anthropic is not None else [])
        provider = self.rng.choice(providers)
        models = OPENAI_MODELS if provider == "openai" else ANTHROPIC_MODELS
        return provider, self.model or self.rng.choice(tuple(models))

    def _models(self) -> list[tuple[str, str]]:
        options = [("openai", m) for m in OPENAI_MODELS]
        if self.clients.anthropic is not None:
            options += [("anthropic", m) for m in ANTHROPIC_MODELS]
        return options

    def _least_used_model(self) -> tuple[str, str]:
        """A new conversation's model: one of those with the fewest calls so far (the seed picks),
        so that every model has calls in every stretch of the run, however long the conversations."""
        options = self._models()
        fewest = min(self.planned[o] for o in options)
        provider, model = self.rng.choice([o for o in options if self.planned[o] == fewest])
        return provider, self.model or model

    def _kind(self, provider: str, model: str) -> str:
        only_chat = model in SERVER_TIMING or (provider == "openai" and not self.responses)
        kinds = ("stream", "chat") if only_chat else ("stream", "chat", "responses")
        return self.rng.choices(kinds, weights=(6, 2, 2)[: len(kinds)])[0]

    def _call(self, provider: str, model: str, question: str, system: bool, kind: str | None = None) -> _Call:
        kind = kind or self._kind(provider, model)
        self.planned[(provider, model)] += 1
        call = _Call(provider, model, kind, question, self.rng.randint(24, 72), system)
        if model in SERVER_TIMING and not self.real:
            from ..sim import PROVIDER_HEADER

            call.headers[PROVIDER_HEADER] = SERVER_TIMING[model]
        return call

    def _conversation(self, traffic: str) -> _Conversation:
        for n in range(len(self.idle) - 1, -1, -1):  # the latest given back: conversations grow deep
            if self.idle[n].traffic == traffic:
                return self.idle.pop(n)
        self.conversations += 1
        provider, model = self._least_used_model()
        length = self.rng.choice(CONVERSATION_LENGTHS)
        system = self.rng.random() < 0.7
        conv_id = f"conv-{self.conversations}"
        return _Conversation(conv_id, length, traffic, provider, model, self._kind(provider, model), system)

    def _action(self) -> _Action:
        traffic = self.rng.choices([t for t, _ in TRAFFIC], weights=[w for _, w in TRAFFIC])[0]
        n_calls = self.rng.choice((1, 1, 1, 2))
        if traffic in ("interactive", "async"):
            conv = self._conversation(traffic)
            n_calls = min(n_calls, conv.length - conv.turns)
            calls = [
                self._call(conv.provider, conv.model, self.rng.choice(QUESTIONS), conv.system, conv.kind)
                for _ in range(n_calls)
            ]
            conv.turns += n_calls
            return _Action("answer_question", traffic, calls, conv)
        calls = []
        for _ in range(n_calls):
            provider, model = self._pick_model()
            calls.append(self._call(provider, model, self.rng.choice(TICKETS), self.rng.random() < 0.7))
        return _Action("summarize_ticket", traffic, calls)

    def _failing_action(self) -> _Action:
        """An interactive question whose call the simulator answers 503 on every attempt. The models
        take turns, so that each one's share of failed calls is the same small one."""
        from ..sim import FAULT_HEADER

        options = self._models()
        provider, model = options[self.failures % len(options)]
        self.failures += 1
        call = self._call(provider, model, self.rng.choice(QUESTIONS), True)
        call.headers[FAULT_HEADER] = "server_error;status=503"
        return _Action("answer_question", "interactive", [call], planned_failure=True)

    def plan(self) -> _Action:
        """The next user action (under the lock: the random draws stay in order for a seed)."""
        with self.lock:
            self.count += 1
            if not self.real and self.count % FAIL_EVERY == FAIL_FIRST % FAIL_EVERY:
                action = self._failing_action()
            else:
                action = self._action()
            rate_limited = self.rng.random() < RATE_LIMITED
        if rate_limited:
            from ..sim import Fault

            self.sim.inject(Fault.rate_limit(retry_after=0.05))
        return action

    def _release(self, conv: _Conversation) -> None:
        with self.lock:
            if conv.turns < conv.length:
                self.idle.append(conv)

    def run(self, quiet: threading.Event | None = None) -> None:
        """Plan and run one user action; its failure, if any, is counted (never raised)."""
        import firsttoken

        action = self.plan()
        conv = action.conversation
        try:
            with firsttoken.action(
                action.name, traffic_class=action.traffic, conversation_id=conv.id if conv else None
            ):
                with firsttoken.phase("retrieve"):
                    time.sleep(0.005)
                for call in action.calls:
                    call.history = list(conv.history) if conv else []
                    answer = call.run(self.clients)
                    if conv:
                        conv.history.append((call.question, answer))
                with firsttoken.phase("render"):
                    time.sleep(0.002)
        except Exception as exc:
            if action.planned_failure and getattr(exc, "status_code", None) == 503:
                with self.outcomes.lock:
                    self.outcomes.planned += 1
            else:
                self.outcomes.failure(exc, quiet=quiet is not None and quiet.is_set())
        finally:
            if conv:
                self._release(conv)
            with self.outcomes.lock:
                self.outcomes.done += 1


class _Telemetry:
    """Spans in memory for the report and, with ``OTEL_EXPORTER_OTLP_ENDPOINT`` set, OTLP export
    through firsttoken's own set-up (short timeouts, a bounded flush, one line if it is down)."""

    def __init__(self) -> None:
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        from .. import _otlp

        telemetry = self

        class Count(SpanProcessor):
            def on_end(self, span: ReadableSpan) -> None:
                telemetry.ended += 1

        self.ended = 0
        self.spans = InMemorySpanExporter()
        self.endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or None
        otlp = ["otlp"] if self.endpoint else []
        self.export = _otlp.providers(
            resource_attributes={"service.name": os.environ.get("OTEL_SERVICE_NAME", "firsttoken-demo")},
            traces=otlp,
            metrics_=otlp,
            span_processors=[SimpleSpanProcessor(self.spans), Count()],
            metric_readers=[InMemoryMetricReader()],
        )
        self.tracer_provider = self.export.tracer_provider
        self.meter_provider = self.export.meter_provider

    def close(self, timeout_s: float | None = None, *, shutdown: bool = True) -> str:
        """Flush (bounded) and say truthfully what reached the collector."""
        done = self.export.close(timeout_s, shutdown=shutdown)
        if not self.endpoint:
            return "Set OTEL_EXPORTER_OTLP_ENDPOINT to also export over OTLP."
        where = redact(self.endpoint)
        exported, failed = self.export.tally.exported, self.export.tally.failed
        spans, exports = exported["spans"], exported["metrics"]
        metric_exports = exports + failed["metrics"]
        if spans == self.ended and exports == metric_exports and done:
            return f"Exported over OTLP to {where}: all {spans} spans and {exports} metric exports."
        metrics_part = f"{exports} of {metric_exports} metric exports" if metric_exports else "no metric export"
        why = "it did not answer" if spans == 0 and exports == 0 else "it did not take them all in time"
        return (
            f"NOT all exported over OTLP to {where}: {spans} of {self.ended} spans and {metrics_part} "
            f"reached the collector; the rest were dropped ({why})."
        )


class _Progress:
    """One status line on stderr while the demo works: rewritten in place on a terminal, else a
    line at each step (and a count each tenth of the way) so that logs show where the time goes."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self._last = ""
        self._tenths = -1
        self._lock = threading.Lock()

    def count(self, template: str, done: int, total: int) -> None:
        """``template`` with its ``{done}`` and ``{total}``, from any thread: on a terminal every time,
        else the first time each tenth of ``total`` is reached (so the end too)."""
        with self._lock:
            tenths = done * 10 // total if total else 10
            step = tenths > self._tenths
            self._tenths = max(tenths, self._tenths)
            self.show(template.format(done=done, total=total), step=step)

    def show(self, text: str, *, step: bool = False) -> None:
        if self.tty:
            sys.stderr.write("\r\x1b[2K" + text)
            sys.stderr.flush()
        elif step and text != self._last:
            print(text, file=sys.stderr, flush=True)
        self._last = text

    def done(self) -> None:
        if self.tty and self._last:
            sys.stderr.write("\r\x1b[2K")
            sys.stderr.flush()
        self._last = ""
        self._tenths = -1


def _firsttoken_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    """firsttoken's warnings among ``caught``, each text once, in order."""
    seen: list[str] = []
    for w in caught:
        text = str(w.message)
        if issubclass(w.category, FirstTokenWarning) and text not in seen:
            seen.append(text)
    return seen


def _notes(caught: list[warnings.WarningMessage], width: int) -> list[str]:
    """firsttoken's warnings, as the report's own lines (not a source line in the middle of it)."""
    return [line for text in _firsttoken_warnings(caught) for line in wrap(f"note: {text}", width, subsequent="  ")]


def _error(message: str) -> None:
    print(f"firsttoken demo: error: {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        html = _check(args)
    except UsageError as exc:
        _error(str(exc))
        return 2
    if importlib.util.find_spec("openai") is None:
        _error(
            "firsttoken demo drives the official openai SDK, which is not installed: "
            "pip install 'openai>=3.0,<4' (firsttoken's openai extra)"
        )
        return 2

    import firsttoken

    from ..sim import LatencyModel, Simulator

    width = terminal_width()
    profiles = {**OPENAI_MODELS, **ANTHROPIC_MODELS}
    models = {name: LatencyModel(**profile, jitter=0.25) for name, profile in profiles.items()}
    progress = _Progress()
    html_line = None
    clients: _Clients | None = None
    workload: _Workload | None = None
    server = _RealServer(args.server, args.server_anthropic) if args.server else None
    with server or Simulator(models=models, seed=args.seed) as sim:
        progress.show("warming up: one call of each API kind", step=True)
        warm_up = _warm_up(sim, (args.model or "default") if server else None)
        progress.done()
        if warm_up.failure is not None:
            _error(f"{warm_up.failure}; nothing was measured")
            return 1
        telemetry = _Telemetry()
        tracer_provider, meter_provider = telemetry.tracer_provider, telemetry.meter_provider
        if not firsttoken.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider):
            _error("firsttoken could not instrument the SDKs (see the warning above)")
            return 1
        started = time.perf_counter()
        spans = telemetry.spans
        warm = wrap(WARM_UP_NOTE.format(kinds=", ".join(warm_up.kinds)), width)
        if warm_up.no_responses:
            warm += wrap(
                f"The server has no Responses API ({warm_up.no_responses}): the workload leaves it out.", width
            )
        try:
            clients = _Clients(sim)
            workload = _Workload(clients, sim, args.seed, (args.model or "default") if server else None)
            workload.responses = warm_up.no_responses is None
            if args.continuous:
                print("\n".join(warm), flush=True)
                _continuous(workload, spans, args, started, progress, width)
                # Ctrl-C: flush briefly, then leave at once. Calls still in flight are dropped with
                # their daemon threads; closing the simulator under them and tearing the interpreter
                # down would only add seconds to a Ctrl-C (nothing else is left to clean up).
                print(telemetry.close(timeout_s=CTRL_C_FLUSH_S, shutdown=False), flush=True)
                code = _exit_code(workload, server is not None, width)
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)

            def run_one(_: int) -> None:
                assert workload is not None
                workload.run()
                progress.count(WORKLOAD_PROGRESS, workload.outcomes.done, args.actions)

            progress.count(WORKLOAD_PROGRESS, 0, args.actions)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", FirstTokenWarning)
                with ThreadPoolExecutor(max_workers=args.concurrency) as pool:
                    list(pool.map(run_one, range(args.actions)))
            progress.done()
            report = _report(
                spans.get_finished_spans(),
                started,
                clients.through,
                width=width,
                notes=["", *warm, *_notes(caught, width)],
                workload=workload,
            )
            print(report, flush=True)
            if html:  # before the levers, which clear the spans
                html_line = write_spans_report(spans.get_finished_spans(), html, title="firsttoken demo")
            if not args.no_levers and server is not None:
                print("\n(the levers are measured against the simulator: run without --server)", flush=True)
            elif not args.no_levers:
                print("\nmeasuring the latency levers (before / after)...", flush=True)
                print(_levers(sim, clients, spans, progress, width), flush=True)
            clients.close()
        except KeyboardInterrupt:
            progress.done()
            through = clients.through if clients else ""
            print(_report(spans.get_finished_spans(), started, through, width=width, workload=workload), flush=True)
        finally:
            firsttoken.uninstrument()
    code = 0
    if html_line:
        print(f"\n{html_line}", flush=True)
        if html_line.startswith("No HTML report"):
            code = 1
    elif html is None and args.html is None and importlib.util.find_spec("plotly") is None:
        print("No HTML report: it needs plotly: pip install 'plotly>=5.20' (firsttoken's cli extra).", flush=True)
    print(telemetry.close(), flush=True)
    if workload is not None:
        code = _exit_code(workload, server is not None, width) or code
    return code


def _exit_code(workload: _Workload, real: bool, width: int) -> int:
    """1 when user actions failed other than as planned (say so on stderr), else 0."""
    outcomes = workload.outcomes
    if not outcomes.unexpected:
        return 0
    kinds = "; ".join(f"{n} x {outcomes.first[kind]}" for kind, n in outcomes.failed.items())
    where = f"against {redact(workload.sim.url)} (nothing is injected with --server)" if real else "(not injected)"
    message = f"{outcomes.unexpected} of {outcomes.done} user actions failed {where}: {kinds}"
    print("\n".join(wrap(f"firsttoken demo: error: {message}", width, subsequent="  ")), file=sys.stderr, flush=True)
    return 1


def _continuous(workload: _Workload, spans: Any, args: Any, started: float, progress: _Progress, width: int) -> None:
    """Workers run actions until Ctrl-C; every --interval seconds, a report of that window.

    The workers are daemon threads: on Ctrl-C the report and the bounded flush happen at once, and
    calls still in flight are abandoned with the process instead of holding it up."""
    stop = threading.Event()

    def worker() -> None:
        while not stop.is_set():
            workload.run(quiet=stop)

    for n in range(args.concurrency):
        threading.Thread(target=worker, name=f"demo-worker-{n}", daemon=True).start()
    window_start = time.perf_counter()

    def report(now: float) -> str:
        return _report(
            spans.get_finished_spans(),
            window_start,
            workload.clients.through,
            since_start=now - started,
            width=width,
            workload=workload,
        )

    try:
        while True:
            deadline = window_start + args.interval
            while (left := deadline - time.perf_counter()) > 0:
                progress.show(f"running: next report in {left:.0f} s (Ctrl-C to stop)")
                time.sleep(min(left, 0.5))
            progress.done()
            now = time.perf_counter()
            print(report(now), flush=True)
            spans.clear()
            window_start = now
    except KeyboardInterrupt:
        stop.set()
        progress.done()
        print(report(time.perf_counter()), flush=True)
    finally:
        stop.set()


def _report(
    finished: Iterable[Any],
    window_start: float,
    through: str,
    *,
    since_start: float | None = None,
    notes: list[str] | None = None,
    width: int = 100,
    workload: _Workload | None = None,
) -> str:
    finished = list(finished)
    stats = collect(finished)
    calls = sum(s.calls for s in stats.values())
    errors = sum(s.errors for s in stats.values())
    actions = [s for s in finished if s.attributes and sc.FT_ACTION_LLM_CALLS in s.attributes]
    elapsed = time.perf_counter() - window_start
    what = f"{len(actions)} user actions, {calls} LLM calls {through}"
    if since_start is None:
        title = f"firsttoken demo: {what}, in {elapsed:.1f} s"
    else:
        title = f"firsttoken demo, the last {elapsed:.0f} s: {what} (running for {since_start:.0f} s)"
    app = [(s.end_time - s.start_time) / 1e9 for s in actions if s.end_time and s.start_time]
    lines = [render(stats, title=title, width=width), ""]
    if errors and workload is not None and not workload.real:
        lines += wrap(
            f"Failed calls: the simulator answers one call of the {FAIL_FIRST}th user action, and of every "
            f"{FAIL_EVERY}th after it, with 503 on every attempt, so that it stays failed after the SDK's "
            "retries (other injected faults, rate limits, are retried away). Anything else that failed is "
            "said on stderr.",
            width,
        )
        lines.append("")
    elif errors:
        lines += wrap(f"Failed calls: {errors} of {calls}; nothing is injected with --server (see stderr).", width)
        lines.append("")
    if app:
        p50, p95, p99 = (percentile(app, q) or 0.0 for q in (50, 95, 99))
        lines += wrap(
            f"Application end-to-end (user action -> rendered), {len(app)} actions: "
            f"p50 {p50 * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms",
            width,
        )
    breakdown = where_the_time_went(finished, width=width)
    if breakdown:
        lines += ["", *breakdown]
    lines.append("")
    lines += wrap(
        "TTFT: SDK call to the first chunk carrying output (streamed calls). TPOT: decode time per output "
        "token after the first. End-to-end: SDK call to the last byte. Cache hit: cached / input tokens.",
        width,
    )
    for note in notes or []:
        lines.append(note)
    return "\n".join(lines)


# -- the levers -----------------------------------------------------------------------------------


def _calls(spans: Any) -> list[Any]:
    return [
        s
        for s in spans.get_finished_spans()
        if s.attributes and sc.GEN_AI_OPERATION_NAME in s.attributes and sc.FT_PHASE not in s.attributes
    ]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _setup_ms(calls: list[Any]) -> float:
    """Mean connection set-up per call (pool wait, DNS, TCP, TLS), from the calls' phase durations."""
    setup = (sc.PHASE_POOL_WAIT, sc.PHASE_DNS, sc.PHASE_TCP_CONNECT, sc.PHASE_TLS_HANDSHAKE, sc.PHASE_CONNECT)
    keys = [sc.FT_PHASE_DURATION_PREFIX + phase for phase in setup]
    total = sum(float(c.attributes.get(key, 0.0)) for c in calls for key in keys) * 1000
    return total / len(calls) if calls else 0.0


def _measure(spans: Any, body: Callable[[], None]) -> list[Any]:
    spans.clear()
    body()
    return _calls(spans)


def _levers(sim: Any, clients: _Clients, spans: Any, progress: _Progress, width: int) -> str:
    """Measure each lever before and after; the table (or, too wide for ``width``, one block per
    lever), and firsttoken's warnings, the expected one told apart."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", FirstTokenWarning)
        rows, expected = _measure_levers(sim, clients, spans, progress)
    progress.done()
    lines = ["The latency levers, measured by firsttoken on the simulator:", ""]
    header = ("lever", "before", "after", "measured difference")
    wide = table([header, *rows], left=4)
    if max(len(line) for line in wide) <= width:
        lines += wide
    else:
        for n, (lever, before, after, difference) in enumerate(rows):
            lines += [""] * (n > 0) + [lever]
            for label, text in (("before", before), ("after", after), ("difference", difference)):
                lines += wrap(f"{label + ':':<12}{text}", width, indent="  ", subsequent=" " * 14)
    for text in expected:
        lines.append("")
        lines += wrap(
            "note: the 'before' half of 'reuse the SDK client' creates a client per call on purpose, so "
            "firsttoken warned about it, as it would in your app; here the warning is the lever's point, "
            "not a problem in your set-up:",
            width,
            subsequent="  ",
        )
        lines += wrap(text, width, indent="  ")
    others = [text for text in _firsttoken_warnings(caught) if text not in expected]
    if others:
        lines.append("")
        lines += [line for text in others for line in wrap(f"note: {text}", width, subsequent="  ")]
    return "\n".join(lines)


def _measure_levers(
    sim: Any, clients: _Clients, spans: Any, progress: _Progress
) -> tuple[list[tuple[str, str, str, str]], list[str]]:
    """The four levers' rows, and firsttoken's warnings during the 'before' half of client reuse."""
    import openai

    import firsttoken

    rows: list[tuple[str, str, str, str]] = []
    msgs: Any = [{"role": "user", "content": "Is there a warranty on wheels?"}]
    model = "gpt-4o-mini"
    oai: Any = clients.openai

    # 1. A new client (and connection pool) per call vs one client reused.
    progress.show("lever 1/4: reuse the SDK client", step=True)

    def per_call_clients() -> None:
        for n in range(6):
            c = openai.OpenAI(base_url=sim.openai_base_url, api_key=OPENAI_KEY)
            c.chat.completions.create(model=model, messages=msgs, max_tokens=8)
            c.close()
            del c
            if n == 4:  # the five dropped now, not whenever the collector gets to them: the 6th call warns
                gc.collect()

    def one_client() -> None:
        for _ in range(6):
            oai.chat.completions.create(model=model, messages=msgs, max_tokens=8)

    def connections(body: Callable[[], None]) -> tuple[str, float]:
        calls = _measure(spans, body)
        new = sum(1 for c in calls if not c.attributes.get(sc.FT_CONNECTION_REUSED, True))
        setup = _setup_ms(calls)
        return f"{new}/{len(calls)} new connections, set-up {setup:.2f} ms/call", setup

    # firsttoken warns about per-call clients here, as it would in your app.
    with warnings.catch_warnings(record=True) as per_call_warnings:
        warnings.simplefilter("always", FirstTokenWarning)
        before, setup_before = connections(per_call_clients)
    oai.chat.completions.create(model=model, messages=msgs, max_tokens=8)  # open the pool's connection
    after, setup_after = connections(one_client)
    rows.append(
        (
            "reuse the SDK client",
            before,
            after,
            f"{setup_before - setup_after:+.2f} ms set-up per call on loopback (across a network: round trips)",
        )
    )

    # 2. A prompt prefix that changes every call (a timestamp up front) vs a stable prefix.
    progress.show("lever 2/4: keep the prompt prefix stable", step=True)

    def ttft_and_hits(calls: list[Any]) -> tuple[float, float]:
        ttft = _mean(
            [c.attributes[sc.FT_TIME_TO_FIRST_TOKEN] for c in calls if sc.FT_TIME_TO_FIRST_TOKEN in c.attributes]
        )
        inp = sum(c.attributes.get(sc.GEN_AI_USAGE_INPUT_TOKENS, 0) for c in calls)
        hit = sum(c.attributes.get(sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, 0) for c in calls)
        return ttft * 1000, (hit / inp if inp else 0.0)

    def prefixed(stable: bool) -> Callable[[], None]:
        def run() -> None:
            for i in range(5):
                stamp = f"Request {time.time_ns()} {i}."
                system = SYSTEM_PROMPT if stable else f"{stamp} {SYSTEM_PROMPT}"
                user = f"{stamp} Is there a warranty on wheels?" if stable else "Is there a warranty on wheels?"
                stream = oai.chat.completions.create(
                    model="gpt-4o",
                    messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
                    max_tokens=8,
                    stream=True,
                    stream_options={"include_usage": True},
                )
                for _ in stream:
                    pass

        return run

    (tb, hb), (ta, ha) = ttft_and_hits(_measure(spans, prefixed(False))), ttft_and_hits(_measure(spans, prefixed(True)))
    rows.append(
        (
            "keep the prompt prefix stable",
            f"TTFT {tb:.0f} ms, cache hits {hb:.0%}",
            f"TTFT {ta:.0f} ms, cache hits {ha:.0%}",
            f"{tb - ta:+.0f} ms TTFT saved per call",
        )
    )

    # 3. Independent calls one after another vs in parallel, inside one user action.
    progress.show("lever 3/4: parallelize independent calls", step=True)

    def action_run(parallel: bool) -> Callable[[], None]:
        def call() -> None:
            for _ in oai.chat.completions.create(
                model=model, messages=msgs, max_tokens=24, stream=True, stream_options={"include_usage": True}
            ):
                pass

        def run() -> None:
            with firsttoken.action("lever_parallelize", traffic_class="interactive"):
                if parallel:
                    with ThreadPoolExecutor(3) as pool:
                        futures = [pool.submit(contextvars.copy_context().run, call) for _ in range(3)]
                        for f in futures:
                            f.result()
                else:
                    for _ in range(3):
                        call()

        return run

    def action_span() -> Any:
        return next(s for s in spans.get_finished_spans() if s.name == "lever_parallelize")

    _measure(spans, action_run(False))
    seq = action_span()
    _measure(spans, action_run(True))
    par = action_span()
    seq_ms, par_ms = ((s.end_time - s.start_time) / 1e6 for s in (seq, par))
    rows.append(
        (
            "parallelize independent calls",
            f"action {seq_ms:.0f} ms, parallelism {seq.attributes[sc.FT_ACTION_LLM_PARALLELISM]:.1f}",
            f"action {par_ms:.0f} ms, parallelism {par.attributes[sc.FT_ACTION_LLM_PARALLELISM]:.1f}",
            f"{seq_ms - par_ms:+.0f} ms per action",
        )
    )

    # 4. Unbounded output vs a max_tokens budget.
    progress.show("lever 4/4: bound the output (max_tokens)", step=True)

    def bounded(limit: int | None) -> Callable[[], None]:
        def run() -> None:
            for _ in range(2):
                kwargs: dict[str, Any] = {"max_tokens": limit} if limit else {}
                for _ in oai.chat.completions.create(
                    model=model, messages=msgs, stream=True, stream_options={"include_usage": True}, **kwargs
                ):
                    pass

        return run

    unb, bnd = _measure(spans, bounded(None)), _measure(spans, bounded(40))

    def e2e_and_tokens(calls: list[Any]) -> tuple[float, float]:
        return (
            _mean([(c.end_time - c.start_time) / 1e6 for c in calls]),
            _mean([c.attributes.get(sc.GEN_AI_USAGE_OUTPUT_TOKENS, 0) for c in calls]),
        )

    (eu, ou), (eb, ob) = e2e_and_tokens(unb), e2e_and_tokens(bnd)
    rows.append(
        (
            "bound the output (max_tokens)",
            f"end-to-end {eu:.0f} ms, {ou:.0f} output tokens",
            f"end-to-end {eb:.0f} ms, {ob:.0f} output tokens",
            f"{eu - eb:+.0f} ms per call",
        )
    )

    return rows, _firsttoken_warnings(per_call_warnings)
