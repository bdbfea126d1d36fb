"""`labwright lab up` on Incus against LXD, side by side in one run (issue 34): cold (the lab's bridge, pool, profile
and container made from nothing, until the container's sshd listens and the lab key is in) and warm (a second `up`
that finds everything in place and changes nothing), then `lab down`; medians per daemon and the Incus/LXD ratios.

    sudo .venv/bin/python benchmarks/lab_backends.py [--rounds 3]

Each daemon gets a throw-away lab of its own (``lwbbl`` on LXD, 10.99.43.0/24; ``lwbbi`` on Incus, 10.99.44.0/24),
``dir`` pools on both, the daemons running beside each other as the tests run them; rounds alternate between the
daemons so both see the same machine load. The lab image is already on both daemons (the test labs' templates use
it: labwright.testing.lab_fixture), so "cold" is everything but the debootstrap and the image import, which
``lab up`` pays once per daemon. Exits 0 when both daemons completed every round (there is no target ratio: the
numbers are recorded in docs/lab.md).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from labwright.lab import lab as lab_ops
from labwright.lab.spec import spec_from_group
from labwright.testing.lab_fixture import ensure_test_lab, incus_test_lab
from labwright.ui import Reporter

LABS = {"lxd": ("lwbbl", 43), "incus": ("lwbbi", 44)}


def spec_for(backend: str):  # type: ignore[no-untyped-def]
    tag, octet = LABS[backend]
    return spec_from_group([f"@{backend}/{tag}-c1"], {
        "lab_name": tag, "lab_subnet": f"10.99.{octet}.1/24", "lab_bridge": f"{tag}br", "lab_pool": tag,
        "lab_profile": tag, "lab_memory": "1GiB", "lab_pool_driver": "dir", "lab_backend": backend},
        source=f"benchmark ({backend})")


def one_round(backend: str) -> dict[str, float]:
    spec = spec_for(backend)
    took: dict[str, float] = {}
    try:
        started = time.perf_counter()
        changed = lab_ops.up(spec, Reporter(quiet=True))
        took["cold up"] = time.perf_counter() - started
        if not any("launched" in c for c in changed):
            raise SystemExit(f"{backend}: the cold `lab up` launched nothing ({changed}); a leftover lab? run "
                             f"`labwright lab down` on {spec.name}")
        started = time.perf_counter()
        again = lab_ops.up(spec, Reporter(quiet=True))
        took["warm up (no change)"] = time.perf_counter() - started
        if again:
            raise SystemExit(f"{backend}: the warm `lab up` changed {again}")
    finally:
        started = time.perf_counter()
        lab_ops.down(spec, Reporter(quiet=True))
        took["down"] = time.perf_counter() - started
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    servers = {"lxd": ensure_test_lab().client.server_info().describe(),  # both daemons up, both with the image
               "incus": incus_test_lab().client.server_info().describe()}
    results: dict[str, dict[str, list[float]]] = {b: {} for b in LABS}
    for _ in range(args.rounds):
        for backend in LABS:
            for what, seconds in one_round(backend).items():
                results[backend].setdefault(what, []).append(seconds)
    print(f"\n`lab up` with one container, {args.rounds} round(s) each, alternating "
          f"({servers['lxd']}, {servers['incus']})\n")
    print(f"{'what':24} {'LXD (median)':>13} {'Incus (median)':>15} {'Incus/LXD':>10}")
    for what in results["lxd"]:
        lxd, incus = statistics.median(results["lxd"][what]), statistics.median(results["incus"][what])
        print(f"{what:24} {lxd:12.2f}s {incus:14.2f}s {incus / lxd:9.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
