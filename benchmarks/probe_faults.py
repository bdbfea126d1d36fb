"""Time until the engine serves again after `labwright probe ceiling` is killed in the middle of a restart, on the
REAL llama-server (issue 16): SIGKILL then `labwright probe restore`, SIGKILL of the probe and of its helper in the
guest, and SIGTERM (the probe restores by itself). Each fault is injected ``--rounds`` times; median and worst.

    .venv/bin/python benchmarks/probe_faults.py [--rounds 3] [--keep]

"Serving again": from the recovery's start (the `probe restore` command, or the SIGTERM) until llama-server's
/health answers 200 in the guest with its original flags. The server runs in a lab container with
limits.memory=512MiB on a tiny GGUF (support.probe_box), as in benchmarks/probe_ceiling.py.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import _support  # noqa: F401  (tests/support on sys.path)

from labwright.testing.lab_fixture import Lab, ensure_test_lab
from labwright.testing.pyinfra_output import tool_env
from support.probe_box import llama_box

REPO = Path(__file__).resolve().parents[1]
LABWRIGHT = str(Path(sys.executable).parent / "labwright")
DROPIN = "/etc/systemd/system/llama-server.service.d/90-labwright-probe.conf"
PID_FILE = "/run/labwright-probe-llama-server.service.pid"
DEADLINE_S = 240.0


def wait_for(what: str, condition: Callable[[], bool]) -> None:
    began = time.monotonic()
    while not condition():
        if time.monotonic() - began > DEADLINE_S:
            raise SystemExit(f"not within {DEADLINE_S:g}s: {what}")
        time.sleep(0.05)


def in_guest(lab: Lab, name: str, script: str) -> int:
    return lab.client.exec(name, ["sh", "-c", script]).exit_code


def serving(lab: Lab, name: str) -> bool:
    check = ("python3 -c \"import urllib.request; urllib.request.urlopen('http://127.0.0.1:8001/health', timeout=2)\""
             " && tr '\\0' ' ' < /proc/$(systemctl show -p MainPID --value llama-server)/cmdline | grep -q "
             "'ctx-size 8192 '")
    return in_guest(lab, name, check) == 0


def one(lab: Lab, name: str, config: Path, fault: str) -> float:
    proc = subprocess.Popen([LABWRIGHT, "probe", "ceiling", "--engine", "llamacpp", "--guest", name, "--cache-type",
                             "f16", "--lo", "8192", "--hi", "262144", "--model-config", str(config)], cwd=REPO,
                            env=tool_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for("the probe's drop-in in the guest", lambda: in_guest(lab, name, f"test -e {DROPIN}") == 0)
        if fault == "sigterm":
            began = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=300)
        else:
            proc.kill()
            proc.wait(timeout=60)
            if fault == "sigkill+helper":
                in_guest(lab, name, f"kill -9 $(cat {PID_FILE}) 2>/dev/null; true")
            began = time.monotonic()
            run = subprocess.run([LABWRIGHT, "probe", "restore", "--guest", name], cwd=REPO, env=tool_env(),
                                 capture_output=True, text=True, timeout=600)
            if run.returncode != 0:
                raise SystemExit(f"probe restore failed: {run.stderr.strip()}")
        wait_for("llama-server serving on its original flags", lambda: serving(lab, name))
        return time.monotonic() - began
    finally:
        if proc.poll() is None:
            proc.kill()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep the container (its name is printed)")
    args = parser.parse_args()
    lab = ensure_test_lab()
    faults = ("sigkill", "sigkill+helper", "sigterm")
    with tempfile.TemporaryDirectory(prefix="lw-probe-faults-") as tmp:
        name = ""
        try:
            name, config = llama_box(lab, Path(tmp), prefix="lwbfault")
            times: dict[str, list[float]] = {fault: [] for fault in faults}
            for _ in range(args.rounds):
                for fault in faults:
                    times[fault].append(one(lab, name, config, fault))
                    print(f"  {fault}: {times[fault][-1]:.2f}s", file=sys.stderr)
        finally:
            if name and not args.keep:
                lab.remove(name)
            elif name:
                print(f"kept {name}", file=sys.stderr)
    print(f"time until llama-server serves again after a killed probe, {args.rounds} rounds each")
    print(f"{'fault (mid-restart)':<22} {'recovery':<26} {'median':>7} {'worst':>7}")
    how = {"sigkill": "labwright probe restore", "sigkill+helper": "labwright probe restore",
           "sigterm": "the probe itself (exit 130)"}
    for fault in faults:
        print(f"{fault:<22} {how[fault]:<26} {statistics.median(times[fault]):>6.2f}s {max(times[fault]):>6.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
