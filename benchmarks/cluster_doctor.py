"""Cluster doctor time on a real 3-node corosync 3 cluster (knet + crypto) in network namespaces, side by side.

    .venv/bin/python benchmarks/cluster_doctor.py [-n 7]

Measured in one run, on the same cluster:
- the doctor (library): all nodes' facts in parallel, one shell round trip per node, then the verdicts;
- the same facts gathered node after node (what a sequential runbook costs);
- the whole `labwright cluster doctor -i INVENTORY --json` process (CLI start-up included), and for scale a bare
  `import labwright.cli` (all command groups) and `import labwright.cluster.doctor` in a fresh interpreter;
- the doctor while node3 is stale (exited on a config_version mismatch).

Target (issue 8): the doctor on a 3-node cluster under 2 s. Needs root and corosync (scripts/apt/cluster.list).
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

import _support  # noqa: F401  (tests/support on sys.path)

from labwright.cluster.doctor import diagnose, doctor, gather
from labwright.testing.pyinfra_output import tool_env
from support.corosync_netns import start_cluster

TARGET_S = 2.0


def timed(n: int, run: Callable[[], object]) -> list[float]:
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        run()
        samples.append(time.perf_counter() - started)
    return samples


def row(name: str, samples: list[float], base: float) -> str:
    med = statistics.median(samples)
    p95 = sorted(samples)[max(0, round(0.95 * len(samples)) - 1)]
    return f"{name:<44} median {med:6.3f} s   p95 {p95:6.3f} s   {med / base:5.2f}x"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=7, help="samples per measurement")
    args = ap.parse_args()
    started = time.perf_counter()
    cluster = start_cluster()
    print(f"3-node cluster up (quorate, 3 members) in {time.perf_counter() - started:.1f} s")
    try:
        inv = Path(tempfile.mkdtemp()) / "cluster_inventory.py"
        inv.write_text(cluster.inventory_text())
        runners = cluster.runners()
        diag = doctor(runners)
        assert diag.healthy, [(n.name, n.verdict, n.reasons) for n in diag.nodes]
        results = {
            "doctor (parallel, library)": timed(args.n, lambda: doctor(runners)),
            "same facts, node after node": timed(args.n, lambda: diagnose([gather(r) for r in runners])),
            "labwright cluster doctor --json (process)": timed(max(3, args.n // 2), lambda: subprocess.run(
                [str(Path(sys.executable).parent / "labwright"), "cluster", "doctor", "-i", str(inv), "--json"],
                capture_output=True, env=tool_env(), check=True)),
            # Where the process's time goes: importing the CLI (every command group) vs the doctor's own modules.
            "python -c 'import labwright.cli' (process)": timed(max(3, args.n // 2), lambda: subprocess.run(
                [sys.executable, "-c", "import labwright.cli"], check=True)),
            "python -c 'import labwright.cluster.doctor'": timed(max(3, args.n // 2), lambda: subprocess.run(
                [sys.executable, "-c", "import labwright.cluster.doctor"], check=True)),
        }
        cluster.stop("node3")
        cluster.set_version(["node1", "node2"], (diag.config_version or 0) + 2)
        cluster.start("node3")
        deadline = time.monotonic() + 30
        log = cluster.node_dir("node3") / "var/log/corosync/corosync.log"
        while time.monotonic() < deadline and not ("Exiting" in log.read_text() and cluster.pid("node3") is None):
            time.sleep(0.2)
        stale = doctor(runners)
        assert stale.node("node3").verdict == "stale config", stale.node("node3")
        results["doctor, node3 stale (parallel, library)"] = timed(args.n, lambda: doctor(runners))
    finally:
        cluster.close()
    base = statistics.median(results["doctor (parallel, library)"])
    print(f"\n{'':<44} {'':>20}   {'':>15}   ratio to the parallel doctor")
    for name, samples in results.items():
        print(row(name, samples, base))
    worst = max(statistics.median(s) for k, s in results.items() if k.startswith("doctor"))
    print(f"\ntarget: doctor on a 3-node cluster < {TARGET_S:.0f} s: {'met' if worst < TARGET_S else 'MISSED'} "
          f"({worst:.3f} s worst median; {TARGET_S / worst:.1f}x under the target)")
    return 0 if worst < TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
