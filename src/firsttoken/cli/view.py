"""``firsttoken view``: a local OTLP/HTTP receiver and a live page of the LLM calls apps send it."""

from __future__ import annotations

import sys

from .report import terminal_width, wrap
from .usage import OneLineParser

STARTUP_WIDTH = 80
"""The start-up lines fit this many columns (or the terminal, when narrower)."""


def _positive(kind: type, what: str, zero: bool = False):  # type: ignore[no-untyped-def]
    said = "a number >= 0" if zero else "a positive number"

    def parse(text: str) -> object:
        try:
            value = kind(text)
        except ValueError:
            raise ValueError(f"{what} must be {said}, not {text!r}") from None
        if value < 0 or (value == 0 and not zero):
            raise ValueError(f"{what} must be {said}, not {text!r}")
        return value

    parse.__name__ = what
    return parse


def main(argv: list[str]) -> int:
    from .. import view

    parser = OneLineParser(
        prog="firsttoken view",
        description="Receive OTLP/HTTP from your instrumented apps and show their LLM latency on a live page.",
    )
    parser.add_argument("--host", default=view.DEFAULT_HOST, help="address to listen on (default: 127.0.0.1)")
    parser.add_argument(
        "--port",
        type=_positive(int, "--port", zero=True),
        default=view.DEFAULT_PORT,
        help="port (default: 4318, OTLP/HTTP's; 0: any free port)",
    )
    parser.add_argument("--db", help=f"SQLite file to keep the calls in (default: {view.default_db()})")
    parser.add_argument(
        "--max-age-hours", type=_positive(float, "--max-age-hours"), default=168.0, help="keep calls this long (168)"
    )
    parser.add_argument(
        "--max-calls", type=_positive(int, "--max-calls"), default=200_000, help="keep at most this many calls"
    )
    parser.add_argument(
        "--max-db-mb",
        type=_positive(float, "--max-db-mb"),
        default=1024.0,
        help="keep the database's pages in use under this size; the oldest calls go first (1024 MB)",
    )
    parser.add_argument(
        "--max-body-mb", type=_positive(float, "--max-body-mb"), default=16.0, help="largest OTLP request (16 MB)"
    )
    args = parser.parse_args(argv)
    if args.port > 65535:
        parser.error(f"--port must be at most 65535, not {args.port}")
    if not view.is_loopback(args.host):
        print(
            f"firsttoken view: warning: listening on {args.host}: anyone who can reach it can send spans and read "
            "the page (which shows what your spans carry); the default is 127.0.0.1",
            file=sys.stderr,
        )
    try:
        server = view.make_server(
            host=args.host,
            port=args.port,
            db=args.db,
            max_age_s=args.max_age_hours * 3600,
            max_calls=args.max_calls,
            max_bytes=int(args.max_db_mb * 1024 * 1024),
            max_body=int(args.max_body_mb * 1024 * 1024),
        )
    except OSError as exc:
        print(f"firsttoken view: error: cannot listen on {args.host}:{args.port}: {exc.strerror}", file=sys.stderr)
        return 1
    except Exception as exc:  # a database that cannot be opened, say
        print(f"firsttoken view: error: {exc}", file=sys.stderr)
        return 1
    width = min(terminal_width(), STARTUP_WIDTH)
    said = [
        f"firsttoken view: receiving OTLP/HTTP on {server.url} (an app with firsttoken's default set-up sends "
        f"here; else set OTEL_EXPORTER_OTLP_ENDPOINT={server.url})",
        f"firsttoken view: the page is at {server.url}/ ; calls are kept in {server.store.path}; Ctrl-C stops",
    ]
    print("\n".join(line for text in said for line in wrap(text, width, subsequent="  ")), flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        print("firsttoken view: stopped", file=sys.stderr)
    finally:
        server.server_close()
        server.store.close()
    return 0
