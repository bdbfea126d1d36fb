"""Benchmark: `labwright matrix refresh` (registry mode) cold and with nothing new, as the user runs it.

In one run, into a fresh directory (a copy of the packaged matrix's hand-written files):
  cold       the first refresh: every feed's PyPI JSON, the core metadata of each torch/torchvision/torchaudio
             release, every *_pypi.toml written
  no-change  the refresh right after: conditional requests (ETag / body hash), nothing parsed or written
  fetch      the same JSON bodies fetched with plain urllib (the network floor a refresh cannot beat)
  import torch  `python -c "import torch"` in the real torch 2.13.0 venv the ABI benchmark uses (the yardstick
             issue 18 asks for: what any check that imports torch pays), interleaved with the no-change runs
Prints each (median of --runs for no-change, fetch and import torch) and each as a ratio to import torch.

    .venv/bin/python benchmarks/matrix_refresh.py [--index https://pypi.org/pypi] [--runs 5]
    .venv/bin/python benchmarks/matrix_refresh.py --recorded --runs 1   # offline, the quickest

--recorded answers from a 127.0.0.1 stand-in with PyPI's recorded responses (tests/support/recorded_registry.py,
tests/unit/matrix/recorded) instead of the registries; the PyTorch index and GitHub's API are 404 there.

The CLI runs as ``sys.executable -m labwright`` (the same CLI as the ``labwright`` console script, exit code
included): started as above, .venv/bin is not on PATH and a bare ``labwright`` would not be found.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import _support  # noqa: F401  (tests/support on sys.path)

from labwright.matrix.registry import DEFAULT_INDEX, FEEDS
from labwright.paths import packaged_matrix_dir

#: This interpreter's labwright CLI: a bare "labwright" is looked up on PATH, which holds .venv/bin only when the venv
#: is activated (tests/unit/test_benchmarks_console_scripts.py keeps benchmarks/ from naming one).
LABWRIGHT = [sys.executable, "-m", "labwright"]


def _refresh(out: Path, index: str, sources: list[str]) -> tuple[float, str]:
    started = time.perf_counter()
    proc = subprocess.run([*LABWRIGHT, "matrix", "refresh", "--out", str(out), "--index", index, *sources],
                          capture_output=True, text=True, timeout=600)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"refresh failed ({proc.returncode}): {proc.stderr.strip()}")
    return elapsed, proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", default=DEFAULT_INDEX)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--recorded", action="store_true",
                        help="offline: PyPI's recorded answers from a 127.0.0.1 stand-in instead of --index")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error(f"--runs {args.runs}: give 1 or more")
    with contextlib.ExitStack() as stack:
        sources: list[str] = []
        if args.recorded:
            from support.recorded_registry import RecordedRegistry

            registry = stack.enter_context(RecordedRegistry())
            args.index = registry.index
            sources = ["--pytorch-index", registry.pytorch, "--github-api", registry.github]
        run(args, sources)


def run(args: argparse.Namespace, sources: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        for name in ("components.toml", "cuda.toml", "stacks.toml"):
            shutil.copy(packaged_matrix_dir() / name, out / name)
        from support.wheels import torch_venv

        python = str(torch_venv("2.13.0").python)
        cold, _ = _refresh(out, args.index, sources)
        unchanged, imports = [], []
        for _ in range(args.runs):
            elapsed, stdout = _refresh(out, args.index, sources)
            if "updated" in stdout:
                raise SystemExit(f"a no-change refresh updated something:\n{stdout}")
            unchanged.append(elapsed)
            started = time.perf_counter()
            subprocess.run([python, "-c", "import torch"], check=True, timeout=300)
            imports.append(time.perf_counter() - started)
        fetches = []
        for _ in range(args.runs):
            started = time.perf_counter()
            for feed in FEEDS:
                with urllib.request.urlopen(f"{args.index}/{feed.package}/json", timeout=30) as response:
                    response.read()
            fetches.append(time.perf_counter() - started)
    no_change, fetch, torch = statistics.median(unchanged), statistics.median(fetches), statistics.median(imports)
    print(f"matrix refresh ({args.index}{' (recorded)' if args.recorded else ''}, {len(FEEDS)} feeds)")
    print(f"  cold          {cold:7.2f} s  ({cold / torch:.2f} x import torch)")
    print(f"  no-change     {no_change:7.2f} s  (median of {args.runs}; {no_change / cold:.2f} x cold, "
          f"{no_change / torch:.2f} x import torch)")
    print(f"  fetch         {fetch:7.2f} s  (plain GET of the {len(FEEDS)} JSON bodies: the network floor; "
          f"{fetch / torch:.2f} x import torch)")
    print(f"  import torch  {torch:7.2f} s  (median of {args.runs}, torch 2.13.0 CPU, between the no-change runs)")


if __name__ == "__main__":
    main()
