"""Server-controlled response headers: values capped, timing and counts parsed defensively, one bad
header never costing the call its other header facts."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from firsttoken import headers
from firsttoken import semconv as sc

from .conftest import Telemetry

COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 0,
    "model": "gpt-4o",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}


def _server(headers: list[tuple[str, str]]) -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["content-length"]))
            body = json.dumps(COMPLETION).encode()
            self.send_response(200)
            for name, value in [*headers, ("content-type", "application/json"), ("content-length", str(len(body)))]:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def _call(telemetry: Telemetry, headers: list[tuple[str, str]]) -> dict[str, Any]:
    for base_url in _server(headers):
        with openai.OpenAI(base_url=base_url, api_key="k", max_retries=0) as client:
            client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    return dict(telemetry.call().attributes or {})


def test_a_huge_request_id_is_capped(telemetry: Telemetry) -> None:
    attrs = _call(telemetry, [("x-request-id", "r" * 12_000)])
    assert attrs[sc.FT_REQUEST_ID] == "r" * headers.MAX_HEADER_VALUE


@pytest.mark.parametrize("bad", ["inf", "-inf", "nan", "-5", "1e400", "9e99", "soon"])
def test_bad_numbers_are_skipped_and_the_rest_kept(telemetry: Telemetry, bad: str) -> None:
    hostile = [
        ("openai-processing-ms", bad),
        ("x-ratelimit-remaining-requests", bad),
        ("retry-after", bad),
    ]
    good = [
        ("x-ratelimit-remaining-tokens", "9000"),
        ("x-ratelimit-reset-tokens", "6m0s"),
        ("x-request-id", "req_123"),
    ]
    attrs = _call(telemetry, [*hostile, *good])
    for attr in (sc.FT_SERVER_PROCESSING_TIME, sc.FT_RATELIMIT_REMAINING_REQUESTS, sc.FT_RETRY_AFTER):
        assert attr not in attrs, (attr, attrs.get(attr))
    assert attrs[sc.FT_RATELIMIT_REMAINING_TOKENS] == 9000
    assert attrs[sc.FT_RATELIMIT_RESET_TOKENS] == "6m0s"
    assert attrs[sc.FT_REQUEST_ID] == "req_123"


def test_good_numbers_are_kept(telemetry: Telemetry) -> None:
    attrs = _call(telemetry, [("openai-processing-ms", "250"), ("x-ratelimit-remaining-requests", "59.0")])
    assert attrs[sc.FT_SERVER_PROCESSING_TIME] == pytest.approx(0.25)
    assert attrs[sc.FT_RATELIMIT_REMAINING_REQUESTS] == 59
