"""Guard firsttoken's own per-call cost: instructions counted under callgrind against a committed number.

firsttoken's own code is what it adds to a call with no-op OpenTelemetry providers (the "firsttoken
only" configuration of overhead.py): no span or metric work of the SDK, just the hooks, the
timeline and the recorder building what it would hand over. Counted with valgrind's callgrind, in
rounds (see ROUNDS), that number repeats within about 1 % between runs with the same Python and
SDK versions, so a change that makes it grow by more than TOLERANCE fails here, long before anyone
could see it in timings.

    python benchmarks/instruction_budget.py            # check (exit 1 when over budget)
    python benchmarks/instruction_budget.py --update   # measure and write the budget file

One call = one streamed call of SHORT tokens (its chunks included), minus the same uninstrumented
call; the simulator sends each response in one write, so the bytes reach the client in the same
reads every time. Each call is counted on its own and the figure is the median instrumented call
minus the median uninstrumented one (see CALLS).

A second count guards what the first cannot resolve: the Python bytecode instructions firsttoken's
own frames run per call (overhead.count_bytecodes, the interpreter's opcode trace). It is exact
(every call of a run counts the same, and so does a build whose per-call code is the same, wherever
CPython's hash tables put things), so its tolerance is BYTECODE_TOLERANCE: a growth of more than 1 %
of firsttoken's Python work fails there, while the C work it calls into stays the callgrind count's.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import overhead

BUDGET_FILE = Path(__file__).with_name("instruction_budget.json")
TOLERANCE = 0.05
"""How much firsttoken's own instructions per call may grow over the committed number. The figure of
one run lies within about ±1 % (openai) and ±1.5 % (anthropic) of the figure of many (95 % of 2,000
resamplings of ten counted rounds of one run), and two runs of one build agree within 0.1 %; but
builds whose per-call code is the same differ by more: six builds in one round (r13, docs/overhead.md)
measured openai 646k-675k, -0.7 % to +3.6 % of the budget (CPython's dict and type-cache layout moves
with code that never runs per call). So 5 %: unchanged code should never fail, and a growth of 5 %
fails however the build falls; a growth of 2-3 % is not caught here (in Python code, the bytecode
count below catches it)."""
BYTECODE_TOLERANCE = 0.01
"""How much firsttoken's own bytecode instructions per call may grow. The count is exact (30 calls of
one run, and runs of builds with unused code added, count alike), so this is not noise allowance: it
lets a change add a few conditionals per call without --update; a loop of ten empty turns in
Recorder.finish adds 36 (0.5 %), an attribute more about 20."""
BYTECODE_DISTS = ("openai", "anthropic", "httpx", "httpcore", "opentelemetry-api")
"""What firsttoken's per-call code reads and calls: another release of one may take another branch
in it (a field more in a chunk). The exact tolerance holds with the versions the budget was counted
with; with others (the test command installs the newest within the ranges) the bytecodes get
TOLERANCE, as the callgrind count, and the gate says to count them again."""
BYTECODE_CALLS = 9
"""Calls counted for the bytecode figure (their median: a call the tail selector gives a waterfall,
on a loaded machine, counts more)."""
WORKLOADS = ("openai", "anthropic")
CALLS = 3
"""Calls per stretch, each counted on its own. The calls of one stretch agree within 5-20k
instructions; whole stretches move by ±15k against each other, on both sides, whichever
configuration (the state the process is in when the stretch starts, not how the stream's bytes fell
into reads: each response comes in one write). A stretch's figure is what it is, so the count takes
many short stretches: a stretch of 10 calls counted as one, six rounds of them, spread ±4 %."""
ROUNDS = 10
"""Stretches of each configuration, uninstrumented and instrumented in turn in one process, after
one round more that is not counted: the first instrumented stretch of a process costs more
(first-time paths: lazy imports, caches, the interpreter's specialisation), whatever its warm-up
calls. The figure is the median instrumented call minus the median uninstrumented one, over the
ROUNDS x CALLS calls of each."""
CONFIG = "firsttoken only"


def measure_calls(rounds: int = ROUNDS) -> dict[str, tuple[list[float], list[float]]]:
    """{workload: (uninstrumented calls, instrumented calls)}, instructions of each call counted, in
    round order (the first, uncounted round left out)."""
    counts = overhead.count_rounds([CONFIG], WORKLOADS, {overhead.SHORT: CALLS}, rounds + 1, each=True)
    return {
        name: (counts[(name, "", overhead.SHORT)][CALLS:], counts[(name, CONFIG, overhead.SHORT)][CALLS:])
        for name in WORKLOADS
    }


def own_cost(off: list[float], on: list[float]) -> float:
    """firsttoken's own instructions per call: the median instrumented call minus the median uninstrumented one."""
    return statistics.median(on) - statistics.median(off)


def measure() -> dict[str, float]:
    """{workload: firsttoken's own instructions per call}."""
    calls = measure_calls()
    for name in WORKLOADS:
        off, on = calls[name]
        print(f"{name:10} calls off: {', '.join(f'{v:,.0f}' for v in off)}")
        print(f"{name:10} calls on:  {', '.join(f'{v:,.0f}' for v in on)}")
    return {name: own_cost(*calls[name]) for name in WORKLOADS}


def versions() -> dict[str, str]:
    from importlib import metadata

    return {dist: metadata.version(dist) for dist in BYTECODE_DISTS}


def measure_bytecodes() -> dict[str, float]:
    """{workload: firsttoken's own bytecode instructions per call}: the median of BYTECODE_CALLS."""
    counts = overhead.count_bytecodes(CONFIG, WORKLOADS, BYTECODE_CALLS)
    for name in WORKLOADS:
        print(f"{name:10} bytecodes per call: {', '.join(f'{v:,}' for v in counts[name])}")
    return {name: statistics.median(counts[name]) for name in WORKLOADS}


def check(what: str, measured: dict[str, float], budget: dict[str, int], tolerance: float) -> bool:
    """Print each workload's figure against its budget; True when one is over."""
    failed = False
    for name, value in measured.items():
        limit = budget[name] * (1 + tolerance)
        over = value > limit
        failed |= over
        stale = (
            " (under budget by more than the tolerance: --update tightens it)"
            if value < budget[name] * (1 - tolerance)
            else ""
        )
        print(
            f"{name:10} {value:10,.0f} {what} per call; budget {budget[name]:,} (+{tolerance:.0%}: "
            f"{limit:,.0f}) {'OVER BUDGET' if over else 'ok'}{stale}"
        )
    return failed


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--update", action="store_true", help=f"write the measured numbers to {BUDGET_FILE.name}")
    args = parser.parse_args()
    bytecodes = measure_bytecodes()
    measured = measure()
    if args.update:
        BUDGET_FILE.write_text(
            json.dumps(
                {
                    "what": f"firsttoken's own instructions per streamed call of {overhead.SHORT} tokens "
                    f"(callgrind, no-op OpenTelemetry providers), and the Python bytecode instructions its "
                    f"own frames run per call; benchmarks/instruction_budget.py",
                    "python": platform.python_version(),
                    "instructions_per_call": {name: round(value) for name, value in measured.items()},
                    "bytecodes_per_call": {name: round(value) for name, value in bytecodes.items()},
                    "bytecodes_counted_with": versions(),
                },
                indent=2,
            )
            + "\n"
        )
        for name in WORKLOADS:
            print(
                f"{name:10} {measured[name]:10,.0f} instructions, {bytecodes[name]:,.0f} bytecodes per call "
                f"(written to {BUDGET_FILE.name})"
            )
        return 0
    committed = json.loads(BUDGET_FILE.read_text())
    failed = check("instructions", measured, committed["instructions_per_call"], TOLERANCE)
    counted_on = committed["python"].rsplit(".", 1)[0]
    moved = {d: v for d, v in versions().items() if committed["bytecodes_counted_with"].get(d) != v}
    if platform.python_version().rsplit(".", 1)[0] != counted_on:  # other bytecode for the same code
        print(f"bytecodes not compared: the budget's were counted on Python {counted_on}")
    elif moved:
        print(
            f"bytecodes compared at +{TOLERANCE:.0%}, not +{BYTECODE_TOLERANCE:.0%}: counted with "
            f"{committed['bytecodes_counted_with']}, here {moved}; --update counts them again"
        )
        failed |= check("bytecodes", bytecodes, committed["bytecodes_per_call"], TOLERANCE)
    else:
        failed |= check("bytecodes", bytecodes, committed["bytecodes_per_call"], BYTECODE_TOLERANCE)
    if failed:
        print(
            "firsttoken's own code got more expensive per call. Find where (benchmarks/overhead.py "
            "--instructions), or, if the cost is worth it, raise the budget with --update and say why in the commit."
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
