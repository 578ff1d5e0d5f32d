"""The latency model: how long each phase of a simulated LLM call takes, and when each byte is due."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from numbers import Real

__all__ = ["LatencyModel", "Schedule"]


def _check_number(name: str, value: object, *, minimum: float = 0.0, strict: bool = False) -> None:
    # bool is an int subclass; LatencyModel(jitter=True) is a bug, not a value.
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ValueError(f"LatencyModel.{name} must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"LatencyModel.{name} must be finite, got {value!r}")
    if number < minimum or (strict and number == minimum):
        relation = ">" if strict else ">="
        raise ValueError(f"LatencyModel.{name} must be {relation} {minimum:g}, got {value!r}")


def _check_int(name: str, value: object, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"LatencyModel.{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"LatencyModel.{name} must be >= {minimum}, got {value!r}")


@dataclass(frozen=True)
class LatencyModel:
    """How slow the simulated model is.

    A call's timeline, measured from the moment the server has read the whole request (``t0``):

    - ``queue``: ``queue_ms`` - waiting for a replica. Response headers are sent at ``t0 + queue``
      (streams only; real providers send stream headers before generation starts).
    - ``prefill``: ``prefill_ms_per_1k_tokens`` x *uncached* input tokens / 1000. Prompt-cache hits
      are not prefilled, which is the whole point of prompt caching.
    - ``decode``: one token every ``1 / decode_tokens_per_s`` seconds. Token ``k`` (1-based; hidden
      reasoning tokens come first) is due at ``t0 + queue + prefill + k / decode_tokens_per_s``, so the
      first token needs one decode step after prefill. An SSE chunk carrying several tokens
      (``chunk_tokens``) is sent when its last token is due.

    ``jitter`` multiplies every component (the queue, the prefill, each token interval) by an
    independent lognormal factor with median 1 and shape ``jitter``; with probability
    ``tail_probability`` a component is additionally ``tail_multiplier`` times slower. That gives a
    realistic p99 >> p50. ``jitter=0`` turns all randomness off (tail included): delays are exact,
    which is what tests need.

    ``output_tokens`` is the completion length when the request sets no limit; a request's
    ``max_tokens`` (or ``max_completion_tokens`` / ``max_output_tokens``) caps it, and the finish
    reason then says so. ``reasoning_tokens`` is how many hidden tokens reasoning models (``o1``,
    ``o3-mini``, ...; Anthropic with ``thinking`` enabled) spend before the answer.
    """

    queue_ms: float = 100.0
    prefill_ms_per_1k_tokens: float = 100.0
    decode_tokens_per_s: float = 50.0
    jitter: float = 0.1
    tail_probability: float = 0.01
    tail_multiplier: float = 5.0
    output_tokens: int = 64
    chunk_tokens: int = 1
    reasoning_tokens: int = 32

    def __post_init__(self) -> None:
        _check_number("queue_ms", self.queue_ms)
        _check_number("prefill_ms_per_1k_tokens", self.prefill_ms_per_1k_tokens)
        _check_number("decode_tokens_per_s", self.decode_tokens_per_s, strict=True)
        _check_number("jitter", self.jitter)
        _check_number("tail_probability", self.tail_probability)
        if self.tail_probability > 1:
            raise ValueError(f"LatencyModel.tail_probability must be <= 1, got {self.tail_probability!r}")
        _check_number("tail_multiplier", self.tail_multiplier, minimum=1.0)
        _check_int("output_tokens", self.output_tokens, minimum=0)
        _check_int("chunk_tokens", self.chunk_tokens, minimum=1)
        _check_int("reasoning_tokens", self.reasoning_tokens, minimum=0)

    @classmethod
    def fixed(
        cls,
        *,
        queue_ms: float = 100.0,
        prefill_ms_per_1k_tokens: float = 100.0,
        decode_tokens_per_s: float = 50.0,
        output_tokens: int = 64,
        chunk_tokens: int = 1,
        reasoning_tokens: int = 32,
    ) -> LatencyModel:
        """The same defaults without any randomness (``jitter=0``), for tests that assert on timing."""
        return cls(
            queue_ms=queue_ms,
            prefill_ms_per_1k_tokens=prefill_ms_per_1k_tokens,
            decode_tokens_per_s=decode_tokens_per_s,
            jitter=0.0,
            output_tokens=output_tokens,
            chunk_tokens=chunk_tokens,
            reasoning_tokens=reasoning_tokens,
        )

    def noise(self, rng: random.Random) -> float:
        """One multiplicative factor for one component (exactly 1.0 when jitter is off)."""
        if self.jitter == 0:
            return 1.0
        factor = rng.lognormvariate(0.0, self.jitter)
        if rng.random() < self.tail_probability:
            factor *= self.tail_multiplier
        return factor


@dataclass
class Schedule:
    """Absolute deadlines (event-loop time) for one call, drawn once from the model.

    Absolute deadlines, not accumulated sleeps: a late wake-up for one token does not delay every
    later token.
    """

    model: LatencyModel
    rng: random.Random
    t0: float
    uncached_tokens: int
    headers_at: float = field(init=False)
    prefill_done_at: float = field(init=False)
    _last_token_at: float = field(init=False)

    def __post_init__(self) -> None:
        m = self.model
        self.headers_at = self.t0 + m.queue_ms / 1000 * m.noise(self.rng)
        prefill = m.prefill_ms_per_1k_tokens * self.uncached_tokens / 1_000_000
        self.prefill_done_at = self.headers_at + prefill * m.noise(self.rng)
        self._last_token_at = self.prefill_done_at

    def next_token(self) -> float:
        """When the next token is due (and advance to it)."""
        self._last_token_at += self.model.noise(self.rng) / self.model.decode_tokens_per_s
        return self._last_token_at

    def skip(self, tokens: int) -> float:
        """Advance past ``tokens`` tokens that are generated but never sent (hidden reasoning)."""
        for _ in range(tokens):
            self.next_token()
        return self._last_token_at

    @property
    def now_due(self) -> float:
        """When the last token generated so far was due (the end, once everything is generated)."""
        return self._last_token_at
