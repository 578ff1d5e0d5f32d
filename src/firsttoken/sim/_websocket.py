"""A websocket server on its own thread and event loop, for the realtime simulators (OpenAI Realtime,
Gemini Live): each subclass answers a connection in ``_connection``."""

from __future__ import annotations

import asyncio
import ssl
import threading
from types import TracebackType
from typing import Any, TypeVar

_S = TypeVar("_S", bound="WebsocketServer")


class WebsocketServer:
    """Serves ``_connection`` on 127.0.0.1 at a free port (TLS with ``ssl_context``); a context manager."""

    def __init__(self, thread_name: str, ssl_context: ssl.SSLContext | None = None) -> None:
        self.ssl_context = ssl_context
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Future[None] | None = None
        self._port = 0
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)

    def start(self: _S) -> _S:
        self._thread.start()
        self._ready.wait()
        return self

    def close(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set_result, None)
        self._thread.join()

    def __enter__(self: _S) -> _S:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def _connection(self, ws: Any) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        self._loop.run_until_complete(self._serve())
        self._loop.close()

    async def _serve(self) -> None:
        from websockets.asyncio.server import serve

        self._stop = self._loop.create_future()
        async with serve(self._connection, "127.0.0.1", 0, ssl=self.ssl_context, max_size=None) as server:
            self._port = next(iter(server.sockets)).getsockname()[1]
            self._ready.set()
            await self._stop
