"""Backup of a 16 MiB chip through flashrom's dummy programmer, side by side with one raw `flashrom -r`.

    .venv/bin/python benchmarks/bios_backup.py [--repeat 5] [--lxd]

Issue 8 asks for the backup's time to be reported (no target). Measured on this machine (@local), each the median
of --repeat runs of the same emulated W25Q128FV backed by an X99-layout image:

- raw: one ``flashrom -p dummy:... -r FILE`` (what the runbook does by hand)
- raw x2 + sha256: two reads and their hashes (the least the read-twice check costs)
- library: labwright.bios.backup.backup() in-process on a connected @local target (two reads, hashes, copy off,
  copy's hash, descriptor decode, manifest)
- CLI: ``labwright bios backup @local`` as a user runs it (interpreter and pyinfra start included)
- with --lxd, the library and a raw read again in a fresh lab container through the @lxd connector (flashrom
  installed there by deploys/bios_backup.py first; the container is removed at the end)
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import _support  # noqa: F401  (tests/support on sys.path)

from labwright.bios.backup import backup
from labwright.bios.target import Target
from labwright.testing.pyinfra_output import run_pyinfra, tool_env
from labwright.ui import Reporter
from support.bios_image import dummy_programmer, write_x99_image

#: This venv's console script by its path, not a bare name looked up on PATH (.venv/bin is not on it when the
#: benchmark runs as `.venv/bin/python benchmarks/bios_backup.py`).
LABWRIGHT = str(Path(sys.executable).parent / "labwright")


def timed(fn: Callable[[], object], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def lxd_results(work: Path, repeat: int) -> list[tuple[str, float]]:
    from labwright.testing.lab_fixture import ensure_test_lab
    from support.bios_image import x99_image

    lab = ensure_test_lab()
    name = lab.fresh("lwbench")
    try:
        lab.client.push_file(name, "/root/chip.bin", x99_image(), mode=0o644)
        programmer = dummy_programmer("/root/chip.bin")
        setup = run_pyinfra(f"@lxd/{name}", "deploys/bios_backup.py", f"bios_programmer={programmer}",
                            f"bios_out={work / 'lxd-setup'}", cwd=Path(__file__).resolve().parent.parent)
        if setup.rc:
            raise SystemExit(f"deploy into {name} failed:\n{setup.output[-2000:]}")
        counter = iter(range(1_000_000))
        with Target.connect(f"@lxd/{name}") as target:
            def raw() -> None:
                target.check(f"flashrom -p {programmer} -r /root/raw.bin", "flashrom -r")

            def library() -> None:
                backup(target, programmer, work / f"lxd{next(counter)}", Reporter(quiet=True))

            return [("@lxd: raw flashrom -r (1 read)", timed(raw, repeat)),
                    ("@lxd: labwright backup, in-process", timed(library, repeat))]
    finally:
        lab.remove(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--lxd", action="store_true", help="also measure through @lxd in a fresh lab container")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lw-bios-bench-"))
    try:
        chip = write_x99_image(work / "chip.bin")
        programmer = dummy_programmer(chip)
        flashrom = shutil.which("flashrom") or "/usr/sbin/flashrom"

        def raw(path: Path = work / "raw.bin") -> None:
            subprocess.run([flashrom, "-p", programmer, "-r", str(path)], check=True, capture_output=True)

        def raw_twice() -> None:
            raw(work / "r1.bin")
            raw(work / "r2.bin")
            subprocess.run(["sha256sum", str(work / "r1.bin"), str(work / "r2.bin")], check=True,
                           capture_output=True)

        counter = iter(range(1_000_000))
        target = Target.connect("@local")

        def library() -> None:
            backup(target, programmer, work / f"lib{next(counter)}", Reporter(quiet=True))

        def cli() -> None:
            subprocess.run([LABWRIGHT, "bios", "backup", "@local", "-p", programmer, "--out",
                            str(work / f"cli{next(counter)}")], check=True, capture_output=True, env=tool_env())

        results = [("raw flashrom -r (1 read)", timed(raw, args.repeat)),
                   ("raw x2 + sha256 (2 reads)", timed(raw_twice, args.repeat)),
                   ("labwright backup, in-process", timed(library, args.repeat)),
                   ("labwright bios backup (CLI)", timed(cli, args.repeat))]
        target.close()
        if args.lxd:
            results += lxd_results(work, args.repeat)
        base = results[0][1]
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"16 MiB dummy chip (W25Q128FV), median of {args.repeat}; {os.cpu_count()} CPUs, load average {load}")
        print(f"{'step':34} {'seconds':>8} {'x raw read':>10}")
        for label, seconds in results:
            print(f"{label:34} {seconds:8.2f} {seconds / base:10.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
