"""instrument() from the app's side: settings, bad input, OTLP set-up, opentelemetry-instrument."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

import firsttoken
from firsttoken import config
from firsttoken import semconv as sc
from firsttoken.providers import _common
from firsttoken.providers import openai as openai_hooks

from .conftest import Telemetry

# -- settings -------------------------------------------------------------------------------


def test_defaults() -> None:
    s = config.load(environ={})
    assert s.capture_content is False
    assert s.chunk_metrics is False
    assert s.phase_spans == "tail"


@pytest.mark.parametrize(
    ("env", "arg", "expected"),
    [
        ("always", None, "always"),
        ("NEVER", None, "never"),
        ("true", None, "always"),
        ("off", None, "never"),
        ("always", "tail", "tail"),
        (None, False, "never"),
        (None, True, "always"),
    ],
)
def test_phase_spans_modes(env: str | None, arg: Any, expected: str) -> None:
    environ = {} if env is None else {config.ENV_PHASE_SPANS: env}
    options = {} if arg is None else {"phase_spans": arg}
    assert config.load(environ=environ, options=options).phase_spans == expected


def test_phase_spans_bad_argument() -> None:
    with pytest.raises(config.ConfigError, match="phase_spans='sometimes' must be 'always', 'tail' or 'never'"):
        config.load(environ={}, options={"phase_spans": "sometimes"})


@pytest.mark.parametrize(
    ("env", "expected"),
    [("true", True), ("SPAN_ONLY", True), ("span_and_event", True), ("NO_CONTENT", False), ("false", False)],
)
def test_capture_content_env(env: str, expected: bool) -> None:
    assert config.load(environ={config.ENV_CAPTURE_CONTENT: env}).capture_content is expected


def test_argument_wins_over_env() -> None:
    assert config.load(capture_content=False, environ={config.ENV_CAPTURE_CONTENT: "true"}).capture_content is False
    assert config.load(options={"chunk_metrics": True}, environ={config.ENV_CHUNK_METRICS: "0"}).chunk_metrics


def test_metric_value_limit_from_argument_env_and_default() -> None:
    assert config.load(environ={}).metric_value_limit == 100
    assert config.load(environ={config.ENV_METRIC_VALUE_LIMIT: " 7 "}).metric_value_limit == 7
    both = config.load(environ={config.ENV_METRIC_VALUE_LIMIT: "7"}, options={"metric_value_limit": 3})
    assert both.metric_value_limit == 3


def test_tail_share_from_argument_env_and_default() -> None:
    assert config.load(environ={}).tail_share == 0.25
    assert config.load(environ={config.ENV_TAIL_SHARE: " 0.05 "}).tail_share == 0.05
    assert config.load(environ={config.ENV_TAIL_SHARE: "0.05"}, options={"tail_share": 1}).tail_share == 1.0


@pytest.mark.parametrize(
    ("kwargs", "environ", "message"),
    [
        ({"options": {"chunk_metric": True}}, {}, "unknown option(s) chunk_metric"),
        ({"options": {"chunk_metrics": "yes"}}, {}, "chunk_metrics='yes' must be True or False"),
        ({}, {config.ENV_CHUNK_METRICS: "maybe"}, "FIRSTTOKEN_CHUNK_METRICS='maybe' is not a boolean"),
        ({}, {config.ENV_CAPTURE_CONTENT: "everything"}, "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"),
        ({}, {config.ENV_PROVIDER_HOSTS: "llm.internal"}, "is not host=provider"),
        ({}, {config.ENV_CONTENT_MAX_LENGTH: "lots"}, "is not an integer"),
        ({"options": {"content_max_length": 3}}, {}, "too small"),
        ({"options": {"redact": "no"}}, {}, "must be a callable"),
        ({}, {config.ENV_METRIC_VALUE_LIMIT: "many"}, "FIRSTTOKEN_METRIC_VALUE_LIMIT='many' is not an integer"),
        (
            {},
            {config.ENV_METRIC_VALUE_LIMIT: "0"},
            "FIRSTTOKEN_METRIC_VALUE_LIMIT='0' must be an integer of at least 1",
        ),
        ({"options": {"metric_value_limit": 0}}, {}, "metric_value_limit=0 must be an integer of at least 1"),
        ({"options": {"metric_value_limit": True}}, {}, "metric_value_limit=True must be an integer"),
        ({"options": {"metric_value_limit": "9"}}, {}, "metric_value_limit='9' must be an integer"),
        ({}, {config.ENV_TAIL_SHARE: "a tenth"}, "FIRSTTOKEN_TAIL_SHARE='a tenth' is not a number"),
        ({}, {config.ENV_TAIL_SHARE: "0"}, "FIRSTTOKEN_TAIL_SHARE='0' is out of range"),
        ({}, {config.ENV_TAIL_SHARE: "nan"}, "FIRSTTOKEN_TAIL_SHARE='nan' is out of range"),
        ({"options": {"tail_share": 25}}, {}, "tail_share=25 is out of range: use a share above 0 and at most 1"),
        ({"options": {"tail_share": "0.1"}}, {}, "tail_share='0.1' must be a number"),
        ({"options": {"tail_share": True}}, {}, "tail_share=True must be a number"),
    ],
)
def test_bad_settings_name_the_problem(kwargs: dict[str, Any], environ: dict[str, str], message: str) -> None:
    with pytest.raises(config.ConfigError) as caught:
        config.load(environ=environ, **kwargs)
    assert message in str(caught.value)


def test_bad_option_warns_once_and_leaves_the_app_uninstrumented(sim: Any) -> None:
    t = Telemetry()
    with pytest.warns(firsttoken.FirstTokenWarning, match="unknown option"):
        ok = firsttoken.instrument(tracer_provider=t.tracer_provider, meter_provider=t.meter_provider, bogus=1)
    assert ok is False
    assert not firsttoken.is_instrumented()
    c = openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0)
    assert c.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}]).choices
    assert not t.spans()


def test_bad_env_var_warns_and_app_runs(monkeypatch: pytest.MonkeyPatch, sim: Any) -> None:
    monkeypatch.setenv(config.ENV_PHASE_SPANS, "sometimes")
    t = Telemetry()
    with pytest.warns(firsttoken.FirstTokenWarning, match="FIRSTTOKEN_PHASE_SPANS='sometimes'"):
        assert firsttoken.instrument(tracer_provider=t.tracer_provider, meter_provider=t.meter_provider) is False
    c = openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0)
    assert c.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}]).choices


def test_unsupported_sdk_version_warns_and_skips(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(openai_hooks, "SUPPORTED", ">=99")
    monkeypatch.setattr(_common, "_warned", set())
    t = Telemetry()
    with pytest.warns(
        firsttoken.FirstTokenWarning, match=r"openai .* is not supported \(firsttoken supports openai>=99\)"
    ):
        ok = firsttoken.instrument(tracer_provider=t.tracer_provider, meter_provider=t.meter_provider)
    try:
        assert ok is True, "anthropic, which is supported, is still instrumented"
        from anthropic import _base_client as anthropic_base
        from openai import _base_client

        assert not hasattr(_base_client.SyncAPIClient.request, "__wrapped__"), "openai is left alone"
        assert hasattr(anthropic_base.SyncAPIClient.request, "__wrapped__")
    finally:
        firsttoken.uninstrument()


def test_disabled_by_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    t = Telemetry()
    assert firsttoken.instrument(tracer_provider=t.tracer_provider, meter_provider=t.meter_provider) is False


@pytest.mark.parametrize(
    ("host", "provider"),
    [
        ("api.openai.com", "openai"),
        ("api.groq.com", "groq"),
        ("my-res.openai.azure.com", "azure.ai.openai"),
        ("api.deepseek.com", "deepseek"),
        ("llm.internal", "vllm"),
        ("127.0.0.1", "openai"),
        (None, "openai"),
    ],
)
def test_provider_from_host(host: str | None, provider: str) -> None:
    resolve = _common.provider_resolver({"llm.internal": "vllm"})
    assert resolve(host, "openai") == provider


def test_provider_host_option_reaches_spans(sim: Any) -> None:
    t = Telemetry()
    assert firsttoken.instrument(
        tracer_provider=t.tracer_provider, meter_provider=t.meter_provider, provider_hosts={"127.0.0.1": "vllm"}
    )
    try:
        c = openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0)
        c.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    finally:
        firsttoken.uninstrument()
    assert t.call().attributes[sc.GEN_AI_PROVIDER_NAME] == "vllm"


def test_chunk_metrics_opt_in(sim: Any) -> None:
    t = Telemetry()
    assert firsttoken.instrument(tracer_provider=t.tracer_provider, meter_provider=t.meter_provider, chunk_metrics=True)
    try:
        c = openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0)
        chunks = list(c.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True))
    finally:
        firsttoken.uninstrument()
    points = t.metrics()[sc.M_TIME_PER_OUTPUT_CHUNK]
    assert sum(p.count for p in points) == len(chunks) - 1  # one sample per chunk after the first


def test_phase_spans_can_be_turned_off(sim: Any) -> None:
    t = Telemetry()
    assert firsttoken.instrument(tracer_provider=t.tracer_provider, meter_provider=t.meter_provider, phase_spans=False)
    try:
        c = openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0)
        c.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    finally:
        firsttoken.uninstrument()
    assert len(t.spans()) == 1


# -- OTLP export with no code change ------------------------------------------------------------


class _Collector(http.server.ThreadingHTTPServer):
    """A minimal OTLP/HTTP receiver: keeps every decoded export request."""

    def __init__(self) -> None:
        self.traces: list[ExportTraceServiceRequest] = []
        self.metrics: list[ExportMetricsServiceRequest] = []
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Collector

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        if self.path == "/v1/traces":
            msg: Any = ExportTraceServiceRequest()
            msg.ParseFromString(body)
            self.server.traces.append(msg)
        elif self.path == "/v1/metrics":
            msg = ExportMetricsServiceRequest()
            msg.ParseFromString(body)
            self.server.metrics.append(msg)
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[_Collector]:
    server = _Collector()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


APP = """
import openai
from firsttoken.sim import LatencyModel, Simulator
{prelude}
with Simulator(latency=LatencyModel(queue_ms=1, decode_tokens_per_s=2000, jitter=0, output_tokens=5)) as sim:
    c = openai.OpenAI(base_url=sim.openai_base_url, api_key="sk-subprocess", max_retries=0)
    for _ in c.chat.completions.create(model="gpt-4o-mini", messages=[{{"role": "user", "content": "hi"}}],
                                       stream=True, stream_options={{"include_usage": True}}):
        pass
"""


def _run_app(tmp_path: Path, collector: _Collector, prelude: str, command: list[str]) -> None:
    script = tmp_path / "app.py"
    script.write_text(textwrap.dedent(APP.format(prelude=prelude)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FIRSTTOKEN_"))} | {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.server_address[1]}",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_SERVICE_NAME": "subprocess-app",
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_METRICS_EXPORTER": "otlp",
        "OTEL_LOGS_EXPORTER": "none",
    }
    done = subprocess.run([*command, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def _exported_call_span(collector: _Collector) -> Any:
    spans = [
        span
        for req in collector.traces
        for rs in req.resource_spans
        for ss in rs.scope_spans
        if ss.scope.name == sc.SCOPE_NAME
        for span in ss.spans
    ]
    calls = [s for s in spans if s.name == "chat gpt-4o-mini"]
    assert len(calls) == 1, [s.name for s in spans]
    resource = {a.key: a.value.string_value for a in collector.traces[0].resource_spans[0].resource.attributes}
    assert resource["service.name"] == "subprocess-app"
    assert uuid.UUID(resource["service.instance.id"]), "replicas of one service stay apart"
    return calls[0]


def _exported_metric_names(collector: _Collector) -> set[str]:
    return {
        m.name
        for req in collector.metrics
        for rm in req.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    }


def test_one_line_instrument_exports_over_otlp_from_env(tmp_path: Path, collector: _Collector) -> None:
    _run_app(tmp_path, collector, "import firsttoken; firsttoken.instrument()", [sys.executable])
    span = _exported_call_span(collector)
    attrs = {a.key for a in span.attributes}
    assert sc.FT_TIME_TO_FIRST_TOKEN in attrs
    assert {sc.M_OPERATION_DURATION, sc.M_TIME_TO_FIRST_TOKEN} <= _exported_metric_names(collector)


def test_opentelemetry_instrument_needs_no_code_change(tmp_path: Path, collector: _Collector) -> None:
    launcher = Path(sys.executable).with_name("opentelemetry-instrument")
    _run_app(tmp_path, collector, "", [str(launcher), sys.executable])
    span = _exported_call_span(collector)
    assert sc.FT_TIME_TO_FIRST_TOKEN in {a.key for a in span.attributes}
    assert sc.M_TIME_TO_FIRST_TOKEN in _exported_metric_names(collector)
