"""``firsttoken stack generate|check``: the stack files derived from prometheus/slos.yml."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from .usage import OneLineParser

PROG = "firsttoken stack"


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(
        prog=PROG,
        description="Regenerate (generate) or check (check) everything a checkout derives from the targets and "
        "SLOs of prometheus/slos.yml: the target, SLO and alert rules, the Collector's sampling policies, the "
        "dashboards and the package's default targets.",
    )
    parser.add_argument("action", choices=("generate", "check"))
    parser.add_argument("--root", type=Path, help="the checkout (default: the one holding the working directory)")
    parser.add_argument(
        "--min-interval",
        help="generate: every dashboard panel's minimum interval, your apps' metric export interval (default 15s)",
    )
    parser.add_argument(
        "--dashboards-out", type=Path, help="generate: write the dashboards to this directory instead (to import)"
    )
    args = parser.parse_args(argv)
    if args.action == "check" and (args.min_interval or args.dashboards_out):
        parser.error("check compares the committed files: no --min-interval or --dashboards-out with it")
    if args.min_interval and not re.fullmatch(r"[1-9][0-9]*(ms|s|m|h)", args.min_interval):
        parser.error(f"--min-interval: expected a duration such as 15s or 1m, got {args.min_interval!r}")
    try:
        import yaml  # noqa: F401  (the generators need it)
    except ImportError:
        print(f"{PROG}: needs PyYAML: pip install 'firsttoken[cli]'", file=sys.stderr)
        return 2
    from .. import stack
    from ..targets import TargetsError

    try:
        root = stack.find_root(args.root)
        if args.action == "check":
            stale = stack.stale(root)
        else:
            outputs = stack.outputs(root, *([args.min_interval] if args.min_interval else []))
    except TargetsError as exc:
        for line in exc.lines:
            print(f"{PROG}: {line}", file=sys.stderr)
        return 1
    except (stack.NotACheckout, ValueError, OSError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    if args.action == "check":
        if stale:
            names = ", ".join(str(p) for p in stale)
            print(
                f"{PROG}: out of date with prometheus/slos.yml: {names} (run firsttoken stack generate)",
                file=sys.stderr,
            )
            return 1
        print(f"{PROG}: every file derived from {root / 'prometheus' / 'slos.yml'} is up to date")
        return 0
    written = []
    for path, text in outputs.items():
        target = root / path
        if args.dashboards_out and path.parent == stack.dashboards.OUT_DIR:
            target = args.dashboards_out / path.name
        if not target.is_file() or target.read_text() != text:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            written.append(str(path))
    source = root / "prometheus" / "slos.yml"
    if not written:
        print(f"{PROG}: every file derived from {source} was already up to date")
        return 0
    print(f"{PROG}: rewrote {', '.join(written)} from {source}; restart Prometheus and the Collector (docs/stack.md)")
    return 0
