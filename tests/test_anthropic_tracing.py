"""The anthropic SDK's own OpenTelemetry tracing with firsttoken on: one call span per call unless
the user asked for the SDK's, and the same request headers as without firsttoken (a trace header
only where the uninstrumented app sends one).

In-process cases use no global tracer provider (the SDK then has no span of its own unless given a
``tracer_provider``); the cases with a global provider run in a subprocess, where one can be set.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

import firsttoken
from firsttoken.sim import LatencyModel, Simulator

from .conftest import Telemetry

MODEL = "claude-test-model"  # not in the SDK's deprecation list
MESSAGES = [{"role": "user", "content": "Hello"}]
QUICK = LatencyModel(queue_ms=1, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=5000, jitter=0, output_tokens=5)


@pytest.fixture
def sim() -> Iterator[Simulator]:
    with Simulator(latency=QUICK, seed=3) as s:
        yield s


def _client(sim: Simulator, seen: list[dict[str, str]], **options: Any) -> anthropic.Anthropic:
    def record(request: Any) -> None:
        seen.append({k.lower(): v for k, v in request.headers.items()})

    http = anthropic.DefaultHttpxClient(event_hooks={"request": [record]})
    return anthropic.Anthropic(
        base_url=sim.anthropic_base_url, api_key="sk-ant-test", max_retries=0, http_client=http, **options
    )


def _calls(client: anthropic.Anthropic) -> None:
    client.messages.create(model=MODEL, max_tokens=16, messages=MESSAGES)
    with client.messages.stream(model=MODEL, max_tokens=16, messages=MESSAGES) as stream:
        stream.get_final_message()
    client.messages.count_tokens(model=MODEL, messages=MESSAGES)


def _requests(sim: Simulator, app_span: bool, instrumented: Telemetry | None, **options: Any) -> list[dict[str, str]]:
    """The headers of the three calls' requests, made inside an app span of the app's own or not.
    A ``traceparent`` sent inside the app span must carry the app span's trace."""
    seen: list[dict[str, str]] = []
    client = _client(sim, seen, **options)
    app_tracer = TracerProvider().get_tracer("app")  # the app's own provider, not a global one
    if instrumented is not None:
        assert firsttoken.instrument(
            tracer_provider=instrumented.tracer_provider, meter_provider=instrumented.meter_provider
        )
    try:
        if app_span:
            with app_tracer.start_as_current_span("handle request") as span:
                _calls(client)
            trace_id = f"{span.get_span_context().trace_id:032x}"
            assert all(h["traceparent"].split("-")[1] == trace_id for h in seen if "traceparent" in h)
        else:
            _calls(client)
    finally:
        if instrumented is not None:
            firsttoken.uninstrument()
        client.close()
    assert len(seen) == 3
    return seen


def _same_headers(without: list[dict[str, str]], with_ft: list[dict[str, str]]) -> None:
    """The same headers, by name, on every request (values such as a trace's ids differ by run)."""
    assert [sorted(h) for h in with_ft] == [sorted(h) for h in without]


@pytest.mark.parametrize("app_span", [False, True], ids=["no-app-span", "app-span"])
def test_same_requests_and_one_call_span_by_default(sim: Simulator, app_span: bool) -> None:
    without = _requests(sim, app_span, None)
    telemetry = Telemetry()
    with_ft = _requests(sim, app_span, telemetry)
    _same_headers(without, with_ft)
    assert all(("traceparent" in h) is app_span for h in with_ft), with_ft
    clients = [s for s in telemetry.spans() if s.kind is SpanKind.CLIENT]
    assert len(clients) == 3 and len(telemetry.calls()) == 3, [s.name for s in clients]


def test_the_sdks_spans_when_the_client_asks_for_them(sim: Simulator) -> None:
    # A client option naming a tracer provider is an explicit request for the SDK's own spans.
    telemetry = Telemetry()
    sdk_spans = InMemorySpanExporter()
    sdk_provider = TracerProvider()
    sdk_provider.add_span_processor(SimpleSpanProcessor(sdk_spans))
    option = {"open_telemetry": {"tracer_provider": sdk_provider}}
    without = _requests(sim, False, None, **option)
    assert len(sdk_spans.get_finished_spans()) == 3
    sdk_spans.clear()
    with_ft = _requests(sim, False, telemetry, **option)
    _same_headers(without, with_ft)
    assert all("traceparent" in h for h in with_ft), "the SDK propagates its own span, as without firsttoken"
    ours = telemetry.calls()
    theirs = sdk_spans.get_finished_spans()
    assert len(ours) == 3 and len(theirs) == 3
    assert all(s.kind is SpanKind.CLIENT for s in theirs)
    # Nested under firsttoken's call spans, and what goes out is the SDK span's context.
    assert {s.parent.span_id for s in theirs if s.parent} == {s.context.span_id for s in ours}
    sent = {h["traceparent"].split("-")[2] for h in with_ft}
    assert sent == {f"{s.context.span_id:016x}" for s in theirs}


def test_the_sdks_tracing_switched_off_by_the_user(sim: Simulator) -> None:
    option = {"open_telemetry": False}
    for app_span in (False, True):
        without = _requests(sim, app_span, None, **option)
        telemetry = Telemetry()
        with_ft = _requests(sim, app_span, telemetry, **option)
        _same_headers(without, with_ft)
        assert not any("traceparent" in h for h in with_ft)
        assert len(telemetry.calls()) == 3


def test_propagation_switched_off_by_the_user(sim: Simulator) -> None:
    option = {"open_telemetry": {"propagation": False}}
    without = _requests(sim, True, None, **option)
    with_ft = _requests(sim, True, Telemetry(), **option)
    _same_headers(without, with_ft)
    assert not any("traceparent" in h for h in with_ft)


# -- with a global tracer provider: a subprocess ------------------------------------------------------

APP = """
import json, sys
import anthropic
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from firsttoken.sim import LatencyModel, Simulator

spans = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(spans))
trace.set_tracer_provider(provider)
if sys.argv[1] == "firsttoken":
    import firsttoken
    assert firsttoken.instrument()
seen = []
hook = lambda r: seen.append(sorted(k.lower() for k in r.headers))
http = anthropic.DefaultHttpxClient(event_hooks={"request": [hook]})
model = LatencyModel(queue_ms=1, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=5000, jitter=0, output_tokens=5)
with Simulator(latency=model) as sim:
    c = anthropic.Anthropic(base_url=sim.anthropic_base_url, api_key="k", max_retries=0, http_client=http)
    c.messages.create(model="claude-test-model", max_tokens=16, messages=[{"role": "user", "content": "hi"}])
    with c.messages.stream(model="claude-test-model", max_tokens=16, messages=[{"role": "user", "content": "hi"}]) as s:
        s.get_final_message()
print(json.dumps({
    "headers": seen,
    "client_spans": [s.name for s in spans.get_finished_spans() if s.kind == trace.SpanKind.CLIENT],
}))
"""


def _run(tmp_path: Path, mode: str, **env: str) -> dict[str, Any]:
    script = tmp_path / "app.py"
    script.write_text(textwrap.dedent(APP))
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FIRSTTOKEN_", "ANTHROPIC_"))}
    done = subprocess.run(
        [sys.executable, str(script), mode], env=clean | env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_with_the_apps_global_tracer_provider(tmp_path: Path) -> None:
    without = _run(tmp_path, "plain")
    with_ft = _run(tmp_path, "firsttoken")
    assert with_ft["headers"] == without["headers"]
    assert all("traceparent" in h for h in with_ft["headers"]), "the app's provider makes the SDK propagate"
    assert len(without["client_spans"]) == 2, without  # the SDK's own
    assert len(with_ft["client_spans"]) == 2, with_ft  # firsttoken's, and no second one from the SDK
    assert all(name == "chat claude-test-model" for name in with_ft["client_spans"])
    # Asked for by the environment: the SDK's spans too, nested under firsttoken's.
    asked = _run(tmp_path, "firsttoken", ANTHROPIC_OPEN_TELEMETRY="true")
    assert asked["headers"] == without["headers"]
    assert len(asked["client_spans"]) == 4, asked
