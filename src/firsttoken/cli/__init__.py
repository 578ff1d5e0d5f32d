"""The ``firsttoken`` command: ``demo`` (the default job), ``bench``, ``sim``, ``view`` and ``stack``."""

from __future__ import annotations

import sys

from .._version import __version__
from .usage import OneLineParser

COMMANDS = ("demo", "bench", "sim", "view", "stack")


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    parser = OneLineParser(
        prog="firsttoken",
        description="LLM latency observability with OpenTelemetry.",
        epilog="Run 'firsttoken COMMAND --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"firsttoken {__version__}")
    parser.add_argument(
        "command",
        choices=COMMANDS,
        help="demo: measure a workload on the simulator; bench: measure, compare and race endpoints; "
        "sim: serve the OpenAI/Anthropic-compatible simulator; view: a local OTLP receiver and live page; "
        "stack: regenerate or check the stack files derived from prometheus/slos.yml (targets, SLOs)",
    )
    if not args or args[0] in ("-h", "--help", "--version"):
        parser.parse_args(args)
        return 0
    if args[0].startswith("-"):
        parser.error(f"unknown option {args[0]}: give a command first ({', '.join(COMMANDS)}), then its options")
    ns = parser.parse_args(args[:1])
    if ns.command == "demo":
        from .demo import main as demo_main

        return demo_main(args[1:])
    if ns.command == "bench":
        from .bench import main as bench_main

        return bench_main(args[1:])
    if ns.command == "view":
        from .view import main as view_main

        return view_main(args[1:])
    if ns.command == "stack":
        from .stack import main as stack_main

        return stack_main(args[1:])
    from ..sim.cli import main as sim_main

    return int(sim_main(args[1:]))
