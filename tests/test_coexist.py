"""Beside another GenAI instrumentation of the same calls (issue 29): firsttoken says so once, in one
line naming docs/coexistence.md, whether the other was active first or activated later; and what
happens to the spans, as docs/coexistence.md tells it.

Each case runs in its own process: instrumentors are process-wide singletons, and each note is said
once per process. The other instrumentations are the real packages from PyPI (the dev extra).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]

PRELUDE = textwrap.dedent(
    """
    import json, warnings
    warnings.simplefilter("always")
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    import firsttoken
    from firsttoken.sim import Simulator

    spans, reader = InMemorySpanExporter(), InMemoryMetricReader()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    caught = warnings.catch_warnings(record=True)
    said = caught.__enter__()
    """
)

REPORT = textwrap.dedent(
    """
    caught.__exit__(None, None, None)
    by_id = {s.context.span_id: s for s in spans.get_finished_spans()}
    points = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name == "gen_ai.client.operation.duration":
                    points[sm.scope.name] = sum(p.count for p in m.data.data_points)
    print(json.dumps({
        "notes": [str(w.message) for w in said if "firsttoken" in str(w.message)],
        "spans": [
            [s.instrumentation_scope.name, s.name,
             by_id[s.parent.span_id].instrumentation_scope.name if s.parent and s.parent.span_id in by_id else None]
            for s in spans.get_finished_spans()
        ],
        "points": points,
    }))
    """
)

OPENAI_CALL = textwrap.dedent(
    """
    import openai
    with Simulator(seed=1) as sim:
        client = openai.OpenAI(base_url=sim.openai_base_url, api_key="anything")
        client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
    """
)

V2 = "from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor as V2; V2().instrument()\n"
LLMETRY = "from opentelemetry.instrumentation.openai import OpenAIInstrumentor as L; L().instrument()\n"
LLMETRY_ANTHROPIC = "from opentelemetry.instrumentation.anthropic import AnthropicInstrumentor as A; A().instrument()\n"
FT = "firsttoken.instrument()\n"


def need(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (the dev extra installs it)")


def run(body: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FIRSTTOKEN_", "LOGFIRE_"))}
    env["PYTHONPATH"] = str(ROOT / "src")
    out = subprocess.run(
        [sys.executable, "-c", PRELUDE + body + REPORT], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_nothing_else_installed_says_nothing() -> None:
    result = run(FT + OPENAI_CALL)
    assert result["notes"] == []
    assert [s[0] for s in result["spans"]].count("firsttoken") >= 1


@pytest.mark.parametrize("order", ["before", "after"])
def test_openai_v2_is_noticed_once_whether_active_before_or_after(order: str) -> None:
    need("opentelemetry.instrumentation.openai_v2")
    body = (V2 + FT if order == "before" else FT + V2) + OPENAI_CALL + OPENAI_CALL
    result = run(body)
    assert len(result["notes"]) == 1, result["notes"]
    note = result["notes"][0]
    assert "opentelemetry-instrumentation-openai-v2" in note and "docs/coexistence.md" in note
    assert 'otel_scope_name="firsttoken"' in note and "\n" not in note
    assert "one point per call from each instrumentation" in note and "twice" not in note
    # What docs/coexistence.md says: two points per call in the standard histogram, one per scope,
    # and a span from each.
    assert result["points"] == {"firsttoken": 2, "opentelemetry.instrumentation.openai_v2": 2}
    scopes = [s[0] for s in result["spans"]]
    assert scopes.count("opentelemetry.instrumentation.openai_v2") == 2
    calls = [s for s in result["spans"] if s[0] == "firsttoken" and s[1].startswith("chat")]
    assert len(calls) == 2, result["spans"]
    # firsttoken patches below the SDK method openai-v2 wraps: its call span is the child, either order.
    assert all(parent == "opentelemetry.instrumentation.openai_v2" for _, _, parent in calls), calls


@pytest.mark.parametrize("order", ["before", "after"])
def test_openllmetry_openai_is_noticed_once(order: str) -> None:
    need("opentelemetry.instrumentation.openai")
    body = (LLMETRY + FT if order == "before" else FT + LLMETRY) + OPENAI_CALL
    result = run(body)
    assert len(result["notes"]) == 1, result["notes"]
    assert "OpenLLMetry's openai instrumentation" in result["notes"][0]
    assert result["points"]["firsttoken"] == 1
    assert sum(result["points"].values()) == 2, result["points"]


@pytest.mark.parametrize("order", ["before", "after"])
def test_three_instrumentations_of_the_same_calls_are_said_as_they_are(order: str) -> None:
    # openai-v2 and OpenLLMetry beside firsttoken: three points per call in the standard histogram,
    # and the last note names both others (a note saying "twice" would be false here).
    need("opentelemetry.instrumentation.openai_v2")
    need("opentelemetry.instrumentation.openai")
    body = (V2 + LLMETRY + FT if order == "before" else FT + V2 + LLMETRY) + OPENAI_CALL + OPENAI_CALL
    result = run(body)
    notes = result["notes"]
    assert len(notes) == 2, notes
    assert all("\n" not in n and "twice" not in n and "docs/coexistence.md" in n for n in notes)
    assert all("one point per call from each instrumentation, firsttoken included" in n for n in notes)
    both = "opentelemetry-instrumentation-openai-v2 and OpenLLMetry's openai instrumentation also instrument "
    assert both in notes[1], notes[1]
    assert result["points"]["firsttoken"] == 2
    assert sum(result["points"].values()) == 6, result["points"]  # 3 per call: one per instrumentation


def test_openllmetry_anthropic_is_noticed() -> None:
    need("opentelemetry.instrumentation.anthropic")
    result = run(FT + "import anthropic\n" + LLMETRY_ANTHROPIC)
    assert len(result["notes"]) == 1 and "OpenLLMetry's anthropic instrumentation" in result["notes"][0]


LOGFIRE_APP = textwrap.dedent(
    """
    import json, sys, warnings
    warnings.simplefilter("always")
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    import logfire, firsttoken, openai
    from firsttoken.sim import Simulator

    spans = InMemorySpanExporter()
    # logfire's provider becomes the global one; firsttoken, given none, records into it.
    logfire.configure(send_to_logfire=False, console=False, additional_span_processors=[SimpleSpanProcessor(spans)])
    with warnings.catch_warnings(record=True) as said:
        firsttoken.instrument()
        logfire.instrument_openai(**json.loads(sys.argv[1]))
        with Simulator(seed=1) as sim:
            client = openai.OpenAI(base_url=sim.openai_base_url, api_key="anything")
            for _ in range(2):
                client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
    print(json.dumps({
        "notes": [str(w.message) for w in said if "firsttoken" in str(w.message)],
        "scopes": [s.instrumentation_scope.name for s in spans.get_finished_spans()],
    }))
    """
)


@pytest.mark.parametrize("suppress", [None, False])
def test_logfire_suppression_is_said_where_it_hides_firsttoken_spans(suppress: bool | None) -> None:
    need("logfire")
    kwargs = {} if suppress is None else {"suppress_other_instrumentation": suppress}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FIRSTTOKEN_", "LOGFIRE_"))}
    env["PYTHONPATH"] = str(ROOT / "src")
    out = subprocess.run(
        [sys.executable, "-c", LOGFIRE_APP, json.dumps(kwargs)], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["scopes"].count("logfire.openai") == 2
    if suppress is None:
        assert len(result["notes"]) == 1 and "suppress_other_instrumentation=False" in result["notes"][0]
        assert result["scopes"].count("firsttoken") == 0, "logfire's default hides firsttoken's spans (the note)"
    else:
        assert result["notes"] == []
        assert result["scopes"].count("firsttoken") == 2
