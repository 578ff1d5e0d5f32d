"""``firsttoken view``: a local OTLP/HTTP receiver with a live page of your own app's LLM latency.

Spans go to SQLite (bounded by age and row count), so they survive restarts of the viewer and of the
apps; any number of apps can send at once (``service.name`` / ``service.instance.id`` tell them apart).
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

from ._otlp import BadRequest, SpanRecord, Unsupported, parse_traces
from ._server import IDLE_S, MAX_CONNECTIONS, WAIT_S, ViewServer
from ._store import MAX_BYTES, Store

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 4318  # OTLP/HTTP's: an app with firsttoken's default set-up sends here without a setting
DEFAULT_MAX_BODY = 16 * 1024 * 1024


def default_db() -> str:
    """``$XDG_CACHE_HOME/firsttoken/view.sqlite3`` (``~/.cache/...`` without it)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return str(Path(base) / "firsttoken" / "view.sqlite3")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def make_server(
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    db: str | None = None,
    max_age_s: float = 7 * 86400,
    max_calls: int = 200_000,
    max_body: int = DEFAULT_MAX_BODY,
    max_bytes: int = MAX_BYTES,
    max_connections: int = MAX_CONNECTIONS,
    idle_s: float = IDLE_S,
    wait_s: float = WAIT_S,
) -> ViewServer:
    """The viewer, bound and ready (``serve_forever()`` to run it; ``server_close()`` and ``store.close()``)."""
    from ..charts import plotly_js

    path = db or default_db()
    if path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    store = Store(path, max_age_s=max_age_s, max_calls=max_calls, max_bytes=max_bytes)
    store.trim()
    return ViewServer(
        (host, port),
        store,
        max_body=max_body,
        plotly_js=plotly_js(),
        max_connections=max_connections,
        idle_s=idle_s,
        wait_s=wait_s,
    )


__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "BadRequest",
    "SpanRecord",
    "Store",
    "Unsupported",
    "ViewServer",
    "default_db",
    "is_loopback",
    "make_server",
    "parse_traces",
]
