"""The viewer's HTTP server: OTLP/HTTP receiver (``POST /v1/traces``, ``/v1/metrics``, ``/v1/logs``), the
page (``GET /``) and its JSON API (``GET /api/...``), on one port."""

from __future__ import annotations

import contextlib
import json
import logging
import re
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .. import semconv as sc
from ..charts import phase_colour, phase_order
from . import _otlp
from ._page import render
from ._store import FUTURE_S, GROUPS, Store

log = logging.getLogger("firsttoken.view")

WINDOWS = (300, 900, 3600, 21600, 86400, 604800)
DRAIN_MAX = 256 * 1024 * 1024
"""A body over the limit is still read (and dropped) up to this many bytes before the 413, so that a
client that sends it all before reading the answer gets the 413 rather than a reset connection."""
_CHUNK = 1 << 16
MAX_CONNECTIONS = 64
"""Connections served at once (one thread each). A new one past this closes the connection that has
waited longest for a request (idle, or sending one slowly); with none waiting, the new one is closed."""
IDLE_S = 30.0
"""A connection that sends nothing for this long is closed."""
SMALL = 1 << 20
"""Bodies up to this size, on the wire and inflated, are decoded up to ``SMALL_DECODES`` at a time; larger
ones one at a time, and their wire bytes are held within ``2 * max_body`` in all."""
SMALL_DECODES = 4
JSON_SHARE = 8
"""An OTLP/JSON request may inflate to ``max_body / JSON_SHARE`` (2 MB by default): Python's JSON decoder
makes up to ~40 bytes of objects per byte, protobuf's parser ~30 (docs/view.md has the figures)."""
WAIT_S = 20.0
"""How long a request waits for its turn to be decoded before a 503 (the sender retries)."""
_LENGTH = re.compile(r"\s*[0-9]+\s*")


class Busy(Exception):
    """The receiver is decoding as much as it may hold: a 503, and the sender retries."""


@dataclass
class _Connection:
    sock: socket.socket
    waiting_since: float
    busy: bool = False


class ViewServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        store: Store,
        *,
        max_body: int,
        plotly_js: str,
        max_connections: int = MAX_CONNECTIONS,
        idle_s: float = IDLE_S,
        wait_s: float = WAIT_S,
    ) -> None:
        self.store = store
        self.max_body = max_body
        self.max_connections = max_connections
        self.idle_s = idle_s
        self.wait_s = wait_s
        self.received_spans = 0
        self.rejected = 0
        self._plotly_js = plotly_js
        self._page: bytes | None = None
        self._lock = threading.Lock()
        self._connections: dict[socket.socket, _Connection] = {}
        self._room = threading.Condition()
        self._large_bytes = 0
        self._small_decodes = threading.BoundedSemaphore(SMALL_DECODES)
        self._large_decode = threading.BoundedSemaphore(1)
        super().__init__(address, Handler)

    # -- connections: a bounded number, the longest-waiting one dropped for a new one ------------------

    def process_request(self, request: Any, client_address: Any) -> None:
        victim: _Connection | None = None
        refused = False
        with self._lock:
            if len(self._connections) >= self.max_connections:
                waiting = [c for c in self._connections.values() if not c.busy]
                if waiting:
                    victim = min(waiting, key=lambda c: c.waiting_since)
                    del self._connections[victim.sock]
                else:
                    refused = True
            if not refused:
                self._connections[request] = _Connection(request, time.monotonic())
        if refused:
            log.debug("firsttoken view: %d connections busy: %s refused", self.max_connections, client_address[0])
            self.shutdown_request(request)
            return
        if victim is not None:
            log.debug("firsttoken view: %d connections: the longest waiting one closed", self.max_connections)
            with contextlib.suppress(OSError):
                victim.sock.shutdown(socket.SHUT_RDWR)  # its thread reads the end and finishes
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._lock:
            self._connections.pop(request, None)
        super().shutdown_request(request)

    def mark(self, sock: socket.socket, *, busy: bool) -> None:
        """A connection starts waiting for a request (it may be dropped for a new one), or is being answered."""
        with self._lock:
            connection = self._connections.get(sock)
            if connection is not None:
                connection.busy = busy
                if not busy:
                    connection.waiting_since = time.monotonic()

    # -- memory: what bodies may be held and decoded at once --------------------------------------------

    @contextlib.contextmanager
    def holding(self, length: int) -> Iterator[None]:
        """Room to hold a body of ``length`` bytes: large bodies share ``2 * max_body``."""
        if length <= SMALL:
            yield
            return
        deadline = time.monotonic() + self.wait_s
        with self._room:
            while self._large_bytes + length > 2 * self.max_body:
                left = deadline - time.monotonic()
                if left <= 0 or not self._room.wait(left):
                    raise Busy("the viewer holds as many large bodies as it may: retry")
            self._large_bytes += length
        try:
            yield
        finally:
            with self._room:
                self._large_bytes -= length
                self._room.notify_all()

    @contextlib.contextmanager
    def decoding(self, large: bool) -> Iterator[None]:
        """A turn to decode: ``SMALL_DECODES`` small requests at once, one large one."""
        gate = self._large_decode if large else self._small_decodes
        if not gate.acquire(timeout=self.wait_s):
            raise Busy("the viewer is decoding as many requests as it may: retry")
        try:
            yield
        finally:
            gate.release()

    @property
    def url(self) -> str:
        host, port = str(self.server_address[0]), self.server_address[1]
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}"

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that leaves early (``curl ... | head``) is not the viewer's error: one debug line, no traceback."""
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            log.debug("firsttoken view: %s left early (%s)", client_address[0], type(exc).__name__)
            return
        super().handle_error(request, client_address)

    def page(self) -> bytes:
        if self._page is None:
            self._page = render(self._plotly_js, self.url)
        return self._page


_SECONDS = frozenset(
    {
        sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK, sc.FT_TIME_TO_FIRST_TOKEN, sc.FT_TIME_PER_OUTPUT_TOKEN,
        sc.FT_TIME_TO_RESPONSE_HEADERS, sc.FT_SERVER_QUEUE_TIME, sc.FT_SERVER_PROMPT_TIME,
        sc.FT_SERVER_COMPLETION_TIME, sc.FT_SERVER_TOTAL_TIME, sc.FT_SERVER_INFERENCE_TIME,
        sc.FT_SERVER_FIRST_TOKEN_TIME, sc.FT_SERVER_TIME_PER_OUTPUT_TOKEN, sc.FT_SERVER_PROCESSING_TIME,
        sc.FT_ACTION_LLM_TIME, sc.FT_ACTION_LLM_BUSY_TIME,
    }
)  # fmt: skip
"""The call-span attributes in seconds (the page shows them in ms, as everything else on it)."""


def _seconds(attrs: dict[str, Any]) -> list[str]:
    return sorted(k for k in attrs if k in _SECONDS or k.startswith(sc.FT_PHASE_DURATION_PREFIX))


def _from_durations(attrs: dict[str, Any]) -> list[dict[str, Any]]:
    """A call's phases from its ``firsttoken.phase_duration.<phase>`` attributes, laid end to end in wire order
    (phase spans exist only for sampled calls; the durations are on every call span)."""
    durations = [
        (key[len(sc.FT_PHASE_DURATION_PREFIX) :], value)
        for key, value in attrs.items()
        if key.startswith(sc.FT_PHASE_DURATION_PREFIX) and isinstance(value, (int, float))
    ]
    out, at = [], 0.0
    for phase, seconds in sorted(durations, key=lambda d: phase_order(d[0])):
        out.append({"phase": phase, "start_s": at, "duration_s": float(seconds)})
        at += float(seconds)
    return out


def _arg(query: dict[str, list[str]], name: str, default: str) -> str:
    values = query.get(name)
    return values[0] if values else default


class Handler(BaseHTTPRequestHandler):
    server: ViewServer
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.idle_s)  # a connection that sends nothing this long is closed

    def handle_one_request(self) -> None:
        self.server.mark(self.connection, busy=False)
        super().handle_one_request()

    def parse_request(self) -> bool:
        # The request line is in: its wait counts from now (a slow sender's from when it began).
        self.server.mark(self.connection, busy=False)
        return super().parse_request()

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def _send(
        self, status: int, body: bytes, content_type: str = "application/json", *, retry_after: bool = False
    ) -> None:
        self.send_response(status)
        if retry_after:
            self.send_header("Retry-After", "1")
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, reason: str) -> None:
        self.server.rejected += 1
        self._send(status, json.dumps({"code": status, "message": reason}).encode())

    # -- receiver ---------------------------------------------------------------------------

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        if path not in ("/v1/traces", "/v1/metrics", "/v1/logs"):
            self._error(404, f"no such endpoint {path!r}: OTLP/HTTP goes to /v1/traces, /v1/metrics, /v1/logs")
            return
        given = self.headers.get("Content-Length")
        if given is None:
            self._error(411, "a Content-Length is required")
            self.close_connection = True
            return
        if not _LENGTH.fullmatch(given):
            self._error(400, f"Content-Length {given[:40]!r} is not a number of bytes")
            self.close_connection = True
            return
        length = int(given)
        if length > self.server.max_body:
            self._drain(length)
            self._error(413, f"the body is {length} bytes, over the viewer's limit of {self.server.max_body}")
            self.close_connection = True
            return
        try:
            with self.server.holding(length):
                body = self.rfile.read(length)
                if len(body) < length:  # the client left part way
                    self.close_connection = True
                    return
                self.server.mark(self.connection, busy=True)
                self._receive(path, body)
        except Busy as exc:
            self.close_connection = True
            self._send(503, json.dumps({"code": 503, "message": str(exc)}).encode(), retry_after=True)

    def _receive(self, path: str, body: bytes) -> None:
        content_type = self.headers.get("Content-Type")
        encoding = self.headers.get("Content-Encoding")
        json_body = (content_type or "").split(";", 1)[0].strip().lower() == _otlp.JSON
        limit = self.server.max_body // JSON_SHARE if json_body else self.server.max_body
        try:
            refused = None
            if len(body) <= SMALL:
                with self.server.decoding(large=False):
                    small = min(SMALL, limit)
                    try:
                        raw = _otlp.decode_body(body, encoding, small)
                        refused = self._store(path, raw, content_type, small // _otlp.MESSAGE_BYTES)
                    except _otlp.TooLarge:
                        if limit <= SMALL:
                            raise
            if refused is None:
                with self.server.decoding(large=True):
                    raw = _otlp.decode_body(body, encoding, limit)
                    refused = self._store(path, raw, content_type, limit // _otlp.MESSAGE_BYTES)
        except _otlp.TooLarge as exc:
            said = f" (OTLP/JSON: 1/{JSON_SHARE} of --max-body-mb; protobuf may use all of it)" if json_body else ""
            self._error(413, f"{exc}{said}")
            return
        except _otlp.Unsupported as exc:
            self._error(415, str(exc))
            return
        except _otlp.BadRequest as exc:
            self._error(400, str(exc))
            return
        except Busy:
            raise
        except Exception as exc:  # never let one request take the receiver down
            log.exception("firsttoken view: storing a request failed")
            self._error(500, f"the viewer could not store this request: {type(exc).__name__}")
            return
        why = f"{refused} span(s) start more than {FUTURE_S} s after the viewer's clock: not stored"
        kind, reply = _otlp.response_body(content_type, refused, why)
        self._send(200, reply, kind)

    def _store(self, path: str, raw: bytes, content_type: str | None, max_messages: int) -> int:
        """Parse and store one request, a batch of spans at a time (nothing is stored before the whole
        request is found valid); how many of its spans were refused for being dated ahead."""
        if path == "/v1/traces":
            before = self.server.store.refused_future
            for records in _otlp.iter_traces(raw, content_type, max_messages):
                self.server.store.add(records)
                self.server.received_spans += len(records)
            return self.server.store.refused_future - before
        if path == "/v1/metrics":
            _otlp.parse_metrics(raw, content_type, max_messages)
        elif (content_type or "").split(";")[0].strip().lower() not in (_otlp.PROTOBUF, _otlp.JSON):
            raise _otlp.Unsupported(f"content-type {content_type!r}")
        return 0

    def _drain(self, length: int) -> None:
        """Read and drop up to ``DRAIN_MAX`` bytes of a body that will not be used."""
        left = min(length, DRAIN_MAX)
        try:
            while left > 0:
                chunk = self.rfile.read(min(_CHUNK, left))
                if not chunk:
                    return
                left -= len(chunk)
        except OSError:
            pass

    # -- page and API --------------------------------------------------------------------------

    def do_GET(self) -> None:
        self.server.mark(self.connection, busy=True)
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        try:
            if parts.path in ("/", "/index.html"):
                self._send(200, self.server.page(), "text/html; charset=utf-8")
            elif parts.path == "/api/overview":
                self._json(self._overview(query))
            elif parts.path == "/api/call":
                call = self.server.store.call(_arg(query, "span_id", ""))
                if call is None:
                    self._error(404, "no such call")
                    return
                call["phases_from"] = "spans"
                if not call["phases"]:  # no phase child spans (they are sampled): the durations every call has
                    call["phases"] = _from_durations(call["attrs"])
                    call["phases_from"] = "durations"
                call["phases"] = sorted(call["phases"], key=lambda p: (p["start_s"], phase_order(p["phase"])))
                for p in call["phases"]:
                    p["colour"] = phase_colour(p["phase"])
                call["seconds"] = _seconds(call["attrs"])
                self._json(call)
            elif parts.path == "/healthz":
                store = self.server.store
                self._json(
                    {
                        "stored_calls": store.count(),
                        "stored_spans": store.span_count(),
                        "received_spans": self.server.received_spans,
                        "refused_future_spans": store.refused_future,
                    }
                )
            else:
                self._error(404, f"no such page {parts.path!r}")
        except ValueError as exc:
            self._error(400, str(exc))

    def _json(self, value: Any) -> None:
        self._send(200, json.dumps(value, default=str).encode())

    def _overview(self, query: dict[str, list[str]]) -> dict[str, Any]:
        raw = _arg(query, "window", "900")
        window = int(raw) if raw.isdigit() else None
        if window not in WINDOWS:
            raise ValueError(f"window={raw!r}: use one of {', '.join(map(str, WINDOWS))} (seconds)")
        group = _arg(query, "group", "model")
        if group not in GROUPS:
            raise ValueError(f"group must be one of {sorted(GROUPS)}")
        metric = _arg(query, "metric", "e2e")
        if metric not in ("e2e", "ttft", "tpot"):
            raise ValueError("metric must be e2e, ttft or tpot")
        now = time.time_ns()
        return self.server.store.overview(now - window * 1_000_000_000, now, group, metric)
