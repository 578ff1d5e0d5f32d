"""Signals behind the latency levers an app can pull: cache-friendly prefixes, context growth,
client reuse. Each keeps bounded state, so a misbehaving app cannot grow memory or cardinality."""

from __future__ import annotations

import copy
import hashlib
import json
import threading
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from functools import partial
from typing import Any

from .. import semconv as sc
from ..config import warn

MAX_PREFIXES = 64
"""Distinct prefix hashes kept as a metric dimension; later ones are reported as ``_OTHER``."""
MAX_CONVERSATIONS = 4096
"""Conversations whose turn count is remembered (least recently used are forgotten)."""
PER_CALL_CLIENT_WARNING_AFTER = 5
"""Warn once this many SDK clients were dropped after a single call."""

RECENT_PREFIXES = 8
"""Prefixes seen again whose label is remembered, so that a repeat costs a comparison, not a hash."""

_lock = threading.Lock()
_prefixes: set[str] = set()
_recent: list[tuple[Any, str]] = []
"""(deep copy of a prefix, its label), most recent first; replaced, never changed in place."""
_hashed_once: OrderedDict[str, None] = OrderedDict()
"""Digests hashed once and not yet remembered: a prefix is remembered when it comes back."""
_conversations: OrderedDict[str, int] = OrderedDict()
_clients: dict[int, list[Any]] = {}
"""id(connection pool) -> [calls, weak reference]; an entry leaves when its pool is collected."""
_dropped_after_one_call = 0
_warned_clients = False


def prefix_hash(parts: tuple[Any, ...]) -> str:
    """12 hex characters of BLAKE2b over the canonical JSON of the prefix; never the text itself.

    Hashing a real prefix (a system prompt and tool definitions, often 10-50 KB) takes 100 µs or
    more, and most apps send the same few prefixes on every call. So a prefix seen a second time
    is kept (a deep copy, with its label) among the last :data:`RECENT_PREFIXES`, and a repeat is
    recognised by comparing with them, a few microseconds. A copy is only made on the second
    sighting, so prefixes that differ on every call cost no more than the hash. "The same" is
    Python's ``==``: a prefix that differs from a kept one only by ``1`` for ``1.0`` or ``True``
    gets the kept one's label.
    """
    global _recent
    for snapshot, label in _recent:
        try:
            if snapshot == parts:
                return label
        except Exception:  # an odd object whose comparison raises: hash it instead
            break
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    digest = hashlib.blake2b(text.encode(), digest_size=6).hexdigest()
    with _lock:
        if digest in _prefixes:
            label = digest
        elif len(_prefixes) < MAX_PREFIXES:
            _prefixes.add(digest)
            label = digest
        else:
            label = sc.PREFIX_OTHER
        again = digest in _hashed_once
        if again:
            del _hashed_once[digest]
        else:
            _hashed_once[digest] = None
            if len(_hashed_once) > 4 * RECENT_PREFIXES:
                _hashed_once.popitem(last=False)
    if again:
        try:
            snapshot = copy.deepcopy(parts)
        except Exception:  # the app's own objects that cannot be copied: not kept, still labelled
            return label
        with _lock:
            _recent = [(snapshot, label), *_recent[: RECENT_PREFIXES - 1]]
    return label


_INSTRUCTION_ROLES = ("system", "developer")


def chat_prefix(messages: Any, tools: Any) -> tuple[Any, ...]:
    """The prefix of a chat request whose instructions are its leading messages: the contents of the
    ``system`` (or ``developer``) messages before the first other one, and the tools; () with
    neither. OpenAI Chat Completions' rule, shared by the APIs that speak it (Mistral, Groq, ...)
    and by Cohere v2 Chat, whose system prompt is a leading ``system`` message too."""
    leading: list[Any] = []
    if isinstance(messages, list):
        for message in messages:
            if not isinstance(message, Mapping) or message.get("role") not in _INSTRUCTION_ROLES:
                break
            leading.append(message.get("content"))
    return () if not leading and tools is None else (leading, tools)


def conversation_turn(conversation_id: str) -> int:
    with _lock:
        turn = _conversations.pop(conversation_id, 0) + 1
        _conversations[conversation_id] = turn
        if len(_conversations) > MAX_CONVERSATIONS:
            _conversations.popitem(last=False)
    return turn


def _dropped(key: int, entry: list[Any], _ref: Any) -> None:
    # Runs when the client is collected, maybe inside the garbage collector: no locks here.
    global _dropped_after_one_call
    if _clients.get(key) is not entry:
        return  # forgotten by reset()
    _clients.pop(key, None)
    if entry[0] == 1:
        _dropped_after_one_call += 1


def _pool_of(client: Any) -> Any:
    """The HTTP client (connection pool) behind an SDK client.

    Copies made with ``with_options()`` and SDK clients given the same ``http_client=`` share one
    pool, and so cost no new connections: they count as one client here.
    """
    pool = getattr(client, "_client", None)
    return client if pool is None else pool


def client_seen(client: Any, provider: str) -> bool:
    """Whether this is the first call made through this SDK client's connection pool.

    Warns once when pools keep being dropped after a single call: each new client has its own
    connection pool, so every call pays DNS, TCP and TLS again.
    """
    global _warned_clients
    pool = _pool_of(client)
    key = id(pool)
    with _lock:
        entry = _clients.get(key)
        if entry is not None:
            entry[0] += 1
            new = False
        else:
            entry = [1]
            try:
                entry.append(weakref.ref(pool, partial(_dropped, key, entry)))
            except TypeError:  # not weak-referenceable: cannot tell
                return False
            _clients[key] = entry
            new = True
        dropped = _dropped_after_one_call
        warn_now = dropped >= PER_CALL_CLIENT_WARNING_AFTER and not _warned_clients
        if warn_now:
            _warned_clients = True
    if warn_now:
        warn(
            f"{dropped} SDK clients were created, used for one call and dropped (the last one: {provider}); "
            "every new client opens new connections (DNS, TCP and TLS before the first token). "
            "Create one client at start-up and reuse it."
        )
    return new


def reset() -> None:
    """Forget everything (tests)."""
    global _dropped_after_one_call, _warned_clients, _recent
    with _lock:
        _prefixes.clear()
        _recent = []
        _hashed_once.clear()
        _conversations.clear()
        _clients.clear()
        _dropped_after_one_call = 0
        _warned_clients = False
