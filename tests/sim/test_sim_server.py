"""The server itself: TLS, concurrency, disconnects, clean shutdown, and the CLI."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time

import anthropic
import httpx2
import openai
import pytest
import trustme

from firsttoken.sim import LatencyModel, Simulator
from firsttoken.sim.cli import build_parser, main

MESSAGES = [{"role": "user", "content": "Go."}]


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _sim_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "firsttoken-sim"]


def _alpn(port: int, ca: trustme.CA, offer: list[str]) -> str | None:
    with socket.create_connection(("127.0.0.1", port)) as raw:
        ctx = ssl.create_default_context()
        ca.configure_trust(ctx)
        ctx.set_alpn_protocols(offer)
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            return tls.selected_alpn_protocol()


def test_tls_with_alpn() -> None:
    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    model = LatencyModel.fixed(queue_ms=0, decode_tokens_per_s=5000, output_tokens=16)
    with Simulator(latency=model, ssl_context=server_ctx) as sim:
        assert sim.url.startswith("https://127.0.0.1:")
        http = openai.DefaultHttpxClient(verify=client_ctx)
        c = openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0, http_client=http)
        assert len(list(c.chat.completions.create(model="m", messages=MESSAGES, stream=True))) == 16 + 2
        c.close()
        assert sim.requests[0].http_version == "1.1"
        assert _alpn(sim.port, ca, ["h2", "http/1.1"]) == "h2"
        assert _alpn(sim.port, ca, ["http/1.1", "h2"]) == "h2"  # the server's preference wins
        assert _alpn(sim.port, ca, ["http/1.1"]) == "http/1.1"
    with Simulator(latency=model, ssl_context=server_ctx, http2=False) as sim:
        assert _alpn(sim.port, ca, ["h2", "http/1.1"]) == "http/1.1"


async def test_fifty_concurrent_async_streams() -> None:
    # The server paces each stream for 420 ms (20 ms queue, 20 tokens at 20 ms): one after another,
    # 60 streams cannot take less than 25 s, however fast the machine. Taking less than half of it
    # proves they ran concurrently, with room for the CPU work of 60 streams on a loaded machine.
    model = LatencyModel.fixed(queue_ms=20, prefill_ms_per_1k_tokens=0, decode_tokens_per_s=50, output_tokens=20)
    sequential = 60 * (0.020 + 20 / 50)
    with Simulator(latency=model, seed=1) as sim:
        oai = openai.AsyncOpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0)
        ant = anthropic.AsyncAnthropic(base_url=sim.anthropic_base_url, api_key="k", max_retries=0)

        async def one_openai() -> int:
            stream = await oai.chat.completions.create(model="m", messages=MESSAGES, stream=True)
            return len([c async for c in stream if c.choices and c.choices[0].delta.content])

        async def one_anthropic() -> int:
            async with ant.messages.stream(model="claude-sim-1", max_tokens=64, messages=MESSAGES) as stream:
                return len([t async for t in stream.text_stream])

        start = time.perf_counter()
        counts = await asyncio.gather(*(one_openai() if i % 2 else one_anthropic() for i in range(60)))
        elapsed = time.perf_counter() - start
        await oai.close()
        await ant.close()
        assert counts == [20] * 60
        assert elapsed < sequential / 2, elapsed
        assert len(sim.requests) == 60


def test_client_disconnect_mid_stream_is_quiet(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    model = LatencyModel.fixed(queue_ms=0, decode_tokens_per_s=100, output_tokens=100)
    with Simulator(latency=model) as sim:
        c = openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0)
        stream = c.chat.completions.create(model="m", messages=MESSAGES, stream=True)
        for n, _ in enumerate(stream):
            if n == 3:
                break
        stream.close()
        deadline = time.monotonic() + 5
        while not sim.requests and time.monotonic() < deadline:
            time.sleep(0.01)
        (served,) = sim.requests
        assert served.disconnected and served.status == 200
        # The server is still fine for the next call.
        assert c.chat.completions.create(model="m", messages=MESSAGES, max_tokens=2).choices
        c.close()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err and "Exception" not in err


def test_close_mid_stream_frees_everything(capfd: pytest.CaptureFixture[str]) -> None:
    gc.collect()
    fds, threads = _fds(), len(_sim_threads())
    sim = Simulator(latency=LatencyModel.fixed(queue_ms=0, decode_tokens_per_s=20, output_tokens=1000)).start()
    port = sim.port
    c = openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0)
    stream = c.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    next(iter(stream))
    started = time.perf_counter()
    sim.close()
    assert time.perf_counter() - started < 2
    sim.close()  # idempotent
    with pytest.raises(openai.APIConnectionError):
        for _ in stream:
            pass
    c.close()
    gc.collect()
    assert len(_sim_threads()) == threads
    assert _fds() <= fds
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err and "Exception" not in err


async def test_usable_inside_an_async_test() -> None:
    with Simulator(latency=LatencyModel.fixed(queue_ms=1, decode_tokens_per_s=5000)) as sim:
        async with httpx2.AsyncClient() as http:
            response = await http.post(sim.openai_base_url + "/embeddings", json={"model": "e", "input": "x"})
        assert response.status_code == 200 and response.headers["x-request-id"]


def test_keep_alive_reuses_one_connection() -> None:
    with Simulator(latency=LatencyModel.fixed(queue_ms=0, decode_tokens_per_s=5000)) as sim, httpx2.Client() as http:
        ports = set()
        for _ in range(3):
            with http.stream(
                "POST",
                sim.openai_base_url + "/chat/completions",
                json={"model": "m", "messages": MESSAGES, "stream": True},
            ) as r:
                r.read()
                ports.add(r.extensions["network_stream"].get_extra_info("client_addr")[1])
        assert len(ports) == 1
        assert http.post(sim.url + "/v1/chat/completions", content=b"{not json").status_code == 400
        assert http.get(sim.url + "/v1/chat/completions").status_code == 405
        assert http.get(sim.openai_base_url + "/models").json()["object"] == "list"


def test_start_errors() -> None:
    with Simulator() as sim:
        with pytest.raises(RuntimeError, match="already started"):
            sim.start()
        with pytest.raises(OSError):
            Simulator(port=sim.port).start()
    with pytest.raises(RuntimeError, match="not started"):
        _ = Simulator().url


# -- CLI -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["--port", "70000"],
        ["--queue-ms", "-5"],
        ["--decode-tps", "0"],
        ["--decode-tps", "-1"],
        ["--jitter", "abc"],
        ["--output-tokens", "1.5"],
    ],
)
def test_cli_rejects_bad_values_in_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Like the other commands: the error names the flag, the usage block is what --help is for."""
    with pytest.raises(SystemExit) as caught:
        build_parser().parse_args(argv)
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"firsttoken sim: error: argument {argv[0]}: ") and err.count("\n") == 1, err


def test_cli_main_serves_until_stopped(capsys: pytest.CaptureFixture[str]) -> None:
    stop = threading.Event()
    codes: list[int] = []
    thread = threading.Thread(
        target=lambda: codes.append(main(["--port", "0", "--queue-ms", "1", "--jitter", "0"], stop=stop))
    )
    thread.start()
    deadline = time.monotonic() + 5
    while "OPENAI_BASE_URL=" not in (out := capsys.readouterr().out) and time.monotonic() < deadline:
        time.sleep(0.01)
    base = out.split("OPENAI_BASE_URL=")[1].split()[0]
    c = openai.OpenAI(base_url=base, api_key="k", max_retries=0)
    assert c.chat.completions.create(model="m", messages=MESSAGES, max_tokens=2).choices
    c.close()
    stop.set()
    thread.join(5)
    assert codes == [0]


def test_cli_ctrl_c_in_a_subprocess() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "firsttoken.sim.cli", "--port", "0", "--seed", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A shell starts a background job with SIGINT ignored, and a child inherits that: Python then
        # installs no Ctrl-C handler. A terminal's Ctrl-C is what this test stands for, so restore it.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("firsttoken sim listening on http://127.0.0.1:")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0
        assert proc.stderr is not None and proc.stderr.read() == ""
    finally:
        proc.kill()
        proc.wait()
