"""Time until the stand-in service serves again after each fault injected into a stack switch, on the real lab.

Runs tests/integration/test_stack_faults.py (fresh lab containers, a systemd unit whose /health is watched from
the host every 20 ms) and tabulates what each fault test printed: the switch SIGKILLed at each step through its
``LABWRIGHT_FAULT_AT`` hook and re-run right after, and ten switch + rollback cycles in a row. "down" is every
moment /health did not answer 200, summed; "serving after" runs from the kill until the re-run finished with
the intended stack answering.

    .venv/bin/python benchmarks/stack_faults.py [--rounds 1]

Numbers from this script are in docs/stacks.md (Restarts, kills and concurrent runs).
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KILL = re.compile(r"SIGKILL at (\w+): down ([\d.]+) s in all; serving \S+ ([\d.]+) s after the kill")
CYCLES = re.compile(r"10 switch \+ rollback cycles \(20 restarts\) in ([\d.]+) s; downtime ([\d.]+) s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="runs of the fault tests (1-10)")
    args = parser.parse_args()
    if not 1 <= args.rounds <= 10:
        print(f"stack_faults: --rounds {args.rounds}: give 1 to 10", file=sys.stderr)
        return 2
    kills: dict[str, list[tuple[float, float]]] = {}
    cycles: list[tuple[float, float]] = []
    for round_ in range(args.rounds):
        print(f"… round {round_ + 1} of {args.rounds}: tests/integration/test_stack_faults.py", file=sys.stderr)
        proc = subprocess.run([sys.executable, "-m", "pytest", "tests/integration/test_stack_faults.py", "-q", "-s",
                               "-k", "sigkill or ten_switch"], cwd=REPO, capture_output=True, text=True)
        if proc.returncode != 0:
            print(proc.stdout[-4000:], file=sys.stderr)
            print(f"stack_faults: the fault tests failed (exit {proc.returncode}); see above", file=sys.stderr)
            return 1
        for step, down, after in KILL.findall(proc.stdout):
            kills.setdefault(step, []).append((float(down), float(after)))
        cycles += [(float(a), float(b)) for a, b in CYCLES.findall(proc.stdout)]
    print(f"\nStack switch faults, stand-in service in a lab container ({args.rounds} round(s), medians):\n")
    print("| killed at | down in all | serving the intended stack after the kill |")
    print("| --- | --- | --- |")
    for step, values in kills.items():
        down = statistics.median(v[0] for v in values)
        after = statistics.median(v[1] for v in values)
        print(f"| {step} | {down:.2f} s | {after:.2f} s |")
    if cycles:
        print(f"\n10 switch + rollback cycles: {statistics.median(c[0] for c in cycles):.1f} s, downtime "
              f"{statistics.median(c[1] for c in cycles):.2f} s in all (20 restarts)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
