"""``firsttoken sim``: run the simulator as a standalone server until Ctrl-C."""

from __future__ import annotations

import argparse
import math
import sys
import threading
from collections.abc import Callable
from typing import NoReturn

from ._cache import CacheConfig
from ._latency import LatencyModel
from ._server import Simulator
from ._timing import PROVIDER_STYLES

__all__ = ["build_parser", "main"]

_DEFAULTS = LatencyModel()


class _OneLineParser(argparse.ArgumentParser):
    """Usage errors in one line, as the other commands give them (cli.usage.OneLineParser; the simulator stands
    alone, so it does not import it): the usage block is what ``--help`` is for."""

    def error(self, message: str) -> NoReturn:
        hint = f" (see {self.prog} --help)" if message.startswith("unrecognized arguments") else ""
        self.exit(2, f"{self.prog}: error: {message}{hint}\n")


def _number(*, minimum: float, strict: bool = False) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not math.isfinite(value) or value < minimum or (strict and value == minimum):
            raise argparse.ArgumentTypeError(f"must be {'>' if strict else '>='} {minimum:g}, got {text}")
        return value

    return parse


def _integer(*, minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < minimum or (maximum is not None and value > maximum):
            bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {text}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(
        prog="firsttoken sim",
        description="Serve the OpenAI and Anthropic APIs with a controllable latency model.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    parser.add_argument(
        "--port", type=_integer(minimum=0, maximum=65535), default=8000, help="0 = any free port (default: %(default)s)"
    )
    latency = parser.add_argument_group("latency model")
    latency.add_argument(
        "--queue-ms", type=_number(minimum=0), default=_DEFAULTS.queue_ms, help="time to headers (default: %(default)s)"
    )
    latency.add_argument(
        "--prefill-ms-per-1k",
        type=_number(minimum=0),
        default=_DEFAULTS.prefill_ms_per_1k_tokens,
        help="prefill time per 1000 uncached input tokens (default: %(default)s)",
    )
    latency.add_argument(
        "--decode-tps",
        type=_number(minimum=0, strict=True),
        default=_DEFAULTS.decode_tokens_per_s,
        help="tokens/s (default: %(default)s)",
    )
    latency.add_argument(
        "--jitter",
        type=_number(minimum=0),
        default=_DEFAULTS.jitter,
        help="lognormal noise shape; 0 = exact (default: %(default)s)",
    )
    latency.add_argument(
        "--output-tokens",
        type=_integer(minimum=0),
        default=_DEFAULTS.output_tokens,
        help="answer length (default: %(default)s)",
    )
    parser.add_argument("--seed", type=int, default=None, help="make jitter, ids and text reproducible")
    parser.add_argument("--replay", nargs="+", metavar="PATH", default=[], help="VCR cassettes (files or dirs)")
    parser.add_argument(
        "--cache-min-tokens",
        type=_integer(minimum=1),
        default=CacheConfig().min_tokens,
        help="shortest cacheable prompt (default: %(default)s)",
    )
    parser.add_argument(
        "--provider-timing",
        choices=PROVIDER_STYLES,
        default="openai",
        help="server timing fields in responses: openai-processing-ms, Groq usage/x_groq or Cerebras time_info",
    )
    return parser


def main(argv: list[str] | None = None, *, stop: threading.Event | None = None) -> int:
    """Parse ``argv``, serve until Ctrl-C (or until ``stop`` is set), return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    model = LatencyModel(
        queue_ms=args.queue_ms,
        prefill_ms_per_1k_tokens=args.prefill_ms_per_1k,
        decode_tokens_per_s=args.decode_tps,
        jitter=args.jitter,
        output_tokens=args.output_tokens,
    )
    try:
        sim = Simulator(
            latency=model,
            seed=args.seed,
            cache=CacheConfig(min_tokens=args.cache_min_tokens),
            replay=args.replay,
            provider_timing=args.provider_timing,
            host=args.host,
            port=args.port,
        )
        sim.start()
    except (OSError, ValueError, RuntimeError) as exc:
        print(f"firsttoken sim: {exc}", file=sys.stderr)
        return 1
    waiter = stop or threading.Event()
    try:
        print(f"firsttoken sim listening on {sim.url}", flush=True)
        print(f"  OpenAI:    OPENAI_BASE_URL={sim.openai_base_url}", flush=True)
        print(f"  Anthropic: ANTHROPIC_BASE_URL={sim.anthropic_base_url}", flush=True)
        print("Press Ctrl-C to stop.", flush=True)
        while not waiter.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        sim.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
