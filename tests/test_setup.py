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


@pytest.mark.parametrize(
    ("kwargs", "environ", "field", "says"),
    [
        ({}, {config.ENV_TAIL_SHARE: "2"}, "tail_share", "FIRSTTOKEN_TAIL_SHARE='2' is out of range"),
        ({}, {config.ENV_PHASE_SPANS: "sometimes"}, "phase_spans", "FIRSTTOKEN_PHASE_SPANS='sometimes'"),
        ({}, {config.ENV_CHUNK_METRICS: "maybe"}, "chunk_metrics", "is not a boolean"),
        ({}, {config.ENV_WIRE_PHASES: "maybe"}, "wire_phases", "FIRSTTOKEN_WIRE_PHASES='maybe'"),
        ({}, {config.ENV_CONTENT_MAX_LENGTH: "lots"}, "content_max_length", "is not an integer"),
        ({}, {config.ENV_METRIC_VALUE_LIMIT: "0"}, "metric_value_limit", "of at least 1"),
        ({}, {config.ENV_PROVIDER_HOSTS: "llm.internal"}, "provider_hosts", "is not host=provider"),
        ({}, {config.ENV_CAPTURE_CONTENT: "everything"}, "capture_content", "CAPTURE_MESSAGE_CONTENT"),
        ({"options": {"tail_share": 25}}, {}, "tail_share", "tail_share=25 is out of range"),
        ({"capture_content": "yes"}, {}, "capture_content", "capture_content='yes' must be True or False"),
    ],
)
def test_a_bad_setting_falls_back_to_its_default_and_the_rest_is_kept(
    kwargs: dict[str, Any], environ: dict[str, str], field: str, says: str
) -> None:
    """One typo costs that setting, not the others (as the OpenTelemetry SDK treats a bad OTEL_* value)."""
    good = {config.ENV_METRIC_VALUE_LIMIT: "7", config.ENV_TAIL_SHARE: "0.5", config.ENV_PHASE_SPANS: "always"}
    problems: list[str] = []
    settings = config.load(environ=good | environ, problems=problems, **kwargs)
    assert len(problems) == 1 and says in problems[0] and "; using " in problems[0], problems
    assert getattr(settings, field) == getattr(config.Settings(), field)
    for kept, value in (("metric_value_limit", 7), ("tail_share", 0.5), ("phase_spans", "always")):
        if kept != field:
            assert getattr(settings, kept) == value


def test_a_redactor_that_cannot_run_means_no_content_rather_than_unredacted_content() -> None:
    problems: list[str] = []
    settings = config.load(capture_content=True, options={"redact": "no"}, environ={}, problems=problems)
    assert settings.capture_content is False and settings.redact is None
    assert problems == ["redact='no' must be a callable (attribute_name, text) -> text | None; using no content "
                        "capture (a redactor was meant to run)"]  # fmt: skip


def test_misspelt_variables_name_the_closest_setting() -> None:
    environ = {
        "FIRSTTOKEN_PHASESPANS": "always",
        "firsttoken_tail_shares": "0.5",
        "FIRSTTOKEN_PHASE_SPANS": "never",
        "FIRSTTOKEN_STACK": "required",  # the project's own test variables are nowhere near a setting
        "FIRSTTOKEN_RECORDINGS": "x",
        "OTEL_SERVICE_NAME": "app",
        # a real setting under a near miss of the prefix
        "FIRSTOKEN_PHASE_SPANS": "never",
        "FIRST_TOKEN_TAIL_SHARE": "0.5",
        "firsttokenchunk_metrics": "1",
        # far from the prefix, or not a setting after it: an app's own variables
        "OTEL_SDK_DISABLED": "false",
        "TOKEN_DISABLED": "1",
        "FIRST_TOKEN_STACK": "x",
    }
    assert config.misspelt_variables(environ) == [
        "FIRSTOKEN_PHASE_SPANS is not a firsttoken setting and is ignored: did you mean FIRSTTOKEN_PHASE_SPANS?",
        "FIRSTTOKEN_PHASESPANS is not a firsttoken setting and is ignored: did you mean FIRSTTOKEN_PHASE_SPANS?",
        "FIRST_TOKEN_TAIL_SHARE is not a firsttoken setting and is ignored: did you mean FIRSTTOKEN_TAIL_SHARE?",
        "firsttoken_tail_shares is not a firsttoken setting and is ignored: did you mean FIRSTTOKEN_TAIL_SHARE?",
        "firsttokenchunk_metrics is not a firsttoken setting and is ignored: did you mean FIRSTTOKEN_CHUNK_METRICS?",
    ]


def test_an_unknown_option_is_ignored_with_one_warning_naming_the_closest(sim: Any) -> None:
    t = Telemetry()
    with pytest.warns(firsttoken.FirstTokenWarning) as caught:
        ok = firsttoken.instrument(
            tracer_provider=t.tracer_provider, meter_provider=t.meter_provider, chunk_metric=True, tail_share=0.5
        )
    try:
        assert ok is True
        messages = [str(w.message) for w in caught]
        assert len(messages) == 1, messages
        assert messages[0].startswith("firsttoken: unknown option(s) chunk_metric (did you mean chunk_metrics?)")
        assert messages[0].endswith("; ignored")
        c = openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0)
        assert c.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}]).choices
        assert t.spans(), "the rest of the settings work"
    finally:
        firsttoken.uninstrument()


def test_a_bad_env_var_warns_and_the_app_is_measured_with_its_default(
    monkeypatch: pytest.MonkeyPatch, sim: Any
) -> None:
    monkeypatch.setenv(config.ENV_PHASE_SPANS, "sometimes")
    monkeypatch.setenv("FIRSTTOKEN_PHASESPANS", "never")
    monkeypatch.setenv("FIRST_TOKEN_WIRE_PHASES", "false")
    t = Telemetry()
    with pytest.warns(firsttoken.FirstTokenWarning) as caught:
        ok = firsttoken.instrument(tracer_provider=t.tracer_provider, meter_provider=t.meter_provider)
    try:
        assert ok is True
        messages = sorted(str(w.message) for w in caught)
        assert messages == [
            "firsttoken: FIRSTTOKEN_PHASESPANS is not a firsttoken setting and is ignored: did you mean "
            "FIRSTTOKEN_PHASE_SPANS?",
            "firsttoken: FIRSTTOKEN_PHASE_SPANS='sometimes' is not understood: use always, tail or never "
            "(true/false mean always/never); using the default, 'tail'",
            "firsttoken: FIRST_TOKEN_WIRE_PHASES is not a firsttoken setting and is ignored: did you mean "
            "FIRSTTOKEN_WIRE_PHASES?",
        ]
        c = openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0)
        assert c.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}]).choices
        assert [s.name for s in t.spans()] == ["chat m"]
    finally:
        firsttoken.uninstrument()


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


def _run_app(tmp_path: Path, collector: _Collector, prelude: str, command: list[str], **extra: str) -> str:
    """Runs the app; what it wrote to stderr."""
    script = tmp_path / "app.py"
    script.write_text(textwrap.dedent(APP.format(prelude=prelude)))
    env = (
        {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FIRSTTOKEN_"))}
        | {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.server_address[1]}",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_SERVICE_NAME": "subprocess-app",
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "otlp",
            "OTEL_LOGS_EXPORTER": "none",
        }
        | extra
    )
    done = subprocess.run([*command, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_without_a_service_name_the_resource_names_the_script_or_module(tmp_path: Path) -> None:
    """firsttoken's own set-up: what the process runs, not the SDK's unknown_service:python for every app
    (in firsttoken view's app column, say); a name the app gives wins."""
    app = "import firsttoken\nfrom opentelemetry import trace\nfirsttoken.instrument()\n"
    app += "print(trace.get_tracer_provider().resource.attributes['service.name'])\n"
    (tmp_path / "chat_app.py").write_text(app)
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "worker.py").write_text(app)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FIRSTTOKEN_"))}
    env |= {"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"}
    runs = {
        "chat_app": ([sys.executable, "chat_app.py"], env),
        "myapp.worker": ([sys.executable, "-m", "myapp.worker"], env),
        "named": ([sys.executable, "chat_app.py"], env | {"OTEL_SERVICE_NAME": "named"}),
    }
    started = {
        want: subprocess.Popen(argv, cwd=tmp_path, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for want, (argv, e) in runs.items()
    }
    for want, process in started.items():
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        assert out.strip() == want, (out, err)


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


def test_typos_in_the_environment_cost_only_themselves(tmp_path: Path, collector: _Collector) -> None:
    """As a user meets it: an endpoint without its scheme, an out-of-range share and a misspelt
    name. Each gets one warning; calls are still measured and exported, to the endpoint meant."""
    stderr = _run_app(
        tmp_path, collector, "import firsttoken; firsttoken.instrument()", [sys.executable],
        OTEL_EXPORTER_OTLP_ENDPOINT=f"127.0.0.1:{collector.server_address[1]}",
        FIRSTTOKEN_TAIL_SHARE="2",
        FIRSTTOKEN_PHASESPANS="always",
    )  # fmt: skip
    warned = [line.partition("FirstTokenWarning: firsttoken: ")[2] for line in stderr.splitlines()]
    warned = [w for w in warned if w]
    address = f"127.0.0.1:{collector.server_address[1]}"
    assert sorted(warned) == [
        "FIRSTTOKEN_PHASESPANS is not a firsttoken setting and is ignored: did you mean FIRSTTOKEN_PHASE_SPANS?",
        "FIRSTTOKEN_TAIL_SHARE='2' is out of range: use a share above 0 and at most 1 (0.25 is a quarter); "
        "using the default, 0.25",
        f"OTEL_EXPORTER_OTLP_ENDPOINT={address!r} has no scheme: using http://{address} (OTLP over HTTP needs "
        "a URL) (for a gRPC collector, set OTEL_EXPORTER_OTLP_PROTOCOL=grpc)",
    ], stderr
    assert sc.FT_TIME_TO_FIRST_TOKEN in {a.key for a in _exported_call_span(collector).attributes}
    assert sc.M_TIME_TO_FIRST_TOKEN in _exported_metric_names(collector)
