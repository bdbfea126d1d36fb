"""The CLI's start-up time: `labwright --help` and no-op commands, against `pyinfra --help` in the same run.

Each command is run ``--runs`` times, the commands interleaved (so a burst of load hits them all alike); the median
wall time of each (and its CPU time, which the machine's load changes much less), its ratio to `pyinfra --help`'s,
and the target (under 0.3 s for `labwright --help` and the no-op `labwright --version`) are printed. `--baseline
REV` also times `python -m labwright --help` from the source of git revision REV (extracted with `git archive`, run
with PYTHONPATH in front of this checkout), beside this tree's.

    .venv/bin/python benchmarks/cli_startup.py [--runs 15] [--baseline 7e2a7f9] [--json]

What the commands load: `--help` and `--version` no command group (labwright.cli.LazyGroup keeps each group's short
help); `kv --help` one light group; `lab status --help` the lab group, which imports pyinfra (its hostname rules).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TARGET_S = 0.3

#: (label, argv, held to the target)
COMMANDS: list[tuple[str, list[str], bool]] = [
    ("labwright --help", [str(BIN / "labwright"), "--help"], True),
    ("labwright --version (no-op)", [str(BIN / "labwright"), "--version"], True),
    ("labwright kv --help (one light group)", [str(BIN / "labwright"), "kv", "--help"], False),
    ("labwright lab status --help (pyinfra group)", [str(BIN / "labwright"), "lab", "status", "--help"], False),
    ("pyinfra --help", [str(BIN / "pyinfra"), "--help"], False),
]
REFERENCE = "pyinfra --help"


def timed(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system of the command and its children). CPU time is what the command
    costs whatever else the machine runs; wall time is what a person waits, and grows with the load."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, check=False)
    took = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.decode()[-500:]}")
    return took, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def bytecode_env(tmp: Path) -> dict[str, str]:
    """This environment with bytecode written (once, by the untimed first runs) under ``tmp``, as an installed wheel
    has it: with PYTHONDONTWRITEBYTECODE=1 every run compiled each module without a .pyc (a module just edited, or
    all of a baseline's extracted source), ~50-100 ms a run here."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
    return env


def baseline_source(rev: str, into: Path) -> Path:
    """This repository's src/ at ``rev``, extracted into ``into``."""
    archive = into / "src.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "-C", str(REPO), "archive", rev, "src"], stdout=out, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data") if hasattr(tarfile, "data_filter") else tar.extractall(into)
    return into / "src"


def arguments(doc: str, runs: int, baseline: str) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    """The options these timing benchmarks share: ``--runs`` (default ``runs``), ``--baseline REV``, ``--json``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--runs", type=int, default=runs, help=f"runs of each command (default {runs})")
    parser.add_argument("--baseline", metavar="REV", help=baseline)
    parser.add_argument("--json", action="store_true", help="the medians as one JSON object on stdout")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error(f"--runs {args.runs}: give 1 or more")
    return parser, args


def main() -> int:
    parser, args = arguments(__doc__, 15, "also time `python -m labwright --help` at git revision REV")

    with tempfile.TemporaryDirectory(prefix="cli-startup-") as tmp:
        plain = bytecode_env(Path(tmp))
        commands = [(label, argv, held, plain) for label, argv, held in COMMANDS]
        if args.baseline:
            try:
                src = baseline_source(args.baseline, Path(tmp))
            except subprocess.CalledProcessError:
                parser.error(f"--baseline {args.baseline}: not a git revision of {REPO}; give a commit or tag")
            module = [sys.executable, "-m", "labwright", "--help"]
            env = {**plain, "PYTHONPATH": str(src)}
            commands += [(f"python -m labwright --help at {args.baseline}", module, False, env),
                         ("python -m labwright --help (this tree)", module, False, plain)]
        for _label, argv, _held, env in commands:  # warm the page cache and the bytecode once, untimed
            timed(argv, env)
        times: dict[str, list[float]] = {label: [] for label, *_ in commands}
        cpu: dict[str, list[float]] = {label: [] for label, *_ in commands}
        for _ in range(args.runs):
            for label, argv, _held, env in commands:
                took, used = timed(argv, env)
                times[label].append(took)
                cpu[label].append(used)

    medians = {label: statistics.median(values) for label, values in times.items()}
    cpu_medians = {label: statistics.median(values) for label, values in cpu.items()}
    reference = medians[REFERENCE]
    load = os.getloadavg()[0]
    if args.json:
        print(json.dumps({"runs": args.runs, "load1": load, "cpus": os.cpu_count(), "target_s": TARGET_S,
                          "median_s": medians, "median_cpu_s": cpu_medians,
                          "ratio_to_pyinfra_help": {k: v / reference for k, v in medians.items()}},
                         indent=2))
    else:
        print(f"median wall time of {args.runs} runs each, interleaved; load average {load:.1f} on {os.cpu_count()} "
              "CPUs")
        print(f"{'command':<52} {'median s':>9} {'min s':>7} {'CPU s':>7} {'vs pyinfra --help':>18}")
        for label, *_ in commands:
            print(f"{label:<52} {medians[label]:>9.3f} {min(times[label]):>7.3f} {cpu_medians[label]:>7.3f} "
                  f"{medians[label] / reference:>17.2f}x")
    missed = [label for label, _argv, held, _env in commands if held and medians[label] >= TARGET_S]
    verdict = "met" if not missed else "MISSED (" + ", ".join(missed) + ")"
    print(f"target: labwright --help and --version under {TARGET_S} s: {verdict}", file=sys.stderr if args.json
          else sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
