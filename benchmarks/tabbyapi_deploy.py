"""deploys/tabbyapi.py: no-change re-run time, and downtime of a `stack=` change vs field note 001's
stop-reinstall-start.

One fresh lab container, two tabbyAPI instances deployed side by side by deploys/tabbyapi.py itself (the tabbyAPI
STAND-IN from support.tabbyapi_standin, served to the guest over git HTTP; stand-in engine stacks whose
torch wheels are padded to ``--torch-mb`` in 12,000 files, as benchmarks/stack_switch.py does, torch 2.9.0+cu128
being ~900 MB):

- ``tabbyapi`` (port 5000): ``pyinfra @lxd/NAME deploys/tabbyapi.py --data stack=...``, alternating stand-in stacks
  2.10 / 2.9: the deploy's side-by-side switch (build + ABI verify while serving, swap, restart, health);
- ``tabbyapi-seed`` (port 5001): field note 001's way: ``systemctl stop``; ``uv pip install`` the other torch and
  extension into the live venv (by URL, no cache: "cold", as field note 001's first downgrade; and from a primed uv
  cache: "warm", the best case for in place); ``systemctl start``.

Each instance's /health is polled from this machine every 10 ms; downtime is the longest unavailable window.
The no-change re-run is the whole ``pyinfra`` command (start-up, connect, facts, every operation a no-op).

    .venv/bin/python benchmarks/tabbyapi_deploy.py [--rounds 4] [--torch-mb 900] [--drivers dir,btrfs,zfs]

Each storage driver the lab can make is measured in the same run, each with its own container (as
benchmarks/stack_switch.py; the driver is printed with its figures).

Targets (issues 5 and 30): no-change re-run under 10 s; stack= downtime at least 20x shorter than field note 001's
procedure, on every storage driver.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _support  # noqa: F401  (tests/support on sys.path)
from stack_switch import (  # the same poller, pools, wheels, uv and table
    Poller,
    downtime_table,
    driver_args,
    each_driver,
    stats,
    uv_binary,
)

from support.tabbyapi_lab import WHEELHOUSE, RepoServer, TabbyGuest, bridge_address, lab_subnet
from support.tabbyapi_standin import build_standin_repo

UV = "/root/.local/bin/uv"
SERVED = "http://127.0.0.1:8901"
WHEELS = {"standin-2.9": ("torch-2.9.0-", "standin_attn-1.0.0+torch2.9-"),
          "standin-2.10": ("torch-2.10.0-", "standin_attn-1.0.0+torch2.10-")}
SEED = {"tabbyapi_service": "tabbyapi-seed", "tabbyapi_user": "tabbyapi-seed", "tabbyapi_dir": "/opt/tabbyapi-seed",
        "tabbyapi_venv": "/opt/tabbyapi-seed/.venv", "tabbyapi_port": 5001}


def measure(url: str, action: Callable[[], None]) -> tuple[float, float]:
    with Poller(url) as poller:
        poller.wait_healthy(30)
        time.sleep(0.2)
        started = time.perf_counter()
        action()
        took = time.perf_counter() - started
        poller.wait_healthy()
        time.sleep(0.1)
    return poller.longest_outage(), took


def run_driver(lab, stacks, args: argparse.Namespace, driver: str,  # type: ignore[no-untyped-def]
               pool: str | None) -> tuple[list[float], dict[str, list[tuple[float, float]]]]:
    name = lab.fresh(f"lwtab-{driver}", pool=pool)
    work = Path(tempfile.mkdtemp(prefix="tabbyapi-bench-"))
    repo = build_standin_repo(work / "tabbyAPI")
    try:
        with RepoServer(repo, bridge_address(lab_subnet())) as server:
            guest = TabbyGuest(lab.client, name, stacks, server.url)
            print(f"… {driver}: container {name}: pushing wheels and uv, deploying two tabbyAPI stand-ins",
                  file=sys.stderr)
            guest.prepare(only=tuple(p for prefixes in WHEELS.values() for p in prefixes))
            guest.sh(f"mkdir -p {Path(UV).parent}")
            with uv_binary().open("rb") as handle:
                lab.client.push_file(name, UV, handle, mode=0o755)
            for data in ({}, SEED):
                run = guest.deploy(**data)
                if run.rc != 0:
                    raise RuntimeError(run.output[-3000:])
            guest.sh(f"cd {WHEELHOUSE} && (setsid python3 -m http.server 8901 --bind 127.0.0.1 >/dev/null 2>&1 &)")
            guest.sh("python3 -m venv --without-pip /tmp/prime && " + " && ".join(
                f"{UV} pip install -q --python /tmp/prime/bin/python --no-index {WHEELHOUSE}/"
                f"{next(stacks.wheelhouse.glob(p + '*.whl')).name}" for prefixes in WHEELS.values() for p in prefixes))

            reruns = []
            for _ in range(3):
                run = guest.deploy()
                if run.rc != 0 or run.totals.changed != 0:
                    raise RuntimeError(f"re-run changed something or failed:\n{run.output[-3000:]}")
                reruns.append(run.seconds)

            ours_url = f"http://{guest.address}:5000/health"
            seed_url = f"http://{guest.address}:5001/health"
            targets = [("standin-2.10", "standin-2.9")[i % 2] for i in range(args.rounds)]
            results: dict[str, list[tuple[float, float]]] = {"switch": [], "cold": [], "warm": []}
            for stack in targets:
                print(f"… {driver}: deploys/tabbyapi.py stack={stack}", file=sys.stderr)

                def switch(target: str = stack) -> None:
                    run = guest.deploy(stack=target)
                    if run.rc != 0 or not guest.readlink().startswith(f"/opt/labwright/stacks/{target}-"):
                        raise RuntimeError(run.output[-3000:])

                results["switch"].append(measure(ours_url, switch))
            for mode in ("cold", "warm"):
                for stack in targets:
                    print(f"… {driver}: field note 001 in-place ({mode}) -> {stack}", file=sys.stderr)
                    names = [next(stacks.wheelhouse.glob(p + "*.whl")).name for p in WHEELS[stack]]
                    python = f"{SEED['tabbyapi_venv']}/bin/python"
                    if mode == "cold":
                        installs = [f"{UV} pip install -q --python {python} --no-cache --no-index "
                                    f"{SERVED}/{urllib.parse.quote(n)}" for n in names]
                    else:
                        installs = [f"{UV} pip install -q --python {python} --no-index --find-links {WHEELHOUSE} "
                                    f"{WHEELHOUSE}/{n}" for n in names]
                    script = " && ".join(["systemctl stop tabbyapi-seed", *installs, "systemctl start tabbyapi-seed"])
                    results[mode].append(measure(seed_url, lambda s=script: guest.sh(s) and None))
            return reruns, results
    finally:
        if not args.keep_container:
            lab.remove(name)


def main() -> int:
    parsed = driver_args(argparse.ArgumentParser(description=__doc__.splitlines()[0]), "tabbyapi_deploy")
    if parsed is None:
        return 2
    args, drivers = parsed
    verdicts: list[str] = []
    for lab, stacks, driver, pool in each_driver(args, drivers):
        reruns, results = run_driver(lab, stacks, args, driver, pool)
        rerun = statistics.median(reruns)
        print(f"\nStorage driver {driver}: deploys/tabbyapi.py no-change re-run: median {rerun:.2f} s of "
              f"{len(reruns)} ({', '.join(f'{r:.2f}' for r in reruns)} s; 0 changes each) - target < 10 s: "
              f"{'met' if rerun < 10 else 'MISSED'}")
        verdicts.append(f"{driver}: no-change re-run {rerun:.2f} s ({'met' if rerun < 10 else 'MISSED'})")
        verdicts += downtime_table(driver, f"service downtime, tabbyAPI stand-in ({args.rounds} stack changes each, "
                                   f"torch wheel {args.torch_mb} MB, /health polled every 10 ms from the host)", [
            ("deploys/tabbyapi.py stack= (switch beside, swap, restart)", stats(results["switch"])),
            ("field note 001 stop-reinstall-start, cold: stop; uv pip install URLs; start", stats(results["cold"])),
            ("field note 001 stop-reinstall-start, warm uv cache: stop; uv install; start", stats(results["warm"]))],
        width=78)
    print()
    for line in verdicts:
        print(line)
    print("\n'command' is the whole command's wall time (for stack=: the whole pyinfra deploy, the build and verify "
          "running while the service keeps answering).")
    return 0 if verdicts and not any("MISSED" in v or "MISSES" in v for v in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
