"""The ``firsttoken`` command itself, as a user starts it: ``python -m firsttoken`` and bad input."""

from __future__ import annotations

import subprocess
import sys

from firsttoken import __version__


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=120, check=False)


def test_python_dash_m_firsttoken_is_the_command() -> None:
    done = _run("-m", "firsttoken", "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"firsttoken {__version__}\n"
    helped = _run("-m", "firsttoken", "bench", "--help")
    assert helped.returncode == 0 and helped.stdout.startswith("usage: firsttoken bench"), helped.stderr


def test_an_unknown_option_or_command_is_one_useful_line() -> None:
    done = _run("-m", "firsttoken", "--bogus")
    assert done.returncode == 2
    assert done.stderr == (
        "firsttoken: error: unknown option --bogus: give a command first (demo, bench, sim, view, stack), "
        "then its options\n"
    )
    done = _run("-m", "firsttoken", "bogus")
    assert done.returncode == 2
    assert done.stderr.startswith("firsttoken: error: argument command: invalid choice: 'bogus'")
    assert done.stderr.count("\n") == 1, done.stderr
