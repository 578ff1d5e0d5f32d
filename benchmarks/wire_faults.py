"""How many calls read on the wire end right when they fail: 36 fault scenarios through the groq and
mistralai SDKs and plain httpx, against the simulator over real sockets.

Every scenario is a failure (an error status, a dropped or stalled stream, an error event inside a
200 stream), so a span is right when it is ``end_reason=error`` with an ``error.type``, exported
while the app still holds the client and the response (not when they are collected). Retries are
off (``max_retries=0``): one attempt, one span.

    python benchmarks/wire_faults.py            # prints right/total and each wrong scenario
"""

from __future__ import annotations

import sys
from typing import Any

import httpx
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import firsttoken
from firsttoken import semconv as sc
from firsttoken.sim import FAULT_HEADER, LatencyModel, Simulator

FAULTS = (
    "rate_limit;retry_after=0",
    "server_error;status=500",
    "overloaded",
    "drop_after;chunks=3",
    "error_event;after_chunks=3",
    "stall;after_chunks=2;seconds=2",
)
WHOLE_FAULTS = (*(f for f in FAULTS if not f.startswith("error_event")), "server_error;status=503")
"""A whole response has no events: an error event fault does not apply (the simulator answers 200)."""
MESSAGES = [{"role": "user", "content": "Say hello"}]
MODEL = "mistral-small-latest"


def _groq(sim: Simulator, stream: bool, fault: str, held: list[Any]) -> None:
    import groq

    client = groq.Groq(api_key="k", base_url=sim.url, max_retries=0, timeout=httpx.Timeout(5.0, read=0.5))
    held.append(client)
    headers = {FAULT_HEADER: fault}
    if stream:
        result = client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True, extra_headers=headers)  # type: ignore[arg-type]
        held.append(result)
        for _ in result:
            pass
    else:
        held.append(client.chat.completions.create(model=MODEL, messages=MESSAGES, extra_headers=headers))  # type: ignore[arg-type]


def _mistral(sim: Simulator, stream: bool, fault: str, held: list[Any]) -> None:
    try:
        from mistralai import Mistral
    except ImportError:  # mistralai 2 and later
        from mistralai.client import Mistral  # type: ignore[no-redef]

    client = Mistral(api_key="k", server_url=sim.url, timeout_ms=500)
    held.append(client)
    headers = {FAULT_HEADER: fault}
    if stream:
        result = client.chat.stream(model=MODEL, messages=MESSAGES, http_headers=headers)  # type: ignore[arg-type]
        held.append(result)
        for _ in result:
            pass
    else:
        held.append(client.chat.complete(model=MODEL, messages=MESSAGES, http_headers=headers))  # type: ignore[arg-type]


def _httpx(sim: Simulator, stream: bool, fault: str, held: list[Any]) -> None:
    client = httpx.Client(timeout=httpx.Timeout(5.0, read=0.5))
    held.append(client)
    body = {"model": MODEL, "messages": MESSAGES, "stream": stream}
    request = client.build_request("POST", sim.url + "/v1/chat/completions", json=body, headers={FAULT_HEADER: fault})
    response = client.send(request, stream=stream)
    held.append(response)
    if stream:
        for _ in response.iter_lines():
            pass
    response.raise_for_status()


CLIENTS = {"groq": _groq, "mistralai": _mistral, "httpx": _httpx}


def main() -> int:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    firsttoken.instrument(tracer_provider=provider)
    right = total = 0
    latency = LatencyModel(queue_ms=5, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=400, jitter=0, output_tokens=40)
    with Simulator(latency=latency, seed=5) as sim:
        for name, send in CLIENTS.items():
            for stream in (True, False):
                for fault in FAULTS if stream else WHOLE_FAULTS:
                    exporter.clear()
                    held: list[Any] = []
                    failed: BaseException | None = None
                    try:
                        send(sim, stream, fault, held)
                    except Exception as exc:
                        failed = exc
                    spans = [
                        s for s in exporter.get_finished_spans() if sc.GEN_AI_OPERATION_NAME in (s.attributes or {})
                    ]
                    a = dict(spans[0].attributes or {}) if len(spans) == 1 else {}
                    ok = a.get(sc.FT_END_REASON) == sc.END_ERROR and bool(a.get(sc.ERROR_TYPE))
                    total += 1
                    right += ok
                    if not ok:
                        saw = type(failed).__name__ if failed is not None else "success"
                        print(
                            f"wrong: {name} {'stream' if stream else 'whole'} {fault}: app saw {saw}; "
                            f"{len(spans)} span(s) {a.get(sc.FT_END_REASON)} {a.get(sc.ERROR_TYPE)}"
                        )
                    del held
    print(f"right spans: {right}/{total}")
    return 0 if right == total else 1


if __name__ == "__main__":
    sys.exit(main())
