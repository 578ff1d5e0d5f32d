"""Nothing lost when the process stops: real servers and worker pools as processes of their own.

Each app instruments itself with ``firsttoken.instrument()`` and nothing else, so firsttoken sets up
export from ``OTEL_*`` (to a counting OTLP sink here). The batch delay and the metric interval are a
minute, so nothing is exported while the app runs: every span and metric point the sink gets was saved
on the way out. Then the app is stopped the way production stops it (SIGTERM to the server's master
process, a pool's end) and the sink must hold exactly one call span per LLM call, and metric points
whose call and token counts, summed over the worker processes, are the simulator's. The same app is
run uninstrumented (``FIRSTTOKEN_DISABLED``) beside it: the exit status and signal must be the same, and
both exit times are printed.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from firsttoken import semconv as sc
from firsttoken.sim import LatencyModel, Simulator

from .otlp_sink import OtlpSink
from .servers import free_port, wait_ready

OUTPUT_TOKENS = 5
CALLS = 16
BOOT_S = 60.0
"""Generous: a server imports the SDKs and firsttoken in each worker, on a busy 2-core machine."""
EXIT_S = 30.0
"""The servers' own graceful shutdown is a few seconds; firsttoken's flush adds at most 2 s to it."""

CALL = """
import os
import openai

_client = None
_aclient = None


def call() -> str:
    global _client
    if _client is None:
        _client = openai.OpenAI(base_url=os.environ["SIM_URL"], api_key="sk-deploy", max_retries=0)
    text = []
    for chunk in _client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], stream=True,
        stream_options={"include_usage": True},
    ):
        if chunk.choices and chunk.choices[0].delta.content:
            text.append(chunk.choices[0].delta.content)
    return "".join(text)


async def acall() -> str:
    global _aclient
    if _aclient is None:
        _aclient = openai.AsyncOpenAI(base_url=os.environ["SIM_URL"], api_key="sk-deploy", max_retries=0)
    text = []
    async for chunk in await _aclient.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], stream=True,
        stream_options={"include_usage": True},
    ):
        if chunk.choices and chunk.choices[0].delta.content:
            text.append(chunk.choices[0].delta.content)
    return "".join(text)
"""

ASGI_APP = """
import firsttoken
firsttoken.instrument()
from llmcall import acall


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    body = b"ok" if scope["path"] == "/ready" else (await acall()).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": body})
"""

WSGI_APP = """
import firsttoken
firsttoken.instrument()
from llmcall import call


def app(environ, start_response):
    body = b"ok" if environ["PATH_INFO"] == "/ready" else call().encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
"""

POOL_APP = """
import sys
import firsttoken
firsttoken.instrument()
from llmcall import call


def work(i):
    return len(call())


if __name__ == "__main__":
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    kind, method, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ctx = multiprocessing.get_context(method)
    if kind == "pool-with":  # the context manager's exit terminates the workers (SIGTERM)
        with ctx.Pool(2) as pool:
            print(sum(pool.map(work, range(calls))))
    elif kind == "pool-join":  # close and join: the workers leave through os._exit
        pool = ctx.Pool(2)
        print(sum(pool.map(work, range(calls))))
        pool.close()
        pool.join()
    else:
        with ProcessPoolExecutor(2, mp_context=ctx) as executor:
            print(sum(executor.map(work, range(calls))))
"""

FORK_AFTER_CALLS_APP = """
import sys
import firsttoken
firsttoken.instrument()
from llmcall import call


def work(i):
    return len(call())


if __name__ == "__main__":
    import multiprocessing

    before, calls = int(sys.argv[1]), int(sys.argv[2])
    for _ in range(before):  # the parent's own calls (a warm-up, a first batch) before it forks its workers
        call()
    with multiprocessing.get_context("fork").Pool(2) as pool:
        print(sum(pool.map(work, range(calls), chunksize=1)))
"""

CELERY_APP = """
import os
import firsttoken
firsttoken.instrument()
from celery import Celery
from llmcall import call

app = Celery("tasks", broker=os.environ["BROKER_URL"], backend=os.environ["BROKER_URL"])


@app.task
def ask():
    return len(call())
"""

CELERY_CLIENT = """
import sys
from tasks import ask

results = [ask.delay() for _ in range(int(sys.argv[1]))]
print(sum(r.get(timeout=60) for r in results))
"""


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    latency = LatencyModel(queue_ms=5, decode_tokens_per_s=500, jitter=0, output_tokens=OUTPUT_TOKENS)
    with Simulator(latency=latency) as simulator:
        yield simulator


def _env(sim: Simulator, sink: OtlpSink | None, app_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FIRSTTOKEN_"))}
    env |= {
        "PYTHONPATH": str(app_dir),
        "SIM_URL": sim.openai_base_url,
        "OTEL_SERVICE_NAME": "deploy-test",
        # Nothing leaves while the app runs: what arrives was saved on the way out.
        "OTEL_BSP_SCHEDULE_DELAY": "60000",
        "OTEL_METRIC_EXPORT_INTERVAL": "60000",
        "OTEL_EXPORTER_OTLP_ENDPOINT": sink.endpoint if sink is not None else "http://127.0.0.1:9",
        **extra,
    }
    if sink is None:
        env["FIRSTTOKEN_DISABLED"] = "true"
    return env


def _write(app_dir: Path, **modules: str) -> None:
    (app_dir / "llmcall.py").write_text(textwrap.dedent(CALL))
    for name, text in modules.items():
        (app_dir / f"{name}.py").write_text(textwrap.dedent(text))


class Outcome:
    def __init__(self, returncode: int, exit_s: float, output: str) -> None:
        self.returncode = returncode
        self.exit_s = exit_s
        self.output = output


def _stop(process: subprocess.Popen[str], started: float | None = None) -> Outcome:
    started = time.monotonic() if started is None else started
    try:
        output, _ = process.communicate(timeout=EXIT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        pytest.fail(f"did not exit within {EXIT_S} s after SIGTERM:\n{output[-3000:]}")
    return Outcome(process.returncode, time.monotonic() - started, output)


def _serve(command: list[str], env: dict[str, str], port: int, app_dir: Path) -> Outcome:
    """Start a server, send it CALLS requests (4 at a time), SIGTERM its master process, wait for the end."""
    process = subprocess.Popen(
        command, cwd=app_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        wait_ready(
            process,  # type: ignore[arg-type]
            f"http://127.0.0.1:{port}/ready",
            name=" ".join(command[1:4]),
            timeout_s=BOOT_S,
            poll_s=0.2,
            logs=lambda: "",
        )

        def get(_: int) -> str:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/call", timeout=30) as response:
                return str(response.read().decode())

        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(get, range(CALLS)))
        assert all(answers), answers
    except BaseException:
        process.kill()
        output, _ = process.communicate()
        print(output[-3000:])
        raise
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    return _stop(process, started)


def _check(sink: OtlpSink, calls: int, outcome: Outcome, bare: Outcome, what: str) -> None:
    print(
        f"\n{what}: {sink.call_spans} call spans of {calls}; calls counted "
        f"{sink.total(sc.M_OPERATION_DURATION):g}, output tokens {sink.total(sc.M_OUTPUT_TOKENS):g}; "
        f"{len(sink.instances)} processes; exit {outcome.returncode} in {outcome.exit_s:.2f} s "
        f"(uninstrumented: exit {bare.returncode} in {bare.exit_s:.2f} s)"
    )
    assert outcome.returncode == bare.returncode, (outcome.output[-3000:], bare.output[-3000:])
    assert sink.call_spans == calls, outcome.output[-3000:]
    assert sink.distinct_call_spans == calls
    assert sink.total(sc.M_OPERATION_DURATION) == calls, sink.last
    assert sink.total(sc.M_OUTPUT_TOKENS) == calls * OUTPUT_TOKENS


def _server_case(
    sim: Simulator,
    tmp_path: Path,
    modules: dict[str, str],
    command: Callable[[int], list[str]],
    what: str,
    **extra: str,
) -> None:
    _write(tmp_path, **modules)
    port = free_port()
    bare = _serve(command(port), _env(sim, None, tmp_path, **extra), port, tmp_path)
    with OtlpSink() as sink:
        port = free_port()
        outcome = _serve(command(port), _env(sim, sink, tmp_path, **extra), port, tmp_path)
        _check(sink, CALLS, outcome, bare, what)


def test_uvicorn(sim: Simulator, tmp_path: Path) -> None:
    pytest.importorskip("uvicorn")
    _server_case(
        sim,
        tmp_path,
        {"app": ASGI_APP},
        lambda port: [sys.executable, "-m", "uvicorn", "app:app", "--port", str(port), "--log-level", "warning"],
        "uvicorn",
    )


def test_uvicorn_under_opentelemetry_instrument(sim: Simulator, tmp_path: Path) -> None:
    """No code change: ``opentelemetry-instrument`` loads firsttoken through its entry point."""
    pytest.importorskip("uvicorn")
    launcher = Path(sys.executable).parent / "opentelemetry-instrument"
    if not launcher.exists():
        pytest.skip("opentelemetry-instrument is not installed beside this Python")
    _server_case(
        sim,
        tmp_path,
        {"app": ASGI_APP.replace("import firsttoken\nfirsttoken.instrument()\n", "")},
        lambda port: [
            str(launcher),
            sys.executable,
            "-m",
            "uvicorn",
            "app:app",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        "opentelemetry-instrument uvicorn",
        # The dev venv also holds genai-openai, genai-anthropic and OpenLLMetry (tests/test_coexist.py):
        # off, as in an app that runs firsttoken alone.
        OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="openai,anthropic",
    )


@pytest.mark.parametrize("preload", [False, True], ids=["", "preload"])
def test_gunicorn_with_uvicorn_workers(sim: Simulator, tmp_path: Path, preload: bool) -> None:
    pytest.importorskip("gunicorn")
    pytest.importorskip("uvicorn")
    _server_case(
        sim,
        tmp_path,
        {"app": ASGI_APP},
        lambda port: [
            sys.executable,
            "-m",
            "gunicorn",
            "-k",
            "uvicorn.workers.UvicornWorker",
            "-w",
            "2",
            "-b",
            f"127.0.0.1:{port}",
            *(["--preload"] if preload else []),
            "app:app",
        ],
        f"gunicorn -k uvicorn.workers.UvicornWorker -w 2{' --preload' if preload else ''}",
    )


@pytest.mark.parametrize("worker", ["sync", "gthread"])
def test_gunicorn_wsgi_workers(sim: Simulator, tmp_path: Path, worker: str) -> None:
    pytest.importorskip("gunicorn")
    _server_case(
        sim,
        tmp_path,
        {"app": WSGI_APP},
        lambda port: [
            sys.executable,
            "-m",
            "gunicorn",
            "-k",
            worker,
            "--threads",
            "2",
            "-w",
            "2",
            "-b",
            f"127.0.0.1:{port}",
            "app:app",
        ],
        f"gunicorn -k {worker} -w 2",
    )


def test_hypercorn(sim: Simulator, tmp_path: Path) -> None:
    pytest.importorskip("hypercorn")
    _server_case(
        sim,
        tmp_path,
        {"app": ASGI_APP},
        lambda port: [sys.executable, "-m", "hypercorn", "-b", f"127.0.0.1:{port}", "app:app"],
        "hypercorn",
    )


@pytest.mark.parametrize(
    ("kind", "method"),
    [
        ("pool-with", "fork"),
        ("pool-join", "fork"),
        ("pool-with", "spawn"),
        ("executor", "fork"),
        ("executor", "spawn"),
    ],
)
def test_worker_pools(sim: Simulator, tmp_path: Path, kind: str, method: str) -> None:
    _write(tmp_path, poolapp=POOL_APP)
    command = [sys.executable, "poolapp.py", kind, method, str(CALLS)]

    def run(env: dict[str, str]) -> Outcome:
        started = time.monotonic()
        done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        assert int(done.stdout.split()[-1]) > 0
        return Outcome(done.returncode, time.monotonic() - started, done.stderr)

    bare = run(_env(sim, None, tmp_path))
    with OtlpSink() as sink:
        _check(sink, CALLS, run(_env(sim, sink, tmp_path)), bare, f"{kind} ({method})")


@pytest.mark.parametrize("calls", [CALLS, 1], ids=["busy-workers", "an-idle-worker"])
def test_workers_forked_after_the_parent_recorded_calls(sim: Simulator, tmp_path: Path, calls: int) -> None:
    """Each forked worker starts its metrics from zero: the parent's calls are counted once, by the parent.

    The SDK keeps the parent's cumulative sums in a forked child, so before, every worker exported the
    parent's 3 calls again as its own (16 + 3 calls were counted 25 times), and a worker that made no
    call republished a frozen copy of them."""
    before = 3
    _write(tmp_path, forkapp=FORK_AFTER_CALLS_APP)
    command = [sys.executable, "forkapp.py", str(before), str(calls)]

    def run(env: dict[str, str]) -> Outcome:
        started = time.monotonic()
        done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        return Outcome(done.returncode, time.monotonic() - started, done.stderr)

    bare = run(_env(sim, None, tmp_path))
    with OtlpSink() as sink:
        _check(sink, before + calls, run(_env(sim, sink, tmp_path)), bare, f"{before} calls, then a pool's {calls}")


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    server = shutil.which("redis-server")
    if server is None:
        if os.environ.get("CI") == "true":
            pytest.fail("redis-server is missing: scripts/test.sh installs Debian's redis-server")
        pytest.skip("redis-server is not installed (scripts/test.sh installs it)")
    port = free_port()
    process = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        import socket

        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    pytest.fail("redis-server did not start")
                time.sleep(0.1)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        process.wait(10)


def test_celery_prefork_worker(sim: Simulator, tmp_path: Path, redis_url: str) -> None:
    pytest.importorskip("celery")
    _write(tmp_path, tasks=CELERY_APP, celery_client=CELERY_CLIENT)

    def run(env: dict[str, str]) -> Outcome:
        env = env | {"BROKER_URL": redis_url}
        worker = subprocess.Popen(
            [
                *(sys.executable, "-m", "celery", "-A", "tasks", "worker", "--pool", "prefork", "-c", "2"),
                *("--loglevel", "warning", "--without-gossip", "--without-mingle", "--without-heartbeat"),
            ],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            client = subprocess.run(
                [sys.executable, "celery_client.py", str(CALLS)],
                cwd=tmp_path,
                env=env | {"FIRSTTOKEN_DISABLED": "true"},
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert client.returncode == 0, client.stderr[-3000:]
        except BaseException:
            worker.kill()
            print(worker.communicate()[0][-3000:])
            raise
        started = time.monotonic()
        worker.send_signal(signal.SIGTERM)  # warm shutdown
        return _stop(worker, started)

    bare = run(_env(sim, None, tmp_path))
    with OtlpSink() as sink:
        _check(sink, CALLS, run(_env(sim, sink, tmp_path)), bare, "celery prefork -c 2")
