"""Install and remove ``wrapt`` patches so that ``uninstrument()`` restores the originals exactly."""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from . import _imports
from ._internal import internal_error

log = logging.getLogger("firsttoken")

_INHERITED = object()
Wrapper = Callable[[Any, Any, tuple[Any, ...], dict[str, Any]], Any]


class Patches:
    """The patches one instrumentation installed, to be undone in reverse order."""

    def __init__(self) -> None:
        self._done: list[tuple[Any, str, object]] = []
        self._pending: list[Callable[[ModuleType], None]] = []
        self._lock = threading.RLock()  # a deferred patch is made in whichever thread imports

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
        with self._lock:
            setattr(owner, attr, wrapped)
            self._done.append((owner, attr, original if own else _INHERITED))
        return True

    def wrap_when_imported(self, module: str, path: str, wrapper: Wrapper) -> None:
        """Wrap ``module.path`` now if ``module`` is imported, else once the app imports it.

        An SDK loads some modules only when the app first uses them (openai's resources, on the
        first ``client.chat``): importing them here would make ``instrument()`` pay for modules the
        app may never load.
        """

        def patch_now(_module: ModuleType) -> None:
            # Runs inside the app's ``import`` statement: it must not raise.
            with self._lock:
                if patch_now not in self._pending:
                    return  # undone before the module was imported
                self._pending.remove(patch_now)
                try:
                    self.wrap(module, path, wrapper)
                except Exception:
                    internal_error("patching %s.%s failed", module, path)

        with self._lock:
            self._pending.append(patch_now)
        _imports.when_imported(module, patch_now)  # at once when ``module`` is already imported

    def unwrap_all(self) -> None:
        with self._lock:
            for hook in self._pending:
                _imports.discard(hook)
            self._pending.clear()
            self.unwrap_to(0)

    def unwrap_to(self, mark: int) -> None:
        """Undo the patches made since ``len(self)`` was ``mark``, newest first."""
        with self._lock:
            while len(self._done) > mark:
                owner, attr, original = self._done.pop()
                if original is _INHERITED:
                    delattr(owner, attr)
                else:
                    setattr(owner, attr, original)

    def __len__(self) -> int:
        return len(self._done)
