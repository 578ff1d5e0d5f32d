"""Servers the tests start as processes of their own: a free loopback port, and waiting until ready."""

from __future__ import annotations

import random
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path


def _ephemeral_range() -> tuple[int, int]:
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
        low, high = (int(x) for x in text.split())
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default
    return low, high


_rng = random.Random()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, below the kernel's ephemeral range.

    The port is handed to another process, which binds it a moment later. A port the kernel chose
    (``bind(0)``) is in its ephemeral range, where every outgoing connection on the machine also takes
    its local port, so in that moment a download or a test's client could take it ("address already in
    use", seen once with a build running beside the suite). Below the range only listeners compete."""
    low, _ = _ephemeral_range()
    if low > 20000:
        for _ in range(50):
            port = _rng.randrange(20000, low)
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
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
