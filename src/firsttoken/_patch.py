"""Install and remove ``wrapt`` patches so that ``uninstrument()`` restores the originals exactly."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("firsttoken")

_INHERITED = object()
Wrapper = Callable[[Any, Any, tuple[Any, ...], dict[str, Any]], Any]


class Patches:
    """The patches one instrumentation installed, to be undone in reverse order."""

    def __init__(self) -> None:
        self._done: list[tuple[Any, str, object]] = []

    def wrap(self, module: str, path: str, wrapper: Wrapper) -> bool:
        """Wrap ``module.path`` (e.g. ``"Client.send"``); False when the target does not exist."""
        import wrapt  # not at start-up: it is imported when there is something to patch

        try:
            owner: Any = importlib.import_module(module)
            *parents, attr = path.split(".")
            for name in parents:
                owner = getattr(owner, name)
            own = attr in getattr(owner, "__dict__", {})
            original = owner.__dict__[attr] if own else getattr(owner, attr)
        except (ImportError, AttributeError):
            log.debug("firsttoken: %s.%s not found; not patched", module, path)
            return False
        # (wrapt 2's FunctionWrapper is no longer a wrapt.ObjectProxy.)
        if isinstance(original, wrapt.FunctionWrapper) and getattr(original, "_self_firsttoken", False):
            return True  # already ours
        wrapped = wrapt.FunctionWrapper(original, wrapper)
        wrapped._self_firsttoken = True  # type: ignore[attr-defined]
        setattr(owner, attr, wrapped)
        self._done.append((owner, attr, original if own else _INHERITED))
        return True

    def unwrap_all(self) -> None:
        self.unwrap_to(0)

    def unwrap_to(self, mark: int) -> None:
        """Undo the patches made since ``len(self)`` was ``mark``, newest first."""
        while len(self._done) > mark:
            owner, attr, original = self._done.pop()
            if original is _INHERITED:
                delattr(owner, attr)
            else:
                setattr(owner, attr, original)

    def __len__(self) -> int:
        return len(self._done)
