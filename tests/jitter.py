"""How late this process's threads wake up while a timing test runs: the noise its bounds allow for.

A timing test on a busy machine has to tell "the code is slow" from "the machine is busy". A probe
thread sleeps in short steps beside the test and records how late it woke: the OS scheduler and the
GIL, the same delays that land between the simulator thread's send and the client's read. A bound
is then ``configured + slack + wakeups * worst lateness``: as tight as before on an idle machine, and
wider only by noise that was measured in the same test, not by a guess.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from types import TracebackType


class SchedulerProbe:
    """``with SchedulerProbe() as probe: ...`` then ``probe.allow(slack)`` or ``probe.worst``."""

    STEP = 0.002  # s: short enough to sample often, long enough to cost nothing

    def __init__(self) -> None:
        self.worst = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scheduler-probe", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            before = time.perf_counter()
            time.sleep(self.STEP)
            late = time.perf_counter() - before - self.STEP
            if late > self.worst:
                self.worst = late

    def __enter__(self) -> SchedulerProbe:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()

    def allow(self, slack: float, wakeups: int = 2) -> float:
        """``slack`` plus the worst lateness seen, once per thread wake-up on the measured path
        (by default two: the sender's and the receiver's)."""
        return slack + wakeups * self.worst


def assert_stamps_agree(app: Sequence[float], ours: Sequence[float], probe: SchedulerProbe) -> None:
    """firsttoken's reading of an interval (call start -> first token) against the app's own reading
    of the same interval, call by call.

    The app reads its clock before it calls the SDK and after the SDK hands it the chunk; firsttoken
    reads the same clock after the call starts and before the chunk is handed over. So firsttoken's
    interval lies inside the app's, always (no timing in that: it is the order of the code), and the
    difference is what firsttoken and the SDK do between the two readings plus any scheduler delay
    that landed there. The smallest difference over the calls is held to 2 ms (what firsttoken adds
    when the scheduler stays out of the way); every call to 20 ms plus the lateness measured meanwhile.
    """
    differences = [a - o for a, o in zip(app, ours, strict=True)]
    assert all(d >= -1e-6 for d in differences), ("firsttoken's interval must lie inside the app's", differences)
    assert min(differences) <= 0.002, differences
    assert max(differences) <= probe.allow(0.020), (differences, probe.worst)
