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
    written: list[Path] = []
    for path, text in outputs.items():
        target = root / path
        if args.dashboards_out and path.parent == stack.dashboards.OUT_DIR:
            target = args.dashboards_out / path.name
        if not target.is_file() or target.read_text() != text:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            written.append(target)
    source = root / "prometheus" / "slos.yml"
    if not written:
        print(f"{PROG}: every file derived from {source} was already up to date")
        return 0
    names = ", ".join(str(p.relative_to(root)) if p.is_relative_to(root) else str(p) for p in written)
    print(f"{PROG}: rewrote {names} from {source}{_then(written, root)}")
    return 0


def _then(written: list[Path], root: Path) -> str:
    """What to restart for the files rewritten (docs/stack.md, "Choosing your targets")."""
    steps = []
    if any(p.is_relative_to(root / "prometheus") for p in written):
        steps.append("reload Prometheus")
    if any(p.is_relative_to(root / "collector-config") for p in written):
        steps.append("restart the Collector")
    if any(p.is_relative_to(root / "src") for p in written):
        steps.append("reinstall firsttoken where your apps run (or set FIRSTTOKEN_TARGETS)")
    return f"; then {', '.join(steps)} (docs/stack.md)" if steps else ""
