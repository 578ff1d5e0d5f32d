"""Post-import hooks: call a function once a module has been imported, or now if it already is.

wrapt has the same (``wrapt.register_post_import_hook``), but importing wrapt 2 loads asyncio and
importlib.metadata: about 190 million instructions, some 35 ms, most of ``instrument()``'s start-up
budget, spent before the app has imported anything to patch. This module imports nothing beyond
what the interpreter has loaded at start; wrapt is imported when a patch is made.

A finder at the front of ``sys.meta_path`` asks the other finders for the spec of a watched module
and sets an ``exec_module`` on that module's loader instance that runs the loader's own, then the
hooks. The loader object stays the same (code that checks its type sees no difference), and the
attribute is removed once the module has run. A module that fails to import fires nothing.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

Hook = Callable[[ModuleType], None]

_lock = threading.Lock()
_hooks: dict[str, list[Hook]] = {}
"""Module name -> hooks waiting for it to be imported (removed when they fire)."""


def when_imported(name: str, hook: Hook) -> None:
    """Call ``hook(module)`` once ``name`` is imported; at once if it already is.

    A hook runs inside the app's ``import`` statement: it must not raise.
    """
    with _lock:
        module = sys.modules.get(name)
        if module is None:
            _hooks.setdefault(name, []).append(hook)
            if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
                sys.meta_path.insert(0, _Finder())
    if module is not None:
        hook(module)


def discard(hook: Hook) -> None:
    """Forget a hook that has not fired (a no-op when it has)."""
    with _lock:
        for name, waiting in list(_hooks.items()):
            if hook in waiting:
                waiting.remove(hook)
            if not waiting:
                del _hooks[name]


def _fire(name: str, module: ModuleType) -> None:
    with _lock:
        hooks = _hooks.pop(name, [])
    for hook in hooks:
        hook(module)


class _Finder:
    """Finds nothing itself: wraps the execution of the watched modules other finders find."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None) -> Any:
        if fullname not in _hooks:  # a dict lookup per import: the cost for every other module
            return None
        for finder in sys.meta_path:
            if finder is self or isinstance(finder, _Finder):
                continue
            find_spec = getattr(finder, "find_spec", None)
            if find_spec is None:
                continue
            try:
                spec = find_spec(fullname, path, target)
            except Exception:  # another finder's trouble: let the import system meet it as usual
                return None
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            return spec  # a loader without exec_module: imported unhooked, as if not watched

        def exec_and_fire(module: ModuleType) -> None:
            if module.__name__ != fullname:  # a loader shared by several modules (a zip importer)
                exec_module(module)
                return
            # Restored before the module runs: a loader wrapping this one (another hook library's)
            # that calls back into ``loader.exec_module`` reaches the original, never this again.
            if getattr(loader, "__dict__", {}).get("exec_module") is exec_and_fire:
                with contextlib.suppress(AttributeError):
                    del loader.exec_module
            exec_module(module)
            _fire(fullname, sys.modules.get(fullname, module))

        with contextlib.suppress(AttributeError, TypeError):  # a loader taking no attributes: unhooked
            loader.exec_module = exec_and_fire
        return spec
