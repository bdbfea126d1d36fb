"""What a test pays for its container: a fresh copy of the stopped template, started, until sshd listens, on a ``dir``
pool and on a ``btrfs`` pool (a loop file), side by side in one run (issue 29, item 2).

Target: on btrfs a fresh container costs at most half of what it costs on dir (the copy is a btrfs snapshot instead
of an rsync of the whole tree; both pay the same boot), and a snapshot of a running guest is at least 10x faster.

    .venv/bin/python benchmarks/lab_fresh.py [--rounds 5]

Builds two throw-away labs of its own (``lwbdir`` on 10.99.41.0/24, ``lwbbtr`` on 10.99.42.0/24), each with a
stopped template made from the lab image, and removes them at the end. Prints the medians per driver and the ratios.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import _support  # noqa: F401  (tests/support on sys.path)

from labwright.lab import lab as lab_ops
from labwright.lab.spec import spec_from_group
from labwright.testing.lab_fixture import Lab
from labwright.ui import Reporter


def timed(fn) -> float:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def one_driver(driver: str, tag: str, octet: int, rounds: int) -> dict[str, list[float]]:
    template = f"{tag}-tpl"
    spec = spec_from_group([f"@lxd/{template}"], {
        "lab_name": tag, "lab_subnet": f"10.99.{octet}.1/24", "lab_bridge": f"{tag}br", "lab_pool": tag,
        "lab_profile": tag, "lab_memory": "1GiB", "lab_pool_driver": driver}, source=f"benchmark ({driver})")
    report = Reporter(quiet=True)
    times: dict[str, list[float]] = {"fresh (copy + start + sshd)": [], "copy": [], "snapshot running": []}
    try:
        lab_ops.up(spec, report)
        client = lab_ops.LxdClient()
        client.set_state(template, "stop", timeout=120)
        lab = Lab(spec, client, "", "")
        for i in range(rounds):
            name = f"{tag}-{i}"
            started = time.perf_counter()
            client.create_instance({"name": name, "type": "container", "source": {"type": "copy",
                                    "source": template}, "profiles": [spec.profile],
                                    "config": {lab_ops.LAB_KEY: spec.name}})
            times["copy"].append(time.perf_counter() - started)
            client.set_state(name, "start")
            lab_ops.wait_ready(client, name)
            times["fresh (copy + start + sshd)"].append(time.perf_counter() - started)
            times["snapshot running"].append(timed(lambda name=name: client.request(
                "POST", f"/1.0/instances/{name}/snapshots", {"name": "bench"})))
            lab.remove(name)
        actual = client.get_or_none(f"/1.0/storage-pools/{spec.pool}")["driver"]
        if actual != driver:
            raise SystemExit(f"the {driver} lab got a {actual} pool (see the line above): nothing to compare")
    finally:
        lab_ops.down(spec, Reporter(quiet=True))
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    refusal = lab_ops.cow_refusal()
    if refusal:
        print(f"btrfs cannot be made here: {refusal}; nothing to compare")
        return 2
    results = {"dir": one_driver("dir", "lwbdir", 41, args.rounds),
               "btrfs": one_driver("btrfs", "lwbbtr", 42, args.rounds)}
    print(f"{'what':32} {'dir (median)':>14} {'btrfs (median)':>15} {'dir/btrfs':>10}")
    ok = True
    for what in results["dir"]:
        d, b = statistics.median(results["dir"][what]), statistics.median(results["btrfs"][what])
        print(f"{what:32} {d:13.2f}s {b:14.2f}s {d / b:9.1f}x")
    fresh = statistics.median(results["dir"]["fresh (copy + start + sshd)"]) / statistics.median(
        results["btrfs"]["fresh (copy + start + sshd)"])
    snap = statistics.median(results["dir"]["snapshot running"]) / statistics.median(
        results["btrfs"]["snapshot running"])
    ok = fresh >= 2 and snap >= 10
    print(f"target: fresh at least 2x ({fresh:.1f}x), snapshot at least 10x ({snap:.1f}x): {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
