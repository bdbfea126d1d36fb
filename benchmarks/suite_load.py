"""The test suite's wall time idle vs with every core saturated, side by side in one run (issue 16, item 5).

Runs the same pytest selection twice (or ``--rounds`` times each): once on an idle machine, once while one busy
process per core spins (pure-Python busy loops at normal priority, the load a parallel build or a second test run
puts on a homelab box; no stress tool to install). Prints each run's wall time, pass/fail counts and the loaded/idle
ratio. A failure under load is the bug this benchmark exists to catch: the script exits 1 when any run fails.

    .venv/bin/python benchmarks/suite_load.py [--rounds 1] [--busy N] [--only loaded] [--log PREFIX] [-- PYTEST ARGS]

``--only loaded`` skips the idle runs: the whole suite under load (``--only loaded -- tests``) is what issue 16 asks
to hold three times, and one idle run of it is what CI already does.

Default selection: ``tests/unit`` (the whole suite needs ~35 minutes idle on 2 cores; pass ``-- tests`` for it).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUMMARY = re.compile(r"=+ (.*) in [\d.]+s")


def spin(stop: multiprocessing.synchronize.Event) -> None:  # type: ignore[name-defined]
    while not stop.is_set():
        for _ in range(100_000):
            pass


def run_pytest(args: list[str], log: Path | None = None) -> tuple[float, int, str]:
    """One pytest run; its output is written to ``log`` as it runs (to follow a long run: ``tail -f LOG``)."""
    started = time.monotonic()
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    if log is None:
        proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        output, code = proc.stdout, proc.returncode
    else:
        with log.open("w") as handle:
            code = subprocess.run(command, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT).returncode
        output = log.read_text(errors="replace")
    elapsed = time.monotonic() - started
    found = SUMMARY.findall(output)
    summary = found[-1] if found else (output.strip().splitlines() or ["no output"])[-1]
    if code != 0:
        failed = [line for line in output.splitlines() if line.startswith(("FAILED", "ERROR"))]
        summary += "".join(f"\n    {line}" for line in failed[:20])
    return elapsed, code, summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="runs of each kind (default 1)")
    parser.add_argument("--busy", type=int, default=os.cpu_count() or 1,
                        help="busy processes while loaded (default: one per core)")
    parser.add_argument("--only", choices=("idle", "loaded"), help="run only this kind (no ratio is printed)")
    parser.add_argument("--log", type=Path, help="write each run's pytest output to LOG-ROUND-KIND.txt as it runs "
                        "(LOG a path prefix), to follow it with tail -f")
    parser.add_argument("pytest_args", nargs="*", default=["tests/unit"])
    args = parser.parse_args()
    if args.rounds < 1 or args.busy < 1:
        parser.error("--rounds and --busy must be at least 1")
    results: dict[str, list[float]] = {"idle": [], "loaded": []}
    failures = 0
    for round_ in range(1, args.rounds + 1):
        for kind in ((args.only,) if args.only else ("idle", "loaded")):
            stop = multiprocessing.Event()
            workers = [multiprocessing.Process(target=spin, args=(stop,), daemon=True)
                       for _ in range(args.busy if kind == "loaded" else 0)]
            for worker in workers:
                worker.start()
            try:
                log = Path(f"{args.log}-{round_}-{kind}.txt") if args.log else None
                elapsed, code, summary = run_pytest(args.pytest_args, log)
            finally:
                stop.set()
                for worker in workers:
                    worker.join(timeout=10)
            results[kind].append(elapsed)
            failures += code != 0
            print(f"round {round_} {kind:6} {elapsed:8.1f} s  exit {code}  {summary}", flush=True)
    if args.only:
        return 1 if failures else 0
    idle = sum(results["idle"]) / len(results["idle"])
    loaded = sum(results["loaded"]) / len(results["loaded"])
    print(f"\n{' '.join(args.pytest_args)}: idle {idle:.1f} s, loaded ({args.busy} busy) {loaded:.1f} s, "
          f"ratio loaded/idle {loaded / idle:.2f}x; runs failed: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
