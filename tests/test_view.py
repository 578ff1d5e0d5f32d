"""``firsttoken view``: a real app, instrumented with firsttoken's own OTLP set-up, sends its calls to the
viewer over HTTP; the viewer stores them in SQLite and shows them on a page read in headless Chromium."""

from __future__ import annotations

import contextlib
import gzip
import json
import math
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from firsttoken import view
from firsttoken.charts import phase_colour

from .test_bench_html import run_browser

APP = """
import json, sys
import anthropic, openai
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import firsttoken
from firsttoken.sim import LatencyModel, Simulator

firsttoken.instrument()  # firsttoken's own set-up: OTLP/HTTP to OTEL_EXPORTER_OTLP_ENDPOINT
seen = InMemorySpanExporter()
trace.get_tracer_provider().add_span_processor(SimpleSpanProcessor(seen))
slow = LatencyModel(queue_ms=250, decode_tokens_per_s=400, jitter=0, output_tokens=20)
with Simulator(seed=3, models={"slow-model": slow}) as sim:
    oa = openai.OpenAI(base_url=sim.openai_base_url, api_key="k")
    an = anthropic.Anthropic(base_url=sim.anthropic_base_url, api_key="k")
    with firsttoken.action("answer_question", traffic_class="interactive"):
        with firsttoken.phase("retrieve"):  # an app phase inside the action: not an action of its own
            for _ in oa.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], stream=True,
                stream_options={"include_usage": True},
            ):
                pass
        for _ in oa.chat.completions.create(
            model="slow-model", messages=[{"role": "user", "content": "hi"}], stream=True,
        ):
            pass
    an.messages.create(model="claude-sonnet-4-6", max_tokens=40, messages=[{"role": "user", "content": "hi"}])
    for _ in range(3):
        oa.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    try:  # a 503 on both attempts: never among the slowest calls
        oa.with_options(max_retries=1).chat.completions.create(
            model="gpt-4.1", messages=[{"role": "user", "content": "hi"}],
            extra_headers={"x-firsttoken-sim-fault": "overloaded"},
        )
    except openai.InternalServerError:
        pass
calls = [
    {"span_id": format(s.context.span_id, "016x"), "trace_id": format(s.context.trace_id, "032x"),
     "model": s.attributes.get("gen_ai.request.model"), "ttft": s.attributes.get("firsttoken.time_to_first_token"),
     "e2e": (s.end_time - s.start_time) / 1e9}
    for s in seen.get_finished_spans() if "gen_ai.operation.name" in (s.attributes or {})
]
json.dump(calls, sys.stdout)
"""


class Viewer:
    def __init__(self, db: str) -> None:
        self.server = view.make_server(port=0, db=db)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        self.url = self.server.url

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=30) as r:
            return json.load(r)

    def post(self, body: bytes, content_type: str, path: str = "/v1/traces", **headers: str) -> tuple[int, bytes]:
        request = urllib.request.Request(
            self.url + path, data=body, method="POST", headers={"Content-Type": content_type, **headers}
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.server.store.close()


@pytest.fixture
def viewer(tmp_path: Path) -> Iterator[Viewer]:
    v = Viewer(str(tmp_path / "view.sqlite3"))
    try:
        yield v
    finally:
        v.close()


def run_app(url: str) -> list[dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FIRSTTOKEN_"))}
    env.update(OTEL_EXPORTER_OTLP_ENDPOINT=url, OTEL_SERVICE_NAME="view-test-app", FIRSTTOKEN_PHASE_SPANS="always")
    result = subprocess.run([sys.executable, "-c", APP], env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    calls: list[dict[str, Any]] = json.loads(result.stdout)
    return calls


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Viewer, list[dict[str, Any]]]]:
    v = Viewer(str(tmp_path_factory.mktemp("view") / "view.sqlite3"))
    try:
        yield v, run_app(v.url)  # the app flushes its exporter at exit: everything has arrived
    finally:
        v.close()


def test_the_stored_calls_are_the_calls_the_app_saw(fed: tuple[Viewer, list[dict[str, Any]]]) -> None:
    v, seen = fed
    assert len(seen) == 7
    overview = v.get("/api/overview?window=900&group=model&metric=e2e")
    assert overview["stored"] == 7
    for call in seen:
        stored = v.get(f"/api/call?span_id={call['span_id']}")
        assert stored["trace_id"] == call["trace_id"] and stored["model"] == call["model"]
        assert stored["ttft"] == call["ttft"]  # the same float, not a re-measurement
        assert stored["e2e"] == pytest.approx(call["e2e"], abs=1e-6)
        assert stored["service"] == "view-test-app"
    counts = {row["key"]: row["calls"] for row in overview["summary"]}
    assert counts == {"gpt-4o-mini": 1, "slow-model": 1, "claude-sonnet-4-6": 1, "gpt-4o": 3, "gpt-4.1": 1}
    assert [a["key"] for a in overview["actions"]] == ["answer_question"]  # not its app phase "retrieve"
    failed = next(c for c in seen if c["model"] == "gpt-4.1")
    assert [
        (e["span_id"], e["provider"], e["model"], e["error_type"], e["status"], e["message"], e["service"])
        for e in overview["errors"]
    ] == [(failed["span_id"], "openai", "gpt-4.1", "InternalServerError", 503, "Overloaded", "view-test-app")]


def test_a_call_has_its_phases_and_the_action_around_it(fed: tuple[Viewer, list[dict[str, Any]]]) -> None:
    v, seen = fed
    slow = next(c for c in seen if c["model"] == "slow-model")
    call = v.get(f"/api/call?span_id={slow['span_id']}")
    phases = [p["phase"] for p in call["phases"]]
    assert {"server_wait", "wait_first_token", "decode"} <= set(phases)
    assert all(p["colour"] == phase_colour(p["phase"]) for p in call["phases"])
    assert call["action"]["name"] == "answer_question"
    assert sorted(c["model"] for c in call["action"]["calls"]) == ["gpt-4o-mini", "slow-model"]
    assert call["attrs"]["firsttoken.traffic_class"] == "interactive"


def test_the_page_opens_the_slowest_call_and_draws_its_waterfall(fed: tuple[Viewer, list[dict[str, Any]]]) -> None:
    v, _ = fed
    slowest = v.get("/api/overview?window=900&group=model&metric=ttft")["slowest"][0]
    assert slowest["model"] == "slow-model"  # its 250 ms queue makes it the slowest to first token
    result = run_browser("--dump-dom", f"{v.url}/#call={slowest['span_id']}")
    assert result.returncode == 0, result.stderr[-2000:]
    dom = result.stdout
    assert f'data-shown="{slowest["span_id"]}"' in dom  # the call was opened
    assert re.search(r'data-refreshed="\d+"', dom)  # the overview was drawn
    drawn = json.loads(re.search(r'data-phases="([^"]*)"', dom).group(1).replace("&quot;", '"'))  # type: ignore[union-attr]
    assert drawn and all(colour == phase_colour(phase) for phase, colour in drawn)
    waterfall = dom.split('id="waterfall"', 1)[1].split("</svg>", 1)[0]
    assert 'class="main-svg"' in waterfall and "bars" in waterfall  # plotly drew the bars
    summary = dom.split('id="summary"', 1)[1].split("</table>", 1)[0]
    assert "slow-model" in summary and "gpt-4o-mini" in summary  # the overview table has the app's calls
    actions = dom.split('id="actions"', 1)[1].split("</table>", 1)[0]
    assert "answer_question" in actions and "retrieve" not in actions
    assert "view-test-app" in dom.split('id="slowest"', 1)[1].split("</table>", 1)[0]


class Browser:
    """Headless Chromium driven over the DevTools protocol: load a page, run script in it, wait for a state."""

    def __init__(self, profile: Path) -> None:
        from .test_bench_html import FLAGS, browser

        self.process = subprocess.Popen(
            [browser(), *[f for f in FLAGS if not f.startswith("--virtual-time")], "--remote-debugging-port=0",
             f"--user-data-dir={profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        active = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not active.exists() or not active.read_text().strip():
            assert self.process.poll() is None and time.monotonic() < deadline, "chromium did not start"
            time.sleep(0.1)
        port = active.read_text().split()[0]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=30) as r:
            page = next(t for t in json.load(r) if t["type"] == "page")
        from websockets.sync.client import connect

        self._exit = contextlib.ExitStack()
        self.ws = self._exit.enter_context(connect(page["webSocketDebuggerUrl"], max_size=None))
        self.next_id = 0

    def call(self, method: str, **params: Any) -> Any:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv(timeout=60))
            if message.get("id") == self.next_id:
                assert "error" not in message, message
                return message["result"]

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in result, result
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 60) -> Any:
        """The expression's value once it is truthy (an exception meanwhile, as before the page loads, is not)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
            value = None if "exceptionDetails" in result else result["result"].get("value")
            if value:
                return value
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {expression}")

    def close(self) -> None:
        self._exit.close()
        self.process.terminate()
        self.process.wait(timeout=30)


def test_a_click_on_a_slow_call_opens_its_waterfall(fed: tuple[Viewer, list[dict[str, Any]]], tmp_path: Path) -> None:
    """As a person would: the page loads, the slowest calls are listed, a click on the slowest opens it."""
    v, seen = fed
    slow = next(c for c in seen if c["model"] == "slow-model")
    chrome = Browser(tmp_path / "profile")
    try:
        chrome.call("Page.navigate", url=v.url + "/")
        chrome.wait_for("document.body.dataset.refreshed")
        chrome.evaluate(
            "document.getElementById('metric').value = 'ttft'; document.getElementById('metric').onchange()"
        )
        first = f"document.querySelector('#slowest tr.pick')?.dataset.span === '{slow['span_id']}'"
        chrome.wait_for(first)  # the slowest to first token heads the list
        chrome.evaluate("document.querySelector('#slowest tr.pick').click()")
        assert chrome.wait_for("document.body.dataset.shown") == slow["span_id"]
        drawn = json.loads(chrome.wait_for("document.getElementById('waterfall').dataset.phases"))
        assert {"server_wait", "wait_first_token", "decode"} <= {phase for phase, _ in drawn}
        assert all(colour == phase_colour(phase) for phase, colour in drawn)
        bars = chrome.evaluate("document.querySelectorAll('#waterfall .bars .point').length")
        assert bars == len(drawn)  # plotly drew one bar per phase
        assert chrome.evaluate("location.hash") == f"#call={slow['span_id']}"
        action = chrome.evaluate("document.getElementById('action').textContent")
        assert "answer_question" in action and "gpt-4o-mini" in action  # the action and its other call
        # Durations among the attributes are in ms, as the rest of the page.
        cells = chrome.evaluate(
            "Object.fromEntries([...document.querySelectorAll('#attrs tr')].map("
            "(tr) => [tr.cells[0].textContent, tr.cells[1].textContent]))"
        )
        assert re.fullmatch(r"\d+\.\d+ ms", cells["firsttoken.time_to_first_token"]), cells
        assert re.fullmatch(r"\d+\.\d+ ms", cells["firsttoken.phase_duration.decode"]), cells
        assert re.fullmatch(r"\d+", cells["firsttoken.stream.chunk_count"]), cells  # counts stay counts
    finally:
        chrome.close()


def test_a_failed_call_is_listed_and_opens_like_the_slowest(
    fed: tuple[Viewer, list[dict[str, Any]]], tmp_path: Path
) -> None:
    """A failed call never ranks among the slowest calls: the failed calls' list is the way to it. Its two
    attempts draw each phase twice, the legend names each once."""
    v, seen = fed
    failed = next(c for c in seen if c["model"] == "gpt-4.1")
    chrome = Browser(tmp_path / "profile")
    try:
        chrome.call("Page.navigate", url=v.url + "/")
        chrome.wait_for("document.body.dataset.refreshed")
        row = chrome.wait_for("document.querySelector('#errors tr.pick')?.textContent")
        for shown in ("view-test-app", "openai", "gpt-4.1", "InternalServerError", "503"):
            assert shown in row, row
        chrome.evaluate("document.querySelector('#errors tr.pick').click()")
        assert chrome.wait_for("document.body.dataset.shown") == failed["span_id"]
        assert "chat gpt-4.1" in chrome.evaluate("document.getElementById('detail-title').textContent")
        attrs = chrome.evaluate("document.getElementById('attrs').textContent")
        assert "error.typeInternalServerError" in attrs and "http.response.status_code503" in attrs
        assert "firsttoken.attempts2" in attrs
        drawn = json.loads(chrome.wait_for("document.getElementById('waterfall').dataset.phases"))  # its waterfall
        legend = chrome.evaluate(
            "[...document.querySelectorAll('#waterfall .legend .legendtext')].map(t => t.textContent)"
        )
        phases = [phase for phase, _ in drawn]
        assert phases.count("server_wait") == 2, phases  # each attempt drawn...
        assert sorted(legend) == sorted(set(phases)), legend  # ...and each phase once in the legend
    finally:
        chrome.close()


def test_bad_requests_get_their_status_and_reason(viewer: Viewer) -> None:
    status, body = viewer.post(b"\xff\x00garbage", "application/x-protobuf")
    assert status == 400 and b"not an OTLP protobuf message" in body
    status, body = viewer.post(b"{not json", "application/json")
    assert status == 400 and b"not JSON" in body
    status, body = viewer.post(b"{}", "text/plain")
    assert status == 415 and b"application/x-protobuf" in body
    status, body = viewer.post(b"\0" * 100, "application/x-protobuf", **{"Content-Encoding": "br"})
    assert status == 415
    status, body = viewer.post(b"x", "application/x-protobuf", **{"Content-Encoding": "gzip"})
    assert status == 400 and b"not valid gzip" in body
    deep = b'{"resourceSpans": ' + b"[" * 1000 + b"]" * 1000 + b"}"
    status, body = viewer.post(deep, "application/json")
    assert status == 400 and b"nested too deeply" in body, body
    viewer.server.max_body = 1000
    status, body = viewer.post(b"\0" * 5000, "application/x-protobuf")
    assert status == 413
    status, body = viewer.post(gzip.compress(b"\0" * 5000), "application/x-protobuf", **{"Content-Encoding": "gzip"})
    assert status == 413 and b"inflates past" in body  # within the limit on the wire, over it decompressed
    status, _ = viewer.post(gzip.compress(b"\0" * 1000), "application/x-protobuf", **{"Content-Encoding": "gzip"})
    assert status == 400  # exactly at the limit: decoded (and not a valid message)
    with pytest.raises(urllib.error.HTTPError) as caught:
        viewer.get("/api/overview?window=bogus")
    said = json.loads(caught.value.read())["message"]
    assert (
        caught.value.code == 400 and said == "window='bogus': use one of 300, 900, 3600, 21600, 86400, 604800 (seconds)"
    )
    status, _ = viewer.post(b"", "application/x-protobuf", path="/v1/nothing")
    assert status == 404
    # ... and the receiver goes on taking good requests.
    assert viewer.post(b"", "application/x-protobuf")[0] == 200
    assert viewer.post(b"", "application/x-protobuf", path="/v1/metrics")[0] == 200
    assert viewer.get("/healthz")["stored_calls"] == 0


def otlp_json_call(span_id: str, model: str) -> bytes:
    now = time.time_ns()  # within the viewer's age bound
    span = {
        "traceId": "5b8efff798038103d269b633813fc60c",
        "spanId": span_id,
        "name": f"chat {model}",
        "kind": 3,
        "startTimeUnixNano": str(now),
        "endTimeUnixNano": str(now + 500_000_000),
        "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
            {"key": "gen_ai.provider.name", "value": {"stringValue": "openai"}},
            {"key": "gen_ai.request.model", "value": {"stringValue": model}},
            {"key": "firsttoken.time_to_first_token", "value": {"doubleValue": 0.2}},
            {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "12"}},
            {"key": "firsttoken.phase_duration.decode", "value": {"doubleValue": 0.2}},
            {"key": "firsttoken.phase_duration.server_wait", "value": {"doubleValue": 0.3}},
        ],
    }
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "json-app"}}]}
    return json.dumps({"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": [span]}]}]}).encode()


def test_otlp_json_with_hex_ids_and_restart(tmp_path: Path) -> None:
    db = str(tmp_path / "kept.sqlite3")
    first = Viewer(db)
    try:
        status, body = first.post(otlp_json_call("eee19b7ec3c1b174", "gpt-4.1"), "application/json")
        assert (status, body) == (200, b"{}")
        status, body = first.post(otlp_json_call("zz", "gpt-4.1"), "application/json")
        assert status == 400 and b"not hex" in body
    finally:
        first.close()
    second = Viewer(db)  # a restart of the viewer: the call is still there
    try:
        call = second.get("/api/call?span_id=eee19b7ec3c1b174")
        assert (call["service"], call["model"], call["ttft"], call["input_tokens"]) == ("json-app", "gpt-4.1", 0.2, 12)
        assert call["e2e"] == pytest.approx(0.5)
        # No phase spans came (they are sampled): the waterfall is laid from the durations, in wire order.
        assert call["phases_from"] == "durations"
        assert [(p["phase"], p["start_s"], p["duration_s"]) for p in call["phases"]] == [
            ("server_wait", 0.0, 0.3),
            ("decode", 0.3, 0.2),
        ]
    finally:
        second.close()


def test_the_store_keeps_its_bounds(tmp_path: Path) -> None:
    store = view.Store(str(tmp_path / "bounded.sqlite3"), max_calls=10)
    records = view.parse_traces(b"", "application/x-protobuf")
    assert records == []
    now = time.time_ns()
    calls = [
        view.SpanRecord(
            trace_id=f"{i:032x}", span_id=f"{i:016x}", parent_id=None, name="chat m",
            start_ns=now + i, end_ns=now + i + 1, error=False,
            attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"}, service="s", instance="",
        )
        for i in range(25)
    ]  # fmt: skip
    store.add(calls)
    store.trim()
    assert store.count() == 10  # the newest ten
    old = view.Store(str(tmp_path / "old.sqlite3"), max_age_s=60)
    stale = calls[0]
    stale.start_ns = stale.end_ns = now - 3600 * 10**9
    old.add([stale])
    old.trim()
    assert old.count() == 0
    store.close()
    old.close()


def test_the_command_refuses_bad_flags_in_one_line() -> None:
    for args, words in (
        (["--port", "-1"], "--port"),
        (["--max-calls", "x"], "--max-calls"),
        (["--port", "70000"], "65535"),
    ):
        result = subprocess.run(
            [sys.executable, "-m", "firsttoken", "view", *args], capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 2 and words in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


# -- the receiver against hostile input, as the command runs --------------------------------------------


class Command:
    """``firsttoken view --port 0`` in its own process: its address from its first line, its stderr kept."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        self.stderr_path = tmp_path / "view.stderr"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "firsttoken", "view", "--port", "0", "--db", str(tmp_path / "v.sqlite3"), *args],
            stdout=subprocess.PIPE, stderr=self.stderr_path.open("w"), text=True,
        )  # fmt: skip
        assert self.process.stdout is not None
        first = self.process.stdout.readline()
        found = re.search(r"receiving OTLP/HTTP on (http://127\.0\.0\.1:(\d+))", first)
        assert found and found.group(2) != "0", first + self.stderr_path.read_text()
        said = [first]
        while not said[-1].rstrip().endswith("Ctrl-C stops"):
            said.append(self.process.stdout.readline())
            assert said[-1], said
        assert max(len(line.rstrip("\n")) for line in said) <= 80, said  # the start-up fits an 80-column terminal
        self.url = found.group(1)
        self.viewer = Viewer.__new__(Viewer)
        self.viewer.url = self.url

    def peak_mb(self) -> float:
        """The process's peak resident memory (VmHWM), in MB."""
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 1024  # type: ignore[union-attr]

    def stop(self) -> str:
        self.process.send_signal(2)  # Ctrl-C
        self.process.wait(timeout=60)
        return self.stderr_path.read_text()


def calls_request(count: int, start_ns: int, *, phases_only: bool = False, first: int = 0) -> bytes:
    """An OTLP protobuf request of ``count`` call spans all starting at ``start_ns`` (or phase spans with
    no call span)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    request = ExportTraceServiceRequest()
    spans = request.resource_spans.add().scope_spans.add().spans
    for i in range(first, first + count):
        span = spans.add(trace_id=(i + 1).to_bytes(16, "big"), span_id=(i + 1).to_bytes(8, "big"), name="chat m")
        span.start_time_unix_nano, span.end_time_unix_nano = start_ns, start_ns + 1_000_000
        if phases_only:
            span.parent_span_id = (10**9 + i).to_bytes(8, "big")
            span.attributes.append(KeyValue(key="firsttoken.phase", value=AnyValue(string_value="decode")))
        else:
            span.attributes.append(KeyValue(key="gen_ai.operation.name", value=AnyValue(string_value="chat")))
            span.attributes.append(KeyValue(key="gen_ai.request.model", value=AnyValue(string_value="m")))
    return request.SerializeToString()


def test_the_receiver_holds_against_hostile_input(tmp_path: Path) -> None:
    import socket
    import zlib

    command = Command(tmp_path, "--max-calls", "1000")
    v = command.viewer
    try:
        base = command.peak_mb()
        # A gzip body of 256 KB that inflates to 256 MB: stopped at the 16 MB limit, a 413.
        packer = zlib.compressobj(9, zlib.DEFLATED, 31)
        bomb = b"".join(packer.compress(b"\0" * (1 << 20)) for _ in range(256)) + packer.flush()
        assert len(bomb) < 300_000
        status, body = v.post(bomb, "application/x-protobuf", **{"Content-Encoding": "gzip"})
        assert status == 413 and b"inflates past" in body
        assert command.peak_mb() - base < 64, (base, command.peak_mb())  # before: the whole 256 MB and more
        # A 17 MB body, sent whole before the answer is read (as urllib does): the 413, not a reset.
        status, body = v.post(b"\0" * (17 << 20), "application/x-protobuf")
        assert status == 413 and b"over the viewer's limit" in body
        # JSON nested 1000 deep: a 400.
        deep = b'{"resourceSpans": ' + b"[" * 1000 + b"]" * 1000 + b"}"
        status, body = v.post(deep, "application/json")
        assert status == 400 and b"nested too deeply" in body
        # --max-calls holds, ties in start time and all; phase spans without their call are bounded too.
        now = time.time_ns()
        for first in range(0, 18_000, 3000):
            assert v.post(calls_request(3000, now - 10**9, first=first), "application/x-protobuf")[0] == 200
        for first in range(0, 20_000, 5000):
            orphans = calls_request(5000, now - 10**9, phases_only=True, first=first)
            assert v.post(orphans, "application/x-protobuf")[0] == 200
        health = v.get("/healthz")
        assert health["stored_calls"] == 1000 and health["stored_spans"] <= 16 * 1000, health
        # Calls dated a year ahead do not push real ones out: they are refused, and the sender told.
        year = 365 * 86400 * 10**9
        status, body = v.post(calls_request(1000, now + year, first=50_000), "application/x-protobuf")
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

        response = ExportTraceServiceResponse.FromString(body)
        assert status == 200 and response.partial_success.rejected_spans == 1000
        assert "after the viewer's clock" in response.partial_success.error_message
        overview = v.get("/api/overview?window=900&group=model&metric=e2e")
        assert overview["stored"] == 1000 and overview["summary"][0]["calls"] == 1000
        # A client that leaves after 300 bytes of the page: no traceback in the viewer's terminal.
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", int(command.url.rsplit(":", 1)[1]))) as sock:
                sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                sock.recv(300)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")  # close with a reset
        assert v.get("/healthz")["stored_calls"] == 1000  # and it serves on
    finally:
        stderr = command.stop()
    assert "Traceback" not in stderr and "Error" not in stderr, stderr


def test_a_file_that_is_not_a_database_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("not a database, just notes\n" * 100)
    result = subprocess.run(
        [sys.executable, "-m", "firsttoken", "view", "--port", "0", "--db", str(bad)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip() == f"firsttoken view: error: {bad}: file is not a database", result.stderr


# -- the chart over time ---------------------------------------------------------------------------------


def test_the_chart_over_time_is_one_colour_per_model_with_round_ticks_clear_of_the_toolbar(
    fed: tuple[Viewer, list[dict[str, Any]]], tmp_path: Path
) -> None:
    v, _ = fed
    chrome = Browser(tmp_path / "profile")
    try:
        chrome.call("Emulation.setDeviceMetricsOverride", width=1280, height=900, deviceScaleFactor=1, mobile=False)
        chrome.call("Page.navigate", url=v.url + "/")
        chrome.wait_for("document.body.dataset.refreshed")
        traces = chrome.evaluate(
            "document.getElementById('over-time').data.map((t) => [t.name, t.type, "
            "t.type === 'bar' ? t.marker.color : t.line.color])"
        )
        colours: dict[str, set[str]] = {}
        for name, _, colour in traces:
            colours.setdefault(name.rsplit(" ", 2 if name.endswith("TTFT p95") else 1)[0], set()).add(colour)
        assert len(colours) == 5 and all(len(c) == 1 for c in colours.values()), traces  # bars and line alike
        assert len({c for cs in colours.values() for c in cs}) == 5  # and the models apart
        for axis in ("y", "y2"):
            labels = chrome.evaluate(
                f"[...document.querySelectorAll('#over-time .{axis}tick text')].map((t) => t.textContent)"
            )
            values = [float(label.replace(",", "")) for label in labels]
            assert values and values[0] == 0, (axis, labels)
            step = values[1] - values[0]
            mantissa = step / 10 ** math.floor(math.log10(step))
            assert round(mantissa, 6) in (1, 2, 5), (axis, labels)  # 0.5, 1, 2, 5, 10, 20 ... not 0.556
        clear = chrome.evaluate(
            "(() => { const gd = document.getElementById('over-time');"
            " const bar = gd.querySelector('.modebar').getBoundingClientRect();"
            " const top = gd.getBoundingClientRect().top + gd._fullLayout._size.t;"
            " const ticks = [...gd.querySelectorAll('.ytick text, .y2tick text')]"
            ".map((t) => t.getBoundingClientRect());"
            " return ticks.every((t) => t.bottom <= bar.top || t.top >= bar.bottom"
            " || t.right <= bar.left || t.left >= bar.right) && bar.bottom <= top + 1; })()"
        )
        assert clear, "the toolbar covers a tick"
    finally:
        chrome.close()


def test_an_empty_page_says_no_calls_yet_instead_of_an_axis(viewer: Viewer, tmp_path: Path) -> None:
    chrome = Browser(tmp_path / "profile")
    try:
        chrome.call("Page.navigate", url=viewer.url + "/")
        chrome.wait_for("document.body.dataset.refreshed")
        text = chrome.evaluate("document.getElementById('over-time').textContent")
        assert "No calls in this window yet." in text
        ticks = chrome.evaluate("document.querySelectorAll('#over-time .ytick, #over-time .xtick').length")
        assert ticks == 0  # no meaningless -1..6 axis
    finally:
        chrome.close()


def test_the_same_calls_fall_in_the_same_slices_later(tmp_path: Path) -> None:
    store = view.Store(str(tmp_path / "s.sqlite3"))
    now = time.time_ns()
    records = [
        view.SpanRecord(
            trace_id=f"{i:032x}", span_id=f"{i:016x}", parent_id=None, name="chat m",
            start_ns=now - i * 7_300_000_000, end_ns=now - i * 7_300_000_000 + 10**8, error=False,
            attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
                        "firsttoken.time_to_first_token": 0.01 * (i % 13)},
            service="s", instance="",
        )
        for i in range(1, 100)
    ]  # fmt: skip
    store.add(records, now_ns=now)
    window = 900 * 10**9

    def slices(at: int) -> dict[float, tuple[float, float | None]]:
        series = store.series(at - window, at, "model")
        g = series["groups"]["m"]
        # The last slice is still filling: compare the finished ones.
        return {
            t: (round(n * series["bucket_s"], 6), p)
            for t, n, p in list(zip(series["t_ms"], g["calls_per_s"], g["ttft_p95"], strict=True))[:-1]
        }

    before, after = slices(now + 10**9), slices(now + 46 * 10**9)  # 45 s: one and a half slices later
    shared = set(before) & set(after)
    assert len(shared) >= 25, (sorted(before)[:3], sorted(after)[:3])  # the slices did not move
    assert all(before[t] == after[t] for t in shared)
    store.close()
