"""The engine of ``firsttoken bench``: send requests through the real SDKs, read back what firsttoken recorded.

Every request runs inside a :func:`firsttoken.action` (``bench``, or ``race`` for a raced one), so
that its call spans are children of one span; a span processor keeps the call and phase spans by
parent, and a request's numbers are read from them when it ends. Bench numbers are therefore the
numbers firsttoken puts in production telemetry, not a second clock.

All requests run on one asyncio event loop with the SDKs' async clients: a closed loop of
``concurrency`` workers, or an open loop that starts requests at Poisson arrival times whatever is
still in flight (so queueing shows).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import random
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from .. import semconv as sc
from ..race import FIRST_TOKEN, arace

SETUP_PHASES = (sc.PHASE_POOL_WAIT, sc.PHASE_DNS, sc.PHASE_TCP_CONNECT, sc.PHASE_TLS_HANDSHAKE, sc.PHASE_CONNECT)
TRAFFIC_CLASS = "bench"
DEFAULT_HOSTS = {
    "openai": "api.openai.com",
    "anthropic": "api.anthropic.com",
    "gemini": "generativelanguage.googleapis.com",
}
"""Where each API's SDK sends a call when no base URL is given."""
GEMINI_API_VERSIONS = ("v1", "v1beta", "v1alpha")
KEY_ENV = {
    "openai": ("OPENAI_API_KEY",),
    "anthropic": ("ANTHROPIC_API_KEY",),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),  # the two google-genai reads
}
"""The environment variables holding each API's key, in the order they are read."""


class BenchError(Exception):
    """A problem that stops the run (unreachable endpoint, wrong key, unknown model): one message."""


@dataclass(frozen=True)
class Target:
    name: str
    api: str  # "openai", "anthropic" or "gemini"
    model: str
    base_url: str | None

    def key(self) -> tuple[str, Any, Any]:
        """(model, host, port): how a call span is matched to its target."""
        if self.base_url is None:
            host, port = DEFAULT_HOSTS[self.api], 443
        else:
            url = urllib.parse.urlsplit(self.base_url)
            return self.model, url.hostname, url.port or (443 if url.scheme == "https" else 80)
        return self.model, host, port

    def describe(self) -> str:
        where = self.base_url or "the SDK's default URL"
        return f"{self.api} {self.model} at {where}"


@dataclass
class Prompt:
    messages: list[dict[str, Any]]
    system: str | None = None
    cache_system: bool = False


@dataclass
class Sample:
    """One measured call (or one raced request), as firsttoken recorded it."""

    target: str
    seq: int
    warmup: bool
    start_s: float
    """Seconds from the start of the run to the call's start."""
    scheduled_s: float | None = None
    ok: bool = False
    error: str | None = None
    end_reason: str | None = None
    stream: bool = False
    ttft_s: float | None = None
    tpot_s: float | None = None
    tokens_per_s: float | None = None
    e2e_s: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    attempts: int = 1
    connection_reused: bool | None = None
    setup_s: float = 0.0
    phases: list[tuple[str, float, float]] = field(default_factory=list)
    """(phase, start relative to the call's start, duration), seconds."""
    race: dict[str, Any] | None = None
    """For a raced request: winner, per-contender outcomes, wasted tokens."""

    def as_json(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["phases"] = [{"phase": p, "start_s": s, "duration_s": d} for p, s, d in self.phases]
        return out


class Collector(SpanProcessor):
    """Keeps the spans firsttoken ends, by parent span id (cheap dict appends on the ending thread)."""

    def __init__(self) -> None:
        self.children: dict[int, list[ReadableSpan]] = {}

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        parent = span.parent
        if parent is not None:
            self.children.setdefault(parent.span_id, []).append(span)

    def take(self, span_id: int) -> list[ReadableSpan]:
        return self.children.pop(span_id, [])

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def is_call(span: ReadableSpan) -> bool:
    """Whether a span is an LLM call's span (not a phase, action or other span)."""
    attrs = span.attributes or {}
    return sc.GEN_AI_OPERATION_NAME in attrs and sc.FT_PHASE not in attrs


def fill(sample: Sample, call: ReadableSpan, collector: Collector, run_start_ns: int) -> None:
    """A sample's numbers from a call span and its phase spans."""
    attrs = call.attributes or {}
    start = call.start_time or 0
    end = call.end_time or start
    sample.start_s = (start - run_start_ns) / 1e9
    sample.e2e_s = (end - start) / 1e9
    sample.stream = bool(attrs.get(sc.GEN_AI_REQUEST_STREAM, False))
    sample.end_reason = _str(attrs.get(sc.FT_END_REASON))
    error = attrs.get(sc.ERROR_TYPE)
    sample.error = sample.error or (str(error) if error is not None else None)
    sample.ok = sample.error is None and sample.end_reason in (sc.END_COMPLETED, None)
    sample.ttft_s = _float(attrs.get(sc.FT_TIME_TO_FIRST_TOKEN))
    sample.tpot_s = _float(attrs.get(sc.FT_TIME_PER_OUTPUT_TOKEN))
    sample.tokens_per_s = _float(attrs.get(sc.FT_OUTPUT_TOKENS_PER_SECOND))
    sample.input_tokens = _int(attrs.get(sc.GEN_AI_USAGE_INPUT_TOKENS))
    sample.output_tokens = _int(attrs.get(sc.GEN_AI_USAGE_OUTPUT_TOKENS))
    sample.cached_tokens = _int(attrs.get(sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS))
    sample.attempts = _int(attrs.get(sc.FT_ATTEMPTS)) or 1
    reused = attrs.get(sc.FT_CONNECTION_REUSED)
    sample.connection_reused = reused if isinstance(reused, bool) else None
    phases = []
    for child in collector.take(call.context.span_id):
        name = (child.attributes or {}).get(sc.FT_PHASE)
        if isinstance(name, str) and child.start_time is not None and child.end_time is not None:
            phases.append((name, (child.start_time - start) / 1e9, (child.end_time - child.start_time) / 1e9))
    if not phases:  # no phase spans for this call (phase_spans="tail"): its per-phase durations
        at = 0.0
        for key, value in attrs.items():
            if key.startswith(sc.FT_PHASE_DURATION_PREFIX) and isinstance(value, (int, float)):
                phases.append((key[len(sc.FT_PHASE_DURATION_PREFIX) :], at, float(value)))
                at += float(value)
    phases.sort(key=lambda p: p[1])
    sample.phases = phases
    sample.setup_s = sum(d for p, _, d in phases if p in SETUP_PHASES)


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _float(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


# -- the SDK calls ----------------------------------------------------------------------------


class Clients:
    """One async SDK client per target, reused by every request (the way apps should do it)."""

    def __init__(self, targets: Sequence[Target], keys: dict[str, str], *, timeout: float, max_retries: int) -> None:
        self.by_name: dict[str, Any] = {}
        for t in targets:
            if t.api == "openai":
                import openai

                self.by_name[t.name] = openai.AsyncOpenAI(
                    base_url=t.base_url, api_key=keys["openai"], timeout=timeout, max_retries=max_retries
                )
            elif t.api == "gemini":
                self.by_name[t.name] = _gemini_client(t.base_url, keys["gemini"], timeout, max_retries)
            else:
                import anthropic

                self.by_name[t.name] = anthropic.AsyncAnthropic(
                    base_url=t.base_url, api_key=keys["anthropic"], timeout=timeout, max_retries=max_retries
                )

    async def close(self) -> None:
        for client in self.by_name.values():
            if hasattr(client, "aio"):  # google-genai: the async client is client.aio (older ones have no aclose)
                aclose = getattr(client.aio, "aclose", None)
                if aclose is not None:
                    await aclose()
            else:
                await client.close()


def gemini_base(base_url: str | None) -> tuple[str | None, str | None]:
    """A Gemini base URL as google-genai takes it: the root, and the API version when the URL ends in
    one (``http://host:8000/v1beta`` -> ``("http://host:8000/", "v1beta")``; the SDK adds the
    version and ``models/...`` itself)."""
    if base_url is None:
        return None, None
    root, _, last = base_url.rstrip("/").rpartition("/")
    if last in GEMINI_API_VERSIONS and "//" in root:
        return root + "/", last
    return base_url.rstrip("/") + "/", None


def _gemini_client(base_url: str | None, key: str, timeout: float, max_retries: int) -> Any:
    from google import genai
    from google.genai import types

    base, version = gemini_base(base_url)
    options = types.HttpOptions(base_url=base, api_version=version, timeout=int(timeout * 1000))
    retry_options = getattr(types, "HttpRetryOptions", None)  # not in google-genai 1.20
    if retry_options is not None and "retry_options" in types.HttpOptions.model_fields:
        options.retry_options = retry_options(attempts=max_retries + 1)
    return genai.Client(api_key=key, http_options=options)


def call_factory(client: Any, target: Target, prompt: Prompt, *, stream: bool, max_tokens: int) -> Callable[[], Any]:
    """A function of no arguments making one call (what the race helper takes)."""
    if target.api == "openai":
        messages = list(prompt.messages)
        if prompt.system is not None:
            messages = [{"role": "system", "content": prompt.system}, *messages]
        kwargs: dict[str, Any] = {"model": target.model, "messages": messages, "max_tokens": max_tokens}
        if stream:
            kwargs.update(stream=True, stream_options={"include_usage": True})
        return lambda: client.chat.completions.create(**kwargs)
    if target.api == "gemini":
        contents = [
            {"role": "model" if m["role"] == "assistant" else "user", "parts": [{"text": m["content"]}]}
            for m in prompt.messages
        ]
        config: dict[str, Any] = {"max_output_tokens": max_tokens}
        if prompt.system is not None:
            config["system_instruction"] = prompt.system  # Gemini caches a repeated prefix implicitly
        models = client.aio.models
        method = models.generate_content_stream if stream else models.generate_content
        return lambda: method(model=target.model, contents=contents, config=config)
    akwargs: dict[str, Any] = {"model": target.model, "messages": prompt.messages, "max_tokens": max_tokens}
    if prompt.system is not None:
        block: dict[str, Any] = {"type": "text", "text": prompt.system}
        if prompt.cache_system:
            block["cache_control"] = {"type": "ephemeral"}
        akwargs["system"] = [block]
    if stream:
        akwargs["stream"] = True
    return lambda: client.messages.create(**akwargs)


async def consume(value: Any) -> None:
    """Read a stream to its end (a whole response needs nothing)."""
    if hasattr(value, "__aiter__"):
        async for _ in value:
            pass


# -- jobs and loops ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    seq: int
    target: str  # a target name, or the race label
    prompt_index: int
    warmup: bool


class Plan:
    """Which target each request goes to, in order: warm-up first, then interleaved or in turn."""

    def __init__(
        self, lanes: Sequence[str], *, requests: int | None, warmup: int, interleave: bool, prompts: int
    ) -> None:
        self.lanes = list(lanes)
        self.requests = requests
        self.warmup = warmup
        self.interleave = interleave
        self.prompts = prompts

    @property
    def total(self) -> int | None:
        if self.requests is None:
            return None
        return (self.requests + self.warmup) * len(self.lanes)

    def jobs(self) -> Iterator[Job]:
        seq = itertools.count()
        for _ in range(self.warmup):
            for lane in self.lanes:
                n = next(seq)
                yield Job(n, lane, n % self.prompts, True)
        if self.interleave or self.requests is None:
            rounds = itertools.count() if self.requests is None else range(self.requests)
            for _ in rounds:
                for lane in self.lanes:
                    n = next(seq)
                    yield Job(n, lane, n % self.prompts, False)
        else:
            for lane in self.lanes:
                for _ in range(self.requests):
                    n = next(seq)
                    yield Job(n, lane, n % self.prompts, False)


class Runner:
    """Runs a plan; collects a :class:`Sample` per request; stops early on a fatal error."""

    def __init__(
        self,
        *,
        targets: dict[str, Target],
        clients: Clients,
        prompts: Sequence[Prompt],
        collector: Collector,
        stream: bool,
        max_tokens: int,
        race: tuple[str, list[str], str] | None,
        progress: Callable[[Sample], None],
        unique_prefix: bool = False,
    ) -> None:
        self.unique_prefix = unique_prefix
        self.targets = targets
        self.clients = clients
        self.prompts = prompts
        self.collector = collector
        self.stream = stream
        self.max_tokens = max_tokens
        self.race = race  # (label, target names, until)
        self.progress = progress
        self.samples: list[Sample] = []
        self.fatal: BaseException | None = None
        self.cancelled = 0
        """Requests in flight when the run was stopped (cancelled, so not in :attr:`samples`)."""
        self.run_start_ns = time.time_ns()
        self._run_start_perf = time.perf_counter()
        self.successes: dict[str, int] = {}

    def _factory(self, name: str, prompt: Prompt) -> Callable[[], Any]:
        return call_factory(
            self.clients.by_name[name], self.targets[name], prompt, stream=self.stream, max_tokens=self.max_tokens
        )

    async def one(self, job: Job, scheduled_s: float | None = None) -> None:
        import firsttoken

        prompt = self.prompts[job.prompt_index]
        if self.unique_prefix and prompt.system is not None:  # a different first token: nothing cached
            prompt = Prompt(prompt.messages, f"Request {job.seq}. {prompt.system}", prompt.cache_system)
        sample = Sample(target=job.target, seq=job.seq, warmup=job.warmup, start_s=0.0, scheduled_s=scheduled_s)
        raced = self.race is not None and job.target == self.race[0]
        exc: BaseException | None = None
        result: Any = None
        with firsttoken.action("race" if raced else "bench", traffic_class=TRAFFIC_CLASS):
            action_id = trace.get_current_span().get_span_context().span_id
            try:
                if raced:
                    assert self.race is not None
                    _, names, until = self.race
                    result = await arace(*(self._factory(n, prompt) for n in names), until=until)
                    await consume(result)
                else:
                    await consume(await self._factory(job.target, prompt)())
            except asyncio.CancelledError:
                self.cancelled += 1  # stopped mid-call (Ctrl-C): not a finished request, not kept
                raise
            except Exception as e:
                exc = e
        spans = self.collector.take(action_id)
        calls = [s for s in spans if is_call(s)]
        if raced:
            sample = self._race_sample(sample, calls, result)
        elif calls:
            fill(sample, calls[-1], self.collector, self.run_start_ns)
        else:
            sample.start_s = time.perf_counter() - self._run_start_perf
        if exc is not None:
            sample.error = type(exc).__qualname__
            sample.ok = False
            self._check_fatal(exc, job, answered=sample.ttft_s is not None)
        elif sample.ok:
            self.successes[job.target] = self.successes.get(job.target, 0) + 1
        self.samples.append(sample)
        self.progress(sample)

    def _race_sample(self, sample: Sample, calls: list[ReadableSpan], result: Any) -> Sample:
        """A raced request: the winner's timeline, from the start of the race; every contender's."""
        assert self.race is not None
        _, names, until = self.race
        key_of = {self.targets[n].key(): n for n in names}
        by_target: dict[str, Sample] = {}
        for span in calls:
            attrs = span.attributes or {}
            key = (str(attrs.get(sc.GEN_AI_REQUEST_MODEL)), attrs.get(sc.SERVER_ADDRESS), attrs.get(sc.SERVER_PORT))
            name = key_of.get(key)
            if name is not None and name not in by_target:
                by_target[name] = contender = Sample(target=name, seq=sample.seq, warmup=sample.warmup, start_s=0.0)
                fill(contender, span, self.collector, self.run_start_ns)
        contenders = {name: c.as_json() for name, c in by_target.items()}
        info: dict[str, Any] = {"until": until, "contenders": contenders, "winner": None}
        win = by_target.get(names[result.winner]) if result is not None else None
        if win is not None:
            info["winner"] = win.target
            info["losers"] = [names[n] for n in result.losers]
            # The raced request started when the race did; its first token is the winner's.
            first = min(c.start_s for c in by_target.values())
            offset = win.start_s - first
            sample = dataclasses.replace(
                win,
                target=sample.target,
                scheduled_s=sample.scheduled_s,
                start_s=first,
                ttft_s=None if win.ttft_s is None else win.ttft_s + offset,
                e2e_s=None if win.e2e_s is None else win.e2e_s + offset,
                phases=[(p, s + offset, d) for p, s, d in win.phases],
            )
            wasted_in = wasted_out = 0
            for n in result.losers:
                loser = by_target.get(names[n])
                if loser is not None:
                    wasted_in += loser.input_tokens or win.input_tokens or 0
                    wasted_out += loser.output_tokens or result.loser_output_items.get(n, 0)
            info["wasted_input_tokens"] = wasted_in
            info["wasted_output_tokens"] = wasted_out
            info["used_tokens"] = (win.input_tokens or 0) + (win.output_tokens or 0)
        sample.race = info
        return sample

    def _check_fatal(self, exc: BaseException, job: Job, *, answered: bool = False) -> None:
        """Whether ``exc`` should stop the run; ``answered``: the endpoint streamed a token first (then
        a timeout is a stalled stream, counted as an error, not an endpoint that cannot be reached)."""
        status = getattr(exc, "status_code", None)
        if status is None and type(exc).__module__.startswith("google.genai"):
            status = getattr(exc, "code", None)  # google-genai's APIError
        target = self.targets.get(job.target)
        where = target.describe() if target else job.target
        message = str(getattr(exc, "message", None) or exc)[:200]
        if status in (401, 403):
            self.fatal = BenchError(
                f"the endpoint refused the API key (HTTP {status}) for {where}: {message}. "
                f"Check {' or '.join(KEY_ENV[target.api] if target else ('OPENAI_API_KEY', 'ANTHROPIC_API_KEY'))}."
            )
        elif status == 404:
            self.fatal = BenchError(f"not found (HTTP 404) for {where}: unknown model or wrong base URL? {message}")
        elif (
            type(exc).__name__ in ("APIConnectionError", "APITimeoutError", "ConnectError", "ConnectTimeout")
            and not answered
            and not self.successes.get(job.target)
        ):
            self.fatal = BenchError(f"cannot reach {where}: {type(exc).__name__}: {message}")

    async def closed_loop(self, jobs: Iterator[Job], concurrency: int, deadline: float | None) -> None:
        async def worker() -> None:
            for job in jobs:
                if self.fatal is not None or (deadline is not None and time.perf_counter() >= deadline):
                    return
                await self.one(job)

        await asyncio.gather(*(worker() for _ in range(concurrency)))

    async def open_loop(self, jobs: Iterator[Job], rate: float, deadline: float | None, seed: int) -> None:
        rng = random.Random(seed)
        tasks: set[asyncio.Task[None]] = set()
        start = time.perf_counter()
        due = start
        try:
            for job in jobs:
                if self.fatal is not None or (deadline is not None and due >= deadline):
                    break
                delay = due - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                task = asyncio.ensure_future(self.one(job, scheduled_s=due - self._run_start_perf))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                due += rng.expovariate(rate)
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
        except asyncio.CancelledError:  # stopped (Ctrl-C): the requests in flight are cancelled too
            pending = list(tasks)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            raise


__all__ = [
    "DEFAULT_HOSTS",
    "FIRST_TOKEN",
    "KEY_ENV",
    "BenchError",
    "Clients",
    "Collector",
    "Job",
    "Plan",
    "Prompt",
    "Runner",
    "Sample",
    "Target",
]
