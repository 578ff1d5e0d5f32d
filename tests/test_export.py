"""firsttoken's own export set-up: a collector that is down, ``OTEL_*_EXPORTER``, the resource, the
metric interval. The exit-time tests run real subprocesses and time them from the outside."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from firsttoken import _otlp
from firsttoken.config import ConfigError

APP = """
import time
import openai
import firsttoken
firsttoken.instrument()
from firsttoken.sim import LatencyModel, Simulator
with Simulator(latency=LatencyModel(queue_ms=1, decode_tokens_per_s=2000, jitter=0, output_tokens=5)) as sim:
    c = openai.OpenAI(base_url=sim.openai_base_url, api_key="sk-subprocess", max_retries=0)
    for _ in range(3):
        for _ in c.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}],
                                           stream=True, stream_options={"include_usage": True}):
            pass
    print("LAST CALL ENDED", time.time(), flush=True)
"""


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FIRSTTOKEN_"))}
    return env | {"OTEL_SERVICE_NAME": "exit-test", **extra}


def _exit_delay(tmp_path: Path, env: dict[str, str], command: list[str] | None = None) -> tuple[float, str]:
    """Seconds from the app's last call to the end of its process, and what it wrote to stderr."""
    script = tmp_path / "app.py"
    script.write_text(textwrap.dedent(APP))
    done = subprocess.run([*(command or [sys.executable]), str(script)], env=env, capture_output=True, text=True)
    ended = time.time()
    assert done.returncode == 0, done.stderr
    last = next(float(line.split()[-1]) for line in done.stdout.splitlines() if line.startswith("LAST CALL ENDED"))
    return ended - last, done.stderr


class _BlackHole:
    """A loopback OTLP endpoint that never answers: either it never accepts (the kernel completes the
    handshake into a full backlog) or it accepts and then reads forever without replying."""

    def __init__(self, accept: bool) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=1)
        self.port = self.sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self._closing = False
        if accept:
            threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closing:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(conn)  # held open, never read from or written to

    def close(self) -> None:
        self._closing = True
        for conn in self.accepted:
            conn.close()
        self.sock.close()


def _refused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> float:
    """The same app exporting nothing: the machine's own cost of ending this process right now."""
    delay, _ = _exit_delay(
        tmp_path_factory.mktemp("baseline"), _clean_env(OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none")
    )
    return delay


@pytest.mark.parametrize("collector", ["refused", "never-accepts", "accepts-never-answers"])
def test_exit_is_prompt_when_the_collector_is_down(tmp_path: Path, baseline: float, collector: str) -> None:
    hole = None if collector == "refused" else _BlackHole(accept=collector == "accepts-never-answers")
    port = _refused_port() if hole is None else hole.port
    try:
        delay, stderr = _exit_delay(tmp_path, _clean_env(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}"))
    finally:
        if hole is not None:
            hole.close()
    budget = _otlp.SHUTDOWN_TIMEOUT_MS / 1000
    # What firsttoken adds at exit is its bounded flush (plus 1 s for two processes' start-up noise)
    # over the same app exporting nothing, measured just before on this machine ...
    assert delay - baseline <= budget + 1.0, (delay, baseline)
    # ... so the process ends within 5 s of its last call, unless ending a process (imports torn
    # down) is itself slower than 1 s here right now; then by that much more.
    assert delay <= 5.0 + max(0.0, baseline - 1.0), (delay, baseline)
    lines = [line for line in stderr.splitlines() if line.strip()]
    # One line that the collector is down, and, when the spans given up on were counted before the
    # exit's bound ran out (a race with the exporter's last try), one saying how many were dropped:
    # never a line per retry.
    assert 1 <= len(lines) <= 2, stderr
    assert all(f"OTLP collector at http://127.0.0.1:{port}" in line for line in lines), stderr
    dropped = [line for line in lines if "before the exit; they were dropped" in line]
    assert len(lines) - len(dropped) <= 1 and len(dropped) <= 1, stderr


def test_exit_is_prompt_with_a_live_collector_too(tmp_path: Path, baseline: float) -> None:
    with _Sink() as sink:
        delay, stderr = _exit_delay(tmp_path, _clean_env(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{sink.port}"))
    assert stderr.strip() == ""
    assert delay - baseline <= _otlp.SHUTDOWN_TIMEOUT_MS / 1000 + 1.0, (delay, baseline)
    assert sink.paths.count("/v1/traces") >= 1 and sink.paths.count("/v1/metrics") >= 1, sink.paths


class _Sink:
    """An OTLP/HTTP endpoint that answers 200 to everything and records the paths and bodies."""

    def __init__(self) -> None:
        import http.server

        paths: list[str] = []
        bodies: list[tuple[str, bytes]] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                bodies.append((self.path, self.rfile.read(int(self.headers["content-length"]))))
                paths.append(self.path)
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.paths = paths
        self.bodies = bodies
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]

    def __enter__(self) -> _Sink:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


# -- OTEL_TRACES_EXPORTER / OTEL_METRICS_EXPORTER ------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, ["otlp"]),
        ("", ["otlp"]),
        ("console", ["console"]),
        ("none", []),
        ("otlp, console", ["otlp", "console"]),
        ("Console,console,none", ["console"]),
    ],
)
def test_exporter_names(raw: str | None, expected: list[str]) -> None:
    environ = {} if raw is None else {_otlp.ENV_TRACES_EXPORTER: raw}
    assert _otlp.exporter_names(_otlp.ENV_TRACES_EXPORTER, environ) == expected


def test_unknown_exporter_is_one_clear_error() -> None:
    with pytest.raises(ConfigError, match=r"OTEL_METRICS_EXPORTER='prometheus'.*otlp, console and none"):
        _otlp.exporter_names(_otlp.ENV_METRICS_EXPORTER, {_otlp.ENV_METRICS_EXPORTER: "prometheus"})


# -- an OTLP/HTTP endpoint without a scheme ------------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "variable"),
    [
        ({_otlp.ENV_ENDPOINT: "localhost:4318"}, _otlp.ENV_ENDPOINT),
        ({_otlp.ENV_TRACES_ENDPOINT: "collector:4318/v1/traces"}, _otlp.ENV_TRACES_ENDPOINT),
        ({_otlp.ENV_METRICS_ENDPOINT: "127.0.0.1:4318/v1/metrics"}, _otlp.ENV_METRICS_ENDPOINT),
        # The signal's variable is the one the exporter reads: a good general one does not hide it.
        ({_otlp.ENV_ENDPOINT: "http://ok:4318", _otlp.ENV_TRACES_ENDPOINT: "ok:4318"}, _otlp.ENV_TRACES_ENDPOINT),
    ],
)
def test_an_http_endpoint_without_a_scheme_is_one_clear_error(environ: dict[str, str], variable: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _otlp.providers(environ)
    message = str(caught.value)
    assert message.startswith(f"{variable}={environ[variable]!r} has no scheme"), message
    assert f"http://{environ[variable]}" in message and "OTEL_EXPORTER_OTLP_PROTOCOL=grpc" in message


@pytest.mark.parametrize(
    "environ",
    [
        {_otlp.ENV_ENDPOINT: "http://localhost:4318"},
        {_otlp.ENV_ENDPOINT: "HTTPS://collector.example:4318"},
        # Over gRPC an address is valid without a scheme.
        {_otlp.ENV_ENDPOINT: "localhost:4317", _otlp.ENV_PROTOCOL: "grpc"},
        # The signal's own variable wins over a bad general one, which then reaches no exporter.
        {_otlp.ENV_ENDPOINT: "bad:4318", _otlp.ENV_TRACES_ENDPOINT: "http://a/v1/traces", "metrics": "none"},
        # Not exported over OTLP at all.
        {_otlp.ENV_ENDPOINT: "localhost:4318", "traces": "console", "metrics": "none"},
    ],
)
def test_endpoints_that_work_are_accepted(environ: dict[str, str]) -> None:
    environ = dict(environ)
    traces = [environ.pop("traces")] if "traces" in environ else None
    metrics = [m for m in [environ.pop("metrics")] if m != "none"] if "metrics" in environ else None
    export = _otlp.providers(environ, traces=traces, metrics_=metrics)
    assert export.close(timeout_s=5)


def test_instrument_warns_once_naming_the_variable_and_the_url_it_uses(tmp_path: Path) -> None:
    """As a user meets it: ``instrument()`` in a fresh process with the usual mistake in its environment."""
    script = tmp_path / "app.py"
    script.write_text("import firsttoken\nprint(firsttoken.instrument())\n")
    env = _clean_env(OTEL_EXPORTER_OTLP_ENDPOINT="localhost:4318")
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"
    warnings = [line for line in done.stderr.splitlines() if "FirstTokenWarning" in line]
    assert len(warnings) == 1, done.stderr
    assert warnings[0].startswith(f"{script}:2: FirstTokenWarning: firsttoken: ")
    assert "OTEL_EXPORTER_OTLP_ENDPOINT='localhost:4318' has no scheme: using http://localhost:4318" in warnings[0]


@pytest.mark.parametrize(
    ("environ", "traces", "metrics"),
    [
        ({_otlp.ENV_ENDPOINT: "localhost:4318"}, "http://localhost:4318/v1/traces", "http://localhost:4318/v1/metrics"),
        ({_otlp.ENV_ENDPOINT: "c:4318/otlp/"}, "http://c:4318/otlp/v1/traces", "http://c:4318/otlp/v1/metrics"),
        (
            {_otlp.ENV_ENDPOINT: "http://ok:4318", _otlp.ENV_TRACES_ENDPOINT: "c:4318/v1/traces"},
            "http://c:4318/v1/traces",
            "http://ok:4318/v1/metrics",
        ),
    ],
)
def test_an_endpoint_without_a_scheme_is_used_with_http(
    monkeypatch: pytest.MonkeyPatch, environ: dict[str, str], traces: str, metrics: str
) -> None:
    for name, value in environ.items():  # where the exporters themselves read them
        monkeypatch.setenv(name, value)
    problems: list[str] = []
    export = _otlp.providers(problems=problems)
    try:
        processors = export.tracer_provider._active_span_processor._span_processors
        exporters = [p.span_exporter for p in processors] + [r._exporter for r in export.metric_readers]
        assert export.deferred is not None
        export.deferred.make()
        assert [e.exporter._endpoint for e in exporters] == [traces, metrics]
        assert problems and all("has no scheme: using http://" in p for p in problems)
    finally:
        export.close(timeout_s=5)


@pytest.mark.parametrize(
    ("variable", "raw", "check"),
    [
        (
            _otlp.ENV_TRACES_EXPORTER,
            "prometheus",
            lambda e: len(e.tracer_provider._active_span_processor._span_processors) == 1,
        ),
        (_otlp.ENV_PROTOCOL, "thrift", lambda e: e.endpoint == "http://localhost:4318"),
        (_otlp.ENV_METRIC_EXPORT_INTERVAL, "soon", lambda e: e.metric_readers[0]._export_interval_millis == 15_000),
        (_otlp.ENV_METRIC_EXPORT_INTERVAL, "0", lambda e: e.metric_readers[0]._export_interval_millis == 15_000),
        (_otlp.ENV_SHUTDOWN_TIMEOUT, "-1", lambda e: e.shutdown_timeout_s == 2.0),
        (_otlp.ENV_TIMEOUT, "never", lambda e: e.metric_readers[0]._export_timeout_millis == 3000),
    ],
)
def test_a_bad_export_variable_falls_back_to_its_default(variable: str, raw: str, check: Any) -> None:
    problems: list[str] = []
    export = _otlp.providers({variable: raw}, problems=problems)
    try:
        assert len(set(problems)) == 1 and problems[0].startswith(f"{variable}={raw!r}") and "; using " in problems[0]
        assert check(export)
    finally:
        export.close(timeout_s=5)


@pytest.fixture
def refusing_listener() -> Iterator[tuple[int, list[socket.socket]]]:
    """A loopback port that records every connection made to it (there must be none)."""
    hole = _BlackHole(accept=True)
    try:
        yield hole.port, hole.accepted
    finally:
        hole.close()


def test_opentelemetry_instrument_with_console_exporters(
    tmp_path: Path, refusing_listener: tuple[int, list[socket.socket]]
) -> None:
    port, connections = refusing_listener
    script = tmp_path / "app.py"
    script.write_text(textwrap.dedent(APP).replace("import firsttoken\nfirsttoken.instrument()\n", ""))
    env = _clean_env(
        OTEL_TRACES_EXPORTER="console",
        OTEL_METRICS_EXPORTER="console",
        OTEL_LOGS_EXPORTER="none",
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}",
    )
    launcher = Path(sys.executable).with_name("opentelemetry-instrument")
    done = subprocess.run([str(launcher), sys.executable, str(script)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert '"name": "chat gpt-4o-mini"' in done.stdout, done.stdout[-2000:]
    assert '"gen_ai.client.operation.duration"' in done.stdout, done.stdout[-2000:]
    assert "Connection refused" not in done.stderr, done.stderr
    assert connections == [], "no OTLP connection is attempted when the exporters are console"


# -- the resource and the metric interval ---------------------------------------------------------


def _reader_intervals(export: _otlp.Export) -> list[float]:
    return [reader._export_interval_millis for reader in export.metric_readers]  # the SDK's reader keeps it


def test_service_instance_id_is_added_when_the_app_sets_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    one = _otlp.providers({}, traces=["console"], metrics_=["console"])
    two = _otlp.providers({}, traces=["console"], metrics_=[])
    ids = [e.tracer_provider.resource.attributes["service.instance.id"] for e in (one, two)]
    assert uuid.UUID(str(ids[0])) and ids[0] == ids[1], "one id per process, on traces and metrics alike"
    assert one.meter_provider._sdk_config.resource.attributes["service.instance.id"] == ids[0]
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.instance.id=pod-7")
    kept = _otlp.providers({}, traces=["console"], metrics_=["console"])
    assert kept.tracer_provider.resource.attributes["service.instance.id"] == "pod-7"
    assert kept.meter_provider._sdk_config.resource.attributes["service.instance.id"] == "pod-7"
    for export in (one, two, kept):
        assert export.close(timeout_s=5)


def test_metric_export_interval_defaults_to_15s() -> None:
    default = _otlp.providers({}, traces=[], metrics_=["console"])
    assert _reader_intervals(default) == [15_000]
    chosen = _otlp.providers({_otlp.ENV_METRIC_EXPORT_INTERVAL: "5000"}, traces=[], metrics_=["console"])
    assert _reader_intervals(chosen) == [5_000]
    with pytest.raises(ConfigError, match="OTEL_METRIC_EXPORT_INTERVAL='soon'"):
        _otlp.providers({_otlp.ENV_METRIC_EXPORT_INTERVAL: "soon"}, traces=[], metrics_=[])
    with pytest.raises(ConfigError, match="FIRSTTOKEN_SHUTDOWN_TIMEOUT='-1'"):
        _otlp.providers({_otlp.ENV_SHUTDOWN_TIMEOUT: "-1"}, traces=[], metrics_=[])
    for export in (default, chosen):
        assert export.close(timeout_s=5)


# -- one line when the collector does not answer --------------------------------------------------


def _record(logger: str, msg: str, level: int = logging.ERROR, exc: BaseException | None = None) -> logging.LogRecord:
    exc_info = (type(exc), exc, None) if exc is not None else None
    return logging.LogRecord(logger, level, __file__, 1, msg, (), exc_info)


def test_unreachable_messages_become_one_line(caplog: pytest.LogCaptureFixture) -> None:
    quiet = _otlp.UnreachableFilter("http://collector:4318")
    noisy = [
        _record(
            "opentelemetry.exporter.otlp.proto.http.trace_exporter",
            "Transient error HTTPConnectionPool(host='collector', port=4318): Max retries exceeded with url: "
            "/v1/traces (Caused by NewConnectionError(... [Errno 111] Connection refused)) encountered while "
            "exporting spans batch, retrying in 1.07s.",
            logging.WARNING,
        ),
        _record(
            "opentelemetry.exporter.otlp.proto.http.metric_exporter",
            "Failed to export metrics batch due to timeout, max retries or shutdown.",
        ),
        _record(
            "opentelemetry.exporter.otlp.proto.grpc.exporter",
            "Transient error StatusCode.UNAVAILABLE encountered while exporting traces to collector:4317, retrying.",
            logging.WARNING,
        ),
        _record("opentelemetry.sdk.trace.export", "Exception while exporting Span.", exc=ConnectionRefusedError(111)),
    ]
    kept = [
        _record(
            "opentelemetry.exporter.otlp.proto.http.trace_exporter",
            "Failed to export spans batch code: 400, reason: Bad Request",
        ),
        _record("opentelemetry.sdk.trace.export", "Exception while exporting Span.", exc=ValueError("bad attribute")),
        _record("opentelemetry.exporter.otlp.proto.http.trace_exporter", "Failed to encode span batch: boom"),
    ]
    with caplog.at_level(logging.WARNING, logger="firsttoken"):
        assert [quiet.filter(r) for r in noisy * 3] == [False] * 12
        assert all(quiet.filter(r) for r in kept), "other exporter errors are not hidden"
    said = [r.getMessage() for r in caplog.records if r.name == "firsttoken"]
    assert said == [
        "firsttoken: the OTLP collector at http://collector:4318 does not answer (connection refused); spans are "
        "held for another try (up to 8192, 30 s each) until it does (said once per outage)"
    ]
    assert quiet.held_back == 11
    # After an export succeeds, the next outage is said again.
    quiet.rearm()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="firsttoken"):
        quiet.filter(noisy[2])
    assert ["(unavailable)" in r.getMessage() for r in caplog.records] == [True]


def test_tally_counts_what_reached_the_collector_and_what_did_not(monkeypatch: pytest.MonkeyPatch) -> None:
    with _Sink() as sink:
        monkeypatch.setenv(_otlp.ENV_ENDPOINT, f"http://127.0.0.1:{sink.port}")
        export = _otlp.providers()
        tracer = export.tracer_provider.get_tracer("t")
        for _ in range(3):
            tracer.start_span("s").end()
        export.meter_provider.get_meter("t").create_counter("c").add(1)
        assert export.close(timeout_s=10)
    assert export.tally.exported == {"spans": 3, "metrics": 1}
    assert export.tally.failed == {"spans": 0, "metrics": 0}

    monkeypatch.setenv(_otlp.ENV_ENDPOINT, f"http://127.0.0.1:{_refused_port()}")
    monkeypatch.setenv(_otlp.ENV_TIMEOUT, "0.5")
    export = _otlp.providers()
    assert export.endpoint == os.environ[_otlp.ENV_ENDPOINT]
    export.tracer_provider.get_tracer("t").start_span("s").end()
    export.close(timeout_s=10)
    assert export.tally.exported["spans"] == 0 and export.tally.failed["spans"] == 1


def test_a_closed_set_up_leaves_no_filter_behind(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """instrument() / uninstrument() cycles: each set-up's one-line filter goes with its exporters, so
    the next set-up's outage is said with its own endpoint, not swallowed by a stale filter."""

    def filters() -> list[logging.Filter]:
        return [
            f
            for name in _otlp._EXPORTER_LOGGERS
            for f in logging.getLogger(name).filters
            if isinstance(f, _otlp.UnreachableFilter)
        ]

    before = len(filters())
    monkeypatch.setenv(_otlp.ENV_ENDPOINT, "http://first-endpoint.invalid:4318")
    first = _otlp.providers()  # nothing is sent to it: nothing is recorded
    assert len(filters()) == before + len(_otlp._EXPORTER_LOGGERS)
    assert first.close(timeout_s=10)
    assert len(filters()) == before

    refused = f"http://127.0.0.1:{_refused_port()}"
    monkeypatch.setenv(_otlp.ENV_ENDPOINT, refused)
    monkeypatch.setenv(_otlp.ENV_TIMEOUT, "0.5")
    second = _otlp.providers()
    with caplog.at_level(logging.WARNING, logger="firsttoken"):
        second.tracer_provider.get_tracer("t").start_span("s").end()
        second.close(timeout_s=10)
    said = [r.getMessage() for r in caplog.records if r.name == "firsttoken"]
    assert said and all("first-endpoint" not in m for m in said), said
    assert any(refused in m for m in said), said


# -- credentials in an endpoint are never printed --------------------------------------------------

SECRETS = ("s3cret", "k3y", "t0ken", "51g")


@pytest.fixture
def fresh_filters() -> None:
    """A set-up whose close did not finish keeps its one-line filter on the exporters' loggers (its
    exporters may still log): another test's, in its own outage, would say its line instead of this one's."""
    for name in _otlp._EXPORTER_LOGGERS:
        logger = logging.getLogger(name)
        for old in [f for f in logger.filters if isinstance(f, _otlp.UnreachableFilter)]:
            logger.removeFilter(old)


def _said_no_secret(messages: list[str]) -> None:
    assert not [m for m in messages if any(secret in m for secret in SECRETS)], messages


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://alice:s3cret@collector:4318", "https://REDACTED@collector:4318"),
        (
            "http://c:4318/v1/traces?api_key=k3y&region=eu&X-Amz-Signature=51g#top",
            "http://c:4318/v1/traces?api_key=REDACTED&region=eu&X-Amz-Signature=REDACTED#top",
        ),
        ("alice:s3cret@c:4318/?Token=t0ken&sig=51g&sign=on", "REDACTED@c:4318/?Token=REDACTED&sig=REDACTED&sign=on"),
        ("http://c:4318/?accessKey=k3y&pass=s3cret&flag", "http://c:4318/?accessKey=REDACTED&pass=REDACTED&flag"),
        ("http://collector:4318/v1/traces", "http://collector:4318/v1/traces"),
    ],
)
def test_redact_hides_userinfo_and_credential_like_query_values(url: str, shown: str) -> None:
    from firsttoken.config import redact

    assert redact(url) == shown


@pytest.mark.usefixtures("fresh_filters")
def test_no_message_names_the_credentials_in_an_endpoint(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Every message that names the collector: the one line of an outage, and what the exit says was dropped."""
    url = f"http://alice:s3cret@127.0.0.1:{_refused_port()}/v1/traces?api_key=k3y&region=eu"
    monkeypatch.setenv(_otlp.ENV_TRACES_ENDPOINT, url)
    monkeypatch.setenv(_otlp.ENV_TIMEOUT, "0.5")
    with caplog.at_level(logging.WARNING):
        export = _otlp.providers(traces=["otlp"], metrics_=[])
        export.tracer_provider.get_tracer("t").start_span("s").end()
        export.flush(5)  # refused: held (the SDK's flush says True all the same)
        export.close(5)
    said = [r.getMessage() for r in caplog.records]
    shown = f"http://REDACTED@127.0.0.1:{url.rpartition(':')[2].partition('/')[0]}/v1/traces?api_key=REDACTED&region=eu"
    assert [m for m in said if shown in m and "does not answer" in m], said
    assert [m for m in said if shown in m and "did not take 1 spans before the exit" in m], said
    _said_no_secret(said)


def test_the_endpoint_checks_name_no_credentials() -> None:
    environ = {_otlp.ENV_TRACES_ENDPOINT: "alice:s3cret@collector:4318/v1/traces?token=t0ken"}
    with pytest.raises(ConfigError) as caught:
        _otlp.check_endpoint(_otlp.ENV_TRACES_ENDPOINT, "http/protobuf", environ)
    problems: list[str] = []
    used = _otlp.check_endpoint(_otlp.ENV_TRACES_ENDPOINT, "http/protobuf", environ, problems)
    assert used == "http://alice:s3cret@collector:4318/v1/traces?token=t0ken"  # the exporter still gets it whole
    assert "REDACTED@collector:4318/v1/traces?token=REDACTED" in str(caught.value) and len(problems) == 1
    _said_no_secret([str(caught.value), *problems])


def test_the_demo_names_no_credentials_of_its_server_or_collector(monkeypatch: pytest.MonkeyPatch) -> None:
    from firsttoken.cli import demo

    messages = []
    for bad in (
        "ftp://alice:s3cret@h/?key=k3y",
        "http://alice:s3cret@/?key=k3y",
        "http://alice:s3cret@h:port/?key=k3y",
    ):
        with pytest.raises(demo.UsageError) as caught:
            demo.check_server_url(bad)
        messages.append(str(caught.value))
    monkeypatch.setenv(_otlp.ENV_ENDPOINT, f"http://alice:s3cret@127.0.0.1:{_refused_port()}/?token=t0ken")
    monkeypatch.setenv(_otlp.ENV_TIMEOUT, "0.5")
    telemetry = demo._Telemetry()
    messages.append(telemetry.close(2))
    assert all("REDACTED" in m for m in messages), messages
    _said_no_secret(messages)


# -- an outage past the hold window ----------------------------------------------------------------


@pytest.mark.usefixtures("fresh_filters")
def test_an_outage_past_the_hold_window_says_once_how_many_spans_were_dropped(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Spans the collector did not take within the window are dropped: said with their count, once, when
    it answers again (before, the only line said they were held); and at the exit when it never does."""
    from .otlp_sink import OtlpSink

    monkeypatch.setattr(_otlp, "RETRY_WINDOW_S", 0.3)  # the hold window, shortened for the test (30 s)
    port = _refused_port()
    monkeypatch.setenv(_otlp.ENV_ENDPOINT, f"http://127.0.0.1:{port}")
    monkeypatch.setenv(_otlp.ENV_TIMEOUT, "0.5")
    with caplog.at_level(logging.WARNING, logger="firsttoken"):
        export = _otlp.providers(traces=["otlp"], metrics_=[])
        tracer = export.tracer_provider.get_tracer("t")
        for _ in range(3):
            tracer.start_span("s").end()
            export.flush(5)  # refused: held
        time.sleep(0.4)  # the three are past the window now
        with OtlpSink(port) as sink:
            tracer.start_span("s").end()
            assert export.flush(5)
            assert export.close(5)
        assert sink.posts == 1
    said = [r.getMessage() for r in caplog.records if r.name == "firsttoken"]
    assert [m for m in said if "dropped" in m] == [
        f"firsttoken: the OTLP collector at http://127.0.0.1:{port} answers again; "
        "3 spans it did not take within 0.3 s were dropped"
    ], said
    assert len(said) == 2, said  # the outage's one line, and this one

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="firsttoken"):
        export = _otlp.providers(traces=["otlp"], metrics_=[])
        export.tracer_provider.get_tracer("t").start_span("s").end()
        export.flush(5)  # refused: held (the SDK's flush says True all the same)
        export.close(5)
    said = [r.getMessage() for r in caplog.records if r.name == "firsttoken"]
    assert [m for m in said if "dropped" in m] == [
        f"firsttoken: the OTLP collector at http://127.0.0.1:{port} did not take 1 spans before the exit; "
        "they were dropped"
    ], said


# -- the OTLP exporters, made on the app's own thread at its first recorded call ------------------------

# Records the thread of every import of the exporter stack (``IMPORTS``); ``SLOW`` makes that module's
# import wait after announcing it (``STARTED``), holding its module lock, as a real import on a busy machine.
IMPORT_WATCH = """
import sys, threading, time
HEAVY = ("opentelemetry.exporter.otlp", "opentelemetry.proto", "google.protobuf", "requests", "urllib3", "grpc")
IMPORTS = []
STARTED = threading.Event()
SLOW = None
EVERY = []
class Watch:
    def find_spec(self, name, path=None, target=None):
        EVERY.append((name, threading.current_thread().name))
        if name.startswith(HEAVY):
            IMPORTS.append((name, threading.current_thread().name))
        if name == SLOW and not STARTED.is_set():
            STARTED.set()
            time.sleep(1.0)
        return None
sys.meta_path.insert(0, Watch())
"""


def _span_names(sink: _Sink) -> list[str]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    names = []
    for path, body in sink.bodies:
        if path == "/v1/traces":
            request = ExportTraceServiceRequest.FromString(body)
            names += [s.name for r in request.resource_spans for ss in r.scope_spans for s in ss.spans]
    return sorted(names)


def test_the_exporters_are_made_on_the_apps_thread_at_its_first_recorded_call(tmp_path: Path) -> None:
    """``instrument()`` imports no exporter, protobuf, requests or grpc (most of its start-up cost, #41). What
    is recorded on a thread of firsttoken's or the SDK's imports nothing there either: it waits, and goes out
    once the app's own thread records (the import happens there) or flushes. Nothing is lost, and no thread
    but the app's imports anything, the exports' own first-use imports included."""
    script = tmp_path / "app.py"
    script.write_text(
        IMPORT_WATCH
        + textwrap.dedent("""
        import firsttoken
        from opentelemetry import metrics, trace
        firsttoken.instrument()
        assert not IMPORTS, IMPORTS
        EVERY.clear()
        def background():
            trace.get_tracer("t").start_span("background").end()
            metrics.get_meter("t").create_counter("background.calls").add(1)
            firsttoken._otlp.own_export().tracer_provider.force_flush()
        worker = threading.Thread(target=background, name="firsttoken-abandoned")
        worker.start()
        worker.join()
        assert not IMPORTS, IMPORTS
        trace.get_tracer("t").start_span("app").end()
        assert IMPORTS and {thread for _, thread in IMPORTS} == {"MainThread"}, IMPORTS
        print(firsttoken.flush(timeout=30))
        trace.get_tracer("t").start_span("after").end()
        firsttoken.flush(timeout=30)
        elsewhere = [(name, thread) for name, thread in EVERY if thread != "MainThread"]
        assert not elsewhere, elsewhere  # nothing at all, the exports' own lazy imports included
        """)
    )
    with _Sink() as sink:
        env = _clean_env(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{sink.port}")
        done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["True"], done.stdout + done.stderr
        assert _span_names(sink) == ["after", "app", "background"]
        assert "/v1/metrics" in sink.paths


def test_a_fork_while_the_app_thread_makes_the_exporters_leaves_the_child_working(tmp_path: Path) -> None:
    """A fork while another thread of the app is inside the exporters' import waits until it is done: a child
    forked in the middle would inherit that import's module lock, held by a thread it does not have, and hang
    at its own first export (iloveitaly/celery-healthcheck#45)."""
    script = tmp_path / "app.py"
    script.write_text(
        IMPORT_WATCH
        + textwrap.dedent("""
        import os
        import firsttoken
        from opentelemetry import trace
        SLOW = "opentelemetry.exporter.otlp.proto.http.trace_exporter"
        firsttoken.instrument()
        first = threading.Thread(target=lambda: trace.get_tracer("t").start_span("first").end(), name="request-1")
        first.start()
        assert STARTED.wait(60)
        pid = os.fork()
        if pid == 0:
            import signal
            signal.alarm(90)  # a child that hangs (the failure this test looks for) does not outlive the test
            trace.get_tracer("t").start_span("child").end()
            os._exit(0 if firsttoken.flush(timeout=30) else 3)
        first.join()
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), firsttoken.flush(timeout=30))
        """)
    )
    with _Sink() as sink:
        env = _clean_env(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{sink.port}", OTEL_METRICS_EXPORTER="none")
        done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["0", "True"], done.stdout + done.stderr
        assert _span_names(sink) == ["child", "first"]


def test_metrics_off_imports_no_metrics_sdk(tmp_path: Path) -> None:
    """``OTEL_METRICS_EXPORTER=none``: firsttoken's set-up gives the API's no-op meter provider."""
    code = (
        "import sys, firsttoken; firsttoken.instrument(); "
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry.sdk.metrics')))"
    )
    env = _clean_env(OTEL_METRICS_EXPORTER="none", OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]"], done.stdout + done.stderr


@pytest.mark.parametrize("temporality", [None, "delta", "LowMemory", " cumulative ", "sometimes"])
@pytest.mark.parametrize("aggregation", [None, "base2_exponential_bucket_histogram", "buckets"])
def test_the_metric_reader_gets_what_the_exporter_prefers(
    monkeypatch: pytest.MonkeyPatch, temporality: str | None, aggregation: str | None
) -> None:
    """The metric reader is made before its exporter, with the exporter's preferences read from the same
    variables as the exporter reads them; a bad value is said at ``instrument()``, as it was."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    environ = {
        name: value
        for name, value in ((_otlp.ENV_TEMPORALITY, temporality), (_otlp.ENV_HISTOGRAM_AGGREGATION, aggregation))
        if value is not None
    }
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    problems: list[str] = []
    export = _otlp.providers(environ, traces=[], problems=problems)
    try:
        reader = export.metric_readers[0]
        real = OTLPMetricExporter()
        made_with_it = InMemoryMetricReader(real._preferred_temporality, real._preferred_aggregation)
        assert reader._instrument_class_temporality == made_with_it._instrument_class_temporality
        assert {k: type(v) for k, v in reader._instrument_class_aggregation.items()} == {
            k: type(v) for k, v in made_with_it._instrument_class_aggregation.items()
        }
        assert sorted(p.split("=")[0] for p in problems) == sorted(
            name for name, value in environ.items() if value in ("sometimes", "buckets")
        )
    finally:
        export.close(timeout_s=5)


def test_an_exporter_that_cannot_be_made_is_said_once_and_counted(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Made at the first recorded span, an exporter whose construction fails (here: a credential provider that
    is not installed) says so once and counts what it could not send; nothing is raised into the app."""
    monkeypatch.setenv("OTEL_PYTHON_EXPORTER_OTLP_HTTP_CREDENTIAL_PROVIDER", "no-such-provider")
    export = _otlp.providers(traces=["otlp"], metrics_=[])
    tracer = export.tracer_provider.get_tracer("t")
    with caplog.at_level(logging.WARNING, logger="firsttoken"):
        tracer.start_span("one").end()
        export.flush(timeout_s=10)
        tracer.start_span("two").end()
        export.close(timeout_s=10)
    said = [r.getMessage() for r in caplog.records if "could not be made" in r.getMessage()]
    assert len(said) == 1 and "no-such-provider" in said[0], said
    assert export.tally.failed["spans"] == 2 and export.tally.exported["spans"] == 0


def test_what_waits_for_the_exporter_is_bounded_counted_and_sent_first_once_it_is_made() -> None:
    """Exports handed over before the exporter is made wait (the oldest beyond ``PENDING_BATCHES`` dropped and
    counted as failed); once made, they go before the next export, oldest first."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExportResult
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    tracer = TracerProvider().get_tracer("t")
    spans = []
    for i in range(_otlp.PENDING_BATCHES + 3):
        span = tracer.start_span(f"s{i}")
        span.end()
        spans.append(span)
    tally = _otlp.ExportTally()
    memory = InMemorySpanExporter()
    lazy = _otlp.Lazy(lambda: memory, "spans", tally, SpanExportResult.SUCCESS, SpanExportResult.FAILURE)
    for span in spans[:-1]:
        assert lazy.export([span]) is SpanExportResult.SUCCESS
    assert lazy.pending() == _otlp.PENDING_BATCHES and tally.failed["spans"] == 2
    lazy.make()
    assert lazy.export([spans[-1]]) is SpanExportResult.SUCCESS
    assert [s.name for s in memory.get_finished_spans()] == [s.name for s in spans[2:]]
    assert lazy.pending() == 0
