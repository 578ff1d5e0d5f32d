"""Nothing lost when the process stops: ``flush()``, ``shutdown()`` and every way a process ends.

What is still in memory when a process ends is the batch span processor's queue, the metrics since
the last periodic export and the calls whose streams the app dropped (queued for recording). ``atexit``
alone saves them only on a normal exit, and production processes rarely end that way:

- **a signal with its default action** (SIGTERM from a deploy; also what uvicorn, hypercorn and
  gunicorn's uvicorn workers do after their graceful shutdown: restore the handler they found and
  raise the signal again) ends the process without running ``atexit``;
- **worker processes** of ``multiprocessing`` (pools, ``ProcessPoolExecutor``; fork, spawn and
  forkserver) and of billiard (Celery's prefork pool) leave through ``os._exit`` after running their
  own finalizers, and a pool's ``terminate()`` ends its workers with SIGTERM.

So when firsttoken set up export itself, :func:`arm` makes each of those paths run one bounded exit
routine first: the abandoned calls recorded, then both providers flushed and shut down
(``FIRSTTOKEN_SHUTDOWN_TIMEOUT``, 2 s by default, in all). For signals, :class:`SignalChain` keeps
firsttoken's handler in front of SIGTERM and SIGINT and passes each signal on to the handler the app
set (``signal.signal`` and ``signal.getsignal`` see only the app's); only when that is the default
action does the routine run, and then the process ends exactly as it would have, by the same signal.
A second signal during the routine ends the process at once. When the app set up its own providers,
their lifecycle stays the app's: only the abandoned calls are recorded at exit (docs/deploy.md shows
the one line per server kind that flushes the app's providers).
"""

from __future__ import annotations

import atexit
import logging
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType, ModuleType
from typing import Any

from . import _imports, streams
from ._internal import internal_error
from ._otlp import Export, force_flush

log = logging.getLogger("firsttoken")

SIGNALS = (signal.SIGTERM, signal.SIGINT)
ABANDONED_SHARE = 0.25
"""The part of the exit budget the abandoned calls may take before the flush (the rest is the flush's)."""
_WORKER_EXIT_PRIORITY = 5
"""multiprocessing runs finalizers of higher priority first; the pool's own ones are 10 and above, None last."""

_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


# -- flush and shutdown ------------------------------------------------------------------------------


def flush(timeout_s: float, tracer_provider: Any, meter_provider: Any) -> bool:
    """Record the abandoned calls, then force-flush both providers (a final metric collection and
    export), concurrently, within ``timeout_s``. True when everything was handed over in time."""
    deadline = time.monotonic() + timeout_s
    recorded = streams.flush_abandoned(max(timeout_s * ABANDONED_SHARE, 0.001))
    return force_flush(max(deadline - time.monotonic(), 0.001), tracer_provider, meter_provider) and recorded


class ExitRoutine:
    """The one routine every exit path runs, once: abandoned calls recorded, ``export`` shut down.

    A signal that ends the process may arrive while the routine runs from another exit path (a pool's
    ``terminate()`` signals a worker already in its finalizers): the routine then finishes (it is bounded)
    and ends the process by that signal afterwards, as the signal would have.
    """

    def __init__(self, export: Export | None) -> None:
        self.export = export
        self._lock = threading.RLock()  # a signal handler may run on the thread holding it
        self._state = "ready"  # running, done
        self._pending: int | None = None

    def __call__(self) -> None:
        self.run()

    def run(self, signum: int | None = None) -> bool:
        """Run the routine unless it ran; False when it is running now (interrupted by ``signum``, which
        then ends the process as soon as it is done), True otherwise."""
        with self._lock:
            if self._state == "running":
                if signum is not None:
                    self._pending = signum
                return False
            if self._state == "done":
                return True
            self._state = "running"
        try:
            self._save()
        finally:
            with self._lock:
                self._state = "done"
                pending, self._pending = self._pending, None
            if pending is not None:
                signal.raise_signal(pending)
        return True

    def _save(self) -> None:
        try:
            streams.abandon_live()
            if self.export is None:
                streams.flush_abandoned()
                return
            budget = self.export.shutdown_timeout_s
            deadline = time.monotonic() + budget
            streams.flush_abandoned(budget * ABANDONED_SHARE)
            self.export.close(max(deadline - time.monotonic(), 0.001))
        except Exception:  # never in the way of the process ending
            log.debug("firsttoken: the exit routine failed", exc_info=True)

    def rearm(self) -> None:
        """A forked child starts with its own data to save."""
        with self._lock:
            self._state = "ready"
            self._pending = None


# -- signals --------------------------------------------------------------------------------------------


class SignalChain:
    """Keeps firsttoken's handler in front of SIGTERM and SIGINT, passing each signal on to the handler
    the app set; runs the exit routine first when that handler is the default action (the process ends).

    ``signal.signal`` and ``signal.getsignal`` are wrapped for these two signals so that the app sees and
    sets its own handler as if firsttoken were not there: the handler a server saves and later restores
    is the app's, and a server that restores the default and raises the signal again (uvicorn) still
    reaches firsttoken's handler first.
    """

    def __init__(self, routine: ExitRoutine) -> None:
        self.routine = routine
        self.behind: dict[int, _Handler] = {}
        """Signal -> the handler the app has in place (what ``signal.getsignal`` would say without us)."""
        self._real_signal = signal.signal
        self._real_getsignal = signal.getsignal
        self.installed = False

    def install(self) -> bool:
        """From the main thread only (Python's rule for signal handlers); False elsewhere."""
        if self.installed:
            return True
        if threading.current_thread() is not threading.main_thread():
            log.debug("firsttoken: instrument() ran outside the main thread; no exit flush on signals")
            return False
        for signum in SIGNALS:
            self.behind[signum] = self._real_signal(signum, self._handle)
        signal.signal = self._signal
        signal.getsignal = self._getsignal
        self.installed = True
        return True

    def uninstall(self) -> None:
        """Give the app's handlers back, as they are now."""
        if not self.installed or threading.current_thread() is not threading.main_thread():
            return
        signal.signal = self._real_signal
        signal.getsignal = self._real_getsignal
        for signum, handler in self.behind.items():
            self._real_signal(signum, signal.SIG_DFL if handler is None else handler)
        self.installed = False

    def _signal(self, signalnum: int, handler: _Handler) -> _Handler:
        if signalnum in self.behind and threading.current_thread() is threading.main_thread():
            if not (callable(handler) or handler in (signal.SIG_DFL, signal.SIG_IGN)):
                return self._real_signal(signalnum, handler)  # its own TypeError
            previous, self.behind[signalnum] = self.behind[signalnum], handler
            if self._real_getsignal(signalnum) != self._handle:  # set behind our back: take the front again
                self._real_signal(signalnum, self._handle)
            return previous
        return self._real_signal(signalnum, handler)

    def _getsignal(self, signalnum: int) -> _Handler:
        if signalnum in self.behind:
            return self.behind[signalnum]
        return self._real_getsignal(signalnum)

    def _handle(self, signum: int, frame: FrameType | None) -> Any:
        behind = self.behind.get(signum, signal.SIG_DFL)
        if behind is signal.SIG_IGN:
            return None
        if callable(behind):
            return behind(signum, frame)  # the app's handler decides; its exit comes back through here or atexit
        # The default action: the process ends now. Save what is in memory first (a second signal ends it
        # at once), then end it the same way, so that the parent sees the same signal.
        self._real_signal(signum, signal.SIG_DFL)
        if self.routine.run(signum):
            signal.raise_signal(signum)
            self._real_signal(signum, self._handle)  # only reached while the signal is blocked
        return None


# -- worker processes that leave through os._exit --------------------------------------------------------


class _WorkerExit:
    """Runs the exit routine from the finalizers a ``multiprocessing`` (or billiard) worker runs before
    ``os._exit``: registered after each fork, since a worker clears the finalizers it inherited."""

    def __init__(self, routine: ExitRoutine) -> None:
        self.routine = routine

    def watch(self, util: ModuleType) -> None:
        try:
            util.register_after_fork(self, lambda watcher, module=util: watcher.in_worker(module))
            if _in_multiprocessing_worker(util):  # instrument() ran inside a running worker
                self.in_worker(util)
        except Exception:
            internal_error("watching %s's workers failed", util.__name__)

    def in_worker(self, util: ModuleType) -> None:
        self.routine.rearm()
        try:
            util.Finalize(None, self.routine, exitpriority=_WORKER_EXIT_PRIORITY)
        except Exception:
            internal_error("registering a worker finalizer failed")


def _in_multiprocessing_worker(util: ModuleType) -> bool:
    if util.__name__ != "multiprocessing.util":
        return False
    import multiprocessing

    return multiprocessing.parent_process() is not None and multiprocessing.current_process().name != "MainProcess"


def _billiard_pool(routine: ExitRoutine) -> Callable[[ModuleType], None]:
    """Celery's prefork pool: billiard's pool workers leave through ``os._exit`` from ``Worker._do_exit``,
    past any finalizer: the routine runs first there."""

    def patch(module: ModuleType) -> None:
        try:
            import wrapt

            def do_exit(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
                routine.run()
                return wrapped(*args, **kwargs)

            wrapt.wrap_function_wrapper(module, "Worker._do_exit", do_exit)
        except Exception:
            internal_error("watching billiard's pool workers failed")

    return patch


# -- arming -------------------------------------------------------------------------------------------------

_armed: tuple[ExitRoutine, SignalChain | None] | None = None
_arm_lock = threading.Lock()


def arm(export: Export | None) -> None:
    """Make every exit path run the exit routine; ``export`` None (the app's own providers) records the
    abandoned calls only and leaves signals alone. Once per process; a later call with firsttoken's own
    export (after one with the app's providers) adds it, and the signals."""
    global _armed
    with _arm_lock:
        if _armed is not None:
            routine = _armed[0]
            if export is None or routine.export is not None:
                return
            routine.export = export
            _armed = (routine, _signals(routine))
            return
        routine = ExitRoutine(export)
        _armed = (routine, _signals(routine) if export is not None else None)
    atexit.register(routine)
    workers = _WorkerExit(routine)
    _keep.append(workers)  # register_after_fork holds it weakly
    for name in ("multiprocessing.util", "billiard.util"):
        _imports.when_imported(name, workers.watch)
    _imports.when_imported("billiard.pool", _billiard_pool(routine))


def _signals(routine: ExitRoutine) -> SignalChain:
    chain = SignalChain(routine)
    try:
        chain.install()
    except (ValueError, OSError, RuntimeError):
        log.debug("firsttoken: signal handlers could not be installed", exc_info=True)
    return chain


_keep: list[_WorkerExit] = []


def disarm() -> None:
    """Signals back to the app's handlers (the exit routine itself stays: it is idempotent)."""
    armed = _armed
    if armed is not None and armed[1] is not None:
        armed[1].uninstall()


def run_exit_routine() -> None:
    """What ``shutdown()`` runs: the exit routine now (once)."""
    armed = _armed
    if armed is not None:
        armed[0]()
