"""The Simulator: an event loop in a background thread serving the OpenAI and Anthropic APIs."""

from __future__ import annotations

import asyncio
import collections
import json
import random
import re
import secrets
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import datetime, timedelta, timezone
from os import PathLike
from types import TracebackType
from typing import Any

from . import _anthropic, _cloud, _cohere, _gemini, _openai
from ._alpn import make_protocol
from ._cache import CacheConfig, PromptCache
from ._faults import FAULT_HEADER, Fault, FaultQueue
from ._http import Connection, Disconnected, Exchange, h2_available
from ._latency import LatencyModel
from ._output import ApiError
from ._replay import Cassettes, replay
from ._reply import Call, Served, Stopped
from ._timing import PROVIDER_HEADER, ProviderStyle, parse_style

__all__ = ["Simulator"]

Route = Callable[[Call], Awaitable[None]]
_ROUTES: dict[tuple[str, str], Route] = {**_openai.ROUTES, **_anthropic.ROUTES, **_cohere.ROUTES}

_REQUEST_LIMIT, _TOKEN_LIMIT = 10_000, 2_000_000


GROQ_PREFIX = "/openai"
"""Groq serves its OpenAI-compatible API under ``/openai/v1`` (the ``groq`` SDK's paths)."""


AZURE_DEPLOYMENT = re.compile(r"/openai/deployments/[^/]+(?=/)")
"""Azure OpenAI's deployment paths (``/openai/deployments/{deployment}/chat/completions?api-version=...``)."""


def _unprefixed(path: str) -> str:
    """The OpenAI API path a request names: Groq's ``/openai/v1`` (and Azure OpenAI's v1 API), and
    Azure OpenAI's deployment paths, are the OpenAI API's ``/v1``."""
    if path.startswith(GROQ_PREFIX + "/v1/"):
        return path[len(GROQ_PREFIX) :]
    azure = AZURE_DEPLOYMENT.match(path)
    return "/v1" + path[azure.end() :] if azure is not None else path


def _is_anthropic(path: str, headers: Mapping[str, str]) -> bool:
    """Which provider's error shape a request expects: the Anthropic SDK always sends its version header."""
    return path.startswith("/v1/messages") or "anthropic-version" in headers or _cloud.match(path) is not None


def _error_event(path: str, anthropic: bool) -> Callable[[], bytes]:
    """The mid-stream error a request's API sends (Bedrock's in its own framing)."""
    if path.endswith(("/invoke-with-response-stream", "/converse-stream")):
        return _cloud.bedrock_error_event
    return _anthropic.error_event if anthropic else _openai.error_event(_unprefixed(path))


class Simulator:
    """An OpenAI- and Anthropic-compatible server with a controllable latency model.

    It runs its own event loop in a background thread, so it serves sync and async clients alike,
    including from inside an async test. Use it as a context manager, or call :meth:`start` and
    :meth:`close`.
    """

    def __init__(
        self,
        *,
        latency: LatencyModel | None = None,
        models: Mapping[str, LatencyModel] | None = None,
        seed: int | None = None,
        cache: CacheConfig | None = None,
        replay: Iterable[str | PathLike[str]] | None = None,
        ssl_context: ssl.SSLContext | None = None,
        http2: bool | None = None,
        provider_timing: ProviderStyle | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        """Configure (nothing listens until :meth:`start`).

        ``latency`` is the default model and ``models`` overrides it per exact model name. ``seed``
        makes jitter, ids and generated text reproducible for sequential runs (each request draws from
        its own generator, seeded by ``seed`` and its arrival number). ``replay`` loads VCR cassettes
        (files or directories) whose recorded answers take precedence on their paths.

        With ``ssl_context`` (a server-side context; see :func:`firsttoken.sim.tls.test_certificates`)
        the server speaks TLS and offers ALPN ``h2`` and ``http/1.1``, so a client with HTTP/2 enabled
        gets HTTP/2. ``http2=False`` offers only ``http/1.1``; ``http2=True`` insists on HTTP/2 being
        available (the ``h2`` package); the default offers it when ``h2`` is installed (``sim.http2``
        says whether it is offered). Without TLS the server speaks HTTP/1.1 only (no h2c).

        ``provider_timing`` (``"groq"`` or ``"cerebras"``) makes OpenAI chat and completions responses
        report server timing in that provider's body fields instead of ``openai-processing-ms``; a
        request's ``x-firsttoken-sim-provider`` header overrides it.
        """
        self.latency = latency if latency is not None else LatencyModel()
        self.models = dict(models or {})
        for name, model in [("latency", self.latency), *self.models.items()]:
            if not isinstance(model, LatencyModel):
                raise TypeError(f"{name}: expected a LatencyModel, got {type(model).__name__}")
        self.seed = seed if seed is not None else secrets.randbits(64)
        self.cache_config = cache if cache is not None else CacheConfig()
        self._cache = PromptCache(self.cache_config)
        self._cassettes = Cassettes(replay or [])
        self._ssl = ssl_context
        if http2 and not h2_available():
            raise ImportError(
                "Simulator(http2=True) needs the 'h2' package: pip install 'h2>=4,<5' (firsttoken's http2 extra)"
            )
        self.http2 = ssl_context is not None and (http2 if http2 is not None else h2_available())
        if ssl_context is not None:
            ssl_context.set_alpn_protocols(["h2", "http/1.1"] if self.http2 else ["http/1.1"])
        self.provider_timing: ProviderStyle = parse_style(provider_timing or "openai")
        self._host, self._port = host, port
        self._faults = FaultQueue()
        self._served: list[Served] = []
        self._lock = threading.Lock()
        self._logged = threading.Condition(self._lock)
        self._arrivals = 0
        self._recent: collections.deque[tuple[float, int]] = collections.deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._connections: set[Connection] = set()

    # -- lifecycle ----------------------------------------------------------------------------------

    def start(self) -> Simulator:
        """Bind and start serving; returns once the port is known."""
        if self._thread is not None:
            raise RuntimeError("Simulator already started")
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._listen())
            except BaseException as exc:
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=run, name="firsttoken-sim", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            self._thread = self._loop = None
            raise failure[0]
        return self

    async def _listen(self) -> None:
        factory = make_protocol(self._handle, self._connections)
        self._server = await asyncio.get_running_loop().create_server(
            factory, self._host, self._port, ssl=self._ssl, reuse_address=True
        )
        self._port = self._server.sockets[0].getsockname()[1]

    def close(self) -> None:
        """Stop serving: cut every connection, stop the loop, join the thread. Idempotent."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=10)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)
        self._loop = self._thread = None

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        tasks = [task for connection in self._connections for task in connection.tasks]
        for connection in list(self._connections):
            connection.abort()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        current = asyncio.current_task()
        rest = [t for t in asyncio.all_tasks() if t is not current]
        for task in rest:
            task.cancel()
        await asyncio.gather(*rest, return_exceptions=True)

    def __enter__(self) -> Simulator:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- public state -------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._thread is None:
            raise RuntimeError("Simulator not started")
        return self._port

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (``https`` with an ``ssl_context``)."""
        scheme = "https" if self._ssl is not None else "http"
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"{scheme}://{host}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """What ``OpenAI(base_url=...)`` takes: the SDK appends ``/chat/completions`` and so on."""
        return self.url + "/v1"

    @property
    def anthropic_base_url(self) -> str:
        """What ``Anthropic(base_url=...)`` takes: that SDK appends ``/v1/messages`` itself."""
        return self.url

    @property
    def requests(self) -> list[Served]:
        """What was served so far, in completion order (a copy)."""
        with self._lock:
            return list(self._served)

    def wait_for_requests(self, count: int, timeout: float = 10.0) -> list[Served]:
        """What was served, once at least ``count`` requests are (or ``timeout`` seconds passed): a request
        is listed after its last byte is written, which its client may have read before that."""
        with self._logged:
            self._logged.wait_for(lambda: len(self._served) >= count, timeout)
            return list(self._served)

    def clear(self) -> None:
        """Forget served requests, pending faults and the prompt cache."""
        with self._lock:
            self._served.clear()
        self._faults.clear()
        self._cache = PromptCache(self.cache_config)

    def inject(self, fault: Fault, *, times: int | None = 1, path: str | None = None, model: str | None = None) -> None:
        """Give the next ``times`` matching requests this fault (``None``: every one until :meth:`clear`).

        ``path`` matches the request path exactly or as a suffix (``"/chat/completions"``), ``model``
        the request's model. Faults apply in injection order, one per request.
        """
        self._faults.add(fault, times=times, path=path, model=model)

    # -- serving ------------------------------------------------------------------------------------

    def _log(self, served: Served) -> None:
        with self._logged:
            self._served.append(served)
            self._logged.notify_all()

    def _rate_headers(self, anthropic: bool, now: float) -> list[tuple[str, str]]:
        with self._lock:
            while self._recent and self._recent[0][0] < now - 60:
                self._recent.popleft()
            requests_left = max(0, _REQUEST_LIMIT - len(self._recent))
            tokens_left = max(0, _TOKEN_LIMIT - sum(n for _, n in self._recent))
        if anthropic:
            reset = (datetime.now(timezone.utc) + timedelta(seconds=60)).strftime("%Y-%m-%dT%H:%M:%SZ")
            out = [("request-id", "req_011" + secrets.token_urlsafe(18).replace("-", "x").replace("_", "y"))]
            out.append(("anthropic-organization-id", "00000000-0000-4000-8000-00000000f157"))
            for kind, limit, left in (
                ("requests", _REQUEST_LIMIT, requests_left),
                ("tokens", _TOKEN_LIMIT, tokens_left),
                ("input-tokens", _TOKEN_LIMIT * 4 // 5, tokens_left * 4 // 5),
                ("output-tokens", _TOKEN_LIMIT // 5, tokens_left // 5),
            ):
                out += [(f"anthropic-ratelimit-{kind}-limit", str(limit))]
                out += [(f"anthropic-ratelimit-{kind}-remaining", str(left))]
                out += [(f"anthropic-ratelimit-{kind}-reset", reset)]
            return out
        return [
            ("x-request-id", "req_" + secrets.token_hex(16)),
            ("openai-version", "2020-10-01"),
            ("openai-organization", "firsttoken-sim"),
            ("x-ratelimit-limit-requests", str(_REQUEST_LIMIT)),
            ("x-ratelimit-limit-tokens", str(_TOKEN_LIMIT)),
            ("x-ratelimit-remaining-requests", str(requests_left)),
            ("x-ratelimit-remaining-tokens", str(tokens_left)),
            ("x-ratelimit-reset-requests", "6ms"),
            ("x-ratelimit-reset-tokens", "12ms"),
        ]

    async def _handle(self, exchange: Exchange) -> None:
        """Route one request: parse, pick its fault, then replay, simulate or answer an error."""
        req = exchange.request
        anthropic = _is_anthropic(req.path, req.headers)
        loop_now = asyncio.get_running_loop().time()
        with self._lock:
            number = self._arrivals
            self._arrivals += 1
        body: Any = {}
        parse_error = None
        if req.body:
            try:
                body = json.loads(req.body)
            except ValueError:
                parse_error = "We could not parse the JSON body of your request."
        if not isinstance(body, dict):
            body, parse_error = {}, parse_error or "The request body must be a JSON object."
        model = body.get("model") if isinstance(body.get("model"), str) else None
        stream = body.get("stream") is True
        gemini = _gemini.match(req.path)  # Gemini's native API names the model and the streaming in its path
        if gemini is not None:
            model, stream = gemini
        cloud = _cloud.match(req.path)  # so do Claude's on Bedrock and Vertex AI
        if cloud is not None:
            model, stream = cloud.model, cloud.stream
        bedrock = cloud is not None and cloud.bedrock
        headers = [] if bedrock else self._rate_headers(anthropic, time.monotonic())
        with self._lock:
            self._recent.append((time.monotonic(), len(req.body) // 4))

        call = Call(
            exchange=exchange,
            body=body,
            model=model,
            latency=self.models.get(model or "", self.latency),
            rng=random.Random(f"{self.seed}:{number}"),
            cache=self._cache,
            fault=None,
            log=self._log,
            error_event=_error_event(req.path, anthropic),
            headers=headers,
            stream=stream,
            t0=loop_now,
        )
        spec = req.headers.get(FAULT_HEADER)
        try:
            style = req.headers.get(PROVIDER_HEADER)
            if style is None and req.path.startswith(GROQ_PREFIX + "/") and not AZURE_DEPLOYMENT.match(req.path):
                style = "groq"  # Groq's own path: its timing too, unless the request asks otherwise
            call.provider = parse_style(style) if style is not None else self.provider_timing
            fault = Fault.parse(spec) if spec else self._faults.take(req.path, model)
        except ValueError as err:
            if bedrock:
                await call.respond(400, *_cloud.bedrock_error(400, str(err)))
                return
            error = _anthropic.error_body(400, str(err)) if anthropic else _openai.error_body(400, str(err))
            await call.respond(400, [("content-type", "application/json"), *headers], error)
            return
        call.fault = fault
        try:
            if fault is not None and fault.is_status:
                await self._fault_response(call, fault, anthropic, bedrock)
                return
            if parse_error:
                raise ApiError(400, parse_error)
            interaction = self._cassettes.match(req.method, req.path, body) if len(self._cassettes) else None
            if interaction is not None:
                await replay(call, interaction)
                return
            route = _ROUTES.get((req.method, _unprefixed(req.path)))
            if route is None and gemini is not None and req.method == "POST":
                route = _gemini.generate
            if route is None and cloud is not None and req.method == "POST":
                route = cloud.route
            if route is None:
                if any(path == req.path for _, path in _ROUTES):
                    raise ApiError(405, f"Method {req.method} not allowed on {req.path}.")
                kind = "not_found_error" if anthropic else "invalid_request_error"
                raise ApiError(404, f"Invalid URL ({req.method} {req.path})", kind=kind)
            await route(call)
        except ApiError as err:
            if exchange.headers_sent:
                raise
            if bedrock:
                await call.respond(err.status, *_cloud.bedrock_error(err.status, err.message))
                return
            if anthropic:
                body_bytes = _anthropic.error_body(err.status, err.message)
            else:
                body_bytes = _openai.error_body(err.status, err.message, kind=err.kind)
            await call.respond(err.status, [("content-type", "application/json"), *headers], body_bytes)
        except Stopped:
            pass
        except (Disconnected, asyncio.CancelledError):
            call.record(200 if exchange.headers_sent else 0, disconnected=True)
            raise

    async def _fault_response(self, call: Call, fault: Fault, anthropic: bool, bedrock: bool) -> None:
        status = fault.status or 500
        headers = [("content-type", "application/json"), *call.headers]
        if fault.kind == "rate_limit":
            if fault.retry_after is not None:
                headers += [("retry-after", f"{fault.retry_after:g}")]
                headers += [("retry-after-ms", str(round(fault.retry_after * 1000)))]
            message = "Rate limit reached for requests (simulated)."
        elif fault.kind == "overloaded":
            message = "Overloaded"
            status = 529 if anthropic else 503
        else:
            message = "The server had an error while processing your request (simulated)."
        if bedrock:
            status = 503 if status == 529 else status  # an overloaded model is a 503 on Bedrock
            more, body = _cloud.bedrock_error(status, message)
            await call.respond(status, [*more, *headers[1:]], body)
            return
        if anthropic:
            body = _anthropic.error_body(status, message)
        else:
            code = "rate_limit_exceeded" if fault.kind == "rate_limit" else None
            body = _openai.error_body(status, message, code=code)
        await call.respond(status, headers, body)
