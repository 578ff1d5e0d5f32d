"""The viewer's HTTP server: OTLP/HTTP receiver (``POST /v1/traces``, ``/v1/metrics``, ``/v1/logs``), the
page (``GET /``) and its JSON API (``GET /api/...``), on one port."""

from __future__ import annotations

import json
import logging
import sys
import time
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


class ViewServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], store: Store, *, max_body: int, plotly_js: str) -> None:
        self.store = store
        self.max_body = max_body
        self.received_spans = 0
        self.rejected = 0
        self._plotly_js = plotly_js
        self._page: bytes | None = None
        super().__init__(address, Handler)

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

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
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
        try:
            length = int(self.headers.get("Content-Length") or "")
        except ValueError:
            self._error(411, "a Content-Length is required")
            self.close_connection = True
            return
        if length > self.server.max_body:
            self._drain(length)
            self._error(413, f"the body is {length} bytes, over the viewer's limit of {self.server.max_body}")
            self.close_connection = True
            return
        body = self.rfile.read(length)
        content_type = self.headers.get("Content-Type")
        refused = 0
        try:
            raw = _otlp.decode_body(body, self.headers.get("Content-Encoding"), self.server.max_body)
            if path == "/v1/traces":
                records = _otlp.parse_traces(raw, content_type)
                before = self.server.store.refused_future
                self.server.store.add(records)
                self.server.received_spans += len(records)
                refused = self.server.store.refused_future - before
            elif path == "/v1/metrics":
                _otlp.parse_metrics(raw, content_type)
            elif (content_type or "").split(";")[0].strip().lower() not in (_otlp.PROTOBUF, _otlp.JSON):
                raise _otlp.Unsupported(f"content-type {content_type!r}")
        except _otlp.TooLarge as exc:
            self._error(413, str(exc))
            return
        except _otlp.Unsupported as exc:
            self._error(415, str(exc))
            return
        except _otlp.BadRequest as exc:
            self._error(400, str(exc))
            return
        except Exception as exc:  # never let one request take the receiver down
            log.exception("firsttoken view: storing a request failed")
            self._error(500, f"the viewer could not store this request: {type(exc).__name__}")
            return
        why = f"{refused} span(s) start more than {FUTURE_S} s after the viewer's clock: not stored"
        kind, reply = _otlp.response_body(content_type, refused, why)
        self._send(200, reply, kind)

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
