"""anthropic's own tracing beside firsttoken (issue 29, item 6): which spans the app's tracer
providers get, and the one-line note, for each case docs/coexistence.md describes.

The SDK makes its own CLIENT span per call once a global tracer provider exists, unless
``ANTHROPIC_OPEN_TELEMETRY=false``. With firsttoken on, one span per call (firsttoken's) unless the
environment asks for the SDK's too, read when the SDK reads it: when the client is made. Where the
app's global provider was getting the SDK's spans, firsttoken says once what it does instead.

Each case runs the real anthropic SDK against the simulator in its own process (a global tracer
provider can be set once per process, and the note is said once per process).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]

APP = textwrap.dedent(
    """
    import json, os, sys, warnings
    cfg = json.loads(sys.argv[1])
    warnings.simplefilter("always")
    ENV = "ANTHROPIC_OPEN_TELEMETRY"
    if cfg["env"] == "before-import":
        os.environ.update(cfg["env_values"])
    elif cfg["env"] == "false":
        os.environ[ENV] = "false"
    import httpx2
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from firsttoken.sim import LatencyModel, Simulator

    def provider():
        spans = InMemorySpanExporter()
        p = TracerProvider()
        p.add_span_processor(SimpleSpanProcessor(spans))
        return p, spans

    app_provider, app_spans = provider()
    if cfg["app_global"]:
        trace.set_tracer_provider(app_provider)
    own_provider, own_spans = provider()
    option_provider, option_spans = provider()
    option = cfg["option"]
    if isinstance(option, dict) and option.get("tracer_provider") == "given":
        option = {**option, "tracer_provider": option_provider}
    sent = []  # whether each request carried a trace context

    def seen(request):
        sent.append("traceparent" in request.headers)

    MESSAGE = {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test-model",
        "content": [{"type": "text", "text": "hello"}], "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }

    def platform_api(request):  # Bedrock's and Vertex's URLs: the simulator does not serve them
        seen(request)
        return httpx2.Response(200, json=MESSAGE)

    with warnings.catch_warnings(record=True) as said:
        if cfg["firsttoken"]:
            import firsttoken
            assert firsttoken.instrument(tracer_provider=own_provider if cfg["firsttoken"] == "own" else None)
        import anthropic
        if cfg["env"] == "after-import":
            os.environ.update(cfg["env_values"])
        model = LatencyModel(queue_ms=1, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=5000, output_tokens=5)
        messages = [{"role": "user", "content": "hi " * 40}]
        kwargs = {} if option is None else {"open_telemetry": option}
        with Simulator(latency=model) as sim:
            if cfg["platform"] == "bedrock":
                http = httpx2.Client(transport=httpx2.MockTransport(platform_api))
                client = anthropic.AnthropicBedrock(api_key="k", aws_region="us-east-1", http_client=http, **kwargs)
            elif cfg["platform"] == "vertex":
                http = httpx2.Client(transport=httpx2.MockTransport(platform_api))
                client = anthropic.AnthropicVertex(
                    region="us-east5", project_id="p", access_token="t", http_client=http, **kwargs
                )
            else:
                http = httpx2.Client(event_hooks={"request": [seen]})
                client = anthropic.Anthropic(
                    base_url=sim.anthropic_base_url, api_key="k", max_retries=0, http_client=http, **kwargs
                )
            if cfg["env"] == "after-client":
                os.environ[ENV] = "true"
            if cfg["env"] == "unset-after-client":
                del os.environ[ENV]
            if cfg["copy"] == "with_options":
                client = client.with_options(timeout=30.0)
            elif cfg["copy"] == "conversation":
                client = client.copy(open_telemetry={**client.open_telemetry, "conversation_id": "c"})
            client.messages.create(model="claude-test-model", max_tokens=16, messages=messages)
            if cfg["platform"]:
                client.messages.create(model="claude-test-model", max_tokens=16, messages=messages)
            else:
                with client.messages.stream(model="claude-test-model", max_tokens=16, messages=messages) as s:
                    s.get_final_message()
            client.messages.create(model="claude-test-model", max_tokens=16, messages=messages)

    def client_spans(exporter):
        found = [s for s in exporter.get_finished_spans() if s.kind == trace.SpanKind.CLIENT]
        ours = [s for s in found if s.instrumentation_scope.name == "firsttoken"]
        sdk = [s for s in found if s.instrumentation_scope.name != "firsttoken"]
        ids = {s.context.span_id for s in ours}
        return {
            "firsttoken": len(ours),
            "sdk": len(sdk),
            "sdk_under_firsttoken": sum(1 for s in sdk if s.parent is not None and s.parent.span_id in ids),
        }

    def settings(exporter):  # what the SDK's spans say of the settings the app gave them
        sdk = [s for s in exporter.get_finished_spans() if s.instrumentation_scope.name.startswith("com.anthropic")]
        content = [len(str(s.attributes.get("gen_ai.input.messages", ""))) for s in sdk]
        return {
            "conversation": sorted({str(s.attributes.get("gen_ai.conversation.id")) for s in sdk}),
            "content_chars": max(content, default=0),
        }

    print(json.dumps({
        "app": client_spans(app_spans),
        "own": client_spans(own_spans),
        "option": client_spans(option_spans),
        "settings": settings(option_spans if cfg["option_provider"] else app_spans),
        "traceparent": sum(sent),
        "notes": [str(w.message) for w in said if "anthropic's own spans" in str(w.message)],
    }))
    """
)


def run(
    firsttoken: str | None,
    env: str = "unset",
    *,
    app_global: bool = True,
    copy: str | None = None,
    option: Any = None,
    platform: str | None = None,
    env_values: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One app: ``firsttoken`` None (not installed), "global" (records into the global provider) or
    "own" (given a provider of its own); ``env``: when ``env_values`` (``ANTHROPIC_OPEN_TELEMETRY=true``
    unless given) are set; ``option``: the client's ``open_telemetry`` option (a ``tracer_provider`` of
    "given" is a provider of the test's); ``copy``: the client used is a copy of the one made;
    ``platform``: an ``AnthropicBedrock`` or ``AnthropicVertex`` client in place of ``Anthropic``."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FIRSTTOKEN_", "ANTHROPIC_"))}
    clean["PYTHONPATH"] = str(ROOT / "src")
    if env == "unset-after-client":
        clean["ANTHROPIC_OPEN_TELEMETRY"] = "true"  # set at start, unset once the client exists
    cfg = {
        "firsttoken": firsttoken,
        "env": env,
        "env_values": env_values or {"ANTHROPIC_OPEN_TELEMETRY": "true"},
        "app_global": app_global,
        "copy": copy,
        "option": option,
        "option_provider": isinstance(option, dict) and option.get("tracer_provider") == "given",
        "platform": platform,
    }
    done = subprocess.run(
        [sys.executable, "-c", APP, json.dumps(cfg)], env=clean, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


NONE = {"firsttoken": 0, "sdk": 0, "sdk_under_firsttoken": 0}
ONE_EACH = {"firsttoken": 3, "sdk": 0, "sdk_under_firsttoken": 0}
BOTH = {"firsttoken": 3, "sdk": 3, "sdk_under_firsttoken": 3}


def test_without_firsttoken_the_app_gets_the_sdks_spans() -> None:
    # What the app was getting: the baseline the notes and the opt-in are about.
    assert run(None)["app"] == {"firsttoken": 0, "sdk": 3, "sdk_under_firsttoken": 0}
    assert run(None, "false")["app"] == NONE


def test_firsttoken_in_the_apps_provider_takes_the_sdks_place_and_says_so() -> None:
    result = run("global")
    assert result["app"] == ONE_EACH  # one span per call, firsttoken's
    assert len(result["notes"]) == 1, result["notes"]  # three calls, one note
    note = result["notes"][0]
    assert "firsttoken's call span takes their place" in note and "ANTHROPIC_OPEN_TELEMETRY=true" in note
    assert "docs/coexistence.md" in note and "\n" not in note


def test_firsttoken_in_its_own_provider_says_the_apps_provider_gets_nothing() -> None:
    result = run("own")
    assert result["app"] == NONE, "the app's global provider gets no span for the call"
    assert result["own"] == ONE_EACH
    assert len(result["notes"]) == 1, result["notes"]
    note = result["notes"][0]
    assert "the app's global provider gets no span for anthropic calls" in note
    assert "docs/coexistence.md" in note and "\n" not in note


def test_nothing_to_say_where_the_app_was_getting_no_sdk_spans() -> None:
    # ANTHROPIC_OPEN_TELEMETRY=false: the SDK's spans are off by the app's own choice.
    result = run("global", "false")
    assert result["app"] == ONE_EACH and result["notes"] == []
    # No global provider: the SDK's spans would have gone nowhere.
    result = run("own", app_global=False)
    assert result["own"] == ONE_EACH and result["notes"] == []


@pytest.mark.parametrize("env", ["before-import", "after-import"])
def test_asked_for_in_the_environment_before_the_client_is_made(env: str) -> None:
    # Set after `import anthropic` but before the client is made, the SDK honours it: so does firsttoken.
    result = run("global", env)
    assert result["app"] == BOTH, "the SDK's spans too, nested under firsttoken's"
    assert result["notes"] == []
    result = run("own", env)
    assert result["app"] == {"firsttoken": 0, "sdk": 3, "sdk_under_firsttoken": 0}, "the SDK's spans, where they went"
    assert result["own"] == ONE_EACH and result["notes"] == []


def test_a_copy_of_a_client_has_its_originals_choice() -> None:
    # with_options: the SDK gives the copy the original's resolved option and reads no variable.
    assert run("global", "after-import", copy="with_options")["app"] == BOTH


def test_a_change_after_the_client_is_made_counts_for_neither() -> None:
    # The SDK read the environment when the client was made; a later change reaches neither.
    result = run("global", "after-client")
    assert result["app"] == ONE_EACH and len(result["notes"]) == 1
    assert run("global", "unset-after-client")["app"] == BOTH


# -- every explicit choice (issue 43) -------------------------------------------------------------

CHOICES = textwrap.dedent(
    """
    import json, os, sys, warnings
    cfg = json.loads(sys.argv[1])
    warnings.simplefilter("always")
    import httpx2
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from firsttoken.sim import LatencyModel, Simulator

    def provider():
        spans = InMemorySpanExporter()
        p = TracerProvider()
        p.add_span_processor(SimpleSpanProcessor(spans))
        return p, spans

    app_provider, app_spans = provider()
    trace.set_tracer_provider(app_provider)
    own_provider, own_spans = provider()
    option_provider, option_spans = provider()
    exporters = {"app": app_spans, "own": own_spans, "option": option_spans}
    sent = []

    def seen(request):
        sent.append("traceparent" in request.headers)

    MESSAGE = {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test-model",
        "content": [{"type": "text", "text": "hello"}], "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }

    def platform_api(request):  # Bedrock's and Vertex's URLs: the simulator does not serve them
        seen(request)
        return httpx2.Response(200, json=MESSAGE)

    CONTENT = "gen_ai.input.messages"

    def sdk_spans(exporter):
        return [s for s in exporter.get_finished_spans() if s.instrumentation_scope.name.startswith("com.anthropic")]

    def outcome():
        ours = {s.context.span_id for e in exporters.values() for s in e.get_finished_spans()
                if s.instrumentation_scope.name == "firsttoken" and s.kind == trace.SpanKind.CLIENT}
        out = {"traceparent": sum(sent)}
        for name, exporter in exporters.items():
            sdk = sdk_spans(exporter)
            out[name] = len(sdk)
            out[name + "_under_firsttoken"] = sum(1 for s in sdk if s.parent is not None and s.parent.span_id in ours)
            out[name + "_settings"] = sorted(
                (str(s.attributes.get("gen_ai.conversation.id")), len(str(s.attributes.get(CONTENT, ""))))
                for s in sdk
            )
        out["firsttoken"] = len(ours)
        return out

    results = []
    with warnings.catch_warnings(record=True) as said:
        if cfg["firsttoken"]:
            import firsttoken
            assert firsttoken.instrument(tracer_provider=own_provider if cfg["firsttoken"] == "own" else None)
        import anthropic
        model = LatencyModel(queue_ms=1, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=5000, output_tokens=5)
        messages = [{"role": "user", "content": "hi " * 40}]
        with Simulator(latency=model) as sim:
            for case in cfg["cases"]:
                for e in exporters.values():
                    e.clear()
                sent.clear()
                for name in [k for k in os.environ if k.startswith("ANTHROPIC_OPEN_TELEMETRY")]:
                    del os.environ[name]
                os.environ.update(case.get("env", {}))
                option = case.get("option", "none")
                if isinstance(option, dict) and option.get("tracer_provider") == "given":
                    option = {**option, "tracer_provider": option_provider}
                kwargs = {} if option == "none" else {"open_telemetry": option}
                if case.get("platform") == "bedrock":
                    http = httpx2.Client(transport=httpx2.MockTransport(platform_api))
                    client = anthropic.AnthropicBedrock(api_key="k", aws_region="us-east-1", http_client=http, **kwargs)
                elif case.get("platform") == "vertex":
                    http = httpx2.Client(transport=httpx2.MockTransport(platform_api))
                    client = anthropic.AnthropicVertex(
                        region="us-east5", project_id="p", access_token="t", http_client=http, **kwargs
                    )
                else:
                    http = httpx2.Client(event_hooks={"request": [seen]})
                    client = anthropic.Anthropic(
                        base_url=sim.anthropic_base_url, api_key="k", max_retries=0, http_client=http, **kwargs
                    )
                if case.get("copy") == "with_options":
                    client = client.with_options(timeout=30.0)
                elif case.get("copy") == "conversation":
                    # The http client given again: AnthropicBedrock.copy() in anthropic 2.0 makes a new one
                    # (to Bedrock's real host) when given an option.
                    conversation = {**client.open_telemetry, "conversation_id": "c"}
                    client = client.copy(open_telemetry=conversation, http_client=http)
                client.messages.create(model="claude-test-model", max_tokens=16, messages=messages)
                if not case.get("platform"):
                    with client.messages.stream(model="claude-test-model", max_tokens=16, messages=messages) as s:
                        s.get_final_message()
                results.append(outcome())
    notes = [str(w.message) for w in said if "anthropic's own spans" in str(w.message)]
    print(json.dumps({"cases": results, "notes": notes}))
    """
)

CONTENT = {"traces": {"content_mode": "content"}}
OPTIONS: list[Any] = [{}, {"traces": True}, {"traces": {"enabled": True}}, CONTENT]
EXPLICIT: list[dict[str, Any]] = [
    # Each option form, whatever the variable says (the SDK reads no variable for a client given one).
    *(
        {"option": o, "env": env}
        for o in OPTIONS
        for env in ({}, {"ANTHROPIC_OPEN_TELEMETRY": "true"}, {"ANTHROPIC_OPEN_TELEMETRY": "FALSE"})
    ),
    {"option": {"traces": {"content_mode": "content", "max_content_bytes": 20}}},
    {"option": {"conversation_id": "conv"}},
    {"option": {"propagation": False}},
    {"option": {"tracer_provider": "given"}},
    {"option": {"tracer_provider": "given"}, "copy": "with_options"},
    # Copies of an opted-in client: the original's choice, or the option the copy is given.
    {"option": {}, "copy": "with_options"},
    {"option": CONTENT, "copy": "conversation"},
    {"env": {"ANTHROPIC_OPEN_TELEMETRY": "true"}, "copy": "conversation"},
    {"env": {"ANTHROPIC_OPEN_TELEMETRY": "true"}, "copy": "with_options"},
    # A client given no option: a variable set when it is made.
    {"env": {"ANTHROPIC_OPEN_TELEMETRY": "true"}},
    {"env": {"ANTHROPIC_OPEN_TELEMETRY_TRACES_CONTENT_MODE": "content"}},
    {"env": {"ANTHROPIC_OPEN_TELEMETRY": "true", "ANTHROPIC_OPEN_TELEMETRY_TRACES_MAX_CONTENT_BYTES": "20"}},
    {"env": {"ANTHROPIC_OPEN_TELEMETRY_PROPAGATION": "false"}},
    # Bedrock and Vertex clients, and their copies.
    {"option": {}, "platform": "bedrock"},
    {"option": CONTENT, "platform": "vertex"},
    {"option": {}, "platform": "bedrock", "copy": "conversation"},
    {"option": {}, "platform": "vertex", "copy": "with_options"},
    {"env": {"ANTHROPIC_OPEN_TELEMETRY": "true"}, "platform": "vertex", "copy": "with_options"},
]
DEFAULT: list[dict[str, Any]] = [
    # No choice: firsttoken's call span in the SDK's place (and its copies, even given the same option).
    {},
    {"copy": "with_options"},
    {"platform": "bedrock"},
    {"platform": "vertex", "copy": "with_options"},
    # Turned off: no SDK span either way.
    {"option": False},
    {"env": {"ANTHROPIC_OPEN_TELEMETRY": "false"}},
    {"option": {"traces": False}, "env": {"ANTHROPIC_OPEN_TELEMETRY": "true"}},
]


CASES = {"explicit": EXPLICIT, "default": DEFAULT}


@functools.cache
def run_choices(firsttoken: str | None, cases: str) -> dict[str, Any]:
    """Each of ``CASES[cases]`` in turn in one app (one client each, made once the case's variables
    are set): the SDK's spans of its calls, where they went, and whether its requests carried a
    trace context."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FIRSTTOKEN_", "ANTHROPIC_"))}
    clean["PYTHONPATH"] = str(ROOT / "src")
    cfg = {"firsttoken": firsttoken, "cases": CASES[cases]}
    done = subprocess.run(
        [sys.executable, "-c", CHOICES, json.dumps(cfg)], env=clean, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("firsttoken", ["global", "own"])
def test_every_explicit_choice_keeps_the_sdks_spans_with_its_settings(firsttoken: str) -> None:
    baseline = run_choices(None, "explicit")["cases"]
    instrumented = run_choices(firsttoken, "explicit")
    for case, before, after in zip(EXPLICIT, baseline, instrumented["cases"], strict=True):
        where = "option" if isinstance(case.get("option"), dict) and "tracer_provider" in case["option"] else "app"
        assert before[where] >= 1, (case, before)  # the app's choice gives the SDK's spans without firsttoken
        # The same SDK spans, where they went, with the settings the app gave them
        assert after[where] == before[where], (case, before, after)
        assert after[where + "_settings"] == before[where + "_settings"], (case, before, after)
        assert after["traceparent"] == before["traceparent"], (case, before, after)
        assert after[where + "_under_firsttoken"] == after[where], "nested under firsttoken's call span"
        assert after["firsttoken"] == after[where], "and firsttoken's call span for each call"
    assert instrumented["notes"] == [], "nothing to say where every client made a choice"


@pytest.mark.parametrize("firsttoken", ["global", "own"])
def test_no_choice_is_replaced_by_firsttokens_call_span(firsttoken: str) -> None:
    baseline = run_choices(None, "default")["cases"]
    instrumented = run_choices(firsttoken, "default")
    for case, before, after in zip(DEFAULT, baseline, instrumented["cases"], strict=True):
        assert after["app"] == 0 and after["own"] == 0, (case, after)
        assert after["firsttoken"] == before["app"] or before["app"] == 0, (case, before, after)
        assert after["traceparent"] == before["traceparent"], (case, before, after)
    assert len(instrumented["notes"]) == 1, instrumented["notes"]  # said once, for the clients without a choice
