"""Service downtime of `stack switch` vs field note 001's in-place downgrade, on the same lab container.

Two copies of the stand-in engine service (support.stack_service) run in one fresh lab container, each
from its own venv with stand-in stack 2.9, each polled from the host every 10 ms on its /health (200 only while
the stand-in torch extension imports). Each round moves both between stand-in stacks 2.10 and 2.9:

- labwright: ``pyinfra @lxd/NAME deploys/stack.py --data stack=...`` (build beside + ABI verify while the
  service runs, then swap + restart + health check);
- field note 001's way: ``systemctl stop``; ``uv pip install`` the other torch into the live venv; ``uv pip install``
  the extension; ``systemctl start`` (field note 001's "Downgrade to Stack A" appendix). "cold" installs by URL
  without uv's cache, as field note 001's first downgrade did (its wheels had never been fetched); "warm" installs
  from a local wheelhouse with uv's cache primed, the best case for in place.

The stand-in torch wheels are padded to ``--torch-mb`` of incompressible data in 12,000 files (default 900:
torch 2.9.0+cu128's cp312 wheel is ~900 MB; torch 2.13's CPU wheel holds 12,248 files), so installing one costs
what installing torch does; ``--torch-mb 0`` shows the floor.
The unavailable window is from the last good answer before an outage to the first good one after it (an upper
bound, within one poll interval).

    .venv/bin/python benchmarks/stack_switch.py [--rounds 4] [--torch-mb 900] [--drivers dir,btrfs,zfs]
        [--keep-container]

Each storage driver the lab's daemon can make is measured in the same run, with its own container on a pool of that
driver: ``dir`` (LXD's default without ZFS/btrfs, where a snapshot of a running guest is a full copy with it frozen),
``btrfs`` (on a loop file) and ``zfs`` where the kernel module is present; a driver that cannot be made is said.

Target (issues 3 and 30): switch downtime at least 20x shorter than field note 001's in-place downgrade, on every
storage driver, in the same run (exit 1 when any driver misses it).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import _support  # noqa: F401  (tests/support on sys.path)

from labwright.errors import BadInput, LxdError
from labwright.testing.lab_fixture import ensure_test_lab
from support.health_poll import Poller
from support.stack_service import WHEELHOUSE, StandinService
from support.stacks import StandinStacks, build_standin_stacks
from support.wheels import test_env_root

BIN = Path(sys.executable).parent
UV = "/root/.local/bin/uv"  # where field note 001's uv lived
SERVED = "http://127.0.0.1:8901"
WHEELS = {"standin-2.9": ("torch-2.9.0-", "standin_attn-1.0.0+torch2.9-"),
          "standin-2.10": ("torch-2.10.0-", "standin_attn-1.0.0+torch2.10-")}
TORCH = {"standin-2.9": "2.9.0", "standin-2.10": "2.10.0"}


def stacks_for(torch_mb: int) -> StandinStacks:
    """The stand-in wheelhouse and matrix, built once per size (a padded one takes a minute to write)."""
    work = test_env_root().parent / "bench" / f"stack-switch-{torch_mb}mb-12k"
    ready = work / ".ready"
    if not ready.exists():
        print(f"… building stand-in stacks with {torch_mb} MB torch wheels in {work} (once)", file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)
        build_standin_stacks(work, torch_pad_mb=torch_mb, pad_versions=("2.9.0", "2.10.0"))
        ready.touch()
    return StandinStacks(wheelhouse=work / "wheelhouse", matrix_dir=work / "wheels_matrix")


def uv_binary() -> Path:
    """uv for the container: on PATH here, else the uv wheel from PyPI through pip (cached)."""
    found = shutil.which("uv")
    if found:
        return Path(found)
    cache = test_env_root().parent / "bench" / "uv"
    binary = cache / "uv"
    if not binary.exists():
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run([str(BIN / "python"), "-m", "pip", "download", "-q", "--no-deps", "-d", str(cache), "uv"],
                       check=True)
        wheel = next(cache.glob("uv-*.whl"))
        with zipfile.ZipFile(wheel) as archive:
            member = next(n for n in archive.namelist() if n.endswith(".data/scripts/uv"))
            binary.write_bytes(archive.read(member))
        binary.chmod(0o755)
    return binary


def in_place(service: StandinService, stack: str, cold: bool) -> None:
    torch, extension = (next(service.stacks.wheelhouse.glob(f"{prefix}*.whl")).name for prefix in WHEELS[stack])
    python = f"{service.venv}/bin/python"
    if cold:
        # --no-index: the URLs are the only source (the container has no index); --no-cache: never fetched before.
        quote = urllib.request.quote
        installs = [f"{UV} pip install -q --python {python} --no-cache --no-index {SERVED}/{quote(name)}"
                    for name in (torch, extension)]
    else:
        installs = [f"{UV} pip install -q --python {python} --no-index --find-links {WHEELHOUSE} "
                    f"{WHEELHOUSE}/{name}" for name in (torch, extension)]
    service.sh(" && ".join([f"systemctl stop {service.unit}", *installs, f"systemctl start {service.unit}"]))


def measure(service: StandinService, action, stack: str) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    with Poller(service.health_url) as poller:
        time.sleep(0.2)
        started = time.perf_counter()
        action()
        took = time.perf_counter() - started
        poller.wait_healthy()
        time.sleep(0.1)
    status, body = service.health()
    if status != 200 or body.get("torch") != TORCH[stack]:
        raise RuntimeError(f"{service.unit} after the switch to {stack}: HTTP {status} {body}")
    return poller.longest_outage(), took


def pools_for(lab, drivers: list[str]) -> list[tuple[str, str | None, str]]:  # type: ignore[no-untyped-def]
    """(driver, pool for the container (None: the lab's own), why it is skipped ("" when it runs)) per driver: the
    lab's own pool where it is that driver, else a pool of it beside (``Lab.extra_pool``), else the reason."""
    own = str((lab.client.get_or_none(f"/1.0/storage-pools/{lab.spec.pool}") or {}).get("driver") or "?")
    found = []
    for driver in drivers:
        if driver == own:
            found.append((driver, None, ""))
            continue
        try:
            found.append((driver, lab.extra_pool(driver), ""))
        except (BadInput, LxdError) as exc:
            found.append((driver, None, str(exc)))
    return found


def run_driver(lab, stacks: StandinStacks, args: argparse.Namespace, driver: str,  # type: ignore[no-untyped-def]
               pool: str | None) -> dict[str, list[tuple[float, float]]]:
    name = lab.fresh(f"lwbench-{driver}", pool=pool)
    try:
        ours = StandinService(lab.client, name, stacks)
        seed = StandinService(lab.client, name, stacks, venv="/opt/inplace/.venv", unit="inplace", port=8766)
        print(f"… {driver}: container {name}: pushing wheels, uv, two services", file=sys.stderr)
        ours.push_wheelhouse(only=tuple(p for prefixes in WHEELS.values() for p in prefixes))
        ours.push(uv_binary(), UV, mode=0o755)
        ours.install("standin-2.9")
        seed.install("standin-2.9", server="/opt/inplace/server.py")
        ours.sh(f"cd {WHEELHOUSE} && (setsid python3 -m http.server 8901 --bind 127.0.0.1 >/dev/null 2>&1 &)")
        # Prime uv's cache for the warm in-place rounds, in a scratch venv (not measured).
        ours.sh("python3 -m venv --without-pip /tmp/prime && " + " && ".join(
            f"{UV} pip install -q --python /tmp/prime/bin/python --no-index {WHEELHOUSE}/"
            f"{next(stacks.wheelhouse.glob(p + '*.whl')).name}" for prefixes in WHEELS.values() for p in prefixes))

        targets = [("standin-2.10", "standin-2.9")[i % 2] for i in range(args.rounds)]
        results: dict[str, list[tuple[float, float]]] = {"switch": [], "cold": [], "warm": []}
        for stack in targets:
            print(f"… {driver}: labwright stack switch -> {stack}", file=sys.stderr)

            def switch(target: str = stack) -> None:
                run = ours.deploy(stack=target)
                if run.rc != 0:
                    raise RuntimeError(run.output[-3000:])
                said = [line for line in run.output.splitlines() if "snapshot" in line and "stack-switch" in line]
                if said:
                    print(f"  {said[0].strip()[:200]}", file=sys.stderr)

            results["switch"].append(measure(ours, switch, stack))
        for mode in ("cold", "warm"):
            for stack in targets:
                print(f"… {driver}: field note 001 in-place ({mode}) -> {stack}", file=sys.stderr)
                results[mode].append(measure(seed, lambda s=stack, m=mode: in_place(seed, s, m == "cold"), stack))
        return results
    finally:
        if not args.keep_container:
            lab.remove(name)


def stats(rows: list[tuple[float, float]]) -> tuple[float, float, float, float]:
    downs = [r[0] for r in rows]
    return statistics.median(downs), min(downs), max(downs), statistics.median(r[1] for r in rows)


def downtime_table(driver: str, title: str, rows: list[tuple[str, tuple[float, float, float, float]]],
                   width: int = 66) -> list[str]:
    """Print one driver's downtime table (the first row is labwright's switch, the others what it replaces);
    return its verdict lines against the 20x target."""
    print(f"\nStorage driver {driver}: {title}\n")
    print(f"{'method':<{width}} {'downtime median':>16} {'min':>8} {'max':>8} {'command':>9}")
    for label, (median, low, high, command) in rows:
        print(f"{label:<{width}} {median:>14.3f} s {low:>6.3f} s {high:>6.3f} s {command:>7.1f} s")
    switch = rows[0][1][0]
    verdicts = []
    for index, (label, (median, *_rest)) in enumerate(rows[1:]):
        ratio = median / max(switch, 1e-3)
        # The target is against the field note's own procedure (the cold row); a warm uv cache is for reference.
        verdict = ("meets the 20x target" if ratio >= 20 else "MISSES the 20x target") if index == 0 else \
            "for reference, not the target"
        verdicts.append(f"{driver}: ratio {label.split(':')[0]} / switch: {ratio:.1f}x ({verdict})")
    return verdicts


def driver_args(parser: argparse.ArgumentParser, name: str) -> tuple[argparse.Namespace, list[str]] | None:
    """The options both downtime benchmarks take; None (after one line on stderr) for a bad value."""
    parser.add_argument("--rounds", type=int, default=4, help="changes per method (alternating 2.10 / 2.9)")
    parser.add_argument("--torch-mb", type=int, default=900, help="stand-in torch wheel size (0: tiny)")
    parser.add_argument("--drivers", default="dir,btrfs,zfs",
                        help="storage drivers to measure on, comma-separated (those the host cannot make are said "
                             "and skipped)")
    parser.add_argument("--keep-container", action="store_true")
    args = parser.parse_args()
    drivers = [d.strip() for d in args.drivers.split(",") if d.strip()]
    unknown = sorted(set(drivers) - {"dir", "btrfs", "zfs", "lvm"})
    if unknown or not drivers or not 1 <= args.rounds <= 50 or not 0 <= args.torch_mb <= 4096:
        print(f"✗ {name}: --drivers takes dir, btrfs, zfs, lvm (got {args.drivers!r}); --rounds 1-50; "
              "--torch-mb 0-4096", file=sys.stderr)
        return None
    return args, drivers


def each_driver(args: argparse.Namespace, drivers: list[str]):  # type: ignore[no-untyped-def]
    """(lab, stacks, driver, pool) for each driver the lab can make; the others are said and skipped."""
    stacks = stacks_for(args.torch_mb)
    lab = ensure_test_lab()
    for driver, pool, skipped in pools_for(lab, drivers):
        if skipped:
            print(f"\nStorage driver {driver}: not measured: {skipped}")
            continue
        yield lab, stacks, driver, pool


def main() -> int:
    parsed = driver_args(argparse.ArgumentParser(description=__doc__.splitlines()[0]), "stack_switch")
    if parsed is None:
        return 2
    args, drivers = parsed
    verdicts: list[str] = []
    for lab, stacks, driver, pool in each_driver(args, drivers):
        results = run_driver(lab, stacks, args, driver, pool)
        verdicts += downtime_table(driver, f"service downtime, stand-in engine ({args.rounds} switches each, torch "
                                   f"wheel {args.torch_mb} MB, /health polled every 10 ms from the host)", [
            ("labwright stack switch (build+verify beside, swap, restart)", stats(results["switch"])),
            ("field note 001 in-place, cold: stop; uv pip install URLs; start", stats(results["cold"])),
            ("field note 001 in-place, warm uv cache: stop; uv pip install; start", stats(results["warm"]))])
    print()
    for line in verdicts:
        print(line)
    print("\n'command' is the whole command's wall time (for the switch: pyinfra start-up, bundle, build and verify "
          "while the service keeps answering).")
    return 0 if verdicts and not any("MISSES" in v for v in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
