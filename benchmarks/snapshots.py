"""Snapshot and restore times of a guest on the local test lab (LXD, the lab's pool), and of the same calls
against the PVE simulator (API round trips and task polling only: the simulator copies no data).

    .venv/bin/python benchmarks/snapshots.py [--rounds 3] [--fill-mib 0]

LXD: a fresh copy of the lab template (running); per round: take (``snapshots.take``), break it (tar's binary
removed), restore with force (stop, restore, start), until the guest answers an exec again ("serving"), and a
restore of the stopped guest. ``--fill-mib N`` writes N MiB of random data into the guest first, to show how a
copy-based pool (dir) scales with the root filesystem's size. Prints each time, the median, the pool driver and
the guest's disk use.
"""

from __future__ import annotations

import argparse
import statistics
import time

import _support  # noqa: F401  (tests/support on sys.path)

from labwright import snapshots
from labwright.lab.lab import wait_ready
from labwright.testing.lab_fixture import ensure_test_lab


def timed(fn) -> float:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def until_exec(lab, name: str, timeout: float = 120) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if lab.client.exec(name, ["true"]).exit_code == 0:
                return
        except Exception:  # the instance is still starting
            pass
        time.sleep(0.1)
    raise SystemExit(f"{name} did not answer an exec within {timeout:.0f} s after the restore")


def lxd(rounds: int, fill_mib: int) -> dict[str, list[float]]:
    lab = ensure_test_lab()
    name = lab.fresh("lwbench")
    guest = f"@lxd/{name}"
    times: dict[str, list[float]] = {"take": [], "restore running (stop+restore+start)": [],
                                     "restore running until exec answers": [], "restore stopped": []}
    try:
        if fill_mib:
            lab.client.exec(name, ["sh", "-c", f"head -c {fill_mib}M /dev/urandom > /root/fill.bin"])
        used = lab.client.exec(name, ["du", "-sxm", "/"]).stdout.decode().split()[0]
        support = snapshots.backend_for(guest, client=lab.client).support()
        print(f"guest {name}: {used} MiB used; {support.storage}: {support.how}")
        for _ in range(rounds):
            times["take"].append(timed(lambda: snapshots.take(guest, "bench", keep=2, client=lab.client)))
            lab.client.exec(name, ["rm", "-f", "/usr/bin/tar"])
            started = time.perf_counter()
            snapshots.restore(guest, force=True, client=lab.client)
            times["restore running (stop+restore+start)"].append(time.perf_counter() - started)
            until_exec(lab, name)
            times["restore running until exec answers"].append(time.perf_counter() - started)
            wait_ready(lab.client, name)
            lab.client.set_state(name, "stop", force=True)
            times["restore stopped"].append(timed(lambda: snapshots.restore(guest, client=lab.client)))
            lab.client.set_state(name, "start")
            wait_ready(lab.client, name)
    finally:
        lab.remove(name)
    return times


def pve(rounds: int) -> dict[str, list[float]]:
    from proxmoxer import ProxmoxAPI

    from labwright.guests.proxmox_api import TaskWaiter
    from support.pve_simulator import PveSimulator

    times: dict[str, list[float]] = {"pve-sim take": [], "pve-sim restore running": []}
    with PveSimulator(task_seconds=0.01) as sim:
        api = ProxmoxAPI(sim.host, user="root@pam", password=sim.root_password, verify_ssl=str(sim.ca_file))
        waiter = TaskWaiter(api, 30, 0.01)
        waiter.wait(api.nodes("pve1").lxc.post(vmid=201, ostemplate=sim.template, rootfs="local-lvm:8"), "create")
        waiter.wait(api.nodes("pve1").lxc(201).status.start.post(), "start")
        from labwright.guests.proxmox_api import Credentials

        options = {"node_data": {"proxmox_api_url": f"https://{sim.host}", "proxmox_ca_file": str(sim.ca_file)},
                   "credentials": Credentials("root@pam", sim.root_password), "poll_interval": 0.01}
        for _ in range(rounds):
            times["pve-sim take"].append(timed(lambda: snapshots.take("@pct/pve1/201", "bench", keep=2, **options)))
            times["pve-sim restore running"].append(
                timed(lambda: snapshots.restore("@pct/pve1/201", force=True, **options)))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fill-mib", type=int, default=0)
    args = parser.parse_args()
    if args.rounds < 1 or args.fill_mib < 0:
        parser.error("--rounds must be at least 1 and --fill-mib at least 0")
    results = {**lxd(args.rounds, args.fill_mib), **pve(args.rounds)}
    for what, values in results.items():
        shown = " ".join(f"{v:.2f}" for v in values)
        print(f"{what:40s} median {statistics.median(values):6.2f} s   ({shown})")


if __name__ == "__main__":
    main()
