"""aiobotocore: async boto's ``bedrock-runtime`` calls measured like boto3's (botocore's adapter, async).

aiobotocore (and ``aioboto3`` over it) subclasses botocore's endpoint, event stream and body, and
overrides every method :mod:`firsttoken.transport_botocore` patches with an async one of its own:
``AioEndpoint._send_request`` (one API call, botocore's retries included), ``AioEndpoint._send`` (one
attempt, sent with aiohttp), ``AioEventStream.__aiter__`` and ``AioStreamingBody.read``. These hooks
are the same adapter's (its ``DirectCalls``, its open bodies, its reading of each event), awaited:

* ``AioBaseClient._make_api_call`` (the app's awaited ``converse(...)``) stamps the call's start, for
  the ``bedrock-runtime`` operations firsttoken measures, as botocore's does;
* ``_send_request`` is the call's :class:`~firsttoken.transport_botocore.RetryScope`;
* ``_send`` is :func:`~firsttoken.transport.send_direct_async`'s send: it starts the call, counts the
  attempt, reads the status and headers from aiohttp's ``ClientResponse``. The call is current while
  aiohttp sends (``CURRENT_CALL``), so aiohttp's own seam passes the request through (no second
  call) and its ``TraceConfig`` cuts the attempt's wire phases;
* ``AioEventStream.__aiter__``'s events go to the call's reader as the app iterates them; its
  ``close()`` is botocore's (already patched), ``AioStreamingBody.read`` and ``close`` are its own.

aiobotocore's httpx backend (an ``http_session_cls`` other than its ``AIOHTTPSession``) is left to the
httpx seam, as before: only the aiohttp backend, aiobotocore's default, is read here. Patched when the
app imports aiobotocore: importing firsttoken imports no aiobotocore.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from typing import Any

from ._patch import Patches
from .streams import end_on_exception
from .timeline import Timeline
from .transport import SseFeed, WireRequest, read_on, send_direct_async
from .transport_aiohttp import aiohttp_responded
from .transport_botocore import API_CALL, BotocoreAdapter, measured, stamp


class AiobotocoreHooks:
    """aiobotocore's hooks over botocore's adapter (one installation's)."""

    client_name = "aiobotocore"

    def __init__(self, adapter: BotocoreAdapter) -> None:
        self.adapter = adapter
        self.calls = adapter.calls

    def patch(self, patches: Patches) -> None:
        """Patch each aiobotocore module when the app imports it (now, if it has)."""
        patches.wrap_when_imported("aiobotocore.client", "AioBaseClient._make_api_call", self._make_api_call)
        patches.wrap_when_imported("aiobotocore.endpoint", "AioEndpoint._send_request", self._send_request)
        patches.wrap_when_imported("aiobotocore.endpoint", "AioEndpoint._send", self._send)
        patches.wrap_when_imported("aiobotocore.eventstream", "AioEventStream.__aiter__", self._aiter)
        patches.wrap_when_imported("aiobotocore.response", "AioStreamingBody.read", self._read)
        patches.wrap_when_imported("aiobotocore.response", "AioStreamingBody.close", self.adapter.close_body)

    @staticmethod
    def _ours(endpoint: Any) -> bool:
        """Whether ``endpoint`` sends with aiobotocore's aiohttp session (imported with its endpoint)."""
        session = getattr(sys.modules.get("aiobotocore.httpsession"), "AIOHTTPSession", None)
        return session is not None and isinstance(getattr(endpoint, "http_session", None), session)

    # -- the app's call to the client's method --------------------------------------------------

    async def _make_api_call(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if not measured(instance, args, kwargs):
            return await wrapped(*args, **kwargs)
        token = API_CALL.set(stamp())
        try:
            return await wrapped(*args, **kwargs)
        finally:
            API_CALL.reset(token)

    # -- one API call, botocore's retries included ---------------------------------------------

    async def _send_request(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        scope = self.adapter.retry_scope() if self._ours(instance) else None
        if scope is None:
            return await wrapped(*args, **kwargs)
        with scope:
            scope.result = await wrapped(*args, **kwargs)
        return scope.result

    # -- one attempt (transport.send_direct_async) ----------------------------------------------

    async def _send(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if not self._ours(instance):
            return await wrapped(*args, **kwargs)
        return await send_direct_async(self, wrapped, instance, args, kwargs)

    def wire_request(self, client: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> WireRequest | None:
        return self.adapter.wire_request(client, args, kwargs)

    def sending(self, tl: Timeline, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.adapter.sending(tl, args, kwargs)

    def responded(self, tl: Timeline, family: str, response: Any) -> None:
        now = aiohttp_responded(tl, response.raw)
        read_on(tl, response, response.status_code, now)

    # -- a streamed answer, as the app reads it --------------------------------------------------

    def _aiter(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        events = wrapped(*args, **kwargs)
        body = self.adapter.bodies.get(instance)
        if body is None or body.reader is None or body.tl.ended:
            return events
        return self._observed(events, body, body.reader)

    async def _observed(self, events: AsyncIterator[Any], body: Any, reader: SseFeed) -> AsyncIterator[Any]:
        adapter = self.adapter
        try:
            async for event in events:
                adapter.event(body, reader, event)
                yield event
        except GeneratorExit:
            raise
        except BaseException as exc:  # an exception event, a dropped connection, a cancellation
            adapter.failed(body, exc)
            raise
        adapter.exhausted(body, reader)

    async def _read(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        body = self.adapter.bodies.get(instance)
        if body is None or body.tl.ended:
            return await wrapped(*args, **kwargs)
        try:
            data = await wrapped(*args, **kwargs)
        except BaseException as exc:  # dropped, timed out, cancelled: the call ends with it
            end_on_exception(body.tl, exc)
            raise
        self.adapter.piece(body, data, args, kwargs)
        return data
