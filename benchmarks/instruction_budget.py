"""Guard firsttoken's own per-call cost: instructions counted under callgrind against a committed number.

firsttoken's own code is what it adds to a call with no-op OpenTelemetry providers (the "firsttoken
only" configuration of overhead.py): no span or metric work of the SDK, just the hooks, the
timeline and the recorder building what it would hand over. Counted with valgrind's callgrind, that
number repeats within about 1 % between runs and machines with the same Python and SDK versions,
so a change that makes it grow by more than TOLERANCE fails here, long before anyone could see it
in timings.

    python benchmarks/instruction_budget.py            # check (exit 1 when over budget)
    python benchmarks/instruction_budget.py --update   # measure and write the budget file

One call = one streamed call of SHORT tokens (its chunks included), counted over CALLS calls, minus
the same uninstrumented call.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import overhead

BUDGET_FILE = Path(__file__).with_name("instruction_budget.json")
TOLERANCE = 0.15
"""How much firsttoken's own instructions per call may grow over the committed number."""
WORKLOADS = ("openai", "anthropic")
CALLS = 4
CONFIG = "firsttoken only"


def measure() -> dict[str, float]:
    """{workload: firsttoken's own instructions per call}."""
    counts = overhead._count([CONFIG], WORKLOADS, {overhead.SHORT: CALLS})
    return {name: counts[(name, CONFIG, overhead.SHORT)] - counts[(name, "", overhead.SHORT)] for name in WORKLOADS}


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--update", action="store_true", help=f"write the measured numbers to {BUDGET_FILE.name}")
    args = parser.parse_args()
    measured = measure()
    if args.update:
        BUDGET_FILE.write_text(
            json.dumps(
                {
                    "what": f"firsttoken's own instructions per streamed call of {overhead.SHORT} tokens "
                    f"(callgrind, no-op OpenTelemetry providers); benchmarks/instruction_budget.py",
                    "python": platform.python_version(),
                    "instructions_per_call": {name: round(value) for name, value in measured.items()},
                },
                indent=2,
            )
            + "\n"
        )
        for name, value in measured.items():
            print(f"{name:10} {value:10,.0f} instructions per call (written to {BUDGET_FILE.name})")
        return 0
    budget = json.loads(BUDGET_FILE.read_text())["instructions_per_call"]
    failed = False
    for name, value in measured.items():
        limit = budget[name] * (1 + TOLERANCE)
        over = value > limit
        failed |= over
        print(
            f"{name:10} {value:10,.0f} instructions per call; budget {budget[name]:,} (+{TOLERANCE:.0%}: "
            f"{limit:,.0f}) {'OVER BUDGET' if over else 'ok'}"
        )
    if failed:
        print(
            "firsttoken's own code got more expensive per call. Find where (benchmarks/overhead.py "
            "--instructions), or, if the cost is worth it, raise the budget with --update and say why in the commit."
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
