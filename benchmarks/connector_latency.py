"""Per-command latency: labwright's @lxd connector vs `lxc exec` vs pyinfra's own SSH connector,
on the same fresh lab container, N commands each (default 200); plus a no-change re-run of
deploys/base.py through @lxd. Prints medians, p95s and the ratios side by side.

    sudo .venv/bin/python benchmarks/connector_latency.py [-n 200] [--no-deploy]

Targets (issue 2): @lxd under 20 ms median and at least 2x faster than both `lxc exec` and the SSH
connector; a no-change re-run of deploys/base.py under 5 s.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all

from labwright.lab.lab import instance_address
from labwright.testing.lab_fixture import ensure_test_lab

REPO = Path(__file__).resolve().parent.parent


def measure(n: int, run: Callable[[], object]) -> list[float]:
    run()  # warm-up (connection set-up is not per-command cost)
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        run()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def pyinfra_host(name: str, data: dict):
    inventory = Inventory(([name], data))
    state = State(inventory, Config())
    connect_all(state)
    host = inventory.get_host(name)
    if not host.connected:
        raise SystemExit(f"could not connect to {name}")
    return host


def checked(host) -> Callable[[], None]:
    def run() -> None:
        ok, out = host.run_shell_command("true")
        assert ok, out.output
    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=200, help="commands per connector")
    parser.add_argument("--no-deploy", action="store_true", help="skip the deploys/base.py re-run timing")
    args = parser.parse_args()

    lab = ensure_test_lab()
    name = lab.fresh("lwbench")
    try:
        address = instance_address(lab.client, name)
        host_key = lab.client.exec(name, ["cat", "/etc/ssh/ssh_host_ed25519_key.pub"]).stdout.decode().split()
        known_hosts = Path(tempfile.mkstemp(prefix="lw-known-hosts-")[1])
        known_hosts.write_text(f"{address} {host_key[0]} {host_key[1]}\n")

        lxd = pyinfra_host(f"@lxd/{name}", {})
        ssh = pyinfra_host(address, {"ssh_user": "root", "ssh_key": lab.private_key_path,
                                     "ssh_known_hosts_file": str(known_hosts)})

        def lxc_exec() -> None:
            subprocess.run(["lxc", "exec", name, "--", "true"], check=True)

        results = {
            "@lxd (labwright, REST exec)": measure(args.n, checked(lxd)),
            "lxc exec (subprocess)": measure(args.n, lxc_exec),
            "@ssh (pyinfra, persistent)": measure(args.n, checked(ssh)),
        }
        print(f"\n{args.n} commands each against container {name}\n")
        print(f"{'connector':32} {'median ms':>10} {'p95 ms':>10} {'x slower than @lxd':>20}")
        base = statistics.median(results["@lxd (labwright, REST exec)"])
        for label, samples in results.items():
            med = statistics.median(samples)
            p95 = statistics.quantiles(samples, n=20)[18]
            print(f"{label:32} {med:10.1f} {p95:10.1f} {med / base:20.2f}")
        lxc_ratio = statistics.median(results["lxc exec (subprocess)"]) / base
        ssh_ratio = statistics.median(results["@ssh (pyinfra, persistent)"]) / base
        print(f"\ntarget @lxd median < 20 ms: {'met' if base < 20 else 'MISSED'} ({base:.1f} ms)")
        print(f"target >= 2x vs lxc exec and vs SSH: {'met' if min(lxc_ratio, ssh_ratio) >= 2 else 'MISSED'} "
              f"({lxc_ratio:.2f}x, {ssh_ratio:.2f}x)")

        if not args.no_deploy:
            deploy_cmd = [str(Path(sys.executable).parent / "pyinfra"), "-y", f"@lxd/{name}", "deploys/base.py",
                          "--data", f"admin_ssh_public_key_file={Path(lab.private_key_path).with_suffix('.pub')}"]
            started = time.perf_counter()
            first = subprocess.run(deploy_cmd, cwd=REPO, capture_output=True, text=True)
            first_s = time.perf_counter() - started
            if first.returncode != 0:
                print(f"\ndeploys/base.py failed:\n{first.stderr[-1500:]}")
                return 1
            started = time.perf_counter()
            subprocess.run(deploy_cmd, cwd=REPO, capture_output=True, text=True, check=True)
            rerun_s = time.perf_counter() - started
            print(f"\ndeploys/base.py via @lxd: first run {first_s:.1f} s, no-change re-run {rerun_s:.1f} s "
                  f"(target < 5 s: {'met' if rerun_s < 5 else 'MISSED'})")
    finally:
        lab.remove(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
