"""Per-command latency: labwright's @lxd connector (agent session, and REST exec with lxd_agent=False)
vs `lxc exec` vs pyinfra's own SSH connector, on the same fresh lab container, N commands each
(default 200), round-robin; plus a no-change re-run of deploys/base.py through @lxd both ways.
Prints medians, p95s and the ratios side by side.

    sudo .venv/bin/python benchmarks/connector_latency.py [-n 200] [--no-deploy] [--backend incus]

``--backend incus``: the same on Incus (the Incus test lab, labwright.testing.lab_fixture.incus_test_lab):
``@incus/NAME`` both ways against ``incus exec`` and SSH.

Targets (issue 2): @lxd (its default: the agent) under 20 ms median and at least 2x faster than both
`lxc exec` and the SSH connector; a no-change re-run of deploys/base.py under 5 s. The same targets hold for @incus
against `incus exec` (issue 34).
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
from labwright.testing.lab_fixture import ensure_test_lab, incus_test_lab

REPO = Path(__file__).resolve().parent.parent


def measure(n: int, runners: dict[str, Callable[[], object]]) -> dict[str, list[float]]:
    """Time ``n`` commands per runner, round-robin, so every connector sees the same machine load."""
    for run in runners.values():
        run()  # warm-up (connection set-up is not per-command cost)
    samples: dict[str, list[float]] = {label: [] for label in runners}
    for _ in range(n):
        for label, run in runners.items():
            started = time.perf_counter()
            run()
            samples[label].append((time.perf_counter() - started) * 1000)
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
    parser.add_argument("--backend", choices=("lxd", "incus"), default="lxd",
                        help="the daemon: lxd (the test lab) or incus (its Incus twin)")
    args = parser.parse_args()
    prefix, tool = ("@incus", "incus") if args.backend == "incus" else ("@lxd", "lxc")
    agent_label, rest_label = f"{prefix} (labwright, agent)", f"{prefix} (labwright, REST exec)"
    exec_label = f"{tool} exec (subprocess)"

    lab = incus_test_lab() if args.backend == "incus" else ensure_test_lab()
    name = lab.fresh("lwbench")
    try:
        # Measure a settled container, not one whose units are still starting.
        lab.client.exec(name, ["systemctl", "is-system-running", "--wait"])
        address = instance_address(lab.client, name)
        host_key = lab.client.exec(name, ["cat", "/etc/ssh/ssh_host_ed25519_key.pub"]).stdout.decode().split()
        known_hosts = Path(tempfile.mkstemp(prefix="lw-known-hosts-")[1])
        known_hosts.write_text(f"{address} {host_key[0]} {host_key[1]}\n")

        started = time.perf_counter()
        lxd_agent = pyinfra_host(f"{prefix}/{name}", {"lxd_agent": True})
        agent_connect_ms = (time.perf_counter() - started) * 1000
        if lxd_agent.connector.session is None:
            raise SystemExit(f"{prefix}/{name}: the agent session did not start (see --debug); nothing to measure")
        started = time.perf_counter()
        lxd_rest = pyinfra_host(f"{prefix}/{name}", {"lxd_agent": False})
        rest_connect_ms = (time.perf_counter() - started) * 1000
        ssh = pyinfra_host(address, {"ssh_user": "root", "ssh_key": lab.private_key_path,
                                     "ssh_known_hosts_file": str(known_hosts)})

        def lxc_exec() -> None:
            subprocess.run([tool, "exec", name, "--", "true"], check=True)

        results = measure(args.n, {
            agent_label: checked(lxd_agent),
            rest_label: checked(lxd_rest),
            exec_label: lxc_exec,
            "@ssh (pyinfra, persistent)": checked(ssh),
        })
        server = lab.client.server_info().describe()
        print(f"\n{args.n} commands each, round-robin, against container {name} on {server} "
              f"(connect: agent {agent_connect_ms:.0f} ms, REST {rest_connect_ms:.0f} ms)\n")
        print(f"{'connector':32} {'median ms':>10} {'p95 ms':>10} {'x slower than ' + prefix:>20}")
        base = statistics.median(results[agent_label])
        for label, samples in results.items():
            med = statistics.median(samples)
            p95 = statistics.quantiles(samples, n=20)[18]
            print(f"{label:32} {med:10.2f} {p95:10.2f} {med / base:20.2f}")
        print()
        for label in (agent_label, rest_label):
            own = statistics.median(results[label])
            lxc_ratio = statistics.median(results[exec_label]) / own
            ssh_ratio = statistics.median(results["@ssh (pyinfra, persistent)"]) / own
            print(f"{label}: median < 20 ms {'met' if own < 20 else 'MISSED'} ({own:.2f} ms); "
                  f">= 2x vs {tool} exec and vs SSH {'met' if min(lxc_ratio, ssh_ratio) >= 2 else 'MISSED'} "
                  f"({lxc_ratio:.2f}x, {ssh_ratio:.2f}x)")
        print(f"(the targets apply to {prefix} as it runs by default: the agent)")

        if not args.no_deploy:
            deploy_cmd = [str(Path(sys.executable).parent / "pyinfra"), "-y", f"{prefix}/{name}", "deploys/base.py",
                          "--data", f"admin_ssh_public_key_file={Path(lab.private_key_path).with_suffix('.pub')}"]
            started = time.perf_counter()
            first = subprocess.run(deploy_cmd, cwd=REPO, capture_output=True, text=True)
            first_s = time.perf_counter() - started
            if first.returncode != 0:
                print(f"\ndeploys/base.py failed:\n{first.stderr[-1500:]}")
                return 1
            reruns = {}
            for label, agent in (("agent", True), ("REST exec", False)):
                started = time.perf_counter()
                subprocess.run([*deploy_cmd, "--data", f"lxd_agent={agent}"], cwd=REPO, capture_output=True,
                               text=True, check=True)
                reruns[label] = time.perf_counter() - started
            print(f"\ndeploys/base.py via {prefix}: first run {first_s:.1f} s; no-change re-run "
                  + ", ".join(f"{label} {took:.1f} s" for label, took in reruns.items())
                  + f" (target < 5 s: {'met' if reruns['agent'] < 5 else 'MISSED'})")
    finally:
        lab.remove(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
