"""``firsttoken demo`` as a user runs it: a subprocess, its output, its exit; and where firsttoken's
warnings point."""

from __future__ import annotations

import gc
import os
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
from firsttoken.providers import _levers
from firsttoken.sim import LatencyModel, Simulator

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


def _refused_endpoint() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_report_shows_progress_the_phase_breakdown_and_the_caveat() -> None:
    done = _demo("--actions", "6", "--no-levers", "--seed", "3")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    sdks = f"the openai SDK {openai.__version__} and the anthropic SDK {anthropic.__version__}"
    assert f"LLM calls through {sdks}, against the built-in simulator, in " in out.splitlines()[0]
    assert "Where the time went" in out
    assert "  median call: " in out and "  slowest call: " in out
    assert "server_wait" in out and "%)" in out
    assert "* fewer than 20 calls: p95 and p99 are about the slowest call" in out
    assert out.rstrip().endswith("Set OTEL_EXPORTER_OTLP_ENDPOINT to also export over OTLP.")
    assert "workload: 0/6 user actions" in done.stderr  # progress before the first action is done
    assert "Warning" not in done.stderr and "warn(" not in done.stderr


def test_levers_show_progress_and_the_warning_as_a_note() -> None:
    done = _demo("--actions", "2", "--seed", "3")
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stderr.splitlines() if line.startswith("lever ")] == [
        "lever 1/4: reuse the SDK client",
        "lever 2/4: keep the prompt prefix stable",
        "lever 3/4: parallelize independent calls",
        "lever 4/4: bound the output (max_tokens)",
    ]
    notes = [line for line in done.stdout.splitlines() if line.startswith("note: firsttoken:")]
    assert len(notes) == 1 and "SDK clients were created, used for one call and dropped" in notes[0]
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
                    titles.append(line)
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


# -- where firsttoken's warnings point -------------------------------------------------------------


def test_configuration_warning_points_at_the_apps_call() -> None:
    with pytest.warns(FirstTokenWarning) as caught:
        assert not firsttoken.instrument(chunk_metrics="yes")
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
