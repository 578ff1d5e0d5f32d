"""``firsttoken demo`` as a user runs it: a subprocess, its output, its exit; and where firsttoken's
warnings point."""

from __future__ import annotations

import collections
import gc
import os
import re
import signal
import socket
import subprocess
import sys
import time
import warnings
from typing import Any

import anthropic
import openai
import pytest

import firsttoken
from firsttoken import FirstTokenWarning
from firsttoken.cli.demo import WORKLOAD_PROGRESS, _Progress
from firsttoken.cli.report import collect, render
from firsttoken.providers import _levers
from firsttoken.sim import Fault, LatencyModel, Simulator

from .jitter import SchedulerProbe


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FIRSTTOKEN_"))}
    return env | extra


def _demo(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "firsttoken.cli", "demo", *args],
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=600,
    )


FAST = LatencyModel(queue_ms=2, prefill_ms_per_1k_tokens=2, decode_tokens_per_s=4000, jitter=0.1)


def _refused_endpoint() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_report_shows_progress_the_phase_breakdown_and_the_caveat() -> None:
    done = _demo("--actions", "6", "--no-levers", "--seed", "3")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    title = " ".join(out.split("\n\n")[0].split())  # the title wraps at the width
    sdks = f"the openai SDK {openai.__version__} and the anthropic SDK {anthropic.__version__}"
    assert f"LLM calls through {sdks}, against the built-in simulator, in " in title
    assert "Where the time went" in out
    assert "  median call: " in out and "  slowest call: " in out
    assert "server_wait" in out and "%)" in out
    assert "* fewer than 20 successful calls: p95 and p99 are about the slowest call" in " ".join(out.split())
    assert out.rstrip().endswith("Set OTEL_EXPORTER_OTLP_ENDPOINT to also export over OTLP.")
    counts = [line for line in done.stderr.splitlines() if line.startswith("workload: ")]
    assert counts[0] == "workload: 0/6 user actions", done.stderr  # progress before the first action is done
    assert counts[-1] == "workload: 6/6 user actions", done.stderr  # and at the end, not only after the first
    assert "Warning" not in done.stderr and "warn(" not in done.stderr


def test_progress_in_a_log_is_a_line_each_tenth_of_the_way(capsys: pytest.CaptureFixture[str]) -> None:
    """Not a terminal (a CI log): no rewriting in place, and a count now and then up to the end."""
    progress = _Progress()
    assert not progress.tty
    for done in range(41):
        progress.count(WORKLOAD_PROGRESS, done, 40)
    progress.done()
    assert capsys.readouterr().err.splitlines() == [f"workload: {n}/40 user actions" for n in range(0, 41, 4)]


def test_levers_show_progress_and_their_own_warning_as_the_levers_point() -> None:
    done = _demo("--actions", "2", "--seed", "3")
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stderr.splitlines() if line.startswith("lever ")] == [
        "lever 1/4: reuse the SDK client",
        "lever 2/4: keep the prompt prefix stable",
        "lever 3/4: parallelize independent calls",
        "lever 4/4: bound the output (max_tokens)",
    ]
    out = " ".join(done.stdout.split())  # the report wraps its lines
    # The warning reaches the reader whole, introduced as what the lever shows, not as a fault of
    # the user's set-up; and it is not repeated as a bare note.
    assert (
        "note: the 'before' half of 'reuse the SDK client' creates a client per call on purpose, so firsttoken "
        "warned about it, as it would in your app; here the warning is the lever's point, not a problem in your "
        "set-up: firsttoken: " in out
    )
    assert "SDK clients were created, used for one call and dropped" in out
    assert "note: firsttoken:" not in out
    assert "FirstTokenWarning" not in done.stderr + done.stdout


def test_with_the_collector_down_the_demo_says_nothing_was_exported() -> None:
    endpoint = _refused_endpoint()
    done = _demo("--actions", "4", "--no-levers", OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)
    assert done.returncode == 0, done.stderr
    last = done.stdout.rstrip().splitlines()[-1]
    assert last.startswith(f"NOT all exported over OTLP to {endpoint}: 0 of "), last
    assert "Exported over OTLP" not in done.stdout
    about_collector = [line for line in done.stderr.splitlines() if "collector" in line]
    assert len(about_collector) == 1, done.stderr


def test_interval_default_is_in_help() -> None:
    done = _demo("--help")
    assert "(default: 30)" in " ".join(done.stdout.split())


def test_ctrl_c_ends_continuous_within_2s() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "firsttoken.cli", "demo", "--continuous", "--interval", "1"],
        env=_env(OTEL_EXPORTER_OTLP_ENDPOINT=_refused_endpoint()),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A background shell job starts with SIGINT ignored, inherited here: restore the default.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert proc.stdout is not None
        titles = []
        with SchedulerProbe() as probe:
            while len(titles) < 2:  # two windows: the workers are busy, calls are in flight
                line = proc.stdout.readline()
                assert line, proc.stderr.read() if proc.stderr else ""
                if line.startswith("firsttoken demo, the last "):
                    title = line
                    while (more := proc.stdout.readline()).strip():  # the title wraps: read to its blank line
                        title += more
                    titles.append(" ".join(title.split()))
            sent = time.perf_counter()
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
            took = time.perf_counter() - sent
        assert proc.returncode == 0, err
        # 2 s, plus what the scheduler's lateness measured meanwhile says this machine adds.
        assert took <= probe.allow(2.0), (took, probe.worst)
        # The window's own length and counts, and the time since the start apart.
        assert all(" s: " in t and "(running for " in t for t in titles), titles
        assert "NOT all exported over OTLP" in out.splitlines()[-1]
        assert "Traceback" not in err and "already shutdown" not in err, err
    finally:
        proc.kill()
        proc.wait()


# -- bad input: one line, before anything is measured (issue 21, items 4, 5 and 12) --------------


def _one_error_line(done: subprocess.CompletedProcess[str], code: int, starts: str) -> str:
    assert done.returncode == code, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("firsttoken demo: error: ")]
    assert len(errors) == 1 and errors[0].startswith(starts), done.stderr
    assert "Traceback" not in done.stderr
    assert "workload: " not in done.stderr and "user actions" not in done.stdout  # nothing ran
    return errors[0]


@pytest.mark.parametrize("url", ["localhost:8080", "http://", "http://127.0.0.1:port/v1"])
def test_a_server_url_that_cannot_work_is_refused_up_front(url: str) -> None:
    done = _demo("--server", url, "--actions", "2", "--no-levers", "--html", "")
    _one_error_line(done, 2, f"firsttoken demo: error: --server {url!r} ")
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1


def test_an_unreachable_server_is_one_line_and_a_failure_before_measuring() -> None:
    url = _refused_endpoint()
    done = _demo("--server", url, "--server-anthropic", "--actions", "4", "--no-levers", "--html", "")
    line = _one_error_line(done, 1, "firsttoken demo: error: the warm-up call (")
    assert f"to {url} failed: APIConnectionError: " in line and line.endswith("; nothing was measured")
    assert "as injected" not in done.stderr


def test_calls_that_fail_against_a_server_exit_1_are_counted_and_not_timed() -> None:
    with Simulator(latency=FAST) as server:
        # The warm-up's five requests pass (a stall of 0 s changes nothing); every later one gets a 500.
        server.inject(Fault.stall(after_chunks=0, seconds=0), times=5)
        server.inject(Fault.server_error(status=500), times=None)
        args = ("--server", server.url, "--server-anthropic", "--actions", "3", "--concurrency", "3")
        done = _demo(*args, "--no-levers", "--html", "")
        url = server.url
    assert done.returncode == 1, done.stdout + done.stderr
    assert "as injected" not in done.stderr + done.stdout
    said = " ".join(done.stderr.split())
    assert (
        f"firsttoken demo: error: 3 of 3 user actions failed against {url} (nothing is injected with --server): "
        in said
    )
    rows = [line.split() for line in done.stdout.splitlines() if line.startswith(("openai ", "anthropic "))]
    assert rows and all(row[2] == row[3] for row in rows), rows  # calls == failed
    latency = [line.split() for line in done.stdout.splitlines() if line.startswith("default")]
    assert latency and all(set(row[1:]) == {"-"} for row in latency), latency  # no failed call is timed
    assert "(0 successful calls" in done.stdout or "Where the time went" not in done.stdout


def test_a_server_without_the_responses_api_is_measured_without_it() -> None:
    with Simulator(latency=FAST) as server:
        server.inject(Fault.server_error(status=501), times=None, path="/responses")  # Not Implemented
        args = ("--server", server.url, "--actions", "6", "--concurrency", "2")
        done = _demo(*args, "--no-levers", "--html", "")
        served = server.requests
    assert done.returncode == 0, done.stdout + done.stderr
    assert [s.path for s in served if s.path.endswith("/responses")] == ["/v1/responses"]  # the warm-up's
    text = " ".join(done.stdout.split())
    assert "The server has no Responses API (the warm-up call (streamed responses) to " in text
    assert "InternalServerError" in text and ": the workload leaves it out." in text
    assert "failed" not in done.stderr


@pytest.mark.parametrize("where", ["no such folder", "a folder"])
def test_an_html_path_that_cannot_be_written_is_refused_before_measuring(tmp_path: Any, where: str) -> None:
    path = tmp_path / "missing" / "demo.html" if where == "no such folder" else tmp_path
    done = _demo("--html", str(path), "--actions", "2", "--no-levers")
    _one_error_line(done, 2, f"firsttoken demo: error: --html {str(path)!r}")
    assert not (tmp_path / "missing").exists()


@pytest.mark.parametrize("flags", [("--model", "qwen"), ("--server-anthropic",)])
def test_server_flags_without_server_are_a_usage_error(flags: tuple[str, ...]) -> None:
    done = _demo(*flags, "--actions", "2", "--no-levers", "--html", "")
    line = _one_error_line(done, 2, f"firsttoken demo: error: {flags[0]} ")
    assert "--server URL" in line


def test_an_unknown_flag_is_one_line_without_the_usage_block() -> None:
    done = _demo("--bogus")
    assert done.returncode == 2
    assert done.stderr == (
        "firsttoken demo: error: unrecognized arguments: --bogus (firsttoken demo --help lists the options)\n"
    )


# -- what the report shows (issue 21, items 9, 10 and 11) -------------------------------------------

_PHASE = re.compile(r"[a-z_]+ \d+(\.\d)? ms \(\d+%\)")


def test_the_report_fits_100_columns_never_breaks_a_value_and_shows_the_failed_call() -> None:
    done = _demo("--actions", "24", "--seed", "3", COLUMNS="100")  # the 20th action has the failing call
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    wide = [line for line in lines if len(line) > 100 and not line.startswith("HTML report")]
    assert not wide, "\n".join(wide)
    start = next(n for n, line in enumerate(lines) if line.startswith("Where the time went"))
    phases = [line for line in lines[start:] if line.startswith("    ")]
    phases = phases[: next((n for n, line in enumerate(phases) if not line[4:5].isalpha()), len(phases))]
    assert len(phases) >= 2
    for line in phases:  # each line a run of whole "phase 1.2 ms (3%)" values
        parts = line.strip().rstrip(",").split(", ")
        assert all(_PHASE.fullmatch(part) for part in parts), line
    assert "(23 successful calls; 1 failed left out)" in done.stdout or "failed left out)" in done.stdout
    text = " ".join(done.stdout.split())
    assert "Failed calls: the simulator answers one call of the 20th user action" in text
    failed = [int(line.split()[3]) for line in lines if line.startswith(("openai ", "anthropic "))]
    assert sum(failed) == 1, failed
    assert "a user action failed" not in done.stderr  # it failed as planned: nothing to warn about
    # Narrow: the levers one block each.
    assert "  difference: " in done.stdout


def test_the_report_fits_80_columns() -> None:
    """The README says the demo fits the terminal: at 80 columns its model table was 87 wide."""
    done = _demo("--actions", "12", "--seed", "3", "--no-levers", COLUMNS="80")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    wide = [line for line in lines if len(line) > 80 and not line.startswith("HTML report")]
    assert not wide, "\n".join(wide)
    text = " ".join(done.stdout.split())
    for header in ("calls", "failed", "streamed", "input tok", "output tok", "cache hit"):
        assert header in text  # split in two tables, not cut
    assert any(line.startswith("anthropic  claude-sonnet-4-6") for line in lines), done.stdout


def test_the_latency_table_says_ttft_is_of_the_streamed_calls_only(telemetry: Any, sim: Simulator) -> None:
    """A model called both ways: its TTFT p50 is of the streamed call, its end-to-end p50 of both."""
    client = openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0)
    messages: Any = [{"role": "user", "content": "hi"}]
    assert client.chat.completions.create(model="m", messages=messages).choices
    assert list(client.chat.completions.create(model="m", messages=messages, stream=True))
    stats = collect(telemetry.spans())
    ((_, model),) = stats.items()
    assert (model.calls, model.streamed, len(model.ttft), len(model.e2e)) == (2, 1, 1, 2)
    text = render(stats, title="t", width=80)
    assert max(len(line) for line in text.splitlines()) <= 80, text
    assert "TTFT and TPOT are of the streamed calls only, end-to-end of all of them" in " ".join(text.split())


def test_a_wide_terminal_gets_the_levers_as_one_table() -> None:
    done = _demo("--actions", "2", "--seed", "3", COLUMNS="240")
    assert done.returncode == 0, done.stderr
    assert re.search(r"^lever +before +after +measured difference$", done.stdout, re.MULTILINE)
    assert max(len(line) for line in done.stdout.splitlines()) <= 240


def test_the_warm_up_calls_each_api_kind_once_before_anything_is_measured() -> None:
    """The first streamed responses call of a process costs the openai SDK about 0.4 s more than later
    ones (with or without firsttoken): the demo makes that call, and one of every other kind, first,
    uninstrumented, so that no measured call (its "slowest call", above all) is a cold start."""
    with Simulator(latency=FAST) as server:
        args = ("--server", server.url, "--server-anthropic", "--actions", "3", "--concurrency", "1")
        done = _demo(*args, "--no-levers", "--html", "")
        served = server.requests
    assert done.returncode == 0, done.stderr
    kinds = collections.Counter(s.path.rsplit("/", 1)[-1] for s in served[:5])
    assert kinds == {"completions": 2, "responses": 1, "messages": 2}, kinds
    title = " ".join(done.stdout.split("\n\n")[0].split())
    assert f" {len(served) - 5} LLM calls through " in title  # the warm-up's calls are not in the report
    text = " ".join(done.stdout.split())
    assert "Warm-up: before measuring, each API kind (chat completions, streamed chat completions, " in text


# -- where firsttoken's warnings point -------------------------------------------------------------


def test_configuration_warning_points_at_the_apps_call() -> None:
    from opentelemetry.metrics import NoOpMeterProvider
    from opentelemetry.trace import NoOpTracerProvider

    # Providers given: firsttoken's own OTLP set-up, which uninstrument() leaves to the exit, would export to
    # localhost:4318 when pytest exits and log its retries there.
    providers = {"tracer_provider": NoOpTracerProvider(), "meter_provider": NoOpMeterProvider()}
    try:
        with pytest.warns(FirstTokenWarning) as caught:
            assert firsttoken.instrument(chunk_metrics="yes", **providers)  # that setting's default; the rest works
    finally:
        firsttoken.uninstrument()
    assert caught[0].filename == __file__


def test_per_call_client_warning_points_at_the_apps_call(telemetry: Any) -> None:
    _levers.reset()
    model = LatencyModel(queue_ms=0, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=5000, jitter=0, output_tokens=2)
    with Simulator(latency=model) as sim, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", FirstTokenWarning)
        for _ in range(_levers.PER_CALL_CLIENT_WARNING_AFTER + 2):
            client = openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0)
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
            del client
            gc.collect()  # the client is dropped; a long-running app's collector gets to it eventually
    ours = [w for w in caught if issubclass(w.category, FirstTokenWarning)]
    assert ours, "the per-call client warning"
    assert all(w.filename == __file__ for w in ours), [(w.filename, w.lineno) for w in ours]
