"""The suite's wall time as the scheduler would lay it out, predicted from tests/durations.json without running it.

``scripts/test`` hands work out with ``--dist loadgroup`` (tests/support/parallel.py): a lab module is one unit,
a unit test is one, longest first by tests/durations.json, and a worker is sent its next unit when two or fewer of
its tests are left (xdist 3.8 ``LoadScopeScheduling._reschedule``). From that many workers on
(``parallel.FILLER_FROM``) one fewer may hold lab modules at a time (rule 4). This
replays that schedule with each test taking its recorded seconds and prints, per worker count, the predicted wall
time (pytest's own start and collection not included: ~20-30 s), each worker's busy seconds, and when the last lab
module ends.

What it does not model: CPU. The recorded seconds are those of a three-worker run on two cores, so a prediction for
another worker count is only the schedule's shape: whether a long module starts late, how evenly the work spreads.
Rule 4's gain (unit tests on the CPU a waiting lab test leaves idle, at a lower priority) shows only in a measured
run (docs/testing.md).

    .venv/bin/python benchmarks/suite_schedule.py [--workers 3,4] [--durations tests/durations.json] [--collect]
                                                  [--tail 8]

``--collect`` takes the tests and their order from pytest's collection instead of the file's own list: a test the
file lacks is ordered as the scheduler orders it (``parallel.UNKNOWN_TEST_S`` / ``UNKNOWN_GROUP_S``) and takes
``--unknown`` seconds (default 0.005: a file recorded from ``--durations=0`` lacks every test under 5 ms).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support import parallel  # noqa: E402  (tests/ on the path first)

#: Cores one lab test keeps busy on average: three lab modules side by side (test_stack_faults, test_guest_lxd,
#: test_lxd_connector, -n 3, otherwise quiet machine) left 24 % of two cores idle (vmstat 5, 17 samples), 2 % in
#: iowait: 1.5 cores for three.
LAB_CORES = 0.5
#: xdist sends a worker more work when this many of its tests or fewer are left (LoadScopeScheduling._reschedule).
PREFETCH = 2


@dataclass
class Worker:
    number: int
    pending: list[str] = field(default_factory=list)  # node ids sent, not finished, in order
    busy: float = 0.0
    units: list[str] = field(default_factory=list)


@dataclass
class Schedule:
    wall: float
    workers: list[Worker]
    last_lab_end: float
    lab_ends: dict[str, float]


def simulate(nodeids: list[str], known: dict[str, float], workers: int, cores: float = 2.0,
             lab_cores: float | None = None, unknown: float = parallel.UNKNOWN_TEST_S) -> Schedule:
    """Replay --dist loadgroup on ``workers`` workers. Without ``lab_cores`` each test takes its recorded seconds.
    With it, a CPU model: a lab test runs at its recorded pace and keeps ``lab_cores`` of the ``cores`` busy (it
    waits on its container the rest of the time); the unit tests share what the lab tests leave, at most a core each,
    and a unit test's recorded seconds are those of a third of the cores (three workers in the recorded run),
    so it runs at (its share) / (cores / 3) of its recorded pace."""
    cost = parallel.unit_costs(nodeids, known)  # the order: what the scheduler reads
    known = {**{n: unknown for n in nodeids if n not in known}, **known}  # the run: what each test takes
    first_seen: dict[str, int] = {}
    for i, nodeid in enumerate(nodeids):
        first_seen.setdefault(parallel.unit_of(nodeid), i)
    tests: dict[str, list[str]] = {}
    for nodeid in nodeids:
        tests.setdefault(parallel.unit_of(nodeid), []).append(nodeid)
    queue: OrderedDict[str, list[str]] = OrderedDict(
        (unit, tests[unit]) for unit in sorted(tests, key=lambda u: (-cost[u], first_seen[u])))
    cap = parallel.lab_cap(workers)
    pool = [Worker(n) for n in range(workers)]
    lab_left: dict[int, dict[str, int]] = {w.number: {} for w in pool}  # worker -> lab module -> tests not done
    lab_ends: dict[str, float] = {}
    left: dict[int, float] = {}  # worker -> recorded seconds left of its current test
    began: dict[int, float] = {}  # worker -> when its current test began
    clock = [0.0]

    def assign(worker: Worker) -> None:
        if cap is not None:
            busy = sum(any(lab_left[w.number].values()) for w in pool if w is not worker)
            if busy >= cap:
                filler = next((unit for unit in queue if not unit.startswith(parallel.INTEGRATION)), None)
                if filler is None:
                    return  # it waits for a lab module to end (rule 4)
                queue.move_to_end(filler, last=False)
        unit, ids = queue.popitem(last=False)
        worker.pending.extend(ids)
        worker.units.append(unit)
        if unit.startswith(parallel.INTEGRATION):
            lab_left[worker.number][unit] = len(ids)

    def reschedule(worker: Worker) -> None:
        if queue and len(worker.pending) <= PREFETCH:
            assign(worker)
        if worker.pending and worker.number not in left:
            left[worker.number] = known.get(worker.pending[0], parallel.UNKNOWN_TEST_S)
            began[worker.number] = clock[0]

    def rates() -> dict[int, float]:
        if lab_cores is None:
            return {number: 1.0 for number in left}
        lab = [n for n in left if pool[n].pending[0].startswith(parallel.INTEGRATION)]
        unit = [n for n in left if n not in lab]
        share = min(1.0, max(0.0, cores - lab_cores * len(lab)) / len(unit)) if unit else 0.0
        recorded = cores / 3
        return {n: 1.0 if n in lab else max(share, 0.02) / recorded for n in left}

    for worker in pool:  # LoadScopeScheduling.schedule: one unit each, then at least two where possible
        if queue:
            assign(worker)
    for worker in pool:
        reschedule(worker)
    while left:
        rate = rates()
        number = min(left, key=lambda n: left[n] / rate[n])
        step = left[number] / rate[number]
        clock[0] += step
        now = clock[0]
        for n in list(left):
            left[n] -= step * rate[n]
        del left[number]
        worker = pool[number]
        done = worker.pending.pop(0)
        worker.busy += now - began[number]
        unit = parallel.unit_of(done)
        if unit in lab_left[number]:
            lab_left[number][unit] -= 1
            if not lab_left[number][unit]:
                del lab_left[number][unit]
                lab_ends[unit] = now
        for each in [worker, *pool]:  # this one first; then any that ran dry while the queue was not empty
            reschedule(each)
    return Schedule(clock[0], pool, max(lab_ends.values(), default=0.0), lab_ends)


def collected() -> list[str]:
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-p",
                           "no:xdist"], cwd=ROOT, capture_output=True, text=True)
    ids = [line.strip() for line in proc.stdout.splitlines() if "::" in line and not line.startswith(" ")]
    if not ids:
        raise SystemExit(f"✗ suite_schedule: pytest --collect-only listed no tests (exit {proc.returncode}): "
                         f"{(proc.stdout + proc.stderr).strip().splitlines()[-1:]}")
    return ids


def fmt(seconds: float) -> str:
    return f"{int(seconds // 60)} min {seconds % 60:4.1f} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="3,4", help="comma-separated worker counts (default 3,4)")
    parser.add_argument("--durations", type=Path, default=parallel.DURATIONS, help="per-test seconds (JSON)")
    parser.add_argument("--collect", action="store_true", help="the tests pytest collects now, in their order")
    parser.add_argument("--tail", type=int, default=8, help="how many of the last lab modules to list (default 8)")
    parser.add_argument("--lab-cores", type=float, default=LAB_CORES,
                        help=f"cores a lab test keeps busy, for the CPU model (default {LAB_CORES}; 0: no model)")
    parser.add_argument("--cores", type=float, default=2.0, help="the machine's cores (default 2)")
    parser.add_argument("--unknown", type=float, default=0.005,
                        help="seconds of a collected test the file lacks (default 0.005: a run's --durations=0 "
                             "lists only phases of 5 ms and more)")
    args = parser.parse_args()
    try:
        counts = [int(w) for w in args.workers.split(",") if w.strip()]
    except ValueError:
        parser.error(f"--workers {args.workers!r}: give worker counts such as 3,4")
    if not counts or any(not 1 <= w <= 99 for w in counts):
        parser.error(f"--workers {args.workers!r}: give worker counts from 1 to 99")
    if args.tail < 0:
        parser.error("--tail must be 0 or more")
    if args.unknown < 0:
        parser.error("--unknown must be 0 or more")
    if not 0 <= args.lab_cores <= args.cores or args.cores <= 0:
        parser.error("--cores must be above 0 and --lab-cores from 0 to --cores")
    known = parallel.load_durations(args.durations)
    if not known:
        parser.error(f"--durations {args.durations}: no per-test seconds in it (a 'seconds' object)")
    nodeids = collected() if args.collect else list(known)
    total = sum(known.get(n, args.unknown) for n in nodeids)
    lab = sum(known.get(n, args.unknown) for n in nodeids if n.startswith(parallel.INTEGRATION))
    print(f"{len(nodeids)} tests, {total:.0f} test-seconds ({lab:.0f} in lab modules, {total - lab:.0f} in unit "
          f"tests), from {args.durations.name}")
    for count in counts:
        result = simulate(nodeids, known, count, args.cores, args.lab_cores or None, args.unknown)
        rule = f"lab modules on at most {parallel.lab_cap(count)} at a time" if parallel.lab_cap(count) else "no cap"
        print(f"{count} workers ({rule}): wall {fmt(result.wall)} ({result.wall:.0f} s; the work / {count}: "
              f"{total / count:.0f} s); last lab module ends at {result.last_lab_end:.0f} s")
        print("  busy per worker: " + ", ".join(f"{w.busy:.0f} s" for w in result.workers))
        for unit, end in sorted(result.lab_ends.items(), key=lambda kv: kv[1])[-args.tail:] if args.tail else []:
            print(f"  {end:7.0f} s  {unit} ends")
    return 0


if __name__ == "__main__":
    sys.exit(main())
