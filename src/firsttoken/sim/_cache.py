"""Prompt caching: which prefix of a prompt the server has already prefilled recently."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["CacheConfig", "CacheResult", "PromptCache"]


@dataclass(frozen=True)
class CacheConfig:
    """How the simulated prompt cache behaves (defaults follow OpenAI's automatic caching).

    A prompt becomes cacheable once it has ``min_tokens`` tokens; OpenAI caches it at
    ``min_tokens + k * block_tokens`` boundaries, Anthropic at its ``cache_control`` breakpoints.
    An entry lives ``ttl_s`` seconds after it was last used. Entries are per model.
    """

    min_tokens: int = 1024
    block_tokens: int = 128
    ttl_s: float = 300.0
    enabled: bool = True

    def __post_init__(self) -> None:
        for name in ("min_tokens", "block_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"CacheConfig.{name} must be a positive integer, got {value!r}")
        if isinstance(self.ttl_s, bool) or not isinstance(self.ttl_s, (int, float)) or not self.ttl_s > 0:
            raise ValueError(f"CacheConfig.ttl_s must be a positive number of seconds, got {self.ttl_s!r}")


@dataclass(frozen=True)
class CacheResult:
    """``read`` tokens came from the cache; ``written`` tokens were newly cached (Anthropic reports them)."""

    read: int = 0
    written: int = 0


class PromptCache:
    """Hashes of prompt prefixes with expiry. Thread-safe: handlers run on one loop, tests peek from others."""

    def __init__(self, config: CacheConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self._clock = clock
        self._entries: dict[bytes, float] = {}
        self._lock = threading.Lock()

    def _prefix_hashes(self, model: str, tokens: Sequence[str], lengths: Sequence[int]) -> dict[int, bytes]:
        hasher = hashlib.blake2b(model.encode(), digest_size=16)
        out: dict[int, bytes] = {}
        done = 0
        for length in sorted(set(lengths)):
            for token in tokens[done:length]:
                hasher.update(token.encode())
                hasher.update(b"\x01")
            done = length
            out[length] = hasher.copy().digest()
        return out

    def _lookup_and_store(self, model: str, tokens: Sequence[str], lengths: Sequence[int]) -> int:
        """The longest cached length among ``lengths``; then (re)store them all."""
        if not lengths:
            return 0
        hashes = self._prefix_hashes(model, tokens, lengths)
        now = self._clock()
        expiry = now + self.config.ttl_s
        with self._lock:
            hit = max((n for n, h in hashes.items() if self._entries.get(h, 0.0) > now), default=0)
            for h in hashes.values():
                self._entries[h] = expiry
            if len(self._entries) > 100_000:
                self._entries = {h: t for h, t in self._entries.items() if t > now}
        return hit

    def automatic(self, model: str, tokens: Sequence[str]) -> CacheResult:
        """OpenAI: every prompt is cached at block boundaries; the longest cached prefix is read."""
        c = self.config
        if not c.enabled or len(tokens) < c.min_tokens:
            return CacheResult()
        lengths = range(c.min_tokens, len(tokens) + 1, c.block_tokens)
        return CacheResult(read=self._lookup_and_store(model, tokens, lengths))

    def breakpoints(self, model: str, tokens: Sequence[str], breakpoints: Sequence[int]) -> CacheResult:
        """Anthropic: only prefixes ending at a ``cache_control`` breakpoint are cached."""
        c = self.config
        lengths = [b for b in breakpoints if b >= c.min_tokens]
        if not c.enabled or not lengths:
            return CacheResult()
        read = self._lookup_and_store(model, tokens, lengths)
        return CacheResult(read=read, written=max(lengths) - read)
