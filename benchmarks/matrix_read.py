"""Reading the wheels matrix: `labwright matrix ...` with the TOML parse cache warm and cold, side by side in one run.

The matrix is 2.6 MB of TOML (~6,200 wheel rows as inline tables); tomllib, pure Python, parsed it in 0.45 s of CPU
in every process that read it. textio.read_toml keeps a JSON copy of each large file's parse under the cache root
(``toml/SHA256.json``); matrix.resolve asks a stack's version pins once per version, not per wheel. Each command runs
``--runs`` times, interleaved: warm (one cache, filled by an untimed first run) and cold (an empty cache each run);
``--baseline REV`` also runs it from the source of git revision REV (no cache there, before the change). The
median CPU time (user + system; the load changes it much less than wall time) is compared.

Target: `labwright matrix stacks` warm at most 0.7x its cold run (the parse is gone) and, with ``--baseline`` at a
commit before both changes (dee2a9d), at most 0.65x the baseline (measured 0.57x on 2026-11-29: 0.83 s against
1.45 s of CPU; what is left is mostly the CLI's imports, docs/matrix.md).

    .venv/bin/python benchmarks/matrix_read.py [--runs 9] [--baseline dee2a9d] [--json]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cli_startup import arguments, baseline_source, bytecode_env, timed  # the same timing, from the same directory

BIN = Path(sys.executable).parent
COMMANDS = {"matrix stacks": ["matrix", "stacks"], "matrix show --json": ["matrix", "show", "--json"],
            "matrix resolve --stack C": ["matrix", "resolve", "--stack", "C", "--json"]}
HELD = "matrix stacks"
WARM_TARGET, BASELINE_TARGET = 0.7, 0.65


def main() -> int:
    parser, args = arguments(__doc__, 9, "also run the commands from git revision REV's source")
    with tempfile.TemporaryDirectory(prefix="matrix-read-") as tmp:
        base_env = {k: v for k, v in bytecode_env(Path(tmp)).items() if k not in ("LABWRIGHT_CACHE",
                                                                                   "LABWRIGHT_MATRIX_DIR")}
        warm = {**base_env, "XDG_CACHE_HOME": str(Path(tmp) / "warm")}
        ways: list[tuple[str, list[str], dict[str, str] | None]] = [("warm", [str(BIN / "labwright")], warm),
                                                                    ("cold", [str(BIN / "labwright")], None)]
        if args.baseline:
            try:
                src = baseline_source(args.baseline, Path(tmp))
            except subprocess.CalledProcessError:
                parser.error(f"--baseline {args.baseline}: not a git revision; give a commit or tag")
            ways.append((f"at {args.baseline}", [sys.executable, "-m", "labwright"], {**warm, "PYTHONPATH": str(src)}))
        cpu: dict[str, dict[str, list[float]]] = {c: {w: [] for w, *_ in ways} for c in COMMANDS}
        wall: dict[str, dict[str, list[float]]] = {c: {w: [] for w, *_ in ways} for c in COMMANDS}
        for argv in COMMANDS.values():  # fills the warm cache, the bytecode and the page cache, untimed
            for _way, prefix, env in ways:
                timed([*prefix, *argv], env or {**base_env, "XDG_CACHE_HOME": str(Path(tmp) / "cold-warm-up")})
        for run in range(args.runs):
            for command, argv in COMMANDS.items():
                for way, prefix, env in ways:
                    if env is None:  # cold: an empty cache of its own
                        env = {**base_env, "XDG_CACHE_HOME": str(Path(tmp) / f"cold-{run}-{len(argv)}")}
                    took, used = timed([*prefix, *argv], env)
                    wall[command][way].append(took)
                    cpu[command][way].append(used)
    med = {c: {w: statistics.median(v) for w, v in ways_.items()} for c, ways_ in cpu.items()}
    med_wall = {c: {w: statistics.median(v) for w, v in ways_.items()} for c, ways_ in wall.items()}
    held = med[HELD]
    verdicts = [f"warm {held['warm'] / held['cold']:.2f}x cold (target <= {WARM_TARGET}x): "
                + ("met" if held["warm"] <= WARM_TARGET * held["cold"] else "MISSED")]
    if args.baseline:
        ratio = held["warm"] / held[f"at {args.baseline}"]
        verdicts.append(f"warm {ratio:.2f}x {args.baseline} (target <= {BASELINE_TARGET}x): "
                        + ("met" if ratio <= BASELINE_TARGET else "MISSED"))
    if args.json:
        print(json.dumps({"runs": args.runs, "load1": os.getloadavg()[0], "median_cpu_s": med,
                          "median_wall_s": med_wall, "verdicts": verdicts}, indent=2))
    else:
        print(f"median CPU s (wall s) of {args.runs} interleaved runs; load average {os.getloadavg()[0]:.1f}")
        names = [w for w, *_ in ways]
        print(f"{'command':<28}" + "".join(f"{n:>22}" for n in names))
        for command in COMMANDS:
            print(f"{command:<28}" + "".join(f"{med[command][n]:>12.3f} ({med_wall[command][n]:>6.2f})"
                                             for n in names))
    for line in verdicts:
        print(f"target, {HELD}: {line}", file=sys.stderr if args.json else sys.stdout)
    return 0 if all(line.endswith("met") for line in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
