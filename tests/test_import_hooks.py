"""Patching on import: ``instrument()`` imports no SDK, and an SDK imported later is measured.

Each case runs in a fresh interpreter (what is imported is process-wide state) against the
simulator running in the test process, and prints what it saw as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest

import firsttoken
from firsttoken import semconv as sc
from firsttoken.sim import Simulator

from .conftest import FAST, Telemetry

LIBRARIES = ("openai", "anthropic", "httpx", "httpx2")

PRELUDE = """
import json, os, sys
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

exporter = InMemorySpanExporter()
tracer_provider = TracerProvider()
tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
OPENAI_URL = os.environ.get("SIM_OPENAI_URL")
ANTHROPIC_URL = os.environ.get("SIM_ANTHROPIC_URL")
out = {}

def imported():
    return sorted(m for m in @LIBRARIES@ if m in sys.modules)

def calls():
    return [
        {"name": s.name, "ttft": (s.attributes or {}).get(@TTFT@)}
        for s in exporter.get_finished_spans()
        if "gen_ai.operation.name" in (s.attributes or {})
    ]

def chat_openai():
    import openai
    client = openai.OpenAI(base_url=OPENAI_URL, api_key="sk-test", max_retries=0)
    stream = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

def is_patched(owner, name):
    return getattr(owner.__dict__[name], "_self_firsttoken", False)
""".replace("@LIBRARIES@", repr(LIBRARIES)).replace("@TTFT@", repr(sc.FT_TIME_TO_FIRST_TOKEN))


def run(body: str, sim: Simulator | None = None, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``body`` after PRELUDE in a fresh interpreter; returns the ``out`` dict it printed."""
    code = PRELUDE + textwrap.dedent(body) + "\nprint('RESULT ' + json.dumps(out))\n"
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FIRSTTOKEN_"))}
    if sim is not None:
        environ["SIM_OPENAI_URL"] = sim.openai_base_url
        environ["SIM_ANTHROPIC_URL"] = sim.anthropic_base_url
    environ.update(env or {})
    # A busy 2-core machine: importing both SDKs can take seconds there.
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=environ, check=False
    )
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, result.stdout + result.stderr
    out: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
    return out


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with Simulator(latency=FAST, seed=1) as s:
        yield s


def test_instrument_imports_no_sdk_and_no_httpx() -> None:
    out = run(
        """
        out["before"] = imported()
        import firsttoken
        out["import"] = imported()
        out["instrumentation_module"] = "opentelemetry.instrumentation" in sys.modules
        out["ok"] = firsttoken.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
        out["after"] = imported()
        """
    )
    assert out == {"before": [], "import": [], "instrumentation_module": False, "ok": True, "after": []}


def test_import_firsttoken_loads_nothing_heavy() -> None:
    """Start-up: ``import firsttoken`` loads no OpenTelemetry, wrapt, asyncio, SDK or httpx.

    They cost tens of milliseconds each; instrument() loads what it needs (benchmarks/startup.py
    has the figures).
    """
    heavy = ("opentelemetry", "wrapt", "asyncio", "aiohttp", "requests", "urllib3", *LIBRARIES)
    code = f"import sys, firsttoken; print(sorted({{m.split('.')[0] for m in sys.modules}} & set({heavy!r})))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "[]", result.stdout + result.stderr


def test_default_export_set_up_imports_no_sdk_either() -> None:
    """The OTLP set-up (no providers passed) does not pull an SDK or httpx in either."""
    out = run(
        """
        import firsttoken
        out["ok"] = firsttoken.instrument()
        out["after"] = imported()
        sys.stdout.write("RESULT " + json.dumps(out) + "\\n")
        sys.stdout.flush()
        os._exit(0)  # no export at exit: nothing listens on the endpoint
        """,
        env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_SERVICE_NAME": "import-hooks-test"},
    )
    assert out == {"ok": True, "after": []}


def test_sdks_imported_after_instrument_are_measured(sim: Simulator) -> None:
    out = run(
        """
        import firsttoken
        firsttoken.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
        out["patched_before"] = firsttoken._install.patched()
        out["text"] = chat_openai()
        import anthropic
        client = anthropic.Anthropic(base_url=ANTHROPIC_URL, api_key="sk-ant-test", max_retries=0)
        with client.messages.stream(
            model="claude-haiku-4-5", max_tokens=32, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            out["anthropic_text"] = "".join(stream.text_stream)
        import httpx
        response = httpx.post(
            OPENAI_URL + "/chat/completions",
            json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]},
            headers={"authorization": "Bearer sk-test"},
        )
        out["direct_status"] = response.status_code
        out["patched_after"] = sorted(firsttoken._install.patched())
        out["calls"] = calls()
        """,
        sim,
    )
    assert out["patched_before"] == []
    assert out["text"] and out["anthropic_text"], "the apps got their answers"
    assert out["direct_status"] == 200
    assert set(out["patched_after"]) >= {"openai", "anthropic", "httpx", "httpx2"}
    names = [c["name"] for c in out["calls"]]
    assert names == ["chat gpt-4o-mini", "chat claude-haiku-4-5", "chat gpt-4o-mini"], names
    assert all(isinstance(c["ttft"], float) and c["ttft"] > 0 for c in out["calls"][:2]), out["calls"]


def test_uninstrument_before_the_sdk_is_imported_leaves_it_alone(sim: Simulator) -> None:
    """Hooks registered but never fired: after uninstrument() they do nothing when the SDK comes."""
    out = run(
        """
        import firsttoken
        firsttoken.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
        firsttoken.uninstrument()
        out["text"] = chat_openai()
        import openai._base_client, httpx
        out["request_patched"] = is_patched(openai._base_client.SyncAPIClient, "request")
        out["send_patched"] = is_patched(httpx.Client, "send")
        out["calls"] = calls()
        # Instrumenting again patches the SDK at once, as it is imported by now.
        firsttoken.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
        out["text_again"] = chat_openai()
        out["calls_again"] = len(calls())
        """,
        sim,
    )
    assert out["text"] and out["text_again"]
    assert out["request_patched"] is False and out["send_patched"] is False
    assert out["calls"] == []
    assert out["calls_again"] == 1


def test_uninstrument_after_the_sdk_was_imported_restores_it(sim: Simulator) -> None:
    out = run(
        """
        import firsttoken
        firsttoken.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
        import openai._base_client
        out["patched"] = is_patched(openai._base_client.SyncAPIClient, "request")
        chat_openai()
        firsttoken.uninstrument()
        out["still_patched"] = is_patched(openai._base_client.SyncAPIClient, "request")
        import httpx
        out["send_patched"] = is_patched(httpx.Client, "send")
        out["text"] = chat_openai()
        out["calls"] = len(calls())
        """,
        sim,
    )
    assert out == {"patched": True, "still_patched": False, "send_patched": False, "text": out["text"], "calls": 1}
    assert out["text"]


def test_modules_an_sdk_loads_on_first_use_are_patched_then_not_at_instrument(sim: Simulator) -> None:
    # openai imports its resources on the first ``client.chat``: instrument() must not import them
    # (that was most of its cost with the SDK already imported), yet their public methods are
    # patched once the app loads them, so a call still starts when the app calls ``create``.
    out = run(
        """
        import openai
        RESOURCE = "openai.resources.chat.completions.completions"
        out["before"] = RESOURCE in sys.modules
        import firsttoken
        firsttoken.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
        out["loaded_by_instrument"] = RESOURCE in sys.modules
        out["text"] = chat_openai()
        module = sys.modules[RESOURCE]
        out["create_patched"] = is_patched(module.Completions, "create")
        out["calls"] = len(calls())
        firsttoken.uninstrument()
        create = module.Completions.__dict__.get("create")
        out["create_restored"] = create is not None and not getattr(create, "_self_firsttoken", False)
        # Undone before the app loads a resource: its pending patch is dropped, not made later.
        firsttoken.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
        firsttoken.uninstrument()
        import openai.resources.embeddings as embeddings
        out["embeddings_patched"] = is_patched(embeddings.Embeddings, "create")
        """,
        sim,
    )
    assert out["text"]
    assert out == {
        "before": False,
        "loaded_by_instrument": False,
        "text": out["text"],
        "create_patched": True,
        "calls": 1,
        "create_restored": True,
        "embeddings_patched": False,
    }


def test_the_opentelemetry_instrumentor_shares_the_installation(telemetry: Telemetry) -> None:
    """``opentelemetry-instrument`` goes through FirstTokenInstrumentor: one installation for both."""
    instrumentor = firsttoken.FirstTokenInstrumentor()
    assert firsttoken.is_instrumented()
    assert instrumentor.recorder is not None
    firsttoken.uninstrument()
    assert not firsttoken.is_instrumented() and instrumentor.recorder is None
    instrumentor.instrument(tracer_provider=telemetry.tracer_provider, meter_provider=telemetry.meter_provider)
    try:
        assert firsttoken.is_instrumented() and instrumentor.is_instrumented_by_opentelemetry
        assert firsttoken.instrument(), "already instrumented: idempotent"
        firsttoken.uninstrument()
        assert not instrumentor.is_instrumented_by_opentelemetry, "the instrumentor knows it was undone"
        assert not firsttoken.is_instrumented()
    finally:
        firsttoken.uninstrument()


def test_a_function_is_wrapped_once_and_restored_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both httpx flavours wrap socket.getaddrinfo: the second wrap must see the first is ours."""
    import types

    from firsttoken._patch import Patches

    module = types.ModuleType("firsttoken_patch_target")

    def original(x: int) -> int:
        return x

    module.target = original  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    seen: list[int] = []

    def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        seen.append(args[0])
        return wrapped(*args, **kwargs)

    patches = Patches()
    assert patches.wrap(module.__name__, "target", wrapper)
    assert patches.wrap(module.__name__, "target", wrapper)
    assert len(patches) == 1
    assert module.target(3) == 3 and seen == [3], "one wrapper, called once"
    patches.unwrap_all()
    assert module.target is original


def test_post_import_hooks_fire_once_after_the_module_ran(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """firsttoken._imports on modules of our own: after, not before, the module's code; once; not
    for a module that failed; not when discarded; at once when already imported."""
    import importlib

    from firsttoken import _imports

    (tmp_path / "ft_hook_target.py").write_text("VALUE = 42\n")
    broken = "import os\nif not os.environ.get('FT_HOOK_FIX'):\n    raise ImportError('no')\n"
    (tmp_path / "ft_hook_broken.py").write_text(broken)
    (tmp_path / "ft_hook_discarded.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("ft_hook_target", "ft_hook_broken", "ft_hook_discarded"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    seen: list[tuple[str, Any]] = []

    def hook(module: Any) -> None:
        seen.append((module.__name__, getattr(module, "VALUE", None)))

    def discarded(module: Any) -> None:
        seen.append(("discarded", module.__name__))

    _imports.when_imported("ft_hook_target", hook)
    _imports.when_imported("ft_hook_broken", hook)
    _imports.when_imported("ft_hook_discarded", discarded)
    _imports.discard(discarded)
    assert seen == []

    target = importlib.import_module("ft_hook_target")
    assert seen == [("ft_hook_target", 42)], "after the module's code ran"
    assert "exec_module" not in vars(target.__spec__.loader), "the loader is left as it was"
    assert type(target.__spec__.loader).__name__ == "SourceFileLoader"
    importlib.reload(target)
    assert len(seen) == 1, "once"

    with pytest.raises(ImportError):
        importlib.import_module("ft_hook_broken")
    assert len(seen) == 1, "nothing for a module that failed"
    monkeypatch.setenv("FT_HOOK_FIX", "1")
    importlib.import_module("ft_hook_broken")
    assert seen[-1] == ("ft_hook_broken", None), "the hook waits for an import that succeeds"

    importlib.import_module("ft_hook_discarded")
    assert ("discarded", "ft_hook_discarded") not in seen

    _imports.when_imported("ft_hook_target", hook)
    assert seen[-1] == ("ft_hook_target", 42), "already imported: at once"


def test_post_import_hooks_live_with_wrapts_on_the_same_module(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """An app (or another instrumentation) using wrapt's hooks for the same module: both fire once."""
    import importlib

    import wrapt

    from firsttoken import _imports

    for name in ("ft_hook_both_a", "ft_hook_both_b"):
        (tmp_path / f"{name}.py").write_text("VALUE = 7\n")
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[str] = []
    # Ours first, then wrapt's finder goes in front of ours; and the other way round.
    _imports.when_imported("ft_hook_both_a", lambda m: seen.append(f"ours {m.__name__} {m.VALUE}"))
    wrapt.register_post_import_hook(lambda m: seen.append(f"wrapt {m.__name__} {m.VALUE}"), "ft_hook_both_a")
    wrapt.register_post_import_hook(lambda m: seen.append(f"wrapt {m.__name__} {m.VALUE}"), "ft_hook_both_b")
    _imports.when_imported("ft_hook_both_b", lambda m: seen.append(f"ours {m.__name__} {m.VALUE}"))
    importlib.import_module("ft_hook_both_a")
    importlib.import_module("ft_hook_both_b")
    assert sorted(seen) == sorted(
        ["ours ft_hook_both_a 7", "wrapt ft_hook_both_a 7", "ours ft_hook_both_b 7", "wrapt ft_hook_both_b 7"]
    )
