"""Beside another GenAI instrumentation of the same calls (issue 29): firsttoken says so once, in one
line naming docs/coexistence.md, whether the other was active first or activated later; and what
happens to the spans, as docs/coexistence.md tells it.

Each case runs in its own process: instrumentors are process-wide singletons, and each note is said
once per process. The other instrumentations are the real packages from PyPI: the dev extra's, and
openai-v2, which cannot share their venv (pyproject.toml says why), in scripts/compat.sh's.
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
    points, by_metric = {}, {}
    HISTOGRAMS = {
        "gen_ai.client.operation.duration", "gen_ai.client.token.usage",
        "gen_ai.client.operation.time_to_first_chunk", "firsttoken.client.time_to_first_token",
    }
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name == "gen_ai.client.operation.duration":
                    points[sm.scope.name] = sum(p.count for p in m.data.data_points)
                if m.name in HISTOGRAMS:
                    by_metric.setdefault(sm.scope.name, {})[m.name] = sum(p.count for p in m.data.data_points)
    print(json.dumps({
        "notes": [str(w.message) for w in said if "firsttoken" in str(w.message)],
        "spans": [
            [s.instrumentation_scope.name, s.name,
             by_id[s.parent.span_id].instrumentation_scope.name if s.parent and s.parent.span_id in by_id else None]
            for s in spans.get_finished_spans()
        ],
        "points": points,
        "by_metric": by_metric,
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

# Streamed calls of both SDKs, and one whole anthropic call (the anthropic SDK's own spans are off:
# firsttoken's note about them is another matter, docs/coexistence.md).
STREAMS = textwrap.dedent(
    """
    import anthropic
    hi = [{"role": "user", "content": "hi"}]
    with Simulator(seed=1) as sim:
        client = openai.OpenAI(base_url=sim.openai_base_url, api_key="anything")
        usage = {"include_usage": True}
        for _ in client.chat.completions.create(model="gpt-4o-mini", messages=hi, stream=True, stream_options=usage):
            pass
        claude = anthropic.Anthropic(base_url=sim.anthropic_base_url, api_key="anything", open_telemetry=False)
        claude.messages.create(model="claude-test-model", max_tokens=16, messages=hi)
        with claude.messages.stream(model="claude-test-model", max_tokens=16, messages=hi) as stream:
            stream.get_final_message()
    """
)

GENAI_OPENAI = "opentelemetry.instrumentation.genai.openai"
GENAI_ANTHROPIC = "opentelemetry.instrumentation.genai.anthropic"
GENAI = (
    "from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor as GO; GO().instrument()\n"
    "from opentelemetry.instrumentation.genai.anthropic import AnthropicInstrumentor as GA; GA().instrument()\n"
)
GENAI_BEDROCK = "opentelemetry.instrumentation.genai.bedrock"
BEDROCK = "from opentelemetry.instrumentation.genai.bedrock import BedrockInstrumentor as GB; GB().instrument()\n"
# boto3's bedrock-runtime (fake credentials, the simulator): a whole and a streamed Converse call.
BOTO3_CALLS = textwrap.dedent(
    """
    import boto3
    from botocore.config import Config
    hi = [{"role": "user", "content": [{"text": "hi"}]}]
    with Simulator(seed=1) as sim:
        runtime = boto3.client(
            "bedrock-runtime", region_name="us-east-1", endpoint_url=sim.url, aws_access_key_id="AKIDEXAMPLE",
            aws_secret_access_key="fake", config=Config(retries={"total_max_attempts": 1}),
        )
        runtime.converse(modelId="claude-test-model", messages=hi)
        for _ in runtime.converse_stream(modelId="claude-test-model", messages=hi)["stream"]:
            pass
    """
)
V2 = "from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor as V2; V2().instrument()\n"
LLMETRY = "from opentelemetry.instrumentation.openai import OpenAIInstrumentor as L; L().instrument()\n"
LLMETRY_ANTHROPIC = "from opentelemetry.instrumentation.anthropic import AnthropicInstrumentor as A; A().instrument()\n"
FT = "firsttoken.instrument()\n"


def need(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (the dev extra installs it)")


def need_openai_v2() -> None:
    need("opentelemetry.instrumentation.openai_v2")
    if importlib.util.find_spec("opentelemetry.util.genai.instruments") is None:
        pytest.skip("openai-v2 2.4b0 needs util-genai 0.x, not the 1.x the official ones need (scripts/compat.sh)")


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
    need_openai_v2()
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
def test_the_official_instrumentations_are_noticed_once_whether_active_before_or_after(order: str) -> None:
    # opentelemetry-instrumentation-genai-openai and -anthropic (open-telemetry/opentelemetry-python-genai),
    # openai-v2's successors: a note for each SDK naming the package, and firsttoken's own points once per call.
    need(GENAI_OPENAI)
    need(GENAI_ANTHROPIC)
    body = (GENAI + FT if order == "before" else FT + GENAI) + OPENAI_CALL + STREAMS
    result = run(body)
    notes = [n for n in result["notes"] if "also instruments" in n]
    assert len(notes) == 2 and all("\n" not in n and "docs/coexistence.md" in n for n in notes), notes
    assert "opentelemetry-instrumentation-genai-openai also instruments the openai SDK's calls" in notes[0]
    assert "opentelemetry-instrumentation-genai-anthropic also instruments the anthropic SDK's calls" in notes[1]
    # 2 openai calls (one streamed), 2 anthropic calls (one streamed): each counted once by firsttoken and
    # once by the official instrumentation of its SDK, under the module's name as the scope.
    assert result["points"] == {"firsttoken": 4, GENAI_OPENAI: 2, GENAI_ANTHROPIC: 2}
    ours = result["by_metric"]["firsttoken"]
    assert ours["gen_ai.client.operation.time_to_first_chunk"] == 2, ours  # the two streams, once each
    assert ours["firsttoken.client.time_to_first_token"] == 2, ours
    assert ours["gen_ai.client.token.usage"] == 8, ours  # input and output, per call
    # genai-openai 1.3b0 records the openai stream's time to first chunk too (one more point under the
    # standard name), and a time_per_output_chunk point per chunk; genai-anthropic 1.3b0 neither.
    assert result["by_metric"][GENAI_OPENAI]["gen_ai.client.operation.time_to_first_chunk"] == 1
    assert "gen_ai.client.operation.time_to_first_chunk" not in result["by_metric"][GENAI_ANTHROPIC]
    # One span each per call, firsttoken's the child of theirs (they wrap the SDK methods, as openai-v2 did).
    spans = result["spans"]
    assert sorted(s for s in spans if s[0] != "firsttoken") == sorted(
        [[GENAI_OPENAI, "chat gpt-4o-mini", None]] * 2 + [[GENAI_ANTHROPIC, "chat claude-test-model", None]] * 2
    ), spans
    calls = sorted(s for s in spans if s[0] == "firsttoken")
    assert calls == sorted(
        [["firsttoken", "chat gpt-4o-mini", GENAI_OPENAI]] * 2
        + [["firsttoken", "chat claude-test-model", GENAI_ANTHROPIC]] * 2
    ), spans


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
    # genai-openai and OpenLLMetry beside firsttoken: three points per call in the standard histogram,
    # and the last note names both others (a note saying "twice" would be false here).
    need(GENAI_OPENAI)
    need("opentelemetry.instrumentation.openai")
    official = GENAI.splitlines(keepends=True)[0]
    body = (official + LLMETRY + FT if order == "before" else FT + official + LLMETRY) + OPENAI_CALL + OPENAI_CALL
    result = run(body)
    notes = result["notes"]
    assert len(notes) == 2, notes
    assert all("\n" not in n and "twice" not in n and "docs/coexistence.md" in n for n in notes)
    assert all("one point per call from each instrumentation, firsttoken included" in n for n in notes)
    both = "opentelemetry-instrumentation-genai-openai and OpenLLMetry's openai instrumentation also instrument "
    assert both in notes[1], notes[1]
    assert result["points"]["firsttoken"] == 2
    assert sum(result["points"].values()) == 6, result["points"]  # 3 per call: one per instrumentation


def test_openllmetry_anthropic_is_noticed() -> None:
    need("opentelemetry.instrumentation.anthropic")
    result = run(FT + "import anthropic\n" + LLMETRY_ANTHROPIC)
    assert len(result["notes"]) == 1 and "OpenLLMetry's anthropic instrumentation" in result["notes"][0]


LOGFIRE_APP = textwrap.dedent(
    """
    import asyncio, json, os, sys, warnings
    warnings.simplefilter("always")
    from opentelemetry.instrumentation.utils import suppress_instrumentation
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    import logfire, firsttoken, openai, anthropic
    from firsttoken.sim import LatencyModel, Simulator

    order, kwargs = json.loads(sys.argv[1])
    fast = LatencyModel(queue_ms=1, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=2000, jitter=0, output_tokens=12)
    spans, reader = InMemorySpanExporter(), InMemoryMetricReader()
    # firsttoken runs from the checkout here; installed, it is in site-packages, which logfire skips
    # when it looks for the app's frame to name in its spans (code.filepath).
    logfire.add_non_user_code_prefix(os.path.dirname(firsttoken.__file__))
    # logfire's providers become the global ones; firsttoken, given none, records into them.
    logfire.configure(
        send_to_logfire=False, console=False, additional_span_processors=[SimpleSpanProcessor(spans)],
        metrics=logfire.MetricsOptions(additional_readers=[reader]),
    )
    with warnings.catch_warnings(record=True) as said:
        if order in ("logfire first", "logfire alone"):
            logfire.instrument_openai(**kwargs); logfire.instrument_anthropic(**kwargs)
        if order != "logfire alone":
            firsttoken.instrument()
        if order == "firsttoken first":
            logfire.instrument_openai(**kwargs); logfire.instrument_anthropic(**kwargs)
        hi = [{"role": "user", "content": "hi"}]
        gpt = {"model": "gpt-4o-mini", "messages": hi}
        claude = {"model": "claude-test-model", "max_tokens": 16, "messages": hi}

        async def async_calls(sim):
            async with openai.AsyncOpenAI(base_url=sim.openai_base_url, api_key="anything") as oai:
                await oai.chat.completions.create(**gpt)
                usage = {"include_usage": True}
                async for _ in await oai.chat.completions.create(**gpt, stream=True, stream_options=usage):
                    pass
            async with anthropic.AsyncAnthropic(base_url=sim.anthropic_base_url, api_key="anything") as ant:
                await ant.messages.create(**claude)
                async with ant.messages.stream(**claude) as stream:
                    await stream.get_final_message()

        with Simulator(latency=fast, seed=1) as sim:
            oai = openai.OpenAI(base_url=sim.openai_base_url, api_key="anything")
            oai.chat.completions.create(**gpt)
            for _ in oai.chat.completions.create(**gpt, stream=True, stream_options={"include_usage": True}):
                pass
            ant = anthropic.Anthropic(base_url=sim.anthropic_base_url, api_key="anything")
            ant.messages.create(**claude)
            with ant.messages.stream(**claude) as stream:
                stream.get_final_message()
            asyncio.run(async_calls(sim))
            with suppress_instrumentation():  # the app asks for no telemetry: one call of each SDK
                oai.chat.completions.create(**gpt)
                ant.messages.create(**claude)
    finished = spans.get_finished_spans()
    by_id = {s.context.span_id: s for s in finished}

    def root(s):
        while s.parent and s.parent.span_id in by_id:
            s = by_id[s.parent.span_id]
        return s.instrumentation_scope.name
    points = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name == "gen_ai.client.operation.duration":
                    points[sm.scope.name] = sum(p.count for p in m.data.data_points)
    print(json.dumps({
        "notes": [str(w.message) for w in said if "logfire" in str(w.message)],
        "spans": [
            [s.instrumentation_scope.name, s.name, s.kind.name, root(s) if s.parent else None, sorted(s.attributes)]
            for s in finished
        ],
        "points": points,
    }))
    """
)


def run_logfire_app(order: str, kwargs: dict[str, bool]) -> dict[str, Any]:
    need("logfire")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FIRSTTOKEN_", "LOGFIRE_", "ANTHROPIC_"))}
    env["PYTHONPATH"] = str(ROOT / "src")
    argv = [sys.executable, "-c", LOGFIRE_APP, json.dumps([order, kwargs])]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


_LOGFIRE_ALONE: dict[str, list[list[Any]]] = {}


def logfires(spans: list[list[Any]]) -> list[list[Any]]:
    return sorted(s for s in spans if s[0].startswith("logfire."))


def logfire_alone(kwargs: dict[str, bool]) -> list[list[Any]]:
    """logfire's own spans for the same calls without firsttoken (one run per setting)."""
    key = json.dumps(kwargs)
    if key not in _LOGFIRE_ALONE:
        _LOGFIRE_ALONE[key] = logfires(run_logfire_app("logfire alone", kwargs)["spans"])
    return _LOGFIRE_ALONE[key]


@pytest.mark.parametrize("suppress", [None, False])
@pytest.mark.parametrize("order", ["firsttoken first", "logfire first"])
def test_firsttoken_spans_survive_logfires_suppression_in_either_order(suppress: bool | None, order: str) -> None:
    # logfire's default suppress_other_instrumentation=True hid every firsttoken span in its provider
    # (issue 37 item 11): suppression set inside the SDK call is set aside for firsttoken's own spans;
    # the app's own suppression (the last call of each SDK) is left as it is.
    kwargs = {} if suppress is None else {"suppress_other_instrumentation": suppress}
    result = run_logfire_app(order, kwargs)
    ours = [s for s in result["spans"] if s[0] == "firsttoken"]
    # 8 calls measured (openai and anthropic; sync and async; whole and streamed), 2 more suppressed by the app.
    assert sorted(name for _, name, *_ in ours) == ["chat claude-test-model"] * 4 + ["chat gpt-4o-mini"] * 4
    assert all(kind == "CLIENT" for _, _, kind, *_ in ours)
    # firsttoken's call span is in logfire's trace, whichever instrumented first: the child of logfire's
    # span (or, logfire first with suppression off, of anthropic's own span under it: docs/coexistence.md).
    assert sorted(root for *_, root, _ in ours) == ["logfire.anthropic"] * 4 + ["logfire.openai"] * 4
    # logfire's own spans are what they are without firsttoken, to their attribute keys (none for the
    # app's suppressed calls): no "logfire.metrics" summing firsttoken's token usage onto them.
    assert logfires(result["spans"]) == logfire_alone(kwargs)
    assert len(logfire_alone(kwargs)) == 12  # per measured call one request span, per stream one more
    # anthropic's own span: suppressed by logfire's default, replaced by firsttoken's where firsttoken
    # patched the SDK's request first, kept where logfire's wrapper holds the original (the table).
    own = [s for s in result["spans"] if s[0] == "com.anthropic.sdk.python"]
    assert len(own) == (4 if suppress is False and order == "logfire first" else 0), own
    # One gen_ai.client.operation.duration point per call from firsttoken, the app's suppressed ones
    # included (firsttoken's metrics do not read the suppression keys); none from logfire.
    assert result["points"] == {"firsttoken": 10}
    assert result["notes"] == [], "nothing to warn of"


@pytest.mark.parametrize("order", ["before", "after"])
def test_genai_bedrock_beside_boto3_is_noticed_once_and_counts_once(order: str) -> None:
    # opentelemetry-instrumentation-genai-bedrock 1.3b0 wraps boto3's client methods (and the stream it
    # returns); firsttoken measures below them, on botocore's send: one note, each call counted once by each.
    need(GENAI_BEDROCK)
    result = run((BEDROCK + FT if order == "before" else FT + BEDROCK) + BOTO3_CALLS)
    notes = [n for n in result["notes"] if "also instruments" in n]
    assert len(notes) == 1 and "\n" not in notes[0] and "docs/coexistence.md" in notes[0], notes
    assert (
        "opentelemetry-instrumentation-genai-bedrock also instruments the boto3 bedrock-runtime SDK's calls" in notes[0]
    )
    assert result["points"] == {"firsttoken": 2, GENAI_BEDROCK: 2}
    ours = result["by_metric"]["firsttoken"]
    assert ours["gen_ai.client.operation.time_to_first_chunk"] == 1, ours  # the stream, once
    assert ours["firsttoken.client.time_to_first_token"] == 1, ours
    assert ours["gen_ai.client.token.usage"] == 4, ours  # input and output, per call
    # genai-bedrock 1.3b0 records the stream's time to first chunk too, under the standard name.
    assert result["by_metric"][GENAI_BEDROCK]["gen_ai.client.operation.time_to_first_chunk"] == 1
    spans = result["spans"]
    assert sorted(s for s in spans if s[0] == GENAI_BEDROCK) == [[GENAI_BEDROCK, "chat claude-test-model", None]] * 2
    assert (
        sorted(s for s in spans if s[0] == "firsttoken")
        == [["firsttoken", "chat claude-test-model", GENAI_BEDROCK]] * 2
    )
