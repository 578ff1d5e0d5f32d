"""Servers the tests start as processes of their own: a free loopback port, and waiting until ready."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(
    process: subprocess.Popen[bytes],
    url: str,
    *,
    name: str,
    timeout_s: float,
    poll_s: float,
    logs: Callable[[], str],
    request_timeout_s: float = 2.0,
) -> None:
    """Poll ``url`` until it answers 200; RuntimeError (with the logs) if the process exits first or
    ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode}:\n{logs()}")
        try:
            with urllib.request.urlopen(url, timeout=request_timeout_s) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} not ready after {timeout_s:.0f} s:\n{logs()}")
        time.sleep(poll_s)
