"""The call lifecycle both SDKs share, behind their ``request`` chokepoint and ``__stream__`` generator.

Both official SDKs (Stainless-generated) route every API call through ``SyncAPIClient.request`` /
``AsyncAPIClient.request`` and every SSE stream through ``Stream.__stream__`` /
``AsyncStream.__stream__``. A provider module subclasses :class:`CallHooks` with what differs: which
requests are LLM calls and what they mean (:meth:`describe`), how to read a whole result
(:meth:`read_result`) and a streamed item (:meth:`observer`).
"""

from __future__ import annotations

import contextlib
import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from .. import semconv as sc
from .._internal import internal_error
from .._patch import Patches
from ..config import warn
from ..context import CALL_START, CONVERSATION_ID, CURRENT_ACTION, CURRENT_CALL, TRAFFIC_CLASS
from ..recorder import Recorder
from ..streams import Observer, end_on_exception, observe_async, observe_sync, watch
from ..timeline import CallStart, Timeline
from ..transport import call_for_response, register_response
from . import _common as common
from . import _levers as levers
from .endpoints import SOURCE_SDK, Endpoint

log = logging.getLogger("firsttoken")

_OMITTED = frozenset({"Omit", "NotGiven"})
"""The SDKs' sentinel types for an argument the app did not pass."""


@dataclass
class CallDescription:
    """What a provider makes of a request before it is sent."""

    operation: str
    model: str | None
    stream: bool
    api_type: str | None = None
    request: dict[str, Any] = field(default_factory=dict)
    content: Callable[[], dict[str, str]] | None = None
    """Builds the captured input content; only called when content capture is on."""
    prefix: tuple[Any, ...] = ()
    """The stable prompt prefix (instructions, tool definitions), hashed for cache diagnostics."""


EVENT_MORE = 0
"""``WireFormat.read_event``: the stream goes on."""
EVENT_END = 1
"""``WireFormat.read_event``: the stream's terminal event."""
EVENT_ERROR = 2
"""``WireFormat.read_event``: an error event inside the stream (its HTTP status said success)."""


class WireFormat(ABC):
    """One wire format, owned once by its provider module, read by the SDK path and the wire path.

    The SDK hooks use :meth:`match` and :meth:`describe` on the request their SDK is about to send;
    the wire path (:mod:`firsttoken.providers.direct`, for any HTTP client) uses all of it.
    Adding a format is one module with one subclass, and one row in ``direct.FORMATS``.
    """

    family: str
    """The API family: ``openai``, ``anthropic``, ``gemini``, ``cohere``."""

    @abstractmethod
    def match(self, path: str) -> tuple[str, str | None] | None:
        """(operation, api type) of a POST to ``path`` (no query, no trailing slash), else None."""

    @abstractmethod
    def describe(
        self, path: str, body: Mapping[str, Any], stream: bool, operation: str, api_type: str | None
    ) -> CallDescription:
        """What the request means (``stream``: what the body or the SDK says)."""

    def default_provider(self, path: str) -> str:
        """The provider when neither the host nor the client names one."""
        return self.family

    @abstractmethod
    def read_result(self, tl: Timeline, data: Mapping[str, Any]) -> None:
        """A whole (not streamed) JSON body of a successful response."""

    @abstractmethod
    def read_event(self, tl: Timeline, event: Mapping[str, Any], now: int, stream: StreamState) -> int:
        """One streamed JSON event: ``EVENT_MORE``, ``EVENT_END`` or ``EVENT_ERROR``."""


class StreamState:
    """What a wire format keeps across one stream's events (``flags``: the format's own bits)."""

    __slots__ = ("flags",)

    def __init__(self) -> None:
        self.flags = 0


def open_call(
    recorder: Recorder,
    what: CallDescription,
    server: tuple[str | None, int | None, Endpoint],
    client: Any,
    on_finish: Callable[[Timeline], None],
    start: CallStart | None = None,
) -> Timeline:
    """The one way a call is opened, on every path: the timeline, and everything around it (endpoint,
    traffic class, conversation and turn, action, prefix hash, client reuse, request attributes,
    chunk gaps and content capture as the settings say), then the recorder starts its span."""
    host, port, endpoint = server
    tl = Timeline(
        provider=endpoint.provider,
        operation=what.operation,
        request_model=what.model,
        server_address=host,
        server_port=port,
        stream=what.stream,
        on_finish=on_finish,
        start=start,
    )
    tl.api_type = what.api_type
    tl.endpoint = endpoint
    if endpoint.source != SOURCE_SDK:  # absent: named after the SDK's API, the default
        tl.extra[sc.FT_PROVIDER_SOURCE] = endpoint.source
    tl.traffic_class = TRAFFIC_CLASS.get()
    tl.conversation_id = CONVERSATION_ID.get()
    tl.action = CURRENT_ACTION.get()
    if what.prefix:
        tl.prefix_hash = levers.prefix_hash(what.prefix)
    if tl.conversation_id is not None:
        tl.conversation_turn = levers.conversation_turn(tl.conversation_id)
    if client is not None:
        tl.new_client = levers.client_seen(client, endpoint.provider)
    tl.request = what.request
    settings = recorder.settings
    if settings.chunk_metrics and what.stream:
        tl.chunk_gaps = []
    if settings.capture_content and what.content is not None:
        tl.capture = what.content()
    if start is None:  # a call read on the wire: the SDK call it is sent in, if any, knows the app's suppression
        start = CALL_START.get()
    recorder.start(tl, None if start is None else start[2])
    return tl


class CallHooks(ABC):
    """Starts a call at ``request``, ends it when the result, stream or response is done."""

    provider = "unknown"
    """The SDK's own provider name, used when the host does not name another."""
    client_providers: Mapping[str, str] = {}
    """The SDK's client base classes (by name) that name the cloud behind them, whatever the host: a
    Bedrock client on a proxy or a simulator still calls Bedrock's API."""

    def __init__(self, recorder: Recorder, provider_of: common.ProviderResolver) -> None:
        self.recorder = recorder
        self._finish = recorder.finish
        """One bound method for every call's timeline (a new one per call is one more object in flight)."""
        self.provider_of = provider_of
        self._servers: dict[int, tuple[Any, str | None, int | None, Endpoint]] = {}
        """id(base URL) -> (the URL, server.address, server.port, endpoint): worked out once per client."""

    def _server(self, client: Any) -> tuple[str | None, int | None, Endpoint]:
        base_url = getattr(client, "base_url", None)
        known = self._servers.get(id(base_url))
        if known is not None and known[0] is base_url:
            return known[1], known[2], known[3]
        host, port = common.server_of(base_url)
        named = self.client_providers
        default = next((named[c.__name__] for c in type(client).__mro__ if c.__name__ in named), self.provider)
        endpoint = self.provider_of.endpoint(host, port, default, str(getattr(base_url, "path", "") or ""))
        if len(self._servers) >= 256:  # clients made per call: start over rather than grow
            self._servers = {}
        self._servers[id(base_url)] = (base_url, host, port, endpoint)
        return host, port, endpoint

    # -- what providers define ------------------------------------------------------------

    @abstractmethod
    def describe(self, options: Any, body: Mapping[str, Any], stream: bool) -> CallDescription | None:
        """What a request means, or None when it is not an LLM call."""

    @abstractmethod
    def read_result(self, tl: Timeline, result: Any) -> None:
        """A whole result (an SDK model, or a raw response's JSON)."""

    @abstractmethod
    def observer(self, tl: Timeline) -> Observer:
        """The reader of the call's streamed items."""

    def prepare(self, tl: Timeline, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
        """The arguments to call the SDK's ``request`` with, once the call has started (the app's
        context is still current). As given, unless a provider must keep the request unchanged."""
        return args, kwargs

    @abstractmethod
    def is_stream(self, result: Any) -> bool:
        """Whether a result is the SDK's SSE stream object (its items are read by ``__stream__``)."""

    # -- call start ------------------------------------------------------------------------

    def start(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Timeline | None:
        try:
            options = args[1] if len(args) > 1 else kwargs.get("options")
            body = getattr(options, "json_data", None)
            body = body if isinstance(body, Mapping) else {}
            extra = getattr(options, "extra_json", None)
            if isinstance(extra, Mapping) and extra:  # extra_body= is sent merged into the body
                body = {**body, **extra}
            # anthropic keeps its "not given" sentinels in the body until it serializes it.
            body = {k: v for k, v in body.items() if type(v).__name__ not in _OMITTED}
            stream = bool(kwargs.get("stream", False) or body.get("stream") is True)
            what = self.describe(options, body, stream)
            if what is None:
                return None
            server = self._server(instance)
            return open_call(self.recorder, what, server, instance, self._finish, CALL_START.get())
        except Exception:
            internal_error("could not start a %s call", self.provider)
            return None

    # -- call end --------------------------------------------------------------------------

    def returned(self, tl: Timeline, result: Any) -> None:
        try:
            if tl.on_close is not None or tl.ended:
                return  # a stream took the call over while the request ran
            if self.is_stream(result):
                # A stream whose generator starts lazily (anthropic): until it does, any close of
                # the response ends the call, and so does dropping the stream.
                common.own_stream(tl, result, None)
                return
            http = common.get(result, "http_response")  # no AttributeError raised by a model per call
            if http is not None:  # with_raw_response / with_streaming_response
                register_response(http, tl)
                if not http.is_closed:
                    tl.on_close = self._raw_closed
                    watch(http, tl)
                    return
                if not tl.stream:
                    self.read_result(tl, http.json())
            else:
                self.read_result(tl, result)
        except Exception:
            internal_error("reading a %s result failed", self.provider)
        tl.finish(sc.END_COMPLETED)

    def _raw_closed(self, tl: Timeline, response: Any, now: int) -> None:
        """A raw response the app read (or dropped) by itself has been closed."""
        if not tl.stream:
            content = getattr(response, "_content", None)
            if content is None and response.is_stream_consumed:
                return  # closed inside read(), before the content was kept: the read hook calls again
            if content:
                with contextlib.suppress(ValueError):
                    self.read_result(tl, json.loads(content))
        tl.finish(sc.END_COMPLETED, now)

    def raised(self, tl: Timeline, exc: BaseException) -> None:
        try:
            status = getattr(exc, "status_code", None)
            if isinstance(status, int):
                tl.status_code = status
            request_id = getattr(exc, "request_id", None)
            if isinstance(request_id, str):
                tl.request_id = request_id
        finally:
            end_on_exception(tl, exc)

    # -- the wrappers ----------------------------------------------------------------------

    def request(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        tl = self.start(instance, args, kwargs)
        if tl is None:
            return wrapped(*args, **kwargs)
        args, kwargs = self.prepare(tl, instance, args, kwargs)
        call_token = CURRENT_CALL.set(tl)
        ctx_token = otel_context.attach(trace.set_span_in_context(tl.span))
        try:
            result = wrapped(*args, **kwargs)
        except BaseException as exc:
            self.raised(tl, exc)
            raise
        finally:
            otel_context.detach(ctx_token)
            CURRENT_CALL.reset(call_token)
        self.returned(tl, result)
        return result

    async def request_async(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        tl = self.start(instance, args, kwargs)
        if tl is None:
            return await wrapped(*args, **kwargs)
        args, kwargs = self.prepare(tl, instance, args, kwargs)
        call_token = CURRENT_CALL.set(tl)
        ctx_token = otel_context.attach(trace.set_span_in_context(tl.span))
        try:
            result = await wrapped(*args, **kwargs)
        except BaseException as exc:
            self.raised(tl, exc)
            raise
        finally:
            otel_context.detach(ctx_token)
            CURRENT_CALL.reset(call_token)
        self.returned(tl, result)
        return result

    def _stream_call(self, instance: Any) -> Timeline | None:
        tl = call_for_response(getattr(instance, "response", None)) or CURRENT_CALL.get()
        if tl is None or tl.ended:
            return None
        return tl

    def _observe(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any], how: Any) -> Any:
        items = wrapped(*args, **kwargs)
        try:
            tl = self._stream_call(instance)
            if tl is None:
                return items
            observed = how(items, tl, self.observer(tl))
            common.own_stream(tl, instance, observed)
            return observed
        except Exception:
            internal_error("could not observe a %s stream", self.provider)
            return items

    def stream(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return self._observe(wrapped, instance, args, kwargs, observe_sync)

    def stream_async(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return self._observe(wrapped, instance, args, kwargs, observe_async)

    # -- installing ------------------------------------------------------------------------

    def install(self, patches: Patches, public_methods: Iterable[tuple[str, str]]) -> bool:
        """Patch the SDK's chokepoints (all or none) and, best effort, its public methods."""
        sdk = self.provider
        mark = len(patches)
        ok = all(
            [
                patches.wrap(f"{sdk}._base_client", "SyncAPIClient.request", self.request),
                patches.wrap(f"{sdk}._base_client", "AsyncAPIClient.request", self.request_async),
                patches.wrap(f"{sdk}._streaming", "Stream.__stream__", self.stream),
                patches.wrap(f"{sdk}._streaming", "AsyncStream.__stream__", self.stream_async),
            ]
        )
        if not ok:
            patches.unwrap_to(mark)
            warn(
                f"the installed {sdk} SDK does not have the internals firsttoken hooks "
                f"(_base_client.SyncAPIClient.request, _streaming.Stream.__stream__); {sdk} calls are not measured"
            )
            return False
        for module, path in public_methods:
            # Without these a call starts when the SDK sends, a little later than the app called.
            is_async = path.startswith(("Async", "BetaAsync")) or path.endswith("__aenter__")
            patches.wrap_when_imported(module, path, common.stamp_start_async if is_async else common.stamp_start)
        return True
