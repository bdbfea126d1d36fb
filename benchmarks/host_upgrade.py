"""`labwright host upgrade --yes`: time from the command to every GPU guest passing `gpu check` again, on the lab.

    sudo .venv/bin/python benchmarks/host_upgrade.py                  # 3 runs, 2 GPU guests
    sudo .venv/bin/python benchmarks/host_upgrade.py --runs 5 --guests 3

Each run: a fresh fake NVIDIA host tree below /dev (tests/support/fake_nvidia: driver 550.54.14, nvidia-uvm major
509, a new kernel with a DKMS build of 550.54.15, a stand-in installer; the simulated reboot gives nvidia-uvm 237)
and fresh LXD guests with its nodes passed through and a matching userspace. Timed: the CLI in-process, from
`host upgrade NODE --yes` to its return, which is after the last guest's gpu check passed. The guests are real
(snapshots on the lab's pool, config PATCH, the installer run inside, restarts under systemd, gpu check); the host's
driver install and reboot are simulated on the tree and take milliseconds, so a real host adds its reboot and the
DKMS build. Reported: the total and the median per step kind. Guests are named lwbhu-<hex> and removed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import secrets
import statistics
import sys
import time
from collections import defaultdict

import _support  # noqa: F401  (tests/support on sys.path)

from labwright.cli import main as cli_main
from labwright.cli import register
from labwright.guests.gpu import GpuHost
from labwright.guests.lxd import LxdBackend
from labwright.testing.lab_fixture import ensure_test_lab
from support.fake_nvidia import (
    DRIVER_VERSION,
    fake_root_in_dev,
    make_fake_nvidia_host,
    make_upgrade_host,
    remove_fake_root,
)
from support.gpu_guest import install_userspace, spec

NEW = "550.54.15"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--guests", type=int, default=2)
    args = parser.parse_args()
    lab = ensure_test_lab()
    register(["host", "gpu"])
    totals: list[float] = []
    steps: dict[str, list[float]] = defaultdict(list)
    for run in range(args.runs):
        root = fake_root_in_dev("lwbench-hu")
        names = [f"lwbhu-{secrets.token_hex(3)}" for _ in range(args.guests)]
        try:
            make_fake_nvidia_host(root, uvm_major=509)
            make_upgrade_host(root, built={"6.8.12-4-pve": [DRIVER_VERSION], "6.8.12-9-pve": [NEW]},
                              repository=(NEW,), hostname="lwbench", uvm_major_after_reboot=237)
            for name in names:
                LxdBackend(lab.client, gpu_host=GpuHost(root)).apply(spec(name, gpu="nvidia"))
                install_userspace(lab.client, name, DRIVER_VERSION)
            out = io.StringIO()
            t0 = time.monotonic()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                code = cli_main(["host", "upgrade", "lwbench", "--host-root", str(root), "--yes", "--json"])
            total = time.monotonic() - t0
            result = json.loads(out.getvalue())
            assert code == 0 and result["ok"], result
            totals.append(total)
            per: dict[str, float] = defaultdict(float)
            for done in result["done"]:
                per[done["action"]] += done["seconds"]
            for action, seconds in per.items():
                steps[action].append(seconds)
            print(f"run {run + 1}: {total:.1f} s for {args.guests} guest(s)", file=sys.stderr)
        finally:
            for name in names:
                lab.remove(name)
            remove_fake_root(root)
    print(f"host upgrade --yes to every guest passing gpu check ({args.guests} guests): median "
          f"{statistics.median(totals):.1f} s, min {min(totals):.1f} s, max {max(totals):.1f} s (n={len(totals)})")
    for action, values in steps.items():
        print(f"  {action:<12} median {statistics.median(values):6.2f} s (all guests together)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
