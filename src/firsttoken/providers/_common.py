"""What every provider hook shares: reading results, naming providers, owning streams."""

from __future__ import annotations

import json
import logging
import time
import weakref
from collections.abc import Mapping
from typing import Any

from opentelemetry.trace import Span
from opentelemetry.util.types import AttributeValue

from .. import semconv as sc
from ..config import warn
from ..context import CALL_START
from ..recorder import Recorder, app_suppressed
from ..streams import is_running, watch
from ..timeline import STREAM_TEXT_KEY, Timeline
from .endpoints import Resolver

log = logging.getLogger("firsttoken")

ProviderResolver = Resolver
"""``provider_of(host, default)`` -> ``gen_ai.provider.name``, and ``.endpoint(...)`` per client."""


def provider_resolver(overrides: Mapping[str, str]) -> Resolver:
    """Name the provider behind a host: user overrides, then known hosts, else the SDK's own."""
    return Resolver(overrides)


def server_of(base_url: Any) -> tuple[str | None, int | None]:
    """(server.address, server.port) of an SDK client's base URL (an httpx URL)."""
    if base_url is None:
        return None, None
    host = getattr(base_url, "host", None) or None
    port = getattr(base_url, "port", None)
    if port is None:
        scheme = getattr(base_url, "scheme", "https")
        port = 443 if scheme == "https" else 80
    return host, port


_MISSING = object()
_FIELD_READS: dict[tuple[type, str], bool] = {}
"""(model class, name) -> whether the name is read from the instance's fields and extras alone."""


def _fields_only(cls: type, name: str) -> bool:
    """Whether ``name`` on instances of ``cls`` is a pydantic 2 field or extra and nothing else: then
    a value missing from the instance is missing, and ``getattr`` would only raise (through
    pydantic's ``__getattr__``, ≈ 2 µs) to say so. Worked out once per class and name."""
    key = (cls, name)
    known = _FIELD_READS.get(key)
    if known is None:
        known = isinstance(getattr(cls, "model_extra", None), property) and not hasattr(cls, name)
        if len(_FIELD_READS) >= 4096:  # classes made per call: start over rather than grow
            _FIELD_READS.clear()
        _FIELD_READS[key] = known
    return known


def get(obj: Any, name: str) -> Any:
    """Attribute of an SDK model or key of the same object as a plain dict (raw responses)."""
    if obj is None:
        return None
    if isinstance(obj, dict):  # a raw response's JSON
        return obj.get(name)
    fields = getattr(obj, "__dict__", None)
    if fields is not None:
        value = fields.get(name, _MISSING)
        if value is not _MISSING:
            return value  # a field the response had
        if _fields_only(type(obj), name):  # a field it lacked, or a name the model does not know
            extra = obj.model_extra
            return None if extra is None else extra.get(name)
    value = getattr(obj, name, _MISSING)
    if value is not _MISSING:
        return value
    return obj.get(name) if isinstance(obj, Mapping) else None


def to_json(value: Any) -> str:
    """JSON text of request or response content (SDK models are dumped as dicts)."""

    def default(obj: Any) -> Any:
        dump = getattr(obj, "model_dump", None)
        if callable(dump):
            return dump(mode="json", exclude_none=True, warnings=False)
        return str(obj)

    return json.dumps(value, default=default, ensure_ascii=False, separators=(",", ":"))


def append_output(tl: Timeline, text: str) -> None:
    """Accumulate streamed output text (only called when content capture is on)."""
    if tl.capture is not None:
        tl.capture[STREAM_TEXT_KEY] = tl.capture.get(STREAM_TEXT_KEY, "") + text


def _stream_closed(tl: Timeline, response: Any, now: int) -> None:
    ref = tl.stream_gen
    gen = None if ref is None else ref()
    if gen is not None and is_running(gen):
        return  # the stream itself is closing its response at its end; it ends the call
    tl.finish(sc.END_COMPLETED if tl.terminal_seen else sc.END_CLOSED, now)


def own_stream(tl: Timeline, stream_obj: Any, gen: Any) -> None:
    """Hand the call to a stream: its generator ends it, or its closing, or its collection.

    ``gen`` is our observing generator, or None while the SDK has not started reading items.
    Only the first stream object is watched for abandonment: the one the app holds. (anthropic
    reads items from a private copy, which dies when its generator ends, before the call does.)
    """
    first = tl.on_close is None
    tl.stream_gen = None if gen is None else weakref.ref(gen)
    tl.on_close = _stream_closed  # a module function, not a partial: fewer objects per call in flight
    if first:
        watch(stream_obj, tl)


_warned: set[str] = set()


def check_version(dist: str, spec: str) -> bool:
    """Whether the installed ``dist`` is in ``spec``; warns once when it is installed but is not."""
    # Only when an SDK is imported: packaging is not free to import, and instrument() need not pay it.
    from importlib import metadata

    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        installed = metadata.version(dist)
    except metadata.PackageNotFoundError:
        return False
    try:
        ok = Version(installed) in SpecifierSet(spec)
    except (InvalidVersion, InvalidSpecifier):
        ok = False
    if not ok and dist not in _warned:
        _warned.add(dist)
        warn(f"{dist} {installed} is not supported (firsttoken supports {dist}{spec}); its calls are not measured")
    return ok


def stamp_start(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Wrapper for a public SDK method: the call starts when the app calls it (outermost wins), and
    whether the app's context suppressed instrumentation is read there, before any wrapper below."""
    if CALL_START.get() is not None:
        return wrapped(*args, **kwargs)
    token = CALL_START.set((time.perf_counter_ns(), time.time_ns(), app_suppressed()))
    try:
        return wrapped(*args, **kwargs)
    finally:
        CALL_START.reset(token)


async def stamp_start_async(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if CALL_START.get() is not None:
        return await wrapped(*args, **kwargs)
    token = CALL_START.set((time.perf_counter_ns(), time.time_ns(), app_suppressed()))
    try:
        return await wrapped(*args, **kwargs)
    finally:
        CALL_START.reset(token)


def start_session_span(
    recorder: Recorder, provider: str, model: str | None, host: str | None, port: int | None, start_wall_ns: int
) -> Span:
    """A realtime session's span (OpenAI Realtime, Gemini Live): its provider, model and server."""
    attrs: dict[str, AttributeValue] = {sc.GEN_AI_PROVIDER_NAME: provider}
    if model:
        attrs[sc.GEN_AI_REQUEST_MODEL] = model
    if host:
        attrs[sc.SERVER_ADDRESS] = host
        if port is not None:
            attrs[sc.SERVER_PORT] = port
    name = f"{sc.SPAN_REALTIME_SESSION} {model}" if model else sc.SPAN_REALTIME_SESSION
    return recorder.start_session(name, attrs, start_wall_ns)
