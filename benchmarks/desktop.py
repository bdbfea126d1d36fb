"""Desktop guests (deploys/desktop.py): first deploy, no-change re-run, and RDP login to a visible MATE panel.

    sudo .venv/bin/python benchmarks/desktop.py              # cached install (built once if missing)
    sudo .venv/bin/python benchmarks/desktop.py --uncached   # also a full first deploy from a bare container
    sudo .venv/bin/python benchmarks/desktop.py --logins 5

Targets (issue 7): a no-change re-run under 10 s. Reported side by side in one run: the full first deploy (packages
from the Debian mirror: ~1 GB), the first deploy on the cached install (configuration only), the clone of the
cache, the no-change re-run, and the time from starting a real RDP client (xfreerdp under Xvfb) to "Top Panel" in
the session's window tree. Guests are lab containers named lwbdesk-<hex>, removed at the end.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _support  # noqa: F401  (tests/support on sys.path)

from labwright.desktop.recipe import PASSWORD_ENV
from labwright.lab.lab import instance_address
from labwright.testing.lab_fixture import TEMPLATE, Lab, ensure_test_lab
from labwright.testing.pyinfra_output import DeployRun, run_pyinfra
from support.desktop import FIREFOX_SOURCE, ensure_cache, make_guest, rdp_client, xvfb

REPO = Path(__file__).resolve().parent.parent
RERUN_TARGET_S = 10.0
USER = "desk"


def deploy(name: str) -> DeployRun:
    run = run_pyinfra(f"@lxd/{name}", "deploys/desktop.py", f"desktop_firefox_source={FIREFOX_SOURCE}", cwd=REPO,
                      timeout=1800)
    if run.rc != 0:
        raise SystemExit(f"deploy on {name} failed:\n{run.output[-3000:]}")
    return run


def until(lab: Lab, name: str, script: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while lab.client.exec(name, ["sh", "-c", script]).exit_code != 0:
        if time.monotonic() > deadline:
            raise SystemExit(f"{script!r} did not succeed within {timeout:.0f}s in {name}")
        time.sleep(0.1)


def login_to_panel(lab: Lab, name: str, address: str, password: str) -> float:
    """A new session each time: the previous one is ended first (xrdp would otherwise reconnect to it)."""
    lab.client.exec(name, ["sh", "-c", f"pkill -KILL -u {USER}; sleep 1; : > /var/log/xrdp-sesman.log"])
    with tempfile.TemporaryDirectory() as tmp, xvfb() as display:
        started = time.monotonic()
        with rdp_client(display, address, USER, password, Path(tmp) / "rdp.log"):
            until(lab, name, f"grep -q 'Session started successfully for user {USER}' /var/log/xrdp-sesman.log")
            number = lab.client.exec(name, ["sh", "-c", "sed -n 's/.*Session started successfully for user .* on "
                                           "display \\([0-9]*\\).*/\\1/p' /var/log/xrdp-sesman.log | tail -1"])
            display_number = number.stdout.decode().strip()
            until(lab, name, f"runuser -u {USER} -- env DISPLAY=:{display_number} xwininfo -root -tree "
                             "| grep -q '\"Top Panel\"'")
            return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uncached", action="store_true", help="also time a full deploy on a bare container")
    parser.add_argument("--reruns", type=int, default=3)
    parser.add_argument("--logins", type=int, default=3)
    args = parser.parse_args()
    os.environ[PASSWORD_ENV] = password = "Bench-" + secrets.token_hex(6)
    lab = ensure_test_lab()
    rows: list[tuple[str, float, str]] = []
    made: list[str] = []
    try:
        started = time.monotonic()
        cache, built = ensure_cache(lab, log=lambda m: print(m, file=sys.stderr))
        rows.append(("desktop cache " + ("built (packages stage)" if built else "found"),
                     time.monotonic() - started, cache))
        if args.uncached:
            bare = make_guest(lab, f"lwbdesk-{secrets.token_hex(3)}", TEMPLATE)
            made.append(bare)
            full = deploy(bare)
            rows.append(("first deploy, bare container (all packages)", full.seconds,
                         f"{full.totals.changed} changed"))
            lab.remove(bare)
            made.remove(bare)
        started = time.monotonic()
        name = make_guest(lab, f"lwbdesk-{secrets.token_hex(3)}", cache)
        made.append(name)
        rows.append(("clone of the cache (guest model)", time.monotonic() - started, "dir pool: a full copy"))
        first = deploy(name)
        rows.append(("first deploy, cached install (configuration)", first.seconds, f"{first.totals.changed} changed"))
        reruns = []
        for _ in range(args.reruns):
            again = deploy(name)
            if again.totals.changed:
                raise SystemExit(f"re-run changed {again.totals.changed} operation(s):\n{again.output[-3000:]}")
            reruns.append(again.seconds)
        rerun = statistics.median(reruns)
        rows.append(("no-change re-run (median)", rerun,
                     f"target < {RERUN_TARGET_S:.0f} s: {rerun / RERUN_TARGET_S:.2f} of it "
                     f"({'met' if rerun < RERUN_TARGET_S else 'MISSED'})"))
        address = instance_address(lab.client, name) or ""
        logins = [login_to_panel(lab, name, address, password) for _ in range(args.logins)]
        rows.append(("RDP client start -> Top Panel mapped (median)", statistics.median(logins),
                     f"{len(logins)} new sessions: " + ", ".join(f"{s:.1f}" for s in logins)))
    finally:
        for guest in made:
            lab.remove(guest)
    width = max(len(r[0]) for r in rows)
    print(f"{'step':<{width}}  {'seconds':>8}  note")
    for label, seconds, note in rows:
        print(f"{label:<{width}}  {seconds:>8.1f}  {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
