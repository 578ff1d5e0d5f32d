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
        os.environ[ENV] = "true"
    elif cfg["env"] == "false":
        os.environ[ENV] = "false"
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
    with warnings.catch_warnings(record=True) as said:
        if cfg["firsttoken"]:
            import firsttoken
            assert firsttoken.instrument(tracer_provider=own_provider if cfg["firsttoken"] == "own" else None)
        import anthropic
        if cfg["env"] == "after-import":
            os.environ[ENV] = "true"
        model = LatencyModel(queue_ms=1, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=5000, output_tokens=5)
        messages = [{"role": "user", "content": "hi"}]
        with Simulator(latency=model) as sim:
            client = anthropic.Anthropic(base_url=sim.anthropic_base_url, api_key="k", max_retries=0)
            if cfg["env"] == "after-client":
                os.environ[ENV] = "true"
            if cfg["env"] == "unset-after-client":
                del os.environ[ENV]
            if cfg["copy"]:
                client = client.with_options(timeout=30.0)
            client.messages.create(model="claude-test-model", max_tokens=16, messages=messages)
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

    print(json.dumps({
        "app": client_spans(app_spans),
        "own": client_spans(own_spans),
        "notes": [str(w.message) for w in said if "anthropic's own spans" in str(w.message)],
    }))
    """
)


def run(firsttoken: str | None, env: str = "unset", *, app_global: bool = True, copy: bool = False) -> dict[str, Any]:
    """One app: ``firsttoken`` None (not installed), "global" (records into the global provider) or
    "own" (given a provider of its own); ``env``: when ``ANTHROPIC_OPEN_TELEMETRY`` is set."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FIRSTTOKEN_", "ANTHROPIC_"))}
    clean["PYTHONPATH"] = str(ROOT / "src")
    if env == "unset-after-client":
        clean["ANTHROPIC_OPEN_TELEMETRY"] = "true"  # set at start, unset once the client exists
    cfg = {"firsttoken": firsttoken, "env": env, "app_global": app_global, "copy": copy}
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
    assert run("global", "after-import", copy=True)["app"] == BOTH


def test_a_change_after_the_client_is_made_counts_for_neither() -> None:
    # The SDK read the environment when the client was made; a later change reaches neither.
    result = run("global", "after-client")
    assert result["app"] == ONE_EACH and len(result["notes"]) == 1
    assert run("global", "unset-after-client")["app"] == BOTH
