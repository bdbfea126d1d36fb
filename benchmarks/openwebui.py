"""Open WebUI: time from the start of the deploy to the first streamed token in a real browser.

Runs tests/integration/test_openwebui_browser.py's fixture and browser test (a fresh lab container, llama-server on
the tiny GGUF, deploys/openwebui.py from the cached wheelhouse served over the lab bridge, headless Chromium through
Playwright) and prints what it measured:

    .venv/bin/python benchmarks/openwebui.py [-n 1]

- deploy: the first pyinfra run of deploys/openwebui.py (venv from the wheelhouse, keys, unit, start, health, sign-in)
- deploy_to_first_token: from the start of that run to the first answer text in the page (sign-in and typing
  included)
- first_token_after_send: from the click on send to the first answer text in the page
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEST = "tests/integration/test_openwebui_browser.py"


def run_once(out: Path) -> dict[str, float]:
    env = {**os.environ, "LABWRIGHT_OPENWEBUI_TIMINGS": str(out)}
    proc = subprocess.run([sys.executable, "-m", "pytest", TEST, "-q", "-x", "-p", "no:cacheprovider", "-k",
                           "verify_fails or browser"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=3600)
    if proc.returncode != 0 or not out.exists():
        print(proc.stdout[-4000:] + proc.stderr[-2000:], file=sys.stderr)
        raise SystemExit(f"labwright: {TEST} failed (exit {proc.returncode}); nothing measured")
    return {key: float(value) for key, value in json.loads(out.read_text()).items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=1, help="fresh containers to measure (each one a full deploy)")
    args = parser.parse_args()
    if args.n < 1:
        print(f"labwright: -n {args.n}: give at least 1", file=sys.stderr)
        return 2
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(args.n):
            runs.append(run_once(Path(tmp) / f"run{index}.json"))
    for key in ("deploy", "deploy_to_first_token", "first_token_after_send"):
        values = sorted(run[key] for run in runs)
        print(f"{key:24s} median {values[len(values) // 2]:8.2f} s   min {values[0]:8.2f} s   max {values[-1]:8.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
