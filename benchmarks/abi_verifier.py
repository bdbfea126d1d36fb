"""ABI verifier time on the real torch 2.13.0 CPU install: cold (empty cache) vs cached, side by side.

The environment is a venv over the real torch 2.13.0 (pip, from this machine's local wheel; made once under
~/.cache/labwright/test-envs) plus one extension compiled with torch.utils.cpp_extension. Each cold run gets an
empty cache directory (the OS page cache stays warm: this measures the verifier, not the disk).

    .venv/bin/python benchmarks/abi_verifier.py [-n 5] [--against OLD_SRC]

``--against OLD_SRC`` (the ``src`` directory of another labwright, e.g. ``mkdir -p /tmp/old && git archive REF
src | tar -x -C /tmp/old`` then ``--against /tmp/old/src``) also times cold and cached runs of that code and of
this one alternately, each in its own process (same venv, same load), and prints them side by side: on a shared,
loaded machine only runs taken side by side compare.

Targets (issue 3): under 2 s cold, under 0.2 s cached. For scale it also prints `import torch` alone (the floor
of any check that really imports) and the whole `labwright stack verify` process on a cached run (CLI start-up
included).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import _support  # noqa: F401  (tests/support on sys.path)

from labwright.matrix.abi import VerifyReport, verify_python
from labwright.matrix.abi_cache import AbiCache
from support.wheels import build_torch_extension_wheel, overlay_venv, torch_venv

BIN = Path(sys.executable).parent


def timed(n: int, run: Callable[[], object]) -> list[float]:
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        run()
        samples.append(time.perf_counter() - started)
    return samples


# One verify in a fresh process, timed around verify_python only (as the in-process numbers are): wall seconds,
# and CPU seconds of this process and its children (the probe, the import child), which load moves far less.
ONE_RUN = r"""
import resource, sys, time
from pathlib import Path
from labwright.matrix.abi import verify_python
from labwright.matrix.abi_cache import AbiCache
python, cache_dir = sys.argv[1], sys.argv[2]
def cpu():
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
started, cpu_started = time.perf_counter(), cpu()
report = verify_python(python, cache=AbiCache(Path(cache_dir)))
assert report.ok, report.to_json()
print(time.perf_counter() - started, cpu() - cpu_started)
"""


def side_by_side(n: int, python: str, work: Path, against: Path) -> None:
    """Cold and cached verify for this checkout's src and ``against``, alternating, each run in its own process."""
    sources = {"this checkout": Path(__file__).resolve().parents[1] / "src", f"{against}": against}
    kinds = ("cold", "cold cpu", "cached", "cached cpu")
    samples: dict[str, dict[str, list[float]]] = {name: {kind: [] for kind in kinds} for name in sources}
    runs = iter(range(10_000))

    def once(src: Path, cache_dir: Path) -> tuple[float, float]:
        env = {**os.environ, "PYTHONPATH": str(src)}
        out = subprocess.run([sys.executable, "-c", ONE_RUN, python, str(cache_dir)], env=env, check=True,
                             capture_output=True, text=True).stdout
        wall, cpu = out.strip().splitlines()[-1].split()
        return float(wall), float(cpu)

    for name, src in sources.items():  # fill each one's cache for the cached runs
        once(src, work / f"side-cached-{abs(hash(name))}")
    for _ in range(n):
        for name, src in sources.items():
            for kind, cache_dir in (("cold", work / f"side-cold-{next(runs)}"),
                                    ("cached", work / f"side-cached-{abs(hash(name))}")):
                wall, cpu = once(src, cache_dir)
                samples[name][kind].append(wall)
                samples[name][f"{kind} cpu"].append(cpu)
    print(f"side by side, alternating, median of {n} (min..max); cpu: this process + its children, seconds:")
    for name, got in samples.items():
        print(f"  {name}")
        print("    " + "   ".join(f"{kind} {statistics.median(got[kind]):.3f} ({min(got[kind]):.3f}.."
                                  f"{max(got[kind]):.3f})" for kind in kinds))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=5, help="runs per measurement (median reported)")
    parser.add_argument("--against", type=Path, help="the src directory of another labwright to compare with")
    args = parser.parse_args()
    if args.against is not None and not (args.against / "labwright" / "matrix" / "abi.py").is_file():
        print(f"--against {args.against}: no labwright/matrix/abi.py under it; give the src directory of a "
              "labwright checkout", file=sys.stderr)
        return 2

    print("… torch 2.13.0 venv (made once) and the cpp_extension probe wheel", file=sys.stderr)
    torch_env = torch_venv("2.13.0")
    with tempfile.TemporaryDirectory(prefix="labwright-abi-bench-") as tmp:
        work = Path(tmp)
        wheel = build_torch_extension_wheel(torch_env, work / "wheels", work / "build")
        venv = overlay_venv(work / "venv", torch_env)
        venv.install(wheel.parent, "torch_abi_probe", no_deps=True)
        python = str(venv.python)
        runs = iter(range(10_000))

        def cold(do_import: bool) -> Callable[[], VerifyReport]:
            def run() -> VerifyReport:
                report = verify_python(python, cache=AbiCache(work / f"cold-{next(runs)}"), do_import=do_import)
                assert report.ok and report.hashed_bytes > 0, report.to_json()
                return report
            return run

        cached_dir = work / "cached"
        verify_python(python, cache=AbiCache(cached_dir))  # fill it

        def cached(do_import: bool) -> Callable[[], VerifyReport]:
            def run() -> VerifyReport:
                report = verify_python(python, cache=AbiCache(cached_dir), do_import=do_import)
                assert report.ok and report.hashed_bytes == 0, report.to_json()
                return report
            return run

        cli_env = {**os.environ, "LABWRIGHT_CACHE": str(cached_dir.parent / "cli-cache")}
        cli = [str(BIN / "labwright"), "stack", "verify", "--python", python]
        subprocess.run(cli, env=cli_env, check=True, capture_output=True)  # fill the CLI's cache

        results = {
            "verify (symbols + real import)": (timed(args.n, cold(True)), timed(args.n, cached(True))),
            "verify --no-import (symbols only)": (timed(args.n, cold(False)), timed(args.n, cached(False))),
        }
        import_torch = timed(args.n, lambda: subprocess.run([python, "-I", "-W", "ignore", "-c", "import torch"],
                                                             check=True))
        cli_cached = timed(args.n, lambda: subprocess.run(cli, env=cli_env, check=True, capture_output=True))
        torch_lib_mb = sum(p.stat().st_size for p in (torch_env.site_packages / "torch" / "lib").glob("*.so*")) / 1e6
        if args.against is not None:
            side_by_side(args.n, python, work, args.against.resolve())

    print(f"torch 2.13.0+cpu, {torch_lib_mb:.0f} MB of torch/lib hashed cold; median of {args.n} runs; "
          f"{os.cpu_count()} CPUs")
    print(f"{'':36} {'cold':>9} {'cached':>9} {'cold/cached':>12}")
    for label, (cold_runs, cached_runs) in results.items():
        c, w = statistics.median(cold_runs), statistics.median(cached_runs)
        print(f"{label:36} {c:8.2f}s {w:8.3f}s {c / w:11.0f}x")
    print(f"{'labwright stack verify (process)':36} {'':9} {statistics.median(cli_cached):8.3f}s"
          "   (CLI start-up included)")
    print(f"{'python -c import torch (floor)':36} {statistics.median(import_torch):8.2f}s")
    cold_full, cached_full = (statistics.median(x) for x in results["verify (symbols + real import)"])
    floor = statistics.median(import_torch)
    print(f"as a ratio to `import torch` in this run: cold {cold_full / floor:.2f}x, "
          f"cached {cached_full / floor:.3f}x, "
          f"stack verify process (cached) {statistics.median(cli_cached) / floor:.2f}x")
    print(f"targets: cold < 2 s: {'met' if cold_full < 2 else 'MISSED'} ({cold_full:.2f} s); "
          f"cached < 0.2 s: {'met' if cached_full < 0.2 else 'MISSED'} ({cached_full:.3f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
