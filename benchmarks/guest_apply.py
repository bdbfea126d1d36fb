"""`labwright guest apply` of 5 LXD guests: the first apply (creates them) side by side with no-change re-applies,
through the CLI a user runs (process start included) and in-process (the library alone, with its request count).

    sudo .venv/bin/python benchmarks/guest_apply.py [--guests 5] [--repeat 5] [--keep]

Target (issue 4): a no-change apply of 5 LXD guests under 2 s in total; it should be a few API reads.
Guests are copies of the test lab's template on its profile (lwtest), named lwb-<hex>-N, removed at the end.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from labwright.guests.lxd import LxdBackend
from labwright.guests.model import load_guests
from labwright.lxd.client import LxdClient
from labwright.testing.lab_fixture import TEMPLATE, ensure_test_lab

REPO = Path(__file__).resolve().parent.parent
TARGET_S = 2.0


class CountingClient(LxdClient):
    def __init__(self) -> None:
        super().__init__()
        self.sent: list[str] = []

    def raw(self, method, path, body=None, headers=None, params=None):
        self.sent.append(method)
        return super().raw(method, path, body=body, headers=headers, params=params)


def write_inventory(path: Path, names: list[str]) -> None:
    hosts = ",\n    ".join(
        f'("@lxd/{name}", {{"guest": {{"backend": "lxd", "clone": "{TEMPLATE}", "profiles": ["lwtest"], '
        f'"cores": 1, "memory": "512M", "features": {{"nesting": True}}, '
        f'"mounts": [{{"host": "/tmp", "guest": "/host-tmp", "readonly": True}}]}}}})'
        for name in names
    )
    path.write_text(f"guests = [\n    {hosts},\n]\n")


def cli_apply(inventory: Path) -> tuple[float, str]:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}", "COLUMNS": "200"}
    started = time.perf_counter()
    # This venv's console script by its path: a bare name is looked up on the PATH of the one who started it.
    proc = subprocess.run([str(Path(sys.executable).parent / "labwright"), "guest", "apply", "-i", str(inventory)],
                          capture_output=True, text=True, env=env, timeout=1800)
    elapsed = time.perf_counter() - started
    if proc.returncode:
        raise SystemExit(f"guest apply failed: {proc.stderr.strip()}")
    return elapsed, proc.stdout.strip().splitlines()[-1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--guests", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="leave the guests in place")
    args = parser.parse_args()

    lab = ensure_test_lab()
    prefix = f"lwb-{secrets.token_hex(2)}"
    names = [f"{prefix}-{i}" for i in range(args.guests)]
    with tempfile.TemporaryDirectory() as tmp:
        inventory = Path(tmp) / "bench.py"
        write_inventory(inventory, names)
        try:
            first, first_summary = cli_apply(inventory)
            cli_runs = [cli_apply(inventory) for _ in range(args.repeat)]
            specs = load_guests(inventory)
            library_runs, requests, writes = [], 0, 0
            for _ in range(args.repeat):
                client = CountingClient()
                backend = LxdBackend(client)
                started = time.perf_counter()
                changed = [backend.apply(spec) for spec in specs]
                library_runs.append(time.perf_counter() - started)
                assert not any(changed), changed
                requests, writes = len(client.sent), sum(m != "GET" for m in client.sent)
                client.close()
        finally:
            if not args.keep:
                for name in names:
                    lab.remove(name)

    no_change = statistics.median(t for t, _ in cli_runs)
    library = statistics.median(library_runs)
    print(f"guest apply, {args.guests} LXD guests (median of {args.repeat} no-change runs)")
    print(f"{'':32}{'first apply':>14}{'no-change':>14}")
    print(f"{'CLI (process start included)':32}{first:>13.2f}s{no_change:>13.2f}s")
    print(f"{'library (apply() per guest)':32}{'':>14}{library * 1000:>12.1f}ms")
    print(f"{'requests / writes per run':32}{'':>14}{f'{requests} / {writes}':>14}")
    print(f"first apply: {first_summary}; no-change: {cli_runs[-1][1]}")
    print(f"speed-up of a no-change run over the first: {first / no_change:.0f}x")
    ok = no_change < TARGET_S and writes == 0
    print(f"target: no-change under {TARGET_S:.0f} s with no write -> {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
