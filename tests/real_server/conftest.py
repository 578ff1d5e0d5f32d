"""A real inference server for the tests: llama.cpp's ``llama-server`` with SmolLM2-135M-Instruct.

``scripts/llama_server.sh`` builds it (once) into a cache outside the repository. When it is not
built, every test here is skipped with that reason; ``FIRSTTOKEN_REAL_SERVER=required`` turns the
skip into a failure (for a run that built it and must not silently test nothing).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ..servers import free_port, wait_ready

VERSION = "11434.0.0"
CACHE = Path(
    os.environ.get("FIRSTTOKEN_LLAMA_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "firsttoken" / f"llama-server-{VERSION}"
)
SERVER = CACHE / "bin" / "llama-server"
STARTUP_TIMEOUT_S = 180.0
"""Loading a 100 MB model takes about a second; a loaded 2-core machine can take much longer."""


@dataclass
class LlamaServer:
    base_url: str
    model_path: str
    log: Path


def _model() -> Path | None:
    return next(iter(sorted((CACHE / "model").glob("*.gguf"))), None)


def _missing() -> str | None:
    if not SERVER.is_file():
        return f"llama-server is not built ({SERVER} is missing): run scripts/llama_server.sh"
    if _model() is None:
        return f"no GGUF model under {CACHE / 'model'}: run scripts/llama_server.sh"
    return None


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    missing = _missing()
    if missing is not None:
        if os.environ.get("FIRSTTOKEN_REAL_SERVER") == "required":
            pytest.fail(missing)
        pytest.skip(missing)
    model = _model()
    assert model is not None
    port = free_port()
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    # One slot (so consecutive calls share its prompt cache), a small context, one thread: on a busy
    # 2-core machine two threads spin at every barrier while the other is preempted (measured here:
    # 2 s per generated token with two threads, 30 ms with one).
    args = [str(SERVER), "-m", str(model), "--host", "127.0.0.1", "--port", str(port)]
    args += ["-c", "2048", "-np", "1", "-t", "1", "-tb", "1"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_ready(
                proc,
                f"{base}/health",
                name="llama-server",
                timeout_s=STARTUP_TIMEOUT_S,
                poll_s=0.2,
                request_timeout_s=5,
                logs=lambda: log.read_text(errors="replace")[-3000:],
            )
        except RuntimeError as exc:
            pytest.fail(str(exc))
        yield LlamaServer(base_url=base, model_path=str(model), log=log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
